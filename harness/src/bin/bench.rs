//! `bench`: what a call costs the server, measured. Prints one table:
//! server CPU per call for GetQuote under concurrency and for a full
//! ListRoutes page (identity and gzip), p50 and p99 latency, and server RSS
//! at rest and per idle HTTP/2 connection. CPU and RSS are read from
//! `/proc` of the server's process (found by its listening port), so the
//! load generator's own cost is excluded; they read `n/a` for a server that
//! is not on this machine. Load comes from tonic clients in this process
//! (`--channels` connections, `-c` calls in flight), so no ghz is needed.
//! The target must resolve to loopback.
//!
//! Run with (a server on 127.0.0.1:9180, and for `--compare` a second server
//! of the same contract, e.g. the grpc-go peer, on 127.0.0.1:9190):
//!
//! ```console
//! $ cargo run --release -p harness --bin bench -- --target 127.0.0.1:9180
//! $ cargo run --release -p harness --bin bench -- --target 127.0.0.1:9180 --compare 127.0.0.1:9190
//! ```
//!
//! It prints the table on stdout: one column per server and, with
//! `--compare`, a `ratio` column (target ÷ compared server; below 1.00× the
//! target uses less). `--compare` may be repeated, for three servers in one
//! run: then there is one ratio column per compared server (`÷ 2`, `÷ 3`,
//! target ÷ the second and third columns). Each phase runs on both servers before the next one
//! starts. GetQuote runs once per `--channels` value: on 1 connection, as
//! `ghz -c 50` does by default, and on 10. A real run (this server on port
//! 29581, the grpc-go peer on 29591, the 2-core test VM):
//!
//! ```text
//! # 2 cores, 1-minute load average 1.49 at start
//! measurement                                                 127.0.0.1:29581  127.0.0.1:29591  ratio
//! ---------------------------------------------------------------------------------------------------
//! server RSS at rest (MiB)                                               11.3             17.8  0.63×
//! server RSS per idle HTTP/2 connection (KiB, 1000 held)                 13.5             17.6  0.77×
//! GetQuote -c 50 on 1 conn: server CPU per call (µs)                     10.0             22.0  0.45×
//! GetQuote -c 50 on 1 conn: p50 latency (ms)                            0.923            1.214  0.76×
//! GetQuote -c 50 on 1 conn: p99 latency (ms)                            1.721            3.774  0.46×
//! GetQuote -c 50 on 1 conn: calls per second                            52843            38229  1.38×
//! GetQuote -c 50 on 10 conns: server CPU per call (µs)                   11.5             25.0  0.46×
//! GetQuote -c 50 on 10 conns: p50 latency (ms)                          1.122            1.138  0.99×
//! GetQuote -c 50 on 10 conns: p99 latency (ms)                          2.271            4.919  0.46×
//! GetQuote -c 50 on 10 conns: calls per second                          42754            37680  1.13×
//! ListRoutes page 25 -c 2 identity: server CPU per call (ms)             2.80             3.30  0.85×
//! ListRoutes page 25 -c 2 identity: p50 latency (ms)                     7.20             7.81  0.92×
//! ListRoutes page 25 -c 2 identity: p99 latency (ms)                    16.99            15.45  1.10×
//! ListRoutes page 25 -c 2 gzip: server CPU per call (ms)                 2.40            11.80  0.20×
//! ListRoutes page 25 -c 2 gzip: p50 latency (ms)                         6.77            15.85  0.43×
//! ListRoutes page 25 -c 2 gzip: p99 latency (ms)                        13.45            28.65  0.47×
//! calls measured                                                        40200            40200      -
//! errors                                                                    0                0      -
//! ```
//!
//! Workers: run the same server twice, with one worker and with its default
//! (one per CPU), and compare them on 10 connections (a connection stays on
//! one worker, so one connection would measure one worker twice):
//!
//! ```console
//! $ target/release/routing-server --listen 127.0.0.1:9181 --worker-threads 1 &
//! $ target/release/routing-server --listen 127.0.0.1:9182 &
//! $ cargo run --release -p harness --bin bench -- --target 127.0.0.1:9181 --compare 127.0.0.1:9182 --channels 10
//! ```
//!
//! Two rows per GetQuote run, and a line per server after the table, say
//! how the server spread the work over its threads, from each thread's CPU
//! time in `/proc/PID/task`: the busiest thread's share, the threads that
//! did at least 10 % of it, and every thread's share by name. From a real
//! run of the commands above (other builds running, load average 5.1):
//!
//! ```text
//! GetQuote -c 50 on 10 conns: server CPU per call (µs)                                19.8            18.5  1.07×
//! GetQuote -c 50 on 10 conns: busiest server thread's share of its CPU (%)             100              64      -
//! GetQuote -c 50 on 10 conns: server threads with >= 10% of its CPU                      1               2      -
//! CPU by thread, 127.0.0.1:9181 GetQuote on 10 conns: routing-server 100%
//! CPU by thread, 127.0.0.1:9182 GetQuote on 10 conns: worker-1 64%, routing-server 36%
//! ```
//!
//! The shares follow the calls, not the connections: the server hands the
//! 10 connections to its workers in turn, 5 each (`RUST_LOG=routing_server::server=debug`
//! logs each hand-off), but each of the 50 callers stays on its connection
//! and calls again as soon as it is answered, so the connections of a worker
//! that the OS runs less often make fewer of the calls.
//!
//! `bench` and the servers share whatever cores the machine has. Where there
//! are no more cores than workers, `bench` runs on the workers' cores, and
//! 2 workers then cost more per call than 1, mostly for that reason. To
//! measure the workers themselves, start the servers and `bench` under
//! `taskset` on separate cores (docs/costs.md, "Two workers against one").
//!
//! Over TLS (`--tls-target`): what TLS costs a reused connection. Start
//! each server twice, plaintext and TLS (`routing-server dev-cert --out
//! certs` makes the certificates), and give both addresses; `--compare`
//! and `--compare-tls` add a second server, e.g. the grpc-go peer:
//!
//! ```console
//! $ target/release/routing-server --listen 127.0.0.1:9181 --worker-threads 1 &
//! $ target/release/routing-server --listen 127.0.0.1:9182 --worker-threads 1 --tls-cert certs/server.pem --tls-key certs/server.key &
//! $ GOMAXPROCS=1 /work/bin/routing-peer -listen 127.0.0.1:9191 &
//! $ GOMAXPROCS=1 /work/bin/routing-peer -listen 127.0.0.1:9192 -tls-cert certs/server.pem -tls-key certs/server.key &
//! $ cargo run --release -p harness --bin bench -- --target 127.0.0.1:9181 --tls-target 127.0.0.1:9182 \
//!     --compare 127.0.0.1:9191 --compare-tls 127.0.0.1:9192 --tls-ca certs/ca.pem \
//!     --calls 50000 --list-calls 400 --tls-rounds 5
//! ```
//!
//! It prints the TLS table instead of the one above: RSS per idle
//! connection, then server CPU per GetQuote and per full identity page,
//! plaintext and TLS, run after run alternating (`--tls-rounds`); each row
//! is the median of the rounds, the `rounds` lines after it every round's
//! value. The extra CPU per page over the page's size is the TLS record
//! layer's cost per MB. A real run (routing-server on 24886/24887, the
//! grpc-go peer on 24888/24889, one worker each, other agents' builds and
//! benchmarks on the same 2 cores):
//!
//! ```text
//! # 2 cores, 1-minute load average 3.98 at start
//! measurement (median of rounds)                                         127.0.0.1:24886 / TLS :24887  127.0.0.1:24888 / TLS :24889  ratio
//! ----------------------------------------------------------------------------------------------------------------------------------------
//! server RSS per idle connection, plaintext (KiB, 1000 held)                                     17.7                          14.1  1.25×
//! server RSS per idle connection, TLS (KiB, 1000 held)                                           25.4                          49.0  0.52×
//! GetQuote -c 50 on 1 conn, plaintext: server CPU per call (µs)                                  10.4                          20.0  0.52×
//! GetQuote -c 50 on 1 conn, TLS: server CPU per call (µs)                                        11.8                          23.6  0.50×
//! GetQuote -c 50 on 1 conn: TLS's extra CPU per call (µs)                                         0.4                           0.0      -
//! GetQuote -c 50 on 1 conn, plaintext: p99 latency (ms)                                         3.816                         5.528  0.69×
//! GetQuote -c 50 on 1 conn, TLS: p99 latency (ms)                                               3.622                         5.908  0.61×
//! ListRoutes page 25 -c 2 identity, plaintext: server CPU per page (ms)                          2.40                          2.75  0.87×
//! ListRoutes page 25 -c 2 identity, TLS: server CPU per page (ms)                                4.05                          4.63  0.88×
//! ListRoutes page 25 -c 2 identity: TLS's extra CPU per page (ms)                                1.40                          2.00  0.70×
//! TLS record layer: server CPU per MB (ms)                                                       0.28                          0.40  0.70×
//! page size (MB)                                                                                 5.00                          5.00      -
//! calls measured (5 rounds)                                                                    504000                        504000      -
//! errors                                                                                            0                             0      -
//! rounds, 127.0.0.1:24886: GetQuote µs plaintext 10.0 11.6 13.2 10.4 9.2 | TLS 11.4 11.8 13.6 12.6 8.6; page ms plaintext 2.3 2.8 3.0 2.4 1.9 | TLS 3.3 4.2 4.4 4.1 3.3
//! rounds, 127.0.0.1:24888: GetQuote µs plaintext 19.4 25.4 25.4 20.0 17.6 | TLS 23.6 24.4 25.4 18.4 19.2; page ms plaintext 2.3 3.5 2.8 2.8 1.9 | TLS 4.6 5.5 4.2 5.0 3.4
//! ```
//!
//! Progress goes to stderr. Every run is bounded by a call count and by
//! `--max-secs`; idle connections by `--idle-conns`.
//!
//! `bench balancer` is one too (`harness::bench::balancer`): the client's
//! CPU per GetQuote through the client-side balancer (balancer/), beside a
//! plain `Channel` and tonic's `balance_channel`, on three servers it starts.
//!
//! `bench folklore` is a command of its own (`harness::folklore`): it
//! starts routing-server, stock tonic and the grpc-go peer itself and
//! measures the folklore of `docs/folklore.md` on all three
//! (`cargo run --release -p harness --bin bench -- folklore --help`).

use std::{io::Write, process::ExitCode};

use clap::Parser;
use harness::{
    Error, LoopbackTarget,
    bench::{self, BenchKnobs, Server},
    init_tracing,
    measure::monitor::ServerProcess,
    target::DEFAULT_TARGET,
};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Server CPU per call, latency and RSS per idle connection, for one server or two side by side"
)]
struct Args {
    /// The server: host:port, loopback only (127.0.0.0/8 or [::1]).
    #[arg(long, env = "ROUTING_TARGET", default_value = DEFAULT_TARGET)]
    target: LoopbackTarget,

    /// Another server of the same contract, measured in the same run (ratio: target ÷ this).
    /// Repeat it for a third server (e.g. the stock tonic example and the grpc-go peer):
    /// one ratio column per compared server.
    #[arg(long)]
    compare: Vec<LoopbackTarget>,

    /// PID of the target server, if it is not found by its listening port.
    #[arg(long)]
    server_pid: Option<u32>,

    /// PID of each compared server, likewise, in the order of `--compare`.
    #[arg(long)]
    compare_pid: Vec<u32>,

    #[command(flatten)]
    knobs: BenchKnobs,

    /// `--tls-target` and its flags: the TLS table (harness/src/bench/tls.rs).
    #[command(flatten)]
    tls: bench::tls::TlsBenchArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    if bench::balancer::is_balancer(std::env::args_os().nth(1).as_deref()) {
        return bench::balancer::main(std::env::args_os().skip(1)).await;
    }
    if harness::folklore::is_folklore(std::env::args_os().nth(1).as_deref()) {
        return harness::folklore::main(std::env::args_os().skip(1)).await;
    }
    match run(Args::parse()).await {
        Ok(table) => {
            let mut stdout = std::io::stdout().lock();
            match write!(stdout, "{table}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            }
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<String, Error> {
    let mut servers = vec![Server {
        target: args.target,
        process: ServerProcess::locate(args.target.addr(), args.server_pid),
    }];
    for (i, other) in args.compare.iter().enumerate() {
        servers.push(Server {
            target: *other,
            process: ServerProcess::locate(other.addr(), args.compare_pid.get(i).copied()),
        });
    }
    for server in &servers {
        if let ServerProcess::Unknown(why) = &server.process {
            tracing::warn!(target = %server.target, "CPU and RSS will read n/a: {why}");
        }
    }
    if let Some(pairs) = args.tls.pairs(&servers)? {
        let measured = bench::tls::run(&pairs, &args.tls, &args.knobs).await?;
        let table = bench::tls::table(&pairs, &args.knobs, args.tls.tls_rounds, &measured);
        return Ok(machine_line() + &table);
    }
    let measured = bench::run(&servers, &args.knobs).await?;
    let mut out = machine_line();
    out.push_str(&bench::table(&servers, &args.knobs, &measured));
    for (server, m) in servers.iter().zip(&measured) {
        for (channels, run) in args.knobs.channels.iter().zip(&m.quote) {
            if !run.thread_shares.is_empty() {
                out.push_str(&format!(
                    "CPU by thread, {} GetQuote on {channels} conn{}: {}\n",
                    server.target,
                    if *channels == 1 { "" } else { "s" },
                    run.describe_threads()
                ));
            }
        }
    }
    for (server, m) in servers.iter().zip(&measured) {
        for run in m.runs() {
            if let Some(e) = &run.first_error {
                out.push_str(&format!("first error from {}: {e}\n", server.target));
            }
        }
    }
    Ok(out)
}

/// One line naming the conditions: cores and load average at the start.
fn machine_line() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_string))
        .unwrap_or_else(|| "?".into());
    format!("# {cores} cores, 1-minute load average {load} at start\n")
}
