//! The connection and its rules.

pub mod age;
pub mod coalesce;
pub mod tls;
pub mod watched;
pub mod window_updates;
