//! Tools that try a gRPC server of the `RoutingService` contract the way an
//! attacker or a load test would, on loopback only. The misbehaving HTTP/2
//! clients under them live in `h2-peer` (`peer/`), which the server's own
//! tests share; the frames, in `h2-frames` (`frames/`).
//!
//! Four binaries sit on top:
//! - `abuse` runs the attacks of issues 6 and 14 one by one (`stall`,
//!   `madeyoureset`, `fdflood`, `nopreface`, `slowbody`, `contenttype`,
//!   `pingflood`, `bigframes`, `wuflood`, `tcpstall`, `lockout`, ...) and
//!   prints one JSON line each: what the server did, its peak memory, and
//!   how a well-behaved client fared meanwhile.
//! - `bench` measures server CPU per call, latency and memory per idle
//!   connection, for one server or two side by side (and `bench folklore`).
//! - `link-chart` measures the catalog over emulated links and a sweep of
//!   receive windows, and draws the figures of `docs/network.md`.
//! - `balance-chart` draws calls per replica over time behind HAProxy, from
//!   `balance-client`'s JSON.
//!
//! `abuse` and `bench` read a local server's memory and CPU from `/proc`,
//! and all of them refuse a target that is not a loopback address.
//!
//! # Layout
//! - [`target`]: the loopback-only target address, and the `--tls-ca` flags
//!   that say whether to speak TLS to it.
//! - [`measure`]: watching a server during a run: its process sampled with a
//!   memory guard ([`measure::monitor`]), the steady GetQuote client whose
//!   p99 shows collateral damage ([`measure::probe`]), and nearest-rank
//!   percentiles ([`measure::latency`]).
//! - [`attacks`]: the attacks, one module each, and their report line.
//! - [`bench`](mod@bench): the benchmark runs and their table, and `bench --tls-target`
//!   ([`bench::tls`]): what TLS costs a reused connection.
//! - [`folklore`]: `bench folklore`, which starts routing-server, stock
//!   tonic and the grpc-go peer and measures the folklore of
//!   `docs/folklore.md` on all three: its runs, table and figure.
//! - [`charts`]: the figures: the catalog over emulated links and the window
//!   sweep, measured ([`charts::link_runs`]) and drawn as SVG
//!   ([`charts::draw`]), and calls per replica behind HAProxy
//!   ([`charts::balance`]).

pub mod attacks;
pub mod bench;
pub mod charts;
pub mod folklore;
pub mod measure;
pub mod target;

/// Any failure a tool reports before exiting non-zero (the same type as the
/// peer's, so `?` crosses between them).
pub use h2_peer::Error;
pub use target::LoopbackTarget;

/// Sends logs to stderr: the harness's own progress at `info`, everything
/// else at `warn`, unless `RUST_LOG` says otherwise. Results go to stdout.
pub fn init_tracing() {
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in logs or CI.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("harness=info,warn")),
        )
        .init();
}
