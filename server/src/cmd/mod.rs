//! The subcommands of `routing-server` besides serving: `probe` (a health
//! check for containers) and `dev-cert` (a local CA and a server
//! certificate).

pub mod dev_cert;
pub mod probe;
