//! gRFC A66's four per-call server metrics, as a tower layer
//! ([`CallMetricsLayer`]) that any tonic server can wrap itself in (see
//! `server/examples/tonic_server.rs`).
//!
//! | A66 name | Prometheus name | labels |
//! |---|---|---|
//! | `grpc.server.call.started` | `grpc_server_call_started_total` | `grpc_method` |
//! | `grpc.server.call.duration` | `grpc_server_call_duration_seconds` | `grpc_method`, `grpc_status` |
//! | `grpc.server.call.sent_total_compressed_message_size` | `grpc_server_call_sent_total_compressed_message_size_bytes` | same |
//! | `grpc.server.call.rcvd_total_compressed_message_size` | `grpc_server_call_rcvd_total_compressed_message_size_bytes` | same |
//!
//! - **`grpc_method`** is `package.Service/Method` for a method the server
//!   registered, and `other` for any other path: A66's guard against a
//!   client growing the label set with made-up names.
//! - **The duration** runs from the request's headers to the response's
//!   trailers (or a trailers-only response's headers), or to the call's
//!   end by a reset or a dropped handler, which is recorded as `CANCELLED`.
//! - **The sizes** are the messages' bytes as sent (after compression),
//!   without gRPC's 5-byte prefixes ([`MessageBytes`]), summed over the call.
//!
//! Recording takes no lock: a handle per method (started) and per method
//! and status (the three histograms, registered the first time that pair
//! ends a call, through a `OnceLock`), each counting with atomics.

use std::{
    future::Future,
    pin::Pin,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll, ready},
    time::Instant,
};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use http_body::{Body as HttpBody, Frame, SizeHint};
use metrics::{Counter, Gauge, Histogram, Unit};
use tower::{Layer, Service};

use crate::metrics::message_bytes::MessageBytes;
use crate::metrics::registry::Registry;

/// Every gRPC status code's name, indexed by code: `grpc_status`'s values.
pub const STATUS_NAMES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
const CANCELLED: u8 = 1;
const UNKNOWN: u8 = 2;

/// `grpc_method`'s value for every method the server did not register.
pub const OTHER_METHOD: &str = "other";

/// The three histograms of one method and status.
#[derive(Debug)]
struct Ended {
    duration: Histogram,
    sent: Histogram,
    rcvd: Histogram,
}

/// The handles the layer records with, for a fixed set of methods.
#[derive(Debug)]
pub struct CallMetrics {
    registry: Registry,
    /// `package.Service/Method`, with `other` last.
    methods: Box<[&'static str]>,
    started: Box<[Counter]>,
    ended: Box<[[OnceLock<Ended>; 17]]>,
    in_flight: Gauge,
}

impl CallMetrics {
    /// Handles for `methods`, each a path as tonic routes it
    /// (`/package.Service/Method`); every other path counts as `other`.
    pub fn new(registry: &Registry, methods: &[&'static str]) -> Self {
        let methods: Box<[&'static str]> = methods
            .iter()
            .map(|m| m.strip_prefix('/').unwrap_or(m))
            .chain([OTHER_METHOD])
            .collect();
        let started = methods
            .iter()
            .map(|m| {
                registry.counter(
                    "grpc_server_call_started_total",
                    &[("grpc_method", m)],
                    "gRFC A66 grpc.server.call.started: calls started, by method",
                )
            })
            .collect();
        let ended = methods
            .iter()
            .map(|_| std::array::from_fn(|_| OnceLock::new()))
            .collect();
        Self {
            registry: registry.clone(),
            methods,
            started,
            ended,
            in_flight: Gauge::noop(),
        }
    }

    /// Also keeps `gauge` at the number of calls in flight (from the
    /// request's headers to the end the duration records). Not an A66
    /// metric: the caller names it under its own prefix.
    pub fn with_in_flight(mut self, gauge: Gauge) -> Self {
        self.in_flight = gauge;
        self
    }

    /// The index of `path`'s method, `other`'s if it is not registered.
    fn method(&self, path: &str) -> usize {
        let name = path.strip_prefix('/').unwrap_or(path);
        let registered = &self.methods[..self.methods.len() - 1];
        registered
            .iter()
            .position(|m| *m == name)
            .unwrap_or(registered.len())
    }

    fn ended(&self, method: usize, status: u8) -> &Ended {
        self.ended[method][usize::from(status)].get_or_init(|| {
            let labels = [
                ("grpc_method", self.methods[method]),
                ("grpc_status", STATUS_NAMES[usize::from(status)]),
            ];
            Ended {
                duration: self.registry.histogram(
                    "grpc_server_call_duration_seconds",
                    &labels,
                    "gRFC A66 grpc.server.call.duration: from the request's headers to the trailers or a reset",
                    Unit::Seconds,
                ),
                sent: self.registry.histogram(
                    "grpc_server_call_sent_total_compressed_message_size_bytes",
                    &labels,
                    "gRFC A66: message bytes sent per call, after compression, without gRPC's 5-byte prefixes",
                    Unit::Bytes,
                ),
                rcvd: self.registry.histogram(
                    "grpc_server_call_rcvd_total_compressed_message_size_bytes",
                    &labels,
                    "gRFC A66: message bytes received per call, as sent (compressed), without gRPC's 5-byte prefixes",
                    Unit::Bytes,
                ),
            }
        })
    }
}

/// Wraps a service in [`Metered`]. `None`: passes every call through and
/// records nothing (metrics off).
#[derive(Debug, Clone)]
pub struct CallMetricsLayer {
    metrics: Option<Arc<CallMetrics>>,
}

impl CallMetricsLayer {
    pub fn new(metrics: Option<Arc<CallMetrics>>) -> Self {
        Self { metrics }
    }
}

impl<S> Layer<S> for CallMetricsLayer {
    type Service = Metered<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Metered {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// The service [`CallMetricsLayer`] makes: it counts each call's start,
/// and hands the inner service a request body that counts the bytes it
/// reads ([`MeteredRequest`]) and the client a response body that records
/// the call when it ends ([`MeteredBody`]).
#[derive(Debug, Clone)]
pub struct Metered<S> {
    inner: S,
    metrics: Option<Arc<CallMetrics>>,
}

impl<S, B, RB> Service<http::Request<B>> for Metered<S>
where
    S: Service<http::Request<MeteredRequest<B>>, Response = http::Response<RB>>,
    S::Future: Unpin,
{
    type Response = http::Response<MeteredBody<RB>>;
    type Error = S::Error;
    type Future = MeteredFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let Some(metrics) = &self.metrics else {
            let request = request.map(|inner| MeteredRequest {
                inner,
                bytes: MessageBytes::default(),
                rcvd: None,
            });
            return MeteredFuture {
                inner: self.inner.call(request),
                call: None,
            };
        };
        let method = metrics.method(request.uri().path());
        metrics.started[method].increment(1);
        metrics.in_flight.increment(1.0);
        let rcvd = Arc::new(Rcvd::default());
        let call = CallRecord {
            metrics: Arc::clone(metrics),
            method,
            start: Instant::now(),
            rcvd: Arc::clone(&rcvd),
            sent: MessageBytes::default(),
            status: None,
            ended: false,
        };
        let request = request.map(|inner| MeteredRequest {
            inner,
            bytes: MessageBytes::default(),
            rcvd: Some(rcvd),
        });
        MeteredFuture {
            inner: self.inner.call(request),
            call: Some(call),
        }
    }
}

/// The message bytes the request body has read: written by
/// [`MeteredRequest`], read when the call ends. One per call.
type Rcvd = AtomicU64;

/// One call being recorded; it records itself once, at its end, or as
/// `CANCELLED` if it is dropped first.
#[derive(Debug)]
struct CallRecord {
    metrics: Arc<CallMetrics>,
    method: usize,
    start: Instant,
    rcvd: Arc<Rcvd>,
    sent: MessageBytes,
    /// From a trailers-only response's headers.
    status: Option<u8>,
    ended: bool,
}

impl CallRecord {
    fn end(&mut self, status: u8) {
        if std::mem::replace(&mut self.ended, true) {
            return;
        }
        let ended = self.metrics.ended(self.method, status);
        ended.duration.record(self.start.elapsed().as_secs_f64());
        ended.sent.record(self.sent.payload() as f64);
        ended.rcvd.record(self.rcvd.load(Ordering::Relaxed) as f64);
        self.metrics.in_flight.decrement(1.0);
    }
}

impl Drop for CallRecord {
    fn drop(&mut self) {
        // A trailers-only response (an error status) has an empty body that
        // hyper never polls: its headers ended the call. Otherwise the call
        // was reset by the client, or its handler dropped (the connection
        // ended) before the trailers were sent.
        self.end(self.status.unwrap_or(CANCELLED));
    }
}

/// The inner service's future; its response's body records the call.
#[derive(Debug)]
pub struct MeteredFuture<F> {
    inner: F,
    call: Option<CallRecord>,
}

impl<F, RB, E> Future for MeteredFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, E>> + Unpin,
{
    type Output = Result<http::Response<MeteredBody<RB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let response = match ready!(Pin::new(&mut this.inner).poll(cx)) {
            Ok(response) => response,
            Err(e) => {
                if let Some(call) = this.call.as_mut() {
                    call.end(UNKNOWN);
                }
                return Poll::Ready(Err(e));
            }
        };
        let mut call = this.call.take();
        if let Some(call) = call.as_mut() {
            call.status = headers_status(response.status(), response.headers());
        }
        Poll::Ready(Ok(response.map(|inner| MeteredBody { inner, call })))
    }
}

/// The status a response's headers give: `grpc-status` in a trailers-only
/// response, or gRPC's mapping of a non-200 HTTP status; `None` for a
/// response whose status comes in its trailers.
fn headers_status(http: StatusCode, headers: &HeaderMap) -> Option<u8> {
    if let Some(status) = grpc_status(headers) {
        return Some(status);
    }
    // gRPC's HTTP-to-gRPC table (doc/http-grpc-status-mapping.md).
    Some(match http.as_u16() {
        200 => return None,
        400 => 13,                   // INTERNAL
        401 => 16,                   // UNAUTHENTICATED
        403 => 7,                    // PERMISSION_DENIED
        404 => 12,                   // UNIMPLEMENTED
        429 | 502 | 503 | 504 => 14, // UNAVAILABLE
        _ => UNKNOWN,
    })
}

fn grpc_status(headers: &HeaderMap) -> Option<u8> {
    let code: u8 = std::str::from_utf8(headers.get("grpc-status")?.as_bytes())
        .ok()?
        .parse()
        .ok()?;
    Some(if usize::from(code) < STATUS_NAMES.len() {
        code
    } else {
        UNKNOWN
    })
}

/// A response body that counts its message bytes and records the call at
/// its trailers, its end, or its drop.
#[derive(Debug)]
pub struct MeteredBody<B> {
    inner: B,
    call: Option<CallRecord>,
}

impl<B> HttpBody for MeteredBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let Some(call) = this.call.as_mut() {
            match &frame {
                Some(Ok(frame)) => {
                    if let Some(data) = frame.data_ref() {
                        call.sent.feed(data);
                    } else if let Some(trailers) = frame.trailers_ref() {
                        call.end(grpc_status(trailers).unwrap_or(UNKNOWN));
                    }
                }
                Some(Err(_)) => call.end(UNKNOWN),
                None => {
                    let status = call.status.unwrap_or(UNKNOWN);
                    call.end(status);
                }
            }
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that counts the message bytes the handler reads.
#[derive(Debug)]
pub struct MeteredRequest<B> {
    inner: B,
    bytes: MessageBytes,
    rcvd: Option<Arc<Rcvd>>,
}

impl<B> HttpBody for MeteredRequest<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let frame = ready!(Pin::new(&mut this.inner).poll_frame(cx));
        if let (Some(rcvd), Some(Ok(frame))) = (&this.rcvd, &frame)
            && let Some(data) = frame.data_ref()
        {
            this.bytes.feed(data);
            rcvd.store(this.bytes.payload(), Ordering::Relaxed);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
