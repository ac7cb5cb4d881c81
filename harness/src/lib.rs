//! Tools that try a gRPC server of the `RoutingService` contract the way an
//! attacker or a load test would, on loopback only, and the raw HTTP/2
//! client behind them, which the server's own tests can reuse.
//!
//! Three binaries sit on top:
//! - `abuse` runs the attacks of issues 6 and 14 one by one (`stall`,
//!   `madeyoureset`, `fdflood`, `nopreface`, `slowbody`, `contenttype`,
//!   `pingflood`, `bigframes`, `wuflood`, `tcpstall`, `lockout`) and prints
//!   one JSON line each: what the server did, its peak memory, and how a
//!   well-behaved client fared meanwhile.
//! - `bench` measures server CPU per call, latency and memory per idle
//!   connection, for one server or two side by side.
//! - `link-chart` measures the catalog over emulated links and a sweep of
//!   receive windows, and draws the figures of `docs/network.md`.
//!
//! `abuse` and `bench` read a local server's memory and CPU from `/proc`,
//! and all three refuse a target that is not a loopback address.
//!
//! # Layout
//! - [`frame`]: HTTP/2 frames as bytes: types, flags, error codes, encoding,
//!   and a decoder for frames split across reads (pure, unit-tested).
//! - [`hpack`]: the literal-only HPACK encoding the raw client sends.
//! - [`raw`]: [`raw::RawConn`], a client that sends exactly the frames it is
//!   told to, and reads frames and GOAWAYs with a timeout.
//! - [`h2client`]: clients built on the `h2` crate that misbehave within the
//!   protocol: a zero receive window, bodies that never end.
//! - [`grpc`]: method paths, the 5-byte message prefix, request headers.
//! - [`procfs`]: finding the process that listens on a port, and its RSS,
//!   CPU time and open files, from `/proc`.
//! - [`monitor`]: sampling that process during a run, with a memory guard.
//! - [`probe`]: the steady GetQuote client whose p99 shows collateral damage.
//! - [`latency`]: nearest-rank percentiles.
//! - [`target`]: the loopback-only target address.
//! - [`tls`]: `--tls-ca`: TLS under every connection the tools open, and
//!   the TLS records the handshake attacks send by hand.
//! - [`attacks`]: the attacks, one module each, and their report line.
//! - [`bench`]: the benchmark runs and their table.
//! - [`bench_tls`]: `bench --tls-target`: what TLS costs a reused
//!   connection, plaintext against TLS, per call and per MB.
//! - [`folklore`]: `bench folklore`, which starts routing-server, stock
//!   tonic and the grpc-go peer and measures the folklore of
//!   `docs/folklore.md` on all three: its runs, table and figure.
//! - [`link_chart`]: the catalog over emulated links and the window sweep,
//!   measured for `link-chart`.
//! - [`chart`]: those measurements drawn as SVG (`docs/figures/`).
//! - [`balance_chart`]: calls per replica over time behind HAProxy, from
//!   `balance-client`'s JSON (`balance-chart`).

pub mod attacks;
pub mod balance_chart;
pub mod bench;
pub mod bench_tls;
pub mod chart;
pub mod folklore;
pub mod frame;
pub mod grpc;
pub mod h2client;
pub mod hpack;
pub mod latency;
pub mod link_chart;
pub mod monitor;
pub mod probe;
pub mod procfs;
pub mod raw;
pub mod target;
pub mod tls;

pub use frame::{ErrorCode, Frame, Goaway};
pub use raw::{RawConn, RawError};
pub use target::LoopbackTarget;

/// Any failure a tool reports before exiting non-zero.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

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
