//! `routing-server`: serves `shipping.routing.v1.RoutingService` with health
//! and reflection.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-server
//! $ cargo run --release -p routing-server -- --help # every knob, flag and env var
//! $ cargo run --release -p routing-server -- probe  # exit 0 only when SERVING
//! $ cargo run --release -p routing-server -- dev-cert --out certs   # a local CA and a server certificate
//! $ cargo run --release -p routing-server -- --listen 127.0.0.1:9443 \
//!       --tls-cert certs/server.pem --tls-key certs/server.key      # TLS (see docs/tls.md)
//! ```
//!
//! Logs go to stderr (`RUST_LOG=routing_server=debug` for one line per call); nothing is
//! printed on stdout except by `probe`.

use std::{io::IsTerminal, process::ExitCode, time::Duration};

use clap::{Parser, Subcommand};
use routing_server::{
    Config,
    cmd::probe::probe,
    connection::tls::BadTlsInput,
    metrics::endpoint::MetricsBindError,
    server::{listen::ListenError, shutdown},
};
use tonic_health::pb::health_check_response::ServingStatus;
use tracing_subscriber::{EnvFilter, layer::SubscriberExt, util::SubscriberInitExt};

/// What each exit code means, at the end of `--help`.
const EXIT_CODES: &str = "\
Exit codes:
  0  stopped after SIGTERM or Ctrl+C (drained); probe: the server is SERVING
  1  failed while running (or probe: not SERVING, unreachable)
  2  a usage or configuration error at start-up: a bad flag or value (the
     message names the flag), an unusable TLS file, a --listen or
     --metrics-listen address that cannot be bound (e.g. already in use)";

// `allow_negative_numbers`: `--fault-delay-ms -1` is the flag's value, so
// the range check refuses it naming the flag; without it clap reads `-1`
// as an unknown flag ("unexpected argument '-1' found").
#[derive(Debug, Parser)]
#[command(
    version,
    about,
    args_conflicts_with_subcommands = true,
    allow_negative_numbers = true,
    after_help = EXIT_CODES
)]
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
        /// Server to check, as host:port (`--addr` is accepted too).
        #[arg(long, visible_alias = "addr", env = "ROUTING_PROBE_ADDR", default_value = routing_server::knobs::DEFAULT_LISTEN)]
        target: String,
        /// Seconds to wait for the answer.
        #[arg(long, default_value_t = 3)]
        timeout_secs: u64,
    },
    /// Write a local CA (ca.pem) and a server certificate it signed (server.pem,
    /// server.key) for localhost, 127.0.0.1, server and server-tls.
    DevCert {
        /// Directory to write the three files into (made if missing).
        #[arg(long, value_name = "DIR")]
        out: std::path::PathBuf,
        /// Keep the files if all three are already there, instead of a new CA
        /// (compose.yaml's `certs` runs before every start of `server-tls`:
        /// a ca.pem that clients already hold stays valid). A set that has
        /// expired, or expires within 30 days, is remade all the same.
        #[arg(long)]
        keep: bool,
    },
}

/// jemalloc instead of glibc's malloc. Measured on the 2-core test machine:
/// RSS per idle connection 12.6 KB instead of 16.4 KB; about 9% fewer
/// instructions per GetQuote; and no page faults per ListRoutes call, where
/// glibc handed each 5 MB response buffer back to the kernel and faulted it in
/// again (up to 1,000 faults, about 2 ms of kernel time, per call).
///
/// Two build options (server/Cargo.toml), for idle connections:
/// - `background_threads`: jemalloc returns freed pages (after its 10 s
///   decay) from a thread of its own. Without it, the decay only runs when the
///   program allocates, so an idle server kept the pages of the last burst:
///   about 19 MB after 1,000 connections had read their pages (the
///   `bigframes` attack), 19 KiB per idle connection, however long they
///   idled.
/// - `disable_cache_oblivious`: each allocation of 16 KiB or more is no
///   longer padded by a page (a random offset that spreads large buffers over
///   cache sets), so a 16 KiB buffer takes 16 KiB, not 20 (h2's write
///   buffer, one per connection, was 16 KiB before `vendor/h2`'s patch).
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal, never in logs or CI.
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .finish()
        .with(IpSniWarning::hidden_unless_asked())
        .init();
    let cli = Cli::parse();
    // One thread: the acceptor, health and the drain. The workers
    // (knobs::WORKER_THREADS) are threads with runtimes of their own that
    // routing_server::run starts, so that each connection stays on one
    // thread; a worker alone is this thread (see routing_server::server::workers).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::error!("cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(cli))
}

/// rustls warns once per connection when a client sends an IP address as
/// its SNI name (`Illegal SNI extension: ignoring IP address presented as
/// hostname`). grpc-js and grpc++ do that whenever they dial `127.0.0.1`;
/// RFC 6066 does not allow it, and rustls then serves the connection as if
/// no name had been sent, which is all this server, with its one
/// certificate, needs. So the line warns about an ordinary client and nobody
/// can act on it; grpc-go's server logs nothing. This layer drops that one
/// message, matched by rustls's module and its text; rustls's other
/// warnings, those of the same module included (a duplicate or malformed
/// name), still show. A level per module in `RUST_LOG` could not tell them
/// apart. A `RUST_LOG` that names `rustls::msgs::handshake` brings it back.
#[derive(Debug, Clone, Copy)]
struct IpSniWarning {
    hidden: bool,
}

impl IpSniWarning {
    /// The module rustls logs the warning from (through `log`, so the
    /// target arrives as the `log.target` field).
    const TARGET: &str = "rustls::msgs::handshake";
    /// The start of the warning's text; the address follows it.
    const MESSAGE: &str = "Illegal SNI extension: ignoring IP address presented as hostname";

    fn hidden_unless_asked() -> Self {
        let asked = std::env::var(EnvFilter::DEFAULT_ENV).is_ok_and(|v| v.contains(Self::TARGET));
        Self { hidden: !asked }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for IpSniWarning {
    fn event_enabled(
        &self,
        event: &tracing::Event<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) -> bool {
        if !self.hidden || *event.metadata().level() != tracing::Level::WARN {
            return true;
        }
        let mut fields = LogLine::default();
        event.record(&mut fields);
        let target = fields
            .target
            .as_deref()
            .unwrap_or(event.metadata().target());
        !(target == Self::TARGET && fields.message.starts_with(Self::MESSAGE))
    }
}

/// The two fields of a warning that [`IpSniWarning`] looks at.
#[derive(Debug, Default)]
struct LogLine {
    target: Option<String>,
    message: String,
}

impl tracing::field::Visit for LogLine {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        match field.name() {
            "log.target" => self.target = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

async fn run(cli: Cli) -> ExitCode {
    let outcome = match cli.command {
        Some(Command::Probe {
            target,
            timeout_secs,
        }) => probe(&target, Duration::from_secs(timeout_secs))
            .await
            .and_then(|status| {
                tracing::info!(%target, ?status, "health");
                match status {
                    ServingStatus::Serving => Ok(()),
                    other => Err(format!("{target} is {}", other.as_str_name()).into()),
                }
            }),
        Some(Command::DevCert { out, keep }) => dev_cert(&out, keep),
        None => serve(cli.config).await,
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        // A TLS flag's file is unusable: a usage error, as clap's are.
        // So is an address that cannot be bound, gRPC's or the metrics'.
        Err(e) if e.is::<BadTlsInput>() || e.is::<MetricsBindError>() || e.is::<ListenError>() => {
            tracing::error!("{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn dev_cert(out: &std::path::Path, keep: bool) -> Result<(), routing_server::server::Error> {
    use routing_server::cmd::dev_cert::{self, KeptSet};
    // With --keep, a set that is complete and not close to its end stays; one
    // that has expired, or soon will, is remade, and the line says why:
    // clients must then be handed the new ca.pem.
    let replaced = match keep.then(|| dev_cert::check_kept(out, time::OffsetDateTime::now_utc())) {
        Some(KeptSet::Fresh { until }) => {
            tracing::info!(dir = %out.display(), %until, "kept the ca.pem, server.pem and server.key already there (--keep)");
            return Ok(());
        }
        Some(KeptSet::Incomplete { .. }) | None => None,
        Some(why) => Some(why),
    };
    let made = dev_cert::generate(&dev_cert::SERVER_NAMES)?;
    made.write_to(out)
        .map_err(|e| format!("cannot write into {}: {e}", out.display()))?;
    match replaced {
        Some(why) => {
            tracing::warn!(dir = %out.display(), names = ?dev_cert::SERVER_NAMES, "remade ca.pem, server.pem and server.key (--keep): {why}; hand clients the new ca.pem")
        }
        None => {
            tracing::info!(dir = %out.display(), names = ?dev_cert::SERVER_NAMES, "wrote ca.pem, server.pem and server.key")
        }
    }
    Ok(())
}

async fn serve(config: Config) -> Result<(), routing_server::server::Error> {
    // The TLS files are checked before the port is taken (and again by run).
    routing_server::connection::tls::ServerTls::from_config(&config)?;
    let mut config = config;
    config.replica = routing_server::routing::replica::replica_name(&config)?;
    warn_about_faults(&config);
    let listener = routing_server::server::bind_with_backlog(config.listen, &config)?;
    // run binds --metrics-listen before it serves anything: a bad address
    // stops the server at start-up (exit 2, see MetricsBindError).
    routing_server::run(listener, config, shutdown::signal()).await
}

/// A server with a fault on answers slowly or fails on purpose (lever 6):
/// say so loudly, once, before it serves, so nobody mistakes it for a
/// regression or leaves it on.
fn warn_about_faults(config: &Config) {
    let faults = routing_server::routing::faults::Faults::from_config(config);
    if faults.any() {
        tracing::warn!(
            fault_delay_ms = config.fault_delay_ms,
            fault_unavailable_percent = config.fault_unavailable_percent,
            "FAULTS ON: GetQuote is slowed or failed on purpose (--fault-delay-ms, --fault-unavailable-percent); never in production"
        );
    }
}
