//! The request guards: what every call passes through before tonic sees it
//! ([`EdgeLayer`]).
//!
//! - A request whose `content-type` does not start with `application/grpc`
//!   gets HTTP 415, as the gRPC-over-HTTP/2 spec says (grpc-go answers the
//!   same way). tonic would serve it as if it were gRPC.
//! - A request body must be complete within the request deadline, and the
//!   bytes of partly received requests are charged to the request budget.
//! - A client's own deadline (`grpc-timeout`) ends the call when it passes:
//!   the client gets `DEADLINE_EXCEEDED` and the handler is dropped. A
//!   malformed `grpc-timeout` (not 1 to 8 ASCII digits and one of `H M S m
//!   u n`) gets `INTERNAL` "malformed grpc-timeout ..." before any handler
//!   runs, as grpc-go answers it.
//! - A call that brought no `grpc-timeout` gets the server's default
//!   deadline (`--default-deadline-secs`, [`crate::knobs::DEFAULT_DEADLINE`])
//!   the same way; a deadline the client sent, longer or shorter, wins.
//!
//! What a large response carries until it is sent is the other half of the
//! per-call guards, [`crate::call::response_hold`].

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode, header::CONTENT_TYPE};
use http_body::{Body as HttpBody, Frame};
use tokio::time::Sleep;
use tonic::{Status, body::Body};
use tower::{Layer, Service};

use crate::call::budget::ByteBudget;

/// The edge's settings, shared by every call.
#[derive(Debug)]
pub struct EdgeConfig {
    pub request_budget: Arc<ByteBudget>,
    pub request_deadline: Duration,
    /// The deadline of a call that brought none (`None`: no bound).
    pub default_deadline: Option<Duration>,
}

/// Wraps the whole server (see [`EdgeLayer`]).
#[derive(Debug, Clone)]
pub struct EdgeLayer {
    config: Arc<EdgeConfig>,
}

impl EdgeLayer {
    pub fn new(config: EdgeConfig) -> Self {
        Self {
            config: Arc::new(config),
        }
    }
}

impl<S> Layer<S> for EdgeLayer {
    type Service = Edge<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Edge {
            inner,
            config: Arc::clone(&self.config),
        }
    }
}

/// The service made by [`EdgeLayer`].
#[derive(Debug, Clone)]
pub struct Edge<S> {
    inner: S,
    config: Arc<EdgeConfig>,
}

impl<S, B> Service<http::Request<B>> for Edge<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>>,
    S::Future: Unpin,
    B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Response = http::Response<Body>;
    type Error = S::Error;
    type Future = EdgeFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let content_type = req.headers().get(CONTENT_TYPE);
        if !content_type.is_some_and(|ct| ct.as_bytes().starts_with(b"application/grpc")) {
            return EdgeFuture::Answer(Some(unsupported_media_type(content_type)));
        }
        let deadline = match grpc_timeout(req.headers()) {
            Ok(Some(timeout)) => Some(CallDeadline::Client(timeout)),
            Ok(None) => self
                .config
                .default_deadline
                .map(CallDeadline::ServerDefault),
            Err(malformed) => {
                return EdgeFuture::Answer(Some(Status::internal(malformed.0).into_http()));
            }
        }
        .map(|deadline| (deadline, Box::pin(tokio::time::sleep(deadline.duration()))));
        let req = req.map(|body| Body::new(GuardedRequest::new(body, &self.config)));
        EdgeFuture::Call {
            inner: self.inner.call(req),
            deadline,
        }
    }
}

/// What [`Edge`] returns: an answer it gives itself, or the inner service's
/// future, ended early if the client's deadline passes first.
#[derive(Debug)]
pub enum EdgeFuture<F> {
    Answer(Option<http::Response<Body>>),
    Call {
        inner: F,
        /// The call's deadline, and the timer armed with it.
        deadline: Option<(CallDeadline, Pin<Box<Sleep>>)>,
    },
}

/// Where a call's deadline came from.
#[derive(Debug, Clone, Copy)]
pub enum CallDeadline {
    /// The client's `grpc-timeout`.
    Client(Duration),
    /// The call brought none: the server's `--default-deadline-secs`.
    ServerDefault(Duration),
}

impl CallDeadline {
    fn duration(self) -> Duration {
        match self {
            Self::Client(d) | Self::ServerDefault(d) => d,
        }
    }

    /// The `DEADLINE_EXCEEDED` message: says whose deadline it was.
    fn passed(self) -> String {
        match self {
            Self::Client(timeout) => {
                format!("the call's deadline (grpc-timeout {timeout:?}) passed on the server")
            }
            Self::ServerDefault(bound) => format!(
                "the call brought no deadline (grpc-timeout) and ran past the server's default of {} s (--default-deadline-secs)",
                bound.as_secs()
            ),
        }
    }
}

impl<F, E> Future for EdgeFuture<F>
where
    F: Future<Output = Result<http::Response<Body>, E>> + Unpin,
{
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            EdgeFuture::Answer(answer) => match answer.take() {
                Some(response) => Poll::Ready(Ok(response)),
                None => Poll::Pending, // polled after completion
            },
            EdgeFuture::Call { inner, deadline } => {
                if let Poll::Ready(answer) = Pin::new(inner).poll(cx) {
                    return Poll::Ready(answer);
                }
                if let Some((deadline, timer)) = deadline {
                    ready!(timer.as_mut().poll(cx));
                    let status = Status::deadline_exceeded(deadline.passed());
                    return Poll::Ready(Ok(status.into_http()));
                }
                Poll::Pending
            }
        }
    }
}

/// A `grpc-timeout` that is not 1 to 8 ASCII digits and a unit; the
/// message the client gets with `INTERNAL`.
#[derive(Debug, PartialEq, Eq)]
pub struct MalformedTimeout(pub String);

/// The most of a malformed value the message quotes: 16 bytes.
const SHOWN_VALUE_MAX: usize = 16;

/// The client's deadline from the `grpc-timeout` header: 1 to 8 ASCII
/// digits and a unit (`H`, `M`, `S`, `m`, `u` or `n`), as the
/// gRPC-over-HTTP/2 spec says. No header: `Ok(None)`. Anything else is
/// an error, which grpc-go answers with `INTERNAL` "malformed
/// grpc-timeout" before the handler runs, and so does [`Edge`].
pub fn grpc_timeout(headers: &HeaderMap) -> Result<Option<Duration>, MalformedTimeout> {
    let Some(value) = headers.get("grpc-timeout") else {
        return Ok(None);
    };
    let value = value.as_bytes();
    let malformed = || {
        let shown = match std::str::from_utf8(value) {
            Ok(text)
                if text.len() <= SHOWN_VALUE_MAX
                    && text.bytes().all(|b| b.is_ascii_graphic() || b == b' ') =>
            {
                format!("{text:?}")
            }
            _ => format!("({} bytes)", value.len()),
        };
        MalformedTimeout(format!(
            "malformed grpc-timeout {shown}: expected 1 to 8 ASCII digits and a unit (H, M, S, m, u or n)"
        ))
    };
    let Some((unit, digits)) = value.split_last() else {
        return Err(malformed());
    };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(malformed());
    }
    // At most 8 digits: always fits, and at most 99,999,999 hours fits a Duration.
    let n = digits
        .iter()
        .fold(0u64, |n, digit| n * 10 + u64::from(digit - b'0'));
    Ok(Some(match *unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(malformed()),
    }))
}

/// HTTP 415 with the gRPC status grpc-go sends (INVALID_ARGUMENT), so a
/// gRPC client that mislabels its requests still learns why.
fn unsupported_media_type(content_type: Option<&HeaderValue>) -> http::Response<Body> {
    let shown = match content_type.map(HeaderValue::to_str) {
        None => "none".to_owned(),
        // grpc-message is percent-encoded text; keep it to printable ASCII.
        Some(Ok(ct)) if ct.bytes().all(|b| (0x20..0x7f).contains(&b) && b != b'%') => {
            format!("{ct:?}")
        }
        Some(_) => "(not printable)".to_owned(),
    };
    let message = format!("invalid gRPC request content-type {shown}");
    let mut response = http::Response::new(Body::empty());
    *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    headers.insert(
        "grpc-status",
        HeaderValue::from(tonic::Code::InvalidArgument as i32),
    );
    if let Ok(value) = HeaderValue::from_str(&message) {
        headers.insert("grpc-message", value);
    }
    response
}

/// A request body held to the request deadline and the request budget.
struct GuardedRequest<B> {
    body: B,
    budget: Arc<ByteBudget>,
    /// Bytes of this request taken from the budget so far.
    held: usize,
    deadline: Instant,
    deadline_len: Duration,
    /// Armed only when the body first has to wait, so a request that
    /// arrives whole (the usual case) never starts a timer.
    timer: Option<Pin<Box<Sleep>>>,
}

impl<B> GuardedRequest<B> {
    fn new(body: B, config: &EdgeConfig) -> Self {
        Self {
            body,
            budget: Arc::clone(&config.request_budget),
            held: 0,
            deadline: Instant::now() + config.request_deadline,
            deadline_len: config.request_deadline,
            timer: None,
        }
    }

    fn release(&mut self) {
        self.budget.give_back(std::mem::take(&mut self.held));
    }
}

impl<B> Drop for GuardedRequest<B> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<B> HttpBody for GuardedRequest<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<tonic::codegen::StdError>,
{
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.body)
            .poll_frame(cx)
            .map_err(|e| Status::from_error(e.into()));
        let frame = match polled {
            Poll::Pending => {
                let deadline = this.deadline.into();
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                ready!(timer.as_mut().poll(cx));
                this.release();
                return Poll::Ready(Some(Err(Status::deadline_exceeded(format!(
                    "request body not complete within {} s",
                    this.deadline_len.as_secs()
                )))));
            }
            Poll::Ready(None) => {
                // The whole request is in: tonic has decoded it.
                this.release();
                return Poll::Ready(None);
            }
            Poll::Ready(Some(frame)) => frame,
        };
        if let Ok(data) = frame.as_ref().map(Frame::data_ref) {
            let len = data.map_or(0, Bytes::len);
            if !this.budget.try_take(len) {
                this.budget.note_refusal();
                this.release();
                return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                    "{} is full of partly received requests: retry later",
                    this.budget.describe()
                )))));
            }
            this.held += len;
        }
        Poll::Ready(Some(frame))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout_of(value: &str) -> Result<Option<Duration>, MalformedTimeout> {
        let mut headers = HeaderMap::new();
        headers.insert(
            "grpc-timeout",
            HeaderValue::from_str(value).expect("a valid header value"),
        );
        grpc_timeout(&headers)
    }

    #[test]
    fn grpc_timeout_units() {
        let ok = |d| Ok(Some(d));
        assert_eq!(timeout_of("2H"), ok(Duration::from_secs(7200)));
        assert_eq!(timeout_of("3M"), ok(Duration::from_secs(180)));
        assert_eq!(timeout_of("20S"), ok(Duration::from_secs(20)));
        assert_eq!(timeout_of("300m"), ok(Duration::from_millis(300)));
        assert_eq!(
            timeout_of("99999999u"),
            ok(Duration::from_micros(99_999_999))
        );
        assert_eq!(timeout_of("1n"), ok(Duration::from_nanos(1)));
        assert_eq!(
            timeout_of("99999999H"),
            ok(Duration::from_secs(99_999_999 * 3600))
        );
        assert_eq!(grpc_timeout(&HeaderMap::new()), Ok(None));
    }

    /// Every value the spec does not allow is an error that quotes it
    /// (short, printable) or gives its length (anything else).
    #[test]
    fn malformed_grpc_timeouts_are_errors_that_show_the_value() {
        let long = "1".repeat(1024) + "S";
        for bad in [
            "",
            "S",
            "5",
            "10",
            "100000000H",
            "123456789S",
            "-5S",
            "-1S",
            "+5S",
            "1.5S",
            "10s",
            "5X",
            " 5S",
            "5S ",
            "10 S",
            "1D",
            long.as_str(),
        ] {
            let Err(MalformedTimeout(message)) = timeout_of(bad) else {
                panic!("{bad:?} was accepted");
            };
            assert!(message.starts_with("malformed grpc-timeout "), "{message}");
            let shown = if bad.len() <= SHOWN_VALUE_MAX {
                format!("{bad:?}")
            } else {
                format!("({} bytes)", bad.len())
            };
            assert!(message.contains(&shown), "{bad:?}: {message}");
        }
    }
}
