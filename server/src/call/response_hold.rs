//! Response holding: a response whose handler reserved memory from the
//! response budget (ListRoutes, see [`crate::routing::service`]) keeps that
//! reservation until its last byte has been acknowledged by the client's
//! kernel, as the kernel's send queue shows it (Linux,
//! [`crate::kernel_queue`]; elsewhere, until h2 has handed it to the
//! kernel, which queues no more than `TCP_NOTSENT_LOWAT` unsent bytes per
//! connection, see [`crate::connection::accepted`]); if that takes longer
//! than the send deadline, the client is not reading, and its connection is
//! closed. Each slice of the response that h2 takes, and each advance of
//! the client's acknowledgements, is send progress for the connection's
//! budget account. Only ListRoutes pays for this: GetQuote answers pass
//! with nothing added.

use std::{
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Duration,
};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame};
use tokio::sync::oneshot;
use tonic::{Status, body::Body};

use crate::call::budget::{ByteBudget, Refusal, Reservation, mib};
use crate::call::close::CloseRule;
use crate::call::info::ConnectionInfo;
use crate::kernel_queue::{self, SentBytes};
use crate::knobs::PROGRESS_SLICE;

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
    if refusal == Refusal::Share {
        budget.note_refusal(); // response_budget_full counts the other
    }
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
    budget.note_refusal();
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
    use crate::{call::budget::Holder, call::close::Closer};

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
}
