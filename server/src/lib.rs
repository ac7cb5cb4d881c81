//! The chapter's `RoutingService` server.
//!
//! `GetQuote` prices a shipment at USD 2.50 per kilogram; `ListRoutes` pages
//! through a 25-route catalog padded to about 5.0 MB, larger than the default
//! 4 MiB message cap. The server applies the chapter's levers: a 16 MiB send
//! cap, gzip for large responses only, and a 5 s HTTP/2 keepalive.
//!
//! # Layout
//! - [`knobs`]: every tuning knob, its default, unit and effect, and [`Config`].
//! - [`quote`]: GetQuote validation and the pricing formula (pure).
//! - [`catalog`]: the padded catalog, pagination and field masks (pure).
//! - [`page_codec`]: encodes a ListRoutes page straight from the catalog.
//! - [`service`]: the gRPC adapter that maps both onto `Status` codes,
//!   serves ListRoutes through `page_codec`, and gzips only ListRoutes pages.
//! - [`connection`]: per-connection policies: the connection cap, accept
//!   back-off, nothing built before the client's first byte, handshake
//!   timeout and the keepalive ping floor.
//! - [`coalesce`]: gathers large DATA frames into fewer writes.
//! - [`edge`]: per-call guards: HTTP 415 for non-gRPC requests, request
//!   deadline and budget, response budget and send deadline.
//! - [`budget`]: the server-wide byte budgets behind them.
//! - [`kernel_queue`]: when a response has really reached the client: the
//!   kernel's send queue per connection, asked of `sock_diag` (netlink).
//! - [`listen`]: the listening socket, with the kernel's listen backlog.
//! - [`server`]: [`run`] assembles routing, health and reflection, applies
//!   h2's own guards, and drains on shutdown; [`LocalServer`] runs it on a
//!   free port for tests.
//! - [`lifetime`]: connection age and idleness (GOAWAY, then a grace), the
//!   GOAWAY that gives back what a connection kept after a burst of
//!   streams, the server's drain, and the `routing-replica` response header.
//! - [`workers`]: thread-per-core serving: one current-thread runtime per
//!   worker, each connection on one worker for its whole life, and the
//!   acceptor on a thread of its own.
//! - [`window_budget`]: how many WINDOW_UPDATEs the DATA sent calls for.
//! - [`tls`]: TLS on the server's port (`--tls-cert`, `--tls-key`): the
//!   handshake on the worker, inside the handshake timeout, and the
//!   transport under the connection's policies.
//! - [`dev_cert`]: `routing-server dev-cert`: a local CA and a server
//!   certificate, made with rcgen.
//! - [`probe`]: the health probe behind `routing-server probe`.
//! - [`shutdown`]: Ctrl+C and SIGTERM.

pub mod kernel_queue;

pub mod call;
pub mod cmd;
pub mod connection;
pub mod knobs;
pub mod routing;
pub mod server;

pub use knobs::Config;
pub use server::{LocalServer, run};
