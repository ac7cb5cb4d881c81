//! The subcommands.

pub mod dev_cert;
pub mod probe;
