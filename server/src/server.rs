//! Assembling and running the gRPC server: the routing service with its caps
//! and compression, health, reflection, keepalive, the hardening guards and
//! graceful shutdown.

use std::{future::Future, net::SocketAddr, sync::Arc};

use routing_contracts::routing::routing_service_server::RoutingServiceServer;
use tokio::{net::TcpListener, sync::Notify, sync::oneshot, task::JoinHandle};
use tonic::codec::CompressionEncoding;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::{
    budget::ByteBudget,
    catalog::Catalog,
    connection::{self, ConnectionPolicy},
    edge::{EdgeConfig, EdgeLayer},
    knobs::Config,
    service::{RoutingApi, RoutingServer},
};

/// Anything that stops the server from starting or serving.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The routing service with the chapter's message caps and compression.
pub fn routing_service(config: &Config) -> RoutingServer {
    let response_budget = ByteBudget::new("response budget", config.response_budget_bytes);
    let api = RoutingApi::new(Catalog::new(), response_budget, config.send_deadline());
    let service = RoutingServer::new(api)
        // Send cap: tonic's default is unlimited, so set it (see knobs).
        .max_encoding_message_size(config.max_send_bytes)
        // Receive cap: tonic's default is already 4 MiB; we state it anyway.
        .max_decoding_message_size(config.max_recv_bytes)
        // Decompress gzip requests, even with --no-gzip: refusing them would
        // break gzip clients rather than show what compression saves.
        .accept_compressed(CompressionEncoding::Gzip);
    if config.no_gzip {
        return service;
    }
    // Compress ListRoutes pages, but only for clients that accept gzip.
    service.send_compressed(CompressionEncoding::Gzip)
}

/// Serves on `listener` until `shutdown` completes, then drains: health turns
/// NOT_SERVING, new connections are refused, calls in flight may finish, and
/// after `config.drain_timeout()` the server stops waiting for them.
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<RoutingServiceServer<RoutingApi>>()
        .await;

    // Reflection lets grpcurl and ghz discover the API with no .proto files.
    // Both versions are served: grpcurl tries v1 first, older tools only know v1alpha.
    let descriptors = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(routing_contracts::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = descriptors().build_v1()?;
    let reflection_v1alpha = descriptors().build_v1alpha()?;

    let local_addr = listener.local_addr()?;
    let max_connections = config
        .max_connections
        .unwrap_or_else(connection::default_max_connections);
    let incoming = connection::incoming(
        listener,
        max_connections,
        ConnectionPolicy {
            handshake_timeout: config.handshake_timeout(),
            min_ping_interval: config.min_ping_interval(),
            permit_pings_without_calls: config.permit_pings_without_calls,
        },
    );
    let edge = EdgeLayer::new(EdgeConfig {
        request_budget: ByteBudget::new("request budget", config.request_budget_bytes),
        request_deadline: config.request_deadline(),
    });

    let drain_started = Arc::new(Notify::new());
    let signal = {
        let (health, drain_started) = (health.clone(), drain_started.clone());
        async move {
            shutdown.await;
            tracing::info!("shutdown requested: draining calls in flight");
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
            health
                .set_not_serving::<RoutingServiceServer<RoutingApi>>()
                .await;
            drain_started.notify_one();
        }
    };

    let serve = Server::builder()
        // Keepalive: PING a connection after this much idle time...
        .http2_keepalive_interval(Some(config.keepalive_interval()))
        // ...and close it if the PING is not acknowledged within this.
        .http2_keepalive_timeout(Some(config.keepalive_timeout()))
        // tonic advertises no stream limit unless told: unlimited calls per
        // connection. Advertise one (see knobs::MAX_CONCURRENT_STREAMS).
        .max_concurrent_streams(config.max_concurrent_streams)
        // tonic >= 0.14.3 passes None here unless set, which switches h2's
        // MadeYouReset guard off. Set it (see knobs::MAX_LOCAL_ERROR_RESETS).
        .http2_max_local_error_reset_streams(Some(config.max_local_error_resets))
        .layer(edge)
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(routing_service(&config))
        .serve_with_incoming_shutdown(incoming, signal);

    tracing::info!(%local_addr, ?config, max_connections, "serving shipping.routing.v1.RoutingService");
    let drain_bound = async {
        drain_started.notified().await;
        tokio::time::sleep(config.drain_timeout()).await;
    };
    tokio::select! {
        served = serve => served?,
        () = drain_bound => {
            tracing::warn!(drain_secs = config.drain_secs, "drain timed out: dropping calls still in flight");
        }
    }
    tracing::info!("server stopped");
    Ok(())
}

/// A server running in the background on a free loopback port. Integration
/// tests and examples use it; `routing-server` itself calls [`run`].
#[derive(Debug)]
pub struct LocalServer {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
}

impl LocalServer {
    /// Binds `127.0.0.1:0` (ignoring `config.listen`) and starts serving.
    pub async fn start(config: Config) -> Result<Self, Error> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, config, async {
            // A dropped sender also means "stop".
            let _ = stop.await;
        }));
        Ok(Self {
            addr,
            shutdown,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, ready for `Endpoint::from_shared`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts a graceful shutdown and waits for [`run`] to return.
    pub async fn shutdown(self) -> Result<(), Error> {
        let _ = self.shutdown.send(());
        self.task.await?
    }
}
