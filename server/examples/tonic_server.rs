//! `tonic_server`: the chapter's server as a tonic user writes it, to copy.
//! tonic's own `Server::builder()` with the four levers set, the two h2
//! guards tonic leaves off, and the same quote and catalog logic as
//! `routing-server` (from this crate's library). `routing-server` serves
//! connections with hyper directly, with hardening tonic does not have (see
//! docs/hardening.md); this file is what the same settings look like in a
//! plain tonic service, and the live baseline `bench` and `abuse` compare
//! against (docs/costs.md).
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-server --example tonic_server
//! $ cargo run --release -p routing-server --example tonic_server -- --listen 127.0.0.1:9181
//! $ cargo run --release -p routing-server --example tonic_server -- --listen 127.0.0.1:9443 \
//!       --tls-cert certs/server.pem --tls-key certs/server.key   # TLS, tonic's ServerTlsConfig
//! $ cargo run --release -p routing-server --example tonic_server -- --listen 127.0.0.1:9181 \
//!       --metrics-listen 127.0.0.1:9465   # gRFC A66's call metrics at /metrics
//! ```
//!
//! It serves the contract (RoutingService, health, reflection) until Ctrl+C
//! or SIGTERM, then drains for up to 10 s. Logs go to stderr, for example:
//!
//! ```text
//! 2026-12-01T10:03:15.370984Z  INFO tonic_server: stock tonic serving shipping.routing.v1.RoutingService local_addr=127.0.0.1:9181
//! ```

use std::{
    future::Future, io::IsTerminal, net::SocketAddr, path::PathBuf, process::ExitCode, sync::Arc,
};

use clap::Parser;
use routing_contracts::routing::routing_service_server::{RoutingService, RoutingServiceServer};
use routing_contracts::routing::{
    GetQuoteRequest, GetQuoteResponse, ListRoutesRequest, ListRoutesResponse,
};
use routing_server::metrics::{
    Metrics,
    a66::{CallMetrics, CallMetricsLayer, MeteredRequest},
    endpoint,
};
use routing_server::server::{listen, serving::SERVED_METHODS};
use routing_server::{knobs, routing::catalog::Catalog, routing::quote, server::Error};
use tokio::net::TcpListener;
use tonic::{
    Request, Response, Status,
    body::Body,
    codec::CompressionEncoding,
    transport::{Identity, Server, ServerTlsConfig, server::TcpIncoming},
};
use tower::ServiceBuilder;

#[derive(Debug, Parser)]
#[command(about = "The chapter's RoutingService on tonic's stock Server::builder()")]
struct Args {
    /// Address to listen on, as host:port.
    #[arg(long, env = "ROUTING_LISTEN", default_value = knobs::DEFAULT_LISTEN,
          value_parser = knobs::listen_address)]
    listen: SocketAddr,

    /// Serve TLS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, env = "ROUTING_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,

    /// The private key of --tls-cert (PEM); needs --tls-cert.
    #[arg(long, env = "ROUTING_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,

    /// Serve GET /metrics (gRFC A66's per-call metrics) on this host:port [default: off].
    #[arg(long, env = "ROUTING_METRICS_LISTEN", value_parser = knobs::listen_address)]
    metrics_listen: Option<SocketAddr>,
}

/// TLS from `--tls-cert` and `--tls-key` (tonic feature `tls-ring`), or
/// `None` for plaintext. tonic offers ALPN `h2` itself. An unreadable file
/// is named with its flag; a key that does not match fails at start-up.
fn tls_config(args: &Args) -> Result<Option<ServerTlsConfig>, String> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else {
        return Ok(None);
    };
    let read = |flag: &str, path: &PathBuf| {
        std::fs::read(path).map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))
    };
    let identity = Identity::from_pem(read("--tls-cert", cert)?, read("--tls-key", key)?);
    Ok(Some(ServerTlsConfig::new().identity(identity)))
}

/// The contract on the library's pure logic: nothing here but the mapping.
#[derive(Debug, Default)]
pub struct Routing {
    catalog: Arc<Catalog>,
}

#[tonic::async_trait]
impl RoutingService for Routing {
    async fn get_quote(
        &self,
        request: Request<GetQuoteRequest>,
    ) -> Result<Response<GetQuoteResponse>, Status> {
        let quote = quote::quote(request.get_ref())?;
        Ok(Response::new(GetQuoteResponse { quote: Some(quote) }))
    }

    async fn list_routes(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let page = self.catalog.page(request.get_ref())?;
        Ok(Response::new(page.to_message()))
    }
}

/// Serves on `listener` until `shutdown` completes, then drains: health
/// turns NOT_SERVING, connections get GOAWAY, calls in flight may finish for
/// up to `knobs::DRAIN_TIMEOUT`.
pub async fn serve(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    serve_with(listener, None, None, shutdown).await
}

/// [`serve`], over TLS when `tls` is given: the one line
/// `Server::builder().tls_config(tls)` is all a tonic server adds. With
/// `metrics`, every call is recorded by gRFC A66's layer.
pub async fn serve_with(
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    metrics: Option<Arc<CallMetrics>>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let routing = RoutingServiceServer::new(Routing::default())
        // Lever 2, message caps: tonic's send cap is unlimited, so set one
        // (16 MiB fits the 5.0 MB catalog); the receive cap stays at 4 MiB.
        .max_encoding_message_size(knobs::MAX_SEND_MESSAGE_BYTES)
        .max_decoding_message_size(knobs::MAX_RECV_MESSAGE_BYTES)
        // Lever 3, gzip: answers are gzipped for clients that accept it, and
        // gzip requests are accepted. tonic compresses per service, so small
        // GetQuote answers are gzipped too (routing-server never does).
        .send_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Gzip);
    let (health, health_service) = tonic_health::server::health_reporter();
    health.set_serving::<RoutingServiceServer<Routing>>().await;
    // Reflection, so grpcurl and ghz need no .proto files.
    let reflection = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(routing_contracts::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;

    let (draining, mut drain_started) = tokio::sync::watch::channel(false);
    let signal = async move {
        shutdown.await;
        tracing::info!("shutdown requested: draining calls in flight");
        health
            .set_not_serving::<RoutingServiceServer<Routing>>()
            .await;
        let _ = draining.send(true);
    };
    tracing::info!(local_addr = %listener.local_addr()?, "stock tonic serving shipping.routing.v1.RoutingService");
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder.tls_config(tls)?;
    }
    let serving = builder
        // gRFC A66's call metrics: the layer hands the service a request body
        // that counts its bytes, which tonic's router takes boxed.
        .layer(
            ServiceBuilder::new()
                .layer(CallMetricsLayer::new(metrics))
                .map_request(|request: http::Request<MeteredRequest<Body>>| request.map(Body::new)),
        )
        // Lever 4, keepalive: PING a connection idle for 5 s, close it if the
        // ack takes more than 20 s. (tonic enforces no floor on the client's
        // PINGs; routing-server does, in server/src/connection/ping_floor.rs.)
        .http2_keepalive_interval(Some(knobs::KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(knobs::KEEPALIVE_TIMEOUT))
        // h2 guard 1: advertise 100 streams per connection; tonic advertises
        // no limit unless told.
        .max_concurrent_streams(knobs::MAX_CONCURRENT_STREAMS)
        // h2 guard 2: GOAWAY after 1024 streams reset for a client's protocol
        // errors (MadeYouReset, CVE-2025-8671); tonic >= 0.14.3 turns it off.
        .http2_max_local_error_reset_streams(Some(knobs::MAX_LOCAL_ERROR_RESETS))
        .add_service(health_service)
        .add_service(reflection)
        .add_service(routing)
        // TCP_NODELAY, which `Server::builder().serve(addr)` sets itself but
        // `serve_with_incoming` leaves to the listener: without it, a
        // response's last small frames wait for the client's delayed ACK
        // (a 0.2 MB page took 17 ms instead of 0.3, docs/folklore.md).
        .serve_with_incoming_shutdown(TcpIncoming::from(listener).with_nodelay(Some(true)), signal);
    // tonic waits for every connection to close; bound the drain.
    let drain_timed_out = async {
        let _ = drain_started.wait_for(|started| *started).await;
        tokio::time::sleep(knobs::DRAIN_TIMEOUT).await;
    };
    tokio::select! {
        served = serving => served?,
        () = drain_timed_out => tracing::warn!("drain timed out: dropping calls still in flight"),
    }
    tracing::info!("server stopped");
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let args = Args::parse();
    let tls = match tls_config(&args) {
        Ok(tls) => tls,
        Err(e) => {
            tracing::error!("{e}");
            return ExitCode::from(2);
        }
    };
    // Metrics: the A66 layer's handles, served at /metrics on their own port.
    let metrics = match args.metrics_listen {
        Some(addr) => match listen::bind_metrics(addr, None) {
            Ok(listener) => {
                let metrics = Arc::new(Metrics::per_call(&SERVED_METHODS));
                tokio::spawn(endpoint::serve(listener, Arc::clone(&metrics)));
                metrics.calls.clone()
            }
            Err(e) => {
                tracing::error!("{e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let served = match routing_server::server::bind(args.listen).await {
        Ok(listener) => {
            serve_with(
                listener,
                tls,
                metrics,
                routing_server::server::shutdown::signal(),
            )
            .await
        }
        Err(e) => Err(e),
    };
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            ExitCode::FAILURE
        }
    }
}
