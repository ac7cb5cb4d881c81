//! The small library the eight lesson client binaries share.
//!
//! Each binary is this baseline plus one lesson, so `diff` between two of
//! them shows the lesson and nothing else:
//!
//! | binary             | lesson                                                    |
//! |--------------------|-----------------------------------------------------------|
//! | `footgun-client`   | a new channel per call (what not to do)                   |
//! | `pooled-client`    | one channel reused for every call                         |
//! | `gzip-client`      | gzip on a 5 MB response, with a 16 MiB cap                |
//! | `keepalive-client` | HTTP/2 keepalive: idle gaps, a dead peer, the ping floor  |
//! | `window-client`    | the flow-control window on a long link: 64 KiB vs tuned   |
//! | `balance-client`   | behind a load balancer: L4 pins, L7 and a connection age spread |
//! | `deadline-client`  | against a slow server: no deadline, `Endpoint::timeout`, `Request::set_timeout`, a cancel |
//! | `retry-client`     | gRFC A6 retries in an outage: naive, throttled, healthy   |
//!
//! # Layout
//! - [`target`]: parsing `host:port` or `http://host:port`.
//! - [`baseline`]: the shared flags, bounded connect and call timeouts, and
//!   the sample quote request.
//! - [`catalog`]: fetching a page of the catalog, timed.
//! - [`wire`]: a connector that counts connections and bytes on the wire, so
//!   every number a client prints was measured.
//! - [`link`]: an emulated network link (delay, rate, queue, NAT idle
//!   timeout) that wraps a connection, with grpc-go's presets.
//! - [`link_proxy`]: `routing-link`'s core, a TCP proxy through one link.
//! - [`relay`]: a loopback TCP relay that can go silent, to play a dead peer.
//! - [`tonic_balance`]: tonic's own `balance_channel`, fed by the same
//!   resolver as the `ready-balance` crate (balancer/), for comparison.
//! - [`tls`]: `--tls-ca` and `--tls-server-name`: TLS inside the counting
//!   connector, with the version and resumed handshakes for the JSON line.
//! - [`header_probe`]: a loopback HTTP/2 server that records whether a
//!   call carried `grpc-timeout`, so the deadline lesson measures it.
//! - [`retry`]: gRFC A6's retries in one module: the transparent retry of a
//!   call that never left the client (hyper dropped it on a connection that
//!   had just received a GOAWAY), the retry policy with its jittered
//!   backoff, and the throttling token bucket.
//! - [`server_metrics`]: the server's `/metrics`, scraped before and after
//!   a phase, for what the server (not the client) counted.
//! - [`output`]: one JSON line on stdout, diagnostics on stderr.
//! - [`timing`]: the total of a run of calls and the median call.
//! - [`windows`]: the receive windows a client grants, read from its own
//!   SETTINGS and WINDOW_UPDATE frames.

pub mod baseline;
pub mod catalog;
pub mod header_probe;
pub mod link;
pub mod link_proxy;
pub mod output;
pub mod relay;
pub mod retry;
pub mod server_metrics;
pub mod target;
pub mod timing;
pub mod tls;
pub mod tonic_balance;
pub mod windows;
pub mod wire;

pub use baseline::{Baseline, rpc_error, sample_quote_request};
pub use link::{Link, LinkArgs, LinkReport, Preset, SharedLink};
pub use output::{finish, init_tracing, init_tracing_at, seconds};
pub use relay::SilentRelay;
pub use timing::{CallTimer, Timings};
pub use tls::TlsReport;
pub use windows::WindowsGranted;
pub use wire::{CountingConnector, GoAwayReceived, WireSnapshot};

/// Any failure a client reports before exiting non-zero.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
