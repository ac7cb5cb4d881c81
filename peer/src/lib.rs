//! An HTTP/2 peer that misbehaves on purpose, for any server of the
//! `RoutingService` contract, on loopback: the raw client that sends exactly
//! the frames it is told to, the `h2`-crate clients that misbehave within
//! the protocol, and what a test reads of the server's process in `/proc`.
//!
//! Two users share it: the harness's attacks and benchmarks, and the
//! server's own integration tests (`server/tests/`). It is a crate of its
//! own so that those tests build this and not the whole harness, with its
//! charts.
//!
//! # Layout
//! - [`raw`]: [`raw::RawConn`], a client that sends exactly the frames it is
//!   told to, and reads frames and GOAWAYs with a timeout. Frames are
//!   `h2-frames`' ([`h2_frames::FrameDecoder`], its encoders).
//! - [`hpack`]: the literal-only HPACK encoding the raw client sends.
//! - [`h2client`]: clients built on the `h2` crate that misbehave within the
//!   protocol: a zero receive window, bodies that never end.
//! - [`stalled`]: [`stalled::TcpStalledReader`], a connection that stalls
//!   at the TCP level with a page in the server's send queue.
//! - [`grpc`]: the 5-byte message prefix, request headers, status names.
//! - [`tls`]: TLS under the raw and `h2` clients (and a connector for tonic
//!   channels), and the TLS records the handshake attacks send by hand.
//! - [`procfs`]: finding the process that listens on a port, and its RSS,
//!   CPU time, threads, open files and sockets, from `/proc`.

pub mod grpc;
pub mod h2client;
pub mod hpack;
pub mod procfs;
pub mod raw;
pub mod stalled;
pub mod tls;

pub use raw::{RawConn, RawError};

/// Any failure a client reports.
pub type Error = Box<dyn std::error::Error + Send + Sync>;
