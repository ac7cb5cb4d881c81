//! The connection and its rules: everything between an accepted socket and
//! hyper, one file per layer of the byte stack and one per rule.
//!
//! ```text
//!   socket (TcpStream)             accepted: first byte, socket options
//!     |
//!   kernel-queue accounting        crate::kernel_queue: CountWrites, SentBytes
//!     |                              (bytes as the socket takes them)
//!   TLS or plain                   tls: Transport, tokio-util's Either
//!     |
//!   fewer, larger writes           coalesce: Coalesce (the catalog's bytes
//!     |                              by reference: shared_memory)
//!   frame watchers and rules       watched: Connection (handshake timeout,
//!     |                              GOAWAY at a frame boundary, close on
//!     |                              request); frame_rules: one handler per
//!     |                              frame type, over ping_floor,
//!     |                              control_frames, window_updates
//!   hyper / h2                     age: connection age and idleness (gRFC A9)
//!     |
//!   tonic                          crate::call, crate::routing
//! ```
//!
//! [`policy::ConnectionPolicy`] is the rules' settings, [`verdict`] what a
//! budget rule decides, and [`drain`] the server's drain each connection
//! watches. The runtime ([`crate::server`]) accepts the sockets and serves
//! each on a worker; the calls on a connection see it through
//! [`crate::call::info::ConnectionInfo`].

pub mod accepted;
pub mod age;
pub mod coalesce;
pub mod control_frames;
pub mod drain;
pub mod frame_rules;
pub(crate) mod linger;
pub mod ping_floor;
pub mod policy;
pub mod shared_memory;
pub mod tls;
pub mod verdict;
pub mod watched;
pub mod window_updates;
