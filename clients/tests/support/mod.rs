//! Helpers for the clients' integration tests: run a client binary against an
//! in-process server and read its one JSON line.

#![allow(dead_code)] // Each test file uses a different subset.

use std::{process::Output, time::Duration};

use routing_server::{Config, LocalServer};

/// The client binaries, as cargo built them for these tests.
pub const FOOTGUN: &str = env!("CARGO_BIN_EXE_footgun-client");
pub const POOLED: &str = env!("CARGO_BIN_EXE_pooled-client");
pub const GZIP: &str = env!("CARGO_BIN_EXE_gzip-client");
pub const KEEPALIVE: &str = env!("CARGO_BIN_EXE_keepalive-client");
pub const ROUTING_LINK: &str = env!("CARGO_BIN_EXE_routing-link");
/// No client run in a test takes longer than this.
pub const LIMIT: Duration = Duration::from_secs(60);

/// A server with the chapter's settings on `127.0.0.1:0`.
pub async fn start_server() -> LocalServer {
    start_server_with(Config::default()).await
}

/// A server with other settings, e.g. knobs scaled down for a test.
pub async fn start_server_with(config: Config) -> LocalServer {
    LocalServer::start(config).await.expect("server starts")
}

/// Runs a client binary of this package to completion, bounded by `limit`.
pub async fn run_bin(path: &str, args: &[&str], limit: Duration) -> Output {
    let child = tokio::process::Command::new(path)
        .args(args)
        .env_remove("ROUTING_TARGET")
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(limit, child)
        .await
        .unwrap_or_else(|_| panic!("{path} did not finish within {limit:?}"))
        .expect("binary runs")
}

/// The single JSON line a successful client prints on stdout.
pub fn json_line(output: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}; stderr: {stderr}",
        output.status
    );
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "exactly one line on stdout, got {stdout:?}");
    serde_json::from_str(lines[0]).unwrap_or_else(|e| panic!("not JSON ({e}): {}", lines[0]))
}
