//! The runtime: everything that runs the connections rather than speaks on
//! them.
//!
//! - [`serving`]: [`run()`] assembles the services and serves until shutdown, draining
//!   calls in flight; [`local`]: the same on a free port for tests.
//! - [`accept`]: the accept loop (the connection cap, back-off, `accept4`);
//!   [`fd_limit`]: the open-file limit and the cap it allows.
//! - [`listen`]: the listening socket and its backlog.
//! - [`workers`]: one current-thread runtime per core, each connection on
//!   one worker for its whole life.
//! - [`shutdown`]: Ctrl+C and SIGTERM. [`error`]: the runtime's error type.
//!
//! The paths callers use (`server::run`, `server::bind`, `server::Error`,
//! `server::LocalServer`) are re-exported here.

pub mod accept;
pub mod error;
pub mod fd_limit;
pub mod listen;
pub mod local;
pub mod serving;
pub mod shutdown;
pub mod workers;

pub use error::Error;
pub use listen::{bind, bind_with_backlog};
pub use local::LocalServer;
pub use serving::{routing_service, run};
