//! The request guards: what every call passes through before tonic sees it
//! ([`EdgeLayer`]).
//!
//! - A request whose `content-type` does not start with `application/grpc`
//!   gets HTTP 415, as the gRPC-over-HTTP/2 spec says (grpc-go answers the
//!   same way). tonic would serve it as if it were gRPC.
//! - A request body must be complete within the request deadline, and the
//!   bytes of partly received requests are charged to the request budget.
//! - A client's own deadline (`grpc-timeout`) ends the call when it passes:
//!   the client gets `DEADLINE_EXCEEDED` and the handler is dropped.
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
        let deadline = grpc_timeout(req.headers())
            .map(|timeout| (timeout, Box::pin(tokio::time::sleep(timeout))));
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
        /// The client's `grpc-timeout`, and the timer armed with it.
        deadline: Option<(Duration, Pin<Box<Sleep>>)>,
    },
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
                if let Some((timeout, timer)) = deadline {
                    ready!(timer.as_mut().poll(cx));
                    let status = Status::deadline_exceeded(format!(
                        "the call's deadline (grpc-timeout {timeout:?}) passed on the server"
                    ));
                    return Poll::Ready(Ok(status.into_http()));
                }
                Poll::Pending
            }
        }
    }
}

/// The client's deadline from the `grpc-timeout` header: at most 8 digits and
/// a unit (`H`, `M`, `S`, `m`, `u` or `n`), as the gRPC-over-HTTP/2 spec
/// says. A missing or malformed header means no deadline, as in grpc-go.
pub fn grpc_timeout(headers: &HeaderMap) -> Option<Duration> {
    let value = headers.get("grpc-timeout")?.as_bytes();
    let (digits, unit) = value.split_at(value.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(match unit {
        b"H" => Duration::from_secs(n * 3600),
        b"M" => Duration::from_secs(n * 60),
        b"S" => Duration::from_secs(n),
        b"m" => Duration::from_millis(n),
        b"u" => Duration::from_micros(n),
        b"n" => Duration::from_nanos(n),
        _ => return None,
    })
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

    fn timeout_of(value: &'static str) -> Option<Duration> {
        let mut headers = HeaderMap::new();
        headers.insert("grpc-timeout", HeaderValue::from_static(value));
        grpc_timeout(&headers)
    }

    #[test]
    fn grpc_timeout_units() {
        assert_eq!(timeout_of("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(timeout_of("3M"), Some(Duration::from_secs(180)));
        assert_eq!(timeout_of("20S"), Some(Duration::from_secs(20)));
        assert_eq!(timeout_of("300m"), Some(Duration::from_millis(300)));
        assert_eq!(
            timeout_of("99999999u"),
            Some(Duration::from_micros(99_999_999))
        );
        assert_eq!(timeout_of("1n"), Some(Duration::from_nanos(1)));
    }

    /// Malformed values mean "no deadline", never an error or a panic.
    #[test]
    fn malformed_grpc_timeouts_are_ignored() {
        for bad in [
            "",
            "S",
            "10",
            "123456789S",
            "-1S",
            "1.5S",
            "10s",
            "10 S",
            "1D",
        ] {
            assert_eq!(timeout_of(bad), None, "{bad:?}");
        }
        assert_eq!(grpc_timeout(&HeaderMap::new()), None);
    }
}
