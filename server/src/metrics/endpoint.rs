//! The metrics listener: `GET /metrics` in the Prometheus text format, on
//! its own port (`--metrics-listen`), never the gRPC port.
//!
//! - any other path gets 404, any other method on `/metrics` 405;
//! - at most [`METRICS_MAX_CONNECTIONS`] connections at once (more are
//!   closed at once), headers within [`METRICS_HEADER_TIMEOUT`], and no
//!   connection lives past [`METRICS_CONNECTION_LIFETIME`]: an unknown
//!   path, a request with a body or a slow reader costs this listener's
//!   slots and nothing of the gRPC port's budgets, and a request's body is
//!   never read;
//! - HTTP/1.1 through hyper, as Prometheus scrapes.
//!
//! It runs on the runtime that accepts gRPC connections, so it needs no
//! thread of its own; [`serve`] also moves histogram values into their
//! buckets every [`METRICS_UPKEEP_INTERVAL`].

use std::{convert::Infallible, io, net::SocketAddr, sync::Arc};

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::{net::TcpListener, sync::Semaphore};

use crate::knobs::{
    METRICS_CONNECTION_LIFETIME, METRICS_HEADER_TIMEOUT, METRICS_MAX_CONNECTIONS,
    METRICS_UPKEEP_INTERVAL,
};
use crate::metrics::Metrics;

/// The path Prometheus scrapes.
pub const PATH: &str = "/metrics";

/// The content type of the Prometheus text format that Prometheus 2.x reads.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics address could not be bound: a usage error (exit 2), with
/// the address in its message.
#[derive(Debug)]
pub struct MetricsBindError {
    pub addr: SocketAddr,
    pub source: io::Error,
}

impl std::fmt::Display for MetricsBindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "--metrics-listen {}: cannot listen there: {}",
            self.addr, self.source
        )
    }
}

impl std::error::Error for MetricsBindError {}

/// Binds the metrics address.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, MetricsBindError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| MetricsBindError { addr, source })
}

/// Serves `metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let slots = Arc::new(Semaphore::new(METRICS_MAX_CONNECTIONS));
    let mut upkeep = tokio::time::interval(METRICS_UPKEEP_INTERVAL);
    upkeep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let (stream, peer) = tokio::select! {
            _ = upkeep.tick() => {
                metrics.run_upkeep();
                continue;
            }
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // EMFILE and the like: the gRPC accept loop backs off
                    // too; a short pause keeps this one from spinning.
                    tracing::debug!("metrics listener: accept failed: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::debug!(%peer, "metrics listener: {METRICS_MAX_CONNECTIONS} connections open, closing a new one");
            continue;
        };
        let metrics = Arc::clone(&metrics);
        tokio::spawn(async move {
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let response = answer(request.method(), request.uri().path(), &metrics);
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service);
            match tokio::time::timeout(METRICS_CONNECTION_LIFETIME, connection).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, "metrics connection: {e}"),
                Err(_) => {
                    tracing::debug!(%peer, "metrics connection closed after {METRICS_CONNECTION_LIFETIME:?}")
                }
            }
            drop(slot);
        });
    }
}

/// The answer to one request: the metrics, 404 or 405.
fn answer(method: &Method, path: &str, metrics: &Metrics) -> Response<Full<Bytes>> {
    let response = Response::builder();
    let response = match (path, method) {
        (PATH, &Method::GET) => response
            .header(header::CONTENT_TYPE, TEXT_FORMAT)
            .body(Full::new(Bytes::from(metrics.render()))),
        (PATH, _) => response
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .header(header::ALLOW, "GET")
            .body(Full::new(Bytes::from_static(b"only GET\n"))),
        _ => response
            .status(StatusCode::NOT_FOUND)
            .body(Full::new(Bytes::from_static(
                b"not found: metrics are at /metrics\n",
            ))),
    };
    response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new())))
}
