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
//! target uses less). Each phase runs on both servers before the next one
//! starts. A real run (this server on port 29482, the grpc-go peer on 29491,
//! the 2-core test VM with nothing else running):
//!
//! ```text
//! # 2 cores, 1-minute load average 0.43 at start
//! measurement                                                 127.0.0.1:29482  127.0.0.1:29491  ratio
//! ---------------------------------------------------------------------------------------------------
//! server RSS at rest (MiB)                                               12.2             17.9  0.68×
//! server RSS per idle HTTP/2 connection (KiB, 1000 held)                 13.6             18.1  0.75×
//! GetQuote -c 50: server CPU per call (µs)                               14.0             25.0  0.56×
//! GetQuote -c 50: p50 latency (ms)                                      0.987            1.165  0.85×
//! GetQuote -c 50: p99 latency (ms)                                      2.394            4.177  0.57×
//! GetQuote -c 50: calls per second                                      46048            37582  1.23×
//! ListRoutes page 25 -c 2 identity: server CPU per call (ms)             3.80             3.40  1.12×
//! ListRoutes page 25 -c 2 identity: p50 latency (ms)                    10.28             7.86  1.31×
//! ListRoutes page 25 -c 2 identity: p99 latency (ms)                    20.18            14.37  1.40×
//! ListRoutes page 25 -c 2 gzip: server CPU per call (ms)                 3.00            12.90  0.23×
//! ListRoutes page 25 -c 2 gzip: p50 latency (ms)                         6.87            16.32  0.42×
//! ListRoutes page 25 -c 2 gzip: p99 latency (ms)                        13.90            26.97  0.52×
//! calls measured                                                        20200            20200      -
//! errors                                                                    0                0      -
//! ```
//!
//! Progress goes to stderr. Every run is bounded by a call count and by
//! `--max-secs`; idle connections by `--idle-conns`.

use std::{io::Write, process::ExitCode};

use clap::Parser;
use harness::{
    Error, LoopbackTarget,
    bench::{self, BenchKnobs, Server},
    init_tracing,
    monitor::ServerProcess,
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

    /// A second server of the same contract, measured in the same run (ratios: target ÷ this).
    #[arg(long)]
    compare: Option<LoopbackTarget>,

    /// PID of the target server, if it is not found by its listening port.
    #[arg(long)]
    server_pid: Option<u32>,

    /// PID of the compared server, likewise.
    #[arg(long)]
    compare_pid: Option<u32>,

    #[command(flatten)]
    knobs: BenchKnobs,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
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
    if let Some(other) = args.compare {
        servers.push(Server {
            target: other,
            process: ServerProcess::locate(other.addr(), args.compare_pid),
        });
    }
    for server in &servers {
        if let ServerProcess::Unknown(why) = &server.process {
            tracing::warn!(target = %server.target, "CPU and RSS will read n/a: {why}");
        }
    }
    let measured = bench::run(&servers, &args.knobs).await?;
    let mut out = machine_line();
    out.push_str(&bench::table(&servers, &args.knobs, &measured));
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
