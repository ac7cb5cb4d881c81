//! The gRPC edge: what every call passes through before tonic sees it
//! ([`EdgeLayer`]), and what a large response carries until it is sent
//! ([`hold_until_sent`]).
//!
//! - A request whose `content-type` does not start with `application/grpc`
//!   gets HTTP 415, as the gRPC-over-HTTP/2 spec says (grpc-go answers the
//!   same way). tonic would serve it as if it were gRPC.
//! - A request body must be complete within the request deadline, and the
//!   bytes of partly received requests are charged to the request budget.
//! - A client's own deadline (`grpc-timeout`) ends the call when it passes:
//!   the client gets `DEADLINE_EXCEEDED` and the handler is dropped.
//! - A response whose handler reserved memory from the response budget
//!   (ListRoutes, see [`crate::routing::service`]) keeps that reservation until its
//!   last byte has been acknowledged by the client's kernel, as the
//!   kernel's send queue shows it (Linux, [`crate::kernel_queue`];
//!   elsewhere, until h2 has handed it to the kernel, which queues no more
//!   than `TCP_NOTSENT_LOWAT` unsent bytes per connection, see
//!   [`crate::connection::watched`]); if that takes longer than the send deadline,
//!   the client is not reading, and its connection is closed. Each slice of
//!   the response that h2 takes, and each advance of the client's
//!   acknowledgements, is send progress for the connection's budget
//!   account. Only ListRoutes pays for this: GetQuote answers pass the edge
//!   with nothing added.

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
use tokio::{sync::oneshot, time::Sleep};
use tonic::{Status, body::Body};
use tower::{Layer, Service};

use crate::{
    call::budget::{ByteBudget, Refusal, Reservation, mib},
    connection::watched::{CloseRule, ConnectionInfo},
    kernel_queue::{self, SentBytes},
    knobs::PROGRESS_SLICE,
};

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

/// Response memory a handler has reserved. The handler puts it in the
/// response's extensions; [`hold_until_sent`] moves it into the body.
#[derive(Debug, Clone)]
pub struct HeldResponse(pub Arc<Reservation>);

/// Makes `response` hold `reservation` until its last byte has been
/// acknowledged by the client, and closes `connection` if that has not
/// happened within `deadline` (see knobs::SEND_DEADLINE).
pub fn hold_until_sent(
    response: http::Response<Body>,
    reservation: Arc<Reservation>,
    connection: Option<ConnectionInfo>,
    deadline: Duration,
) -> http::Response<Body> {
    let (sent, watched) = oneshot::channel();
    let held = Arc::new(InFlight {
        reservation: Some(reservation),
        bytes: connection.as_ref().map(|c| Arc::clone(&c.sent)),
        sent: Some(sent),
    });
    watch_send_deadline(watched, connection, deadline);
    response.map(|body| {
        Body::new(HeldBody {
            body,
            held,
            rest: Bytes::new(),
        })
    })
}

/// What a budgeted response holds until h2 lets go of its last byte: the
/// reservation, and the sender that then hands it to the deadline watcher,
/// which holds it until the client has acknowledged that byte.
#[derive(Debug)]
struct InFlight {
    /// Always `Some` until dropped.
    reservation: Option<Arc<Reservation>>,
    /// The connection's byte counts (`None` without a connection).
    bytes: Option<Arc<SentBytes>>,
    sent: Option<oneshot::Sender<Released>>,
}

/// A response h2 has let go of: its reservation, and where it ends among
/// the bytes its connection has accepted.
#[derive(Debug)]
struct Released {
    reservation: Arc<Reservation>,
    end: u64,
}

impl Drop for InFlight {
    /// h2 has handed the last byte to the connection's writer (h2 copies a
    /// final slice under 256 bytes into its own buffer first, so the end
    /// may fall up to that much short of the last byte).
    fn drop(&mut self) {
        if let (Some(reservation), Some(sent)) = (self.reservation.take(), self.sent.take()) {
            let end = self.bytes.as_ref().map_or(0, |b| b.accepted());
            // A watcher that is gone (the deadline passed) drops it here.
            let _ = sent.send(Released { reservation, end });
        }
    }
}

/// The bytes of a budgeted response, each chunk holding the [`InFlight`]
/// share: h2 may keep a chunk queued after the body ends, and the memory is
/// only free, and the budget only given back, when the last chunk is gone.
///
/// A chunk is handed to h2 in slices of at most [`PROGRESS_SLICE`] (tonic
/// yields a whole page as one chunk). hyper asks for the next slice only
/// when h2 has room to send it, and h2 drops a slice once it has written
/// it, so each slice taken and each slice dropped is send progress, which
/// keeps the connection from counting as stalled (see [`crate::call::budget`]).
/// The drop counts too: once the last slice is taken, h2 may still hold
/// up to its 400 KiB send buffer of the page, with nothing left to take.
struct HeldBody {
    body: Body,
    held: Arc<InFlight>,
    /// What is left of the chunk being sliced.
    rest: Bytes,
}

struct HeldChunk {
    bytes: Bytes,
    held: Arc<InFlight>,
}

impl AsRef<[u8]> for HeldChunk {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

impl Drop for HeldChunk {
    /// h2 has written this slice (or dropped it with its stream).
    fn drop(&mut self) {
        self.held.progressed();
    }
}

impl InFlight {
    fn progressed(&self) {
        if let Some(reservation) = &self.reservation {
            reservation.progressed();
        }
    }
}

impl HeldBody {
    /// The next slice of `rest`, holding the reservation.
    fn next_slice(&mut self) -> Bytes {
        let slice = self.rest.split_to(self.rest.len().min(PROGRESS_SLICE));
        self.held.progressed();
        Bytes::from_owner(HeldChunk {
            bytes: slice,
            held: Arc::clone(&self.held),
        })
    }
}

impl HttpBody for HeldBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if !this.rest.is_empty() {
            return Poll::Ready(Some(Ok(Frame::data(this.next_slice()))));
        }
        let frame = ready!(Pin::new(&mut this.body).poll_frame(cx));
        Poll::Ready(frame.map(|frame| {
            frame.map(|frame| match frame.into_data() {
                Ok(bytes) => {
                    this.rest = bytes;
                    Frame::data(this.next_slice())
                }
                Err(trailers) => trailers,
            })
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.rest.is_empty() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        let inner = self.body.size_hint();
        let rest = self.rest.len() as u64;
        let mut hint = http_body::SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(rest));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(rest));
        }
        hint
    }
}

/// Closes the response's connection if its last byte has not been
/// acknowledged within `deadline` of its start. `sent` brings the
/// reservation when h2 lets go of the response; it is held, and an
/// acknowledgement that advances is send progress, until the client's
/// kernel has acknowledged the response ([`kernel_queue::drained`]), the
/// socket is gone, or the deadline passes.
fn watch_send_deadline(
    sent: oneshot::Receiver<Released>,
    connection: Option<ConnectionInfo>,
    deadline: Duration,
) {
    tokio::spawn(async move {
        let timer = tokio::time::sleep(deadline);
        tokio::pin!(timer);
        let released = tokio::select! {
            released = sent => released,
            () = &mut timer => return close_late(connection.as_ref(), deadline),
        };
        let (Ok(Released { reservation, end }), Some(connection)) = (released, &connection) else {
            return;
        };
        reservation.draining();
        tokio::select! {
            _ = kernel_queue::drained(&connection.sent, end, || reservation.progressed()) => {}
            () = &mut timer => close_late(Some(connection), deadline),
        }
        drop(reservation);
    });
}

/// The send deadline passed: close the connection, which frees every
/// response on it.
fn close_late(connection: Option<&ConnectionInfo>, deadline: Duration) {
    if let Some(connection) = connection {
        tracing::warn!(
            peer = %connection.remote_addr,
            deadline_secs = deadline.as_secs(),
            "response not read within the send deadline: closing the connection"
        );
        connection.closer.close(CloseRule::SendDeadline);
    }
}

/// The status a handler returns when the response budget refused it.
pub fn response_budget_refused(budget: &ByteBudget, refusal: Refusal, bytes: usize) -> Status {
    match refusal {
        Refusal::Full => response_budget_full(budget, bytes),
        Refusal::Share => Status::resource_exhausted(format!(
            "{} is in use by this connection's responses being sent; this one needs {}: read them first, retry later, or ask for a smaller page (page_size, field_mask)",
            budget.describe_share(),
            mib(bytes)
        )),
    }
}

/// The status a handler returns when the response budget is full.
pub fn response_budget_full(budget: &ByteBudget, bytes: usize) -> Status {
    Status::resource_exhausted(format!(
        "{} is in use by responses being sent; this one needs {}: retry later, or ask for a smaller page (page_size, field_mask)",
        budget.describe(),
        mib(bytes)
    ))
}

#[cfg(test)]
mod tests {
    use http_body_util::{BodyExt, Full};
    use tokio::sync::Notify;

    use super::*;
    use crate::{call::budget::Holder, connection::watched::Closer};

    /// A budget of 100 bytes that one reader holds whole, for a budgeted
    /// body of 1.5 slices as [`hold_until_sent`] makes it (no connection,
    /// so no deadline watcher); the reader's closer; the body, after h2 (this
    /// test) took its first slice; and that slice.
    async fn reader_holding_all(
        stall: Duration,
    ) -> (Arc<ByteBudget>, Arc<Notify>, HeldBody, Bytes) {
        let budget = ByteBudget::with_connection_share("test budget", 100, 100, Some(stall));
        let closed = Arc::new(Notify::new());
        let reader = Holder::new(Closer::new(Arc::clone(&closed)));
        let reservation = budget.try_reserve_for(&reader, 100).expect("fits");
        let page = Bytes::from(vec![7u8; 3 * PROGRESS_SLICE / 2]);
        let mut body = HeldBody {
            body: Body::new(Full::new(page)),
            held: Arc::new(InFlight {
                reservation: Some(Arc::new(reservation)),
                bytes: None,
                sent: None,
            }),
            rest: Bytes::new(),
        };
        let frame = body.frame().await.expect("a frame").expect("data");
        let slice = frame.into_data().expect("a data frame");
        assert_eq!(slice.len(), PROGRESS_SLICE);
        (budget, closed, body, slice)
    }

    /// Given a full budget held by one reader, whose response last showed
    /// progress when h2 took its first slice, longer ago than the stall
    /// rule allows: while h2 still holds that slice, a newcomer closes the
    /// reader's connection to make room; once h2 has dropped the slice
    /// (written it), the reader is not stalled, and the newcomer is refused.
    #[tokio::test]
    async fn a_slice_written_is_send_progress() {
        let stall = Duration::from_millis(100);
        let newcomer = Holder::new(Closer::new(Arc::new(Notify::new())));

        let (budget, closed, body, slice) = reader_holding_all(stall).await;
        tokio::time::sleep(stall * 2).await;
        let hangs_up = tokio::spawn(async move {
            closed.notified().await;
            drop((body, slice));
        });
        let room = budget.reserve_for(&newcomer, 50).await;
        assert_eq!(room.map(|r| r.bytes()).ok(), Some(50), "slice still in h2");
        hangs_up.await.expect("the stalled reader was closed");

        let (budget, closed, _body, slice) = reader_holding_all(stall).await;
        tokio::time::sleep(stall * 2).await;
        drop(slice);
        let room = budget.reserve_for(&newcomer, 50).await;
        assert_eq!(room.err(), Some(Refusal::Full), "slice written");
        let was_closed = tokio::time::timeout(stall, closed.notified()).await;
        assert!(
            was_closed.is_err(),
            "a reader whose slice was written was closed"
        );
    }

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
