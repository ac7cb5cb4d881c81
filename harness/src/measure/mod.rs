//! Watching a server from the outside while the attacks and the benchmark
//! run, shared by both.
//!
//! - [`monitor`]: the server's process sampled during a run (peak RSS, CPU),
//!   with a memory guard that ends a run early.
//! - [`probe`]: the steady GetQuote client whose p99 shows collateral damage.
//! - [`latency`]: nearest-rank percentiles.

pub mod latency;
pub mod monitor;
pub mod probe;
