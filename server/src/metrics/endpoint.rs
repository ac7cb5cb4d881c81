//! The metrics listener: `GET /metrics` in the Prometheus text format, on
//! its own port (`--metrics-listen`), never the gRPC port.
//!
//! - any other path gets 404, any other method on `/metrics` 405;
//! - HTTP/1.1 through hyper, as Prometheus scrapes; a request's body is
//!   never read.
//!
//! # Slots: idle sockets cannot lock it
//!
//! At most [`METRICS_MAX_CONNECTIONS`] connections hold a slot. When all
//! are taken and another arrives, the connection that has waited longest
//! for a request (half a request line, or a keep-alive between scrapes)
//! is closed and the newcomer takes its slot ([`crate::metrics::slots`]);
//! a connection that is answering keeps its slot, and only when all are
//! answering is the newcomer refused. Then a request's headers must arrive
//! within [`METRICS_HEADER_TIMEOUT`], and no connection lives past
//! [`METRICS_CONNECTION_LIFETIME`].
//!
//! Why this design rather than more slots or a shorter timeout alone: any
//! fixed number of slots is filled by that many idle sockets, and any
//! timeout is outlasted by an attacker who reopens each socket as it is
//! closed. Closing the oldest waiting connection when a newcomer arrives
//! (as nginx and Go's `net/http` reuse idle connections first) gives a
//! fresh scrape its slot at once, whatever idle sockets are open, while
//! memory stays bounded by the slots and [`METRICS_MAX_REQUEST_BYTES`].
//! Three more things make it hold under thousands of reconnects a second:
//! a newcomer whose whole request head is already in its socket (peeked,
//! not read) counts as answering from the start, so it is never the one
//! closed; the accept loop yields after each newcomer, so the newcomer
//! reads its request before the next one can close it; and the listener
//! has the gRPC port's listen backlog (`somaxconn`), so a scrape's SYN is
//! not dropped behind the reconnecting sockets (a dropped SYN waits 1 s).
//! Every connection closed or refused is counted in
//! `routing_server_metrics_connections_dropped_total{reason}` and summed in
//! one warning at most every [`METRICS_DROP_LOG_INTERVAL`].
//!
//! It runs on the runtime that accepts gRPC connections, so it needs no
//! thread of its own, and costs nothing of the gRPC port's budgets;
//! [`serve`] also moves histogram values into their buckets every
//! [`METRICS_UPKEEP_INTERVAL`].

use std::{
    convert::Infallible,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex, PoisonError},
    task::{Context, Poll},
    time::Instant,
};

use bytes::Bytes;
use http::{Method, Response, StatusCode, header};
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::Full;
use hyper::{server::conn::http1, service::service_fn};
use hyper_util::rt::{TokioIo, TokioTimer};
use metrics::Counter;
use tokio::net::TcpListener;

use crate::knobs::{
    METRICS_CONNECTION_LIFETIME, METRICS_DROP_LOG_INTERVAL, METRICS_HEADER_TIMEOUT,
    METRICS_MAX_CONNECTIONS, METRICS_MAX_REQUEST_BYTES, METRICS_UPKEEP_INTERVAL,
};
use crate::metrics::{
    Metrics,
    registry::Registry,
    slots::{Admission, Answering, Slots},
};

/// The path Prometheus scrapes.
pub const PATH: &str = "/metrics";

/// The content type of the Prometheus text format that Prometheus 2.x reads.
const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The metrics address could not be bound: a usage error (exit 2), with
/// the address in its message. The server layer binds it
/// (`server::listen::bind_metrics`), with the gRPC port's listen backlog.
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

/// Serves `metrics` on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>) {
    let slots = Slots::new(METRICS_MAX_CONNECTIONS);
    let dropped = Arc::new(Dropped::new(metrics.registry()));
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
        let slot = match slots.admit(request_arrived(&stream)) {
            Admission::Admitted(slot) => slot,
            Admission::AdmittedByClosingIdle(slot) => {
                dropped.note(Reason::ClosedIdle);
                slot
            }
            Admission::Full => {
                dropped.note(Reason::RefusedFull);
                continue; // the stream is dropped: closed
            }
        };
        let metrics = Arc::clone(&metrics);
        let dropped = Arc::clone(&dropped);
        tokio::spawn(async move {
            let marker = slot.marker();
            let service = service_fn(move |request: http::Request<hyper::body::Incoming>| {
                let answering = marker.answering();
                let response = answer(request.method(), request.uri().path(), &metrics)
                    .map(|body| AnswerBody { body, answering });
                async move { Ok::<_, Infallible>(response) }
            });
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(METRICS_HEADER_TIMEOUT)
                .max_buf_size(METRICS_MAX_REQUEST_BYTES)
                .serve_connection(TokioIo::new(stream), service);
            let ended = tokio::select! {
                served = tokio::time::timeout(METRICS_CONNECTION_LIFETIME, connection) => served,
                // A newcomer took this slot (counted when it did).
                () = slot.close.notified() => Ok(Ok(())),
            };
            match ended {
                Ok(Ok(())) => {}
                Ok(Err(e)) if e.is_timeout() => dropped.note(Reason::HeaderTimeout),
                Ok(Err(e)) => tracing::debug!(%peer, "metrics connection: {e}"),
                Err(_) => dropped.note(Reason::Lifetime),
            }
            drop(slot);
        });
        // Let the newcomer read its request before the next accept: a
        // scrape's request is in its socket already, and once hyper has
        // read it the connection is answering and keeps its slot. Without
        // this, tokio lets this loop accept up to a budget of sockets in a
        // row, and under a flood of reconnecting idle sockets each of them
        // evicts one waiting connection before any has read a byte.
        tokio::task::yield_now().await;
    }
}

/// Whether `stream`'s socket already holds a whole request head (up to
/// [`PEEK_BYTES`]), looked at without reading it: a peek through a
/// duplicate of its descriptor, non-blocking like the socket (std's safe
/// `peek`; tokio's would wait for readiness the runtime has not polled yet).
/// A scraper sends its request with the connection, and under a flood it
/// waits in the listen queue long enough for the request to arrive first;
/// an idle socket's half request never holds the blank line that ends a
/// head.
#[cfg(unix)]
fn request_arrived(stream: &tokio::net::TcpStream) -> bool {
    use std::os::fd::AsFd;
    let Ok(fd) = stream.as_fd().try_clone_to_owned() else {
        return false;
    };
    let mut buf = [0u8; PEEK_BYTES];
    match std::net::TcpStream::from(fd).peek(&mut buf) {
        Ok(n) => buf[..n].windows(4).any(|w| w == b"\r\n\r\n"),
        Err(_) => false, // nothing yet (WouldBlock), or an error hyper will see
    }
}

#[cfg(not(unix))]
fn request_arrived(_: &tokio::net::TcpStream) -> bool {
    false
}

/// How much of a new connection's first bytes [`request_arrived`] looks at:
/// 2 KiB. Prometheus's request head is about 300 bytes, curl's under 100; a
/// longer head is served as before, only without the head start.
const PEEK_BYTES: usize = 2048;

/// Why the listener closed or refused a connection: the `reason` label.
#[derive(Debug, Clone, Copy)]
enum Reason {
    /// Every slot was taken; this one had waited longest for a request.
    ClosedIdle,
    /// Every slot was answering: the new connection was closed at once.
    RefusedFull,
    /// Its request's headers did not arrive within the header timeout.
    HeaderTimeout,
    /// It lived for the whole connection lifetime.
    Lifetime,
}

impl Reason {
    const ALL: [Self; 4] = [
        Self::ClosedIdle,
        Self::RefusedFull,
        Self::HeaderTimeout,
        Self::Lifetime,
    ];

    fn label(self) -> &'static str {
        match self {
            Self::ClosedIdle => "closed_idle",
            Self::RefusedFull => "refused_full",
            Self::HeaderTimeout => "header_timeout",
            Self::Lifetime => "lifetime",
        }
    }
}

/// Connections the listener dropped: a counter per reason, and a warning
/// at most every [`METRICS_DROP_LOG_INTERVAL`] with the counts since the
/// last one (a flood of idle sockets must not flood the log).
struct Dropped {
    counters: [Counter; 4],
    /// When the last warning was logged, and what was dropped since.
    log: Mutex<(Option<Instant>, [u64; 4])>,
}

impl Dropped {
    fn new(registry: Option<&Registry>) -> Self {
        let counter = |reason: Reason| {
            match registry {
            Some(registry) => registry.counter(
                "routing_server_metrics_connections_dropped_total",
                &[("reason", reason.label())],
                "Metrics connections closed or refused by the metrics listener: closed_idle (a newcomer took the slot of the one that had waited longest for a request), refused_full (every slot answering), header_timeout, lifetime",
            ),
            None => Counter::noop(),
        }
        };
        Self {
            counters: Reason::ALL.map(counter),
            log: Mutex::new((None, [0; 4])),
        }
    }

    fn note(&self, reason: Reason) {
        self.counters[reason as usize].increment(1);
        let mut log = self.log.lock().unwrap_or_else(PoisonError::into_inner);
        let (last, since) = &mut *log;
        since[reason as usize] += 1;
        if last.is_some_and(|at| at.elapsed() < METRICS_DROP_LOG_INTERVAL) {
            return;
        }
        *last = Some(Instant::now());
        let counts = std::mem::take(since);
        let [closed_idle, refused_full, header_timeout, lifetime] = counts;
        tracing::warn!(
            closed_idle,
            refused_full,
            header_timeout,
            lifetime,
            "metrics listener: connections dropped since the last such line (at most one every {METRICS_DROP_LOG_INTERVAL:?}); see routing_server_metrics_connections_dropped_total"
        );
    }
}

/// A response body that keeps its connection's slot answering until hyper
/// has written it and drops it.
struct AnswerBody {
    body: Full<Bytes>,
    answering: Answering,
}

impl HttpBody for AnswerBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl std::fmt::Debug for AnswerBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AnswerBody")
            .field("answering", &self.answering)
            .finish_non_exhaustive()
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
