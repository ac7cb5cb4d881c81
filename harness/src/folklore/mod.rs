//! `bench folklore`: the performance folklore around the chapter's levers,
//! measured on this stack in one run (issue 24, `docs/folklore.md`). It
//! starts the servers itself, each on a free loopback port, and stops them
//! when it ends, on an error or on Ctrl+C / SIGTERM too:
//!
//! - `routing-server` (the release binary beside this one), as it starts
//!   (one worker per CPU), and with `--worker-threads 1` for the
//!   head-of-line rows;
//! - stock tonic, `server/examples/tonic_server.rs`;
//! - the grpc-go peer of the same contract (`--peer PATH`; without it, it
//!   is looked for where `cd ../shared/peers/go && go build -o routing-peer .`
//!   puts it, and its column is skipped, with that hint, if it is absent).
//!
//! Run with (started by cargo, it first builds the two Rust servers into
//! the same target directory, which cargo skips when they are up to date):
//!
//! ```console
//! $ cargo run --release -p harness --bin bench -- folklore
//! $ cargo run --release -p harness --bin bench -- folklore --peer ../shared/peers/go/routing-peer
//! $ cargo run --release -p harness --bin bench -- folklore --only message-size,in-flight
//! ```
//!
//! It measures, each server in turn within each claim:
//! - **message size**: server CPU per call and p50 for GetQuote and
//!   ListRoutes pages of 1, 5 and 25 routes (0.2, 1 and 5 MB), identity,
//!   one call at a time;
//! - **connections**: 80 callers over 1 and over 4 connections;
//! - **stream cap**: 300 callers on connections that allow 100 streams,
//!   with fast calls and with calls that hold their stream 20 ms, on 1 to 4
//!   connections;
//! - **one connection's CPU**: 100 callers at saturation on 1 and 2
//!   connections: the server's cores used and its busiest thread's share;
//! - **head-of-line**: GetQuote p99 at 400 calls/s on 10 connections, alone
//!   and beside 40 gzip full pages/s on 4 other connections;
//! - **calls in flight**: server RSS per GetQuote whose request body never
//!   ends, at 1,000 and 5,000 calls over 100 connections.
//!
//! Bytes allocated per call are not measured: only a process's own
//! allocator counts them (RSS is what the allocator kept, not what it
//! handed out), and none of the three servers reports its allocator's
//! statistics; the grpc-go peer is an instrument this repository does not
//! change.
//!
//! It prints one JSON line per measurement on stdout as each claim ends,
//! then the table (a column per server, a `##` section per claim, the load
//! average at start and end), and writes `folklore.svg` into `--out-dir`.
//! About 3 minutes on the 2-core test machine. Progress and the servers'
//! log paths go to stderr.

pub mod figure;
pub mod phases;
pub mod report;
pub mod servers;

use std::{
    ffi::{OsStr, OsString},
    io::Write,
    path::{Path, PathBuf},
    process::ExitCode,
};

use clap::Parser;

use crate::Error;
use phases::Contender;
use report::{Claim, Measurement, Stack};
use servers::Running;

/// How to build the two Rust servers by hand.
const BUILD_HINT: &str =
    "cargo build --release -p routing-server --bin routing-server --example tonic_server";

/// The figure's file name in `--out-dir`.
pub const FIGURE: &str = "folklore.svg";

#[derive(Debug, Parser)]
#[command(
    name = "bench folklore",
    bin_name = "bench folklore",
    about = "Message size, one connection or several, calls in flight: routing-server, stock tonic and grpc-go side by side"
)]
pub struct Args {
    /// The grpc-go peer's binary [default: ../shared/peers/go/routing-peer or
    /// ../bin/routing-peer beside the workspace; its column is skipped if neither exists].
    #[arg(long, env = "ROUTING_PEER", value_name = "PATH")]
    peer: Option<PathBuf>,

    /// Do not run `cargo build` for the two Rust servers first.
    #[arg(long)]
    no_build: bool,

    /// Directory the figure is written into (created if missing).
    #[arg(long, default_value = "docs/figures")]
    out_dir: PathBuf,

    /// Run only these claims (comma-separated) [default: all].
    #[arg(long, value_enum, value_delimiter = ',')]
    only: Vec<Claim>,
}

/// `bench folklore ARGS`: `args` starts with `folklore` itself.
pub async fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    // Ctrl+C or SIGTERM ends the run; dropping it stops every server it started.
    let outcome = tokio::select! {
        outcome = run(args) => outcome,
        signal = interrupted() => Err(format!("{signal}: stopped the servers this run started").into()),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn interrupted() -> &'static str {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return "Ctrl+C";
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "Ctrl+C",
        _ = term.recv() => "SIGTERM",
    }
}

fn listen(flag: &str, addr: std::net::SocketAddr, more: &[&str]) -> Vec<OsString> {
    let mut args: Vec<OsString> = vec![flag.into(), addr.to_string().into()];
    args.extend(more.iter().map(OsString::from));
    args
}

/// The 1-, 5- and 15-minute load averages, as `/proc/loadavg` says them.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "?".into())
}

fn print_line(line: &str) -> Result<(), Error> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    Ok(())
}

async fn start_all(profile: &Path, peer: Option<&Path>) -> Result<Vec<Running>, Error> {
    let routing = servers::require(profile.join("routing-server"), BUILD_HINT)?;
    let tonic = servers::require(profile.join("examples").join("tonic_server"), BUILD_HINT)?;
    let mut running = vec![
        servers::start(Stack::RoutingServer, &routing, |a| {
            listen("--listen", a, &[])
        })
        .await?,
        servers::start(Stack::RoutingServerOneWorker, &routing, |a| {
            listen("--listen", a, &["--worker-threads", "1"])
        })
        .await?,
        servers::start(Stack::Tonic, &tonic, |a| listen("--listen", a, &[])).await?,
    ];
    if let Some(peer) = peer {
        running.push(servers::start(Stack::GrpcGo, peer, |a| listen("-listen", a, &[])).await?);
    }
    Ok(running)
}

async fn run(args: Args) -> Result<(), Error> {
    let profile = servers::profile_dir()?;
    if !args.no_build {
        servers::build_servers(&profile)?;
    }
    let peer = servers::find_peer(args.peer)?;
    if peer.is_none() {
        tracing::warn!(
            "the grpc-go peer was not found, so its column is skipped: build it with `{}` \
             (from the workspace root), or pass --peer PATH",
            servers::PEER_BUILD_HINT
        );
    }
    let claims: Vec<Claim> = if args.only.is_empty() {
        vec![
            Claim::MessageSize,
            Claim::Connections,
            Claim::StreamCap,
            Claim::OneConnectionCpu,
            Claim::HeadOfLine,
            Claim::InFlight,
        ]
    } else {
        args.only.clone()
    };
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let load_at_start = load_average();
    let running = start_all(&profile, peer.as_deref()).await?;
    let contenders: Vec<Contender> = running
        .iter()
        .map(|r| Contender {
            stack: r.stack,
            server: r.server.clone(),
        })
        .collect();
    let servers: serde_json::Map<String, serde_json::Value> = contenders
        .iter()
        .map(|c| {
            (
                c.stack.name().to_string(),
                c.server.target.to_string().into(),
            )
        })
        .collect();
    print_line(
        &serde_json::json!({
            "run": "folklore",
            "cores": cores,
            "load_average_at_start": load_at_start,
            "servers": servers,
        })
        .to_string(),
    )?;

    phases::warm_up(&contenders).await?;
    let mut all: Vec<Measurement> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for claim in claims {
        for c in &contenders {
            // The 1-worker server is there for the head-of-line rows only.
            if c.stack == Stack::RoutingServerOneWorker && claim != Claim::HeadOfLine {
                continue;
            }
            let measured = match claim {
                Claim::MessageSize => phases::message_size(c).await,
                Claim::Connections => phases::connections(c).await,
                Claim::StreamCap => phases::stream_cap(c).await,
                Claim::OneConnectionCpu => phases::one_connection_cpu(c).await,
                Claim::HeadOfLine => phases::head_of_line(c).await,
                Claim::InFlight => phases::in_flight(c).await,
            };
            match measured {
                Ok(measured) => {
                    for m in &measured {
                        print_line(&m.json_line())?;
                    }
                    all.extend(measured);
                }
                Err(e) => {
                    let failure = format!("{} on {}: {e}", claim.key(), c.stack.name());
                    tracing::warn!("{failure}");
                    failures.push(failure);
                }
            }
        }
    }

    let mut out = format!(
        "# {cores} cores, load average {load_at_start} at start, {} at end\n",
        load_average()
    );
    out.push_str(&report::table(&all));
    for failure in &failures {
        out.push_str(&format!("failed: {failure}\n"));
    }
    if peer.is_none() {
        out.push_str(&format!(
            "grpc-go skipped: no peer binary (build it with `{}`)\n",
            servers::PEER_BUILD_HINT
        ));
    }
    let figure = write_figure(&all, &args.out_dir)?;
    out.push_str(&format!("figure: {}\n", figure.display()));
    // Stop the servers before the table is printed: the run is over.
    drop(running);
    print_line(out.trim_end())?;
    Ok(())
}

fn write_figure(all: &[Measurement], dir: &Path) -> Result<PathBuf, Error> {
    let mut svg = String::new();
    figure::draw(&figure::panels(all), &mut svg)?;
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let path = dir.join(FIGURE);
    std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// Whether the first argument after the program's name is `folklore`.
pub fn is_folklore(first: Option<&OsStr>) -> bool {
    first == Some(OsStr::new("folklore"))
}
