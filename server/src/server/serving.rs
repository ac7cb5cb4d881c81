//! Assembling and running the gRPC server: the routing service with its caps
//! and compression, health, reflection, keepalive, the hardening guards and
//! graceful shutdown. [`run`] takes the connections the accept loop
//! ([`crate::server::accept`]) yields, hands each to a worker
//! ([`crate::server::workers`]), and drains them all on shutdown.

use std::{
    convert::Infallible,
    future::Future,
    pin::pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::{body::Incoming, server::conn::http2};
use hyper_util::{
    rt::{TokioExecutor, TokioIo, TokioTimer},
    service::TowerToHyperService,
};
use routing_contracts::routing::routing_service_server::RoutingServiceServer;
use tokio::net::TcpListener;
use tonic::{
    Status, body::Body, codec::CompressionEncoding, codegen::BoxFuture, server::NamedService,
};
use tonic_health::ServingStatus;
use tower::{Layer, Service, util::BoxCloneSyncService};

use crate::{
    call::budget::ByteBudget,
    call::info::ConnectionInfo,
    call::request_guards::{EdgeConfig, EdgeLayer},
    connection::accepted::Accepted,
    connection::age::{self as lifetime, Lifetime},
    connection::drain::{DrainWatcher, ServerDrain},
    connection::policy::ConnectionPolicy,
    connection::shared_memory::SharedMemory,
    connection::tls::ServerTls,
    connection::watched::Connection,
    knobs::{Config, SEND_BUFFER_PER_STREAM},
    metrics::{Metrics, a66::CallMetricsLayer, connection::Closed, endpoint},
    routing::catalog::Catalog,
    routing::faults::Faults,
    routing::service::{RoutingApi, RoutingServer},
    server::error::Error,
    server::{accept, fd_limit, listen, workers, workers::Live, workers::Workers},
};

/// The routing service with the chapter's message caps and compression.
pub fn routing_service(config: &Config) -> RoutingServer {
    routing_server(routing_api(config), config)
}

/// The catalog and the response budget, behind GetQuote and ListRoutes,
/// and GetQuote's faults (off unless `--fault-*` asks).
fn routing_api(config: &Config) -> RoutingApi {
    let response_budget = ByteBudget::with_connection_share(
        "response budget",
        config.response_budget_bytes,
        config.response_share_bytes(),
        Some(config.stalled_holder_after()),
    );
    RoutingApi::new(
        Catalog::with_filler(config.filler),
        response_budget,
        config.send_deadline(),
    )
    .with_faults(Faults::from_config(config))
}

/// The routing service around `api`, which may be shared: a clone shares its
/// catalog and response budget.
fn routing_server(api: RoutingApi, config: &Config) -> RoutingServer {
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
/// NOT_SERVING, new connections are refused, every connection gets GOAWAY,
/// calls in flight may finish, and after `config.drain_timeout()` the server
/// stops waiting for them.
///
/// Connections are served by `config.worker_threads` workers
/// ([`crate::server::workers`]): the runtime this is awaited on accepts every
/// connection; the workers are threads this starts, each with a
/// current-thread runtime, and stops before it returns (one worker alone is
/// the caller's runtime itself). What is global stays here, on the caller's
/// runtime: the accept loop with its connection cap and back-off, health,
/// the byte budgets (shared by every worker's copy of the service) and the
/// drain, which waits for every worker's connections.
///
/// With `config.metrics_listen`, binds it first (see [`run_with`]).
///
/// hyper serves each connection directly rather than through tonic's
/// `Server`: tonic adds a router, boxed futures and bodies, and a `date`
/// header to every call, about 10 % of GetQuote's CPU on the test machine
/// (see README, "What each lever costs"). Its other per-call job, honouring
/// the client's `grpc-timeout`, is done in [`crate::call::request_guards`].
pub async fn run(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(listen::bind_metrics(addr, config.listen_backlog)?),
        None => None,
    };
    run_with(listener, metrics_listener, config, shutdown).await
}

/// Every method the server mounts, as gRFC A66's `grpc_method` names them
/// (any other path is recorded as `other`).
pub const SERVED_METHODS: [&str; 6] = [
    routing_contracts::GET_QUOTE,
    routing_contracts::LIST_ROUTES,
    "/grpc.health.v1.Health/Check",
    "/grpc.health.v1.Health/Watch",
    "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
];

/// [`run`], with the metrics listener already bound (`None`: metrics off),
/// as [`crate::server::local::LocalServer`] calls it with a free port.
pub async fn run_with(
    listener: TcpListener,
    metrics_listener: Option<TcpListener>,
    mut config: Config,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), Error> {
    let metrics = Arc::new(match metrics_listener {
        Some(_) => Metrics::on(&SERVED_METHODS),
        None => Metrics::off(),
    });
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
            // Each version lists both reflection services, as grpc-go does;
            // tonic's builder adds only its own. (A file registered twice is
            // kept once.)
            .register_encoded_file_descriptor_set(tonic_reflection::pb::v1::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(
                tonic_reflection::pb::v1alpha::FILE_DESCRIPTOR_SET,
            )
    };
    // Every worker gets a service of its own: hyper and tonic clone the
    // service, and so bump its reference counts, on every call, and counts
    // shared by two cores would bounce between their caches. What must be
    // global is shared: the catalog, both byte budgets and health.
    let api = routing_api(&config);
    let request_budget = ByteBudget::new("request budget", config.request_budget_bytes);
    let workers = workers::count(config.worker_threads);
    config.worker_threads = Some(workers);
    let worker_service = || -> Result<_, Error> {
        let services = Services::new(routing_server(api.clone(), &config))
            .with(health_service.clone())
            .with(descriptors().build_v1()?)
            .with(descriptors().build_v1alpha()?);
        let edge = EdgeLayer::new(EdgeConfig {
            request_budget: Arc::clone(&request_budget),
            request_deadline: config.request_deadline(),
            default_deadline: config.default_deadline(),
        })
        .layer(services);
        // Outermost, so a call is recorded with the status the client gets,
        // the edge's own (DEADLINE_EXCEEDED, 415) included.
        Ok(CallMetricsLayer::new(metrics.calls.clone()).layer(edge))
    };
    let http2 = http2_settings(&config);
    let tls = ServerTls::from_config(&config)?;

    let local_addr = listener.local_addr()?;
    let max_connections = config
        .max_connections
        .unwrap_or_else(fd_limit::default_max_connections);
    let (slots, slot_count) = accept::connection_slots(max_connections);
    let mut incoming = accept::incoming(
        listener,
        Arc::clone(&slots),
        ConnectionPolicy {
            handshake_timeout: config.handshake_timeout(),
            min_ping_interval: config.min_ping_interval(),
            permit_pings_without_calls: config.permit_pings_without_calls,
            // TCP_USER_TIMEOUT is the keepalive timeout, as in grpc-go.
            tcp_user_timeout: Some(config.keepalive_timeout()),
            tcp_notsent_lowat: config.tcp_notsent_lowat(),
            control_frame_budget: config.control_frame_budget(),
            window_update_budget: config.window_update_budget(),
            metrics: metrics.connections,
        },
    )?;
    let connections = ServerDrain::new();
    let lifetime = Arc::new(Lifetime {
        metrics: Some(metrics.connections),
        ..Lifetime::from_config(&config)
    });
    if let Some(registry) = metrics.registry() {
        // Set once: what a CPU limit gave this process (docs/kubernetes.md).
        registry
            .gauge(
                "routing_server_worker_threads",
                &[],
                "Worker threads serving connections: --worker-threads, or the CPUs this process may use (cgroup quota and affinity included)",
            )
            .set(workers as f64);
    }
    let metrics_task = metrics_listener.map(|listener| {
        watch_state(&metrics, &slots, slot_count, &request_budget, &api);
        let metrics_addr = listener
            .local_addr()
            .map_or_else(|e| e.to_string(), |a| a.to_string());
        tracing::info!(%metrics_addr, path = endpoint::PATH, "serving metrics (Prometheus text format)");
        tokio::spawn(endpoint::serve(listener, Arc::clone(&metrics)))
    });
    let mut serve = Vec::with_capacity(workers);
    for _ in 0..workers {
        let worker = Arc::new(WorkerServing {
            service: worker_service()?,
            http2: http2.clone(),
            tls: tls.clone(),
            lifetime: Arc::clone(&lifetime),
            // A copy per worker, as the service: its reference count is
            // moved by every connection the worker starts.
            shared: Arc::new(SharedMemory::new(api.carriers())),
        });
        serve.push(move |(accepted, watcher), live| {
            Arc::clone(&worker).serve_connection(accepted, watcher, live)
        });
    }
    let mut workers = Workers::start(serve)?;
    tracing::info!(%local_addr, ?config, max_connections, workers = workers.len(), tls = tls.is_some(), "serving shipping.routing.v1.RoutingService");

    let mut shutdown = pin!(shutdown);
    loop {
        let connection = tokio::select! {
            () = &mut shutdown => break,
            connection = incoming.recv() => connection,
        };
        let Some(connection) = connection else { break };
        let peer = connection.peer();
        // The watcher is made here, before the hand-off, so the drain also
        // waits for a connection still on its way to its worker.
        let worker = workers.hand_off((connection, connections.watcher()));
        tracing::debug!(%peer, worker, live = ?workers.live(), "connection accepted");
    }

    // Dropping `incoming` ends the accept loop, which closes the listener:
    // new connections are refused from now on.
    drop(incoming);
    tracing::info!("shutdown requested: draining calls in flight");
    health
        .set_service_status("", ServingStatus::NotServing)
        .await;
    health
        .set_not_serving::<RoutingServiceServer<RoutingApi>>()
        .await;
    tokio::select! {
        () = connections.shutdown() => {}
        () = tokio::time::sleep(config.drain_timeout()) => {
            tracing::warn!(drain_secs = config.drain_secs, "drain timed out: dropping calls still in flight");
        }
    }
    workers.stop().await;
    if let Some(task) = metrics_task {
        task.abort();
    }
    tracing::info!("server stopped");
    Ok(())
}

/// What every connection on one worker is served with: its copy of the
/// service, hyper's settings, TLS, the lifetime rules and the memory its
/// writes may share. Shared by the worker's connection tasks, so each task
/// stores one pointer to it rather than a copy of each (about 300 bytes per
/// connection).
struct WorkerServing<S> {
    service: S,
    http2: http2::Builder<TokioExecutor>,
    tls: Option<ServerTls>,
    lifetime: Arc<Lifetime>,
    /// The catalog's carriers: an identity page's bytes are written from
    /// them, not copied into the write buffer
    /// ([`crate::connection::shared_memory`]).
    shared: Arc<SharedMemory>,
}

impl<S, RB> WorkerServing<S>
where
    S: Service<http::Request<Incoming>, Response = http::Response<RB>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + Unpin + 'static,
    RB: http_body::Body<Data = bytes::Bytes> + Send + Unpin + 'static,
    RB::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    /// hyper's connection over `connection`, with the per-call service, and
    /// the activity its idle rules watch. Not async on purpose: what it
    /// takes and borrows (the 600-byte `Connection`, the per-call service)
    /// is gone before the caller's next `.await`, so the connection's task
    /// does not keep room for it.
    fn http2_over(
        &self,
        connection: Connection,
    ) -> (HyperConnection<S>, Option<Arc<lifetime::Activity>>) {
        let per_call = PerConnection {
            service: self.service.clone(),
            info: connection.info().clone(),
        };
        // Connection age and idleness, and the replica header (connection/age.rs).
        let peak_streams = Arc::clone(&per_call.info.peak_streams);
        let (per_call, activity) = self.lifetime.track(per_call, peak_streams);
        let connection = connection.sharing(Arc::clone(&self.shared));
        let serving = self
            .http2
            .serve_connection(TokioIo::new(connection), TowerToHyperService::new(per_call));
        (serving, activity)
    }

    /// Serves one connection on this worker, until it ends or the drain
    /// closes it.
    ///
    /// This future is each connection's task, kept for the connection's
    /// life, so it is kept small: a task of 3,584 bytes instead of 7,424
    /// (measured with `-Zprint-type-sizes`; docs/costs.md). The handshake's
    /// future is boxed and freed once the handshake is over, and hyper's
    /// connection is built outside it ([`Self::http2_over`]) and pinned
    /// once, here.
    ///
    /// A function that returns an `async move` block rather than an `async
    /// fn`: an `async fn` keeps each argument twice, as passed and as moved
    /// into its body.
    #[allow(
        clippy::manual_async_fn,
        reason = "an async fn would store its arguments twice"
    )]
    fn serve_connection(
        self: Arc<Self>,
        accepted: Accepted,
        mut watcher: DrainWatcher,
        live: Live,
    ) -> impl Future<Output = ()> + Send + use<S, RB> {
        async move {
            // Counted on its worker until this task ends.
            let _live = live;
            let closed = |how| {
                if let Some(metrics) = self.lifetime.metrics {
                    metrics.closed(how);
                }
            };
            let peer = accepted.peer();
            let handshake = Box::pin(accepted.serve(self.tls.as_ref(), &mut watcher));
            let connection = match handshake.await {
                Ok(connection) => connection,
                Err(e) => {
                    tracing::debug!(%peer, "connection not served: {e}");
                    closed(Closed::NotServed);
                    return;
                }
            };
            let (serving, activity) = self.http2_over(connection);
            let serving = pin!(serving);
            match lifetime::serve(serving, watcher, &self.lifetime, activity).await {
                Ok(()) => closed(Closed::Clean),
                Err(e) => {
                    tracing::debug!("connection ended with an error: {e}");
                    closed(Closed::Error);
                }
            }
        }
    }
}

/// hyper's HTTP/2 connection as [`WorkerServing::http2_over`] builds it.
type HyperConnection<S> = http2::Connection<
    TokioIo<Connection>,
    TowerToHyperService<lifetime::Tracked<PerConnection<S>>>,
    TokioExecutor,
>;

/// Sets, before each scrape, the gauges whose value the server keeps
/// anyway: connections open (the accept loop's permits in use), and each
/// budget's bytes held and refusals.
fn watch_state(
    metrics: &Metrics,
    slots: &Arc<tokio::sync::Semaphore>,
    slot_count: usize,
    request_budget: &Arc<ByteBudget>,
    api: &RoutingApi,
) {
    let Some(registry) = metrics.registry() else {
        return;
    };
    let open = registry.gauge(
        "routing_server_connections_open",
        &[],
        "Connections open now (accepted and not yet ended)",
    );
    let slots = Arc::clone(slots);
    metrics
        .on_scrape(move || open.set(slot_count.saturating_sub(slots.available_permits()) as f64));
    for (label, budget) in [
        ("request", Arc::clone(request_budget)),
        ("response", api.response_budget()),
    ] {
        let held = registry.gauge(
            "routing_server_budget_bytes_held",
            &[("budget", label)],
            "Bytes each server-wide budget holds now (--request-budget-bytes, --response-budget-bytes)",
        );
        let refused = registry.counter(
            "routing_server_budget_refusals_total",
            &[("budget", label)],
            "Calls refused with RESOURCE_EXHAUSTED because a budget (or a connection's share) was full",
        );
        metrics.on_scrape(move || {
            held.set(budget.in_use() as f64);
            refused.absolute(budget.refusals());
        });
    }
}

/// hyper's HTTP/2 settings for every connection. With tonic's `Server`
/// instead, each has a builder method of the same meaning, named in the
/// comment after `tonic:`.
fn http2_settings(config: &Config) -> http2::Builder<TokioExecutor> {
    let mut http2 = http2::Builder::new(TokioExecutor::new());
    http2
        // Keepalive needs a timer to run.
        .timer(TokioTimer::new())
        // Keepalive: PING a connection after this much idle time...
        // (tonic: http2_keepalive_interval)
        .keep_alive_interval(config.keepalive_interval())
        // ...and close it if the PING is not acknowledged within this.
        // (tonic: http2_keepalive_timeout)
        .keep_alive_timeout(config.keepalive_timeout())
        // Advertise a stream limit (see knobs::MAX_CONCURRENT_STREAMS); tonic
        // advertises none unless told. (tonic: max_concurrent_streams)
        .max_concurrent_streams(config.max_concurrent_streams)
        // h2's MadeYouReset guard, which tonic >= 0.14.3 switches off unless
        // it is set (see knobs::MAX_LOCAL_ERROR_RESETS).
        // (tonic: http2_max_local_error_reset_streams)
        .max_local_error_reset_streams(config.max_local_error_resets)
        // gRPC has no use for a `date` header on every response. (tonic
        // always sends one.)
        .auto_date_header(false)
        // A response's bytes h2 may hold per stream beyond what is on the
        // wire (see knobs::SEND_BUFFER_PER_STREAM). (tonic: no setting; its
        // server keeps hyper's ~400 KiB)
        .max_send_buf_size(SEND_BUFFER_PER_STREAM);
    http2
}

/// A service reached by name through a box: health and reflection.
type OtherService = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, Infallible>;

/// Every service the server mounts, found by the service name in the path
/// (`/shipping.routing.v1.RoutingService/GetQuote`). RoutingService is
/// called directly; health and reflection, which are rare, go through boxed
/// services. Any other name gets `UNIMPLEMENTED`, as from tonic's router.
#[derive(Clone)]
struct Services {
    routing: RoutingServer,
    /// Shared, not copied: hyper clones the service for every call.
    others: Arc<[(&'static str, OtherService)]>,
}

impl Services {
    fn new(routing: RoutingServer) -> Self {
        Self {
            routing,
            others: Arc::new([]),
        }
    }

    fn with<S>(mut self, service: S) -> Self
    where
        S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Future: Send + 'static,
    {
        let mut others = self.others.to_vec();
        others.push((S::NAME, BoxCloneSyncService::new(service)));
        self.others = others.into();
        self
    }
}

impl Service<http::Request<Body>> for Services {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        // Every service here is always ready (tonic's generated servers are).
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let name = service_name(request.uri().path());
        if name == RoutingServer::NAME {
            return self.routing.call(request);
        }
        match self.others.iter().find(|(n, _)| *n == name) {
            Some((_, service)) => service.clone().call(request),
            None => Box::pin(async { Ok(Status::unimplemented("").into_http()) }),
        }
    }
}

/// `package.Service` from `/package.Service/Method`.
fn service_name(path: &str) -> &str {
    let path = path.strip_prefix('/').unwrap_or(path);
    path.split_once('/').map_or(path, |(service, _)| service)
}

/// The service for one connection: every request learns which connection it
/// came on ([`ConnectionInfo`]), as the send deadline needs.
#[derive(Clone)]
struct PerConnection<S> {
    service: S,
    info: ConnectionInfo,
}

impl<S> Service<http::Request<Incoming>> for PerConnection<S>
where
    S: Service<http::Request<Incoming>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.service.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<Incoming>) -> Self::Future {
        request.extensions_mut().insert(self.info.clone());
        self.service.call(request)
    }
}
