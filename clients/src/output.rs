//! The clients' output contract: exactly one JSON line on stdout, and
//! everything else (logs, errors) on stderr.

use std::{io::IsTerminal, io::Write, process::ExitCode, time::Duration};

use serde::Serialize;
use tracing_subscriber::EnvFilter;

use crate::Error;

/// Sends `tracing` output to stderr. `RUST_LOG=routing_clients=debug` shows
/// each connection; a bare `RUST_LOG=debug` adds every HTTP/2 frame.
pub fn init_tracing() {
    init_tracing_at("warn");
}

/// The same, showing `default` and above unless `RUST_LOG` says otherwise:
/// `routing-link` logs at `info`, so its start and shutdown are seen.
pub fn init_tracing_at(default: &str) {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in logs or CI.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
        )
        .init();
}

/// Prints the report as one JSON line and exits 0, or prints the error on
/// stderr and exits 1. Nothing reaches stdout on failure, so a script never
/// parses half a result.
pub fn finish<R: Serialize>(outcome: Result<R, Error>) -> ExitCode {
    let line = outcome.and_then(|report| Ok(serde_json::to_string(&report)?));
    match line {
        Ok(line) => {
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    tracing::error!("cannot write the result: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            // A plain line, readable without RUST_LOG.
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// A duration in seconds, rounded to the microsecond for a readable report.
pub fn seconds(elapsed: Duration) -> f64 {
    (elapsed.as_secs_f64() * 1e6).round() / 1e6
}
