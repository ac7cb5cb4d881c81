//! The chapter's `RoutingService` server.
//!
//! `GetQuote` prices a shipment at USD 2.50 per kilogram; `ListRoutes` pages
//! through a 25-route catalog padded to about 5.0 MB, larger than the default
//! 4 MiB message cap. The server applies the chapter's levers: a 16 MiB send
//! cap, gzip for large responses only, and a 5 s HTTP/2 keepalive.
//!
//! # Layout
//! One folder per layer. Imports run one way, from the runtime down: a
//! type two layers need lives below both.
//!
//! - [`server`], the runtime: [`server::serving`]: [`run()`] assembles routing, health and
//!   reflection, applies h2's own guards, serves each connection on a
//!   worker and drains on shutdown; [`server::local`] runs
//!   it on a free port for tests. [`server::accept`] is the accept loop
//!   (connection cap, back-off, `accept4`), [`server::fd_limit`] the
//!   open-file limit, [`server::listen`] the listening socket and its
//!   backlog, [`server::workers`] one current-thread runtime per core,
//!   [`server::shutdown`] Ctrl+C and SIGTERM, [`server::error`] the error
//!   type.
//! - [`connection`], the connection and its rules, between the socket and
//!   hyper (`connection/mod.rs` draws the byte stack):
//!   [`connection::accepted`] waits for the first byte and sets the socket
//!   options; [`connection::tls`] the TLS handshake and transport;
//!   [`connection::coalesce`] fewer, larger writes, which keep the catalog's
//!   bytes by reference ([`connection::shared_memory`]); [`connection::watched`]
//!   the frame watchers, the handshake timeout and the server's own
//!   GOAWAY; [`connection::frame_rules`] one handler per frame type, over
//!   [`connection::ping_floor`], [`connection::control_frames`] and
//!   [`connection::window_updates`], whose shared verdict is
//!   [`connection::verdict`]; [`connection::policy`] their settings;
//!   [`connection::age`] connection age and idleness (gRFC A9) and the
//!   GOAWAY after a burst; [`connection::drain`] the server's drain each
//!   connection watches.
//! - [`kernel_queue`]: when a response has really reached the client: the
//!   kernel's send queue per connection, asked of `sock_diag` (netlink).
//! - [`call`], the per-call guards: [`call::request_guards`] (HTTP 415 for
//!   non-gRPC requests, request deadline and budget, `grpc-timeout`),
//!   [`call::response_hold`] (a response holds its budget until
//!   acknowledged, under the send deadline), [`call::budget`] the
//!   server-wide byte budgets, [`call::info`] what a call knows of its
//!   connection, [`call::close`] how it closes it.
//! - [`routing`], the chapter's service: [`routing::quote`] GetQuote
//!   validation and pricing (pure), [`routing::catalog`] the padded catalog,
//!   pagination and field masks (pure data), [`routing::page_codec`] a page's
//!   wire encoding and every field number, [`routing::page_body`] an
//!   uncompressed page sent from the catalog without a copy, [`routing::service`] the gRPC
//!   adapter that maps both onto `Status` codes and gzips only ListRoutes
//!   pages, [`routing::replica`] the `routing-replica` header,
//!   [`routing::faults`] GetQuote slowed or failed on purpose (lever 6, off
//!   by default).
//! - [`metrics`], a leaf every layer counts into: [`metrics::a66`] gRFC
//!   A66's per-call metrics as a tower layer, [`metrics::connection`] the
//!   connection counters, [`metrics::registry`] one registry per server,
//!   [`metrics::message_bytes`] message sizes without gRPC's framing, and
//!   [`metrics::endpoint`] `GET /metrics` on `--metrics-listen`.
//! - [`cmd`]: the subcommands, [`cmd::probe`] (`routing-server probe`, the
//!   health probe) and [`cmd::dev_cert`] (`routing-server dev-cert`, a
//!   local CA and a server certificate made with rcgen).
//! - [`knobs`]: every tuning knob, its default, unit and effect, and
//!   [`Config`], whose `--help` groups follow the folders.

pub mod kernel_queue;

pub mod call;
pub mod cmd;
pub mod connection;
pub mod knobs;
pub mod metrics;
pub mod routing;
pub mod server;

pub use knobs::Config;
pub use server::{LocalServer, run};
