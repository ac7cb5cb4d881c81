//! Per-call guards.

pub mod budget;
pub mod edge;
