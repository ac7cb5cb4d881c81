//! The harness's figures, all SVG through `plotters` (the only module that
//! needs it): what `link-chart` measures and draws for `docs/network.md`,
//! and what `balance-chart` draws from `balance-client`'s JSON.
//!
//! - [`link_runs`]: the catalog over emulated links and the window sweep,
//!   measured.
//! - [`draw`]: those measurements drawn, and the drawing helpers the other
//!   figures share.
//! - [`balance`]: calls per replica over time behind HAProxy.

pub mod balance;
pub mod draw;
pub mod link_runs;
