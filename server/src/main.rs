//! `routing-server`: serves `shipping.routing.v1.RoutingService` with health
//! and reflection.
//!
//! Run with:
//!
//! ```console
//! $ cargo run -p routing-server
//! $ cargo run -p routing-server -- --help           # every knob, flag and env var
//! $ cargo run -p routing-server -- probe            # exit 0 only when SERVING
//! ```
//!
//! Logs go to stderr (`RUST_LOG=debug` for one line per call); nothing is
//! printed on stdout except by `probe`.

use std::{io::IsTerminal, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use routing_server::{Config, probe::probe, shutdown};
use tokio::net::TcpListener;
use tonic_health::pb::health_check_response::ServingStatus;
use tracing_subscriber::EnvFilter;

#[derive(Debug, Parser)]
#[command(version, about, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    config: Config,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Check the server's gRPC health; exit 0 only when it is SERVING.
    Probe {
        /// Server to check, as host:port.
        #[arg(long, env = "ROUTING_PROBE_ADDR", default_value = routing_server::knobs::DEFAULT_LISTEN)]
        addr: String,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 3)]
        timeout_secs: u64,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in logs or CI.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .init();
    let cli = Cli::parse();

    let outcome = match cli.command {
        Some(Command::Probe { addr, timeout_secs }) => {
            probe(&addr, Duration::from_secs(timeout_secs))
                .await
                .and_then(|status| {
                    tracing::info!(%addr, ?status, "health");
                    match status {
                        ServingStatus::Serving => Ok(()),
                        other => Err(format!("{addr} is {}", other.as_str_name()).into()),
                    }
                })
        }
        None => serve(cli.config).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> Result<(), routing_server::server::Error> {
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.listen))?;
    routing_server::run(listener, config, shutdown::signal()).await
}
