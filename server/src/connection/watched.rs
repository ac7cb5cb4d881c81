//! [`Connection`]: an accepted stream with this server's rules applied.
//! hyper reads and writes through it; it forwards every byte unchanged and
//! watches the frame headers go by, both ways, with
//! [`h2_frames::FrameTracker`]:
//!
//! - **handshake timeout**: no preface, SETTINGS and acknowledgement of
//!   the server's SETTINGS in time, closed (RFC 9113 §6.5.3 allows this
//!   `SETTINGS_TIMEOUT`; a client that never reads never acknowledges);
//! - **the frame rules** ([`crate::connection::frame_rules`]): the ping
//!   floor, the control-frame budget and the window-update budget, each a
//!   handler that may want a GOAWAY `ENHANCE_YOUR_CALM`; the GOAWAY is
//!   written between two outgoing frames, and the connection is closed once
//!   it is written;
//! - **close on request**: [`crate::call::close::Closer::close`] ends a connection whose
//!   response missed its send deadline ([`crate::call::response_hold`]), or
//!   that the response budget evicts ([`crate::call::budget`]): GOAWAY
//!   `ENHANCE_YOUR_CALM` naming the rule (`send_deadline`,
//!   `stalled_holder`) first, at a frame boundary as above, so the client
//!   learns why and which streams were not served; a connection whose
//!   socket takes no GOAWAY within [`crate::knobs::GOAWAY_WRITE_GRACE`] (a
//!   reader stalled at the TCP level) fails its next read or write without
//!   one, as before;
//! - **fewer, larger writes** for bulk responses
//!   ([`crate::connection::coalesce`]);
//! - **bytes counted**, as h2 hands them over and as they reach the
//!   socket, to tell when a response has been acknowledged
//!   ([`crate::kernel_queue`]).

use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
    time::Duration,
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::{Notify, OwnedSemaphorePermit, futures::OwnedNotified},
    time::Sleep,
};

use crate::call::info::ConnectionInfo;
use crate::connection::coalesce::Coalesce;
use crate::connection::frame_rules::FrameRules;
use crate::connection::linger::Linger;
use crate::connection::ping_floor::PING_PAYLOAD_LEN;
use crate::connection::policy::ConnectionPolicy;
use crate::connection::shared_memory::SharedMemory;
use crate::connection::tls::Transport;
use crate::kernel_queue::{CountWrites, SentBytes};
use crate::knobs::GOAWAY_WRITE_GRACE;
use h2_frames::{Frame, FrameTracker, GoAway, flag, kind};
use tokio_util::either::Either;

/// Where the GOAWAY this server sends on its own stands (h2 sends the
/// others, and [`h2_frames::GoAway`] is the frame itself).
#[derive(Debug)]
enum GoawayWrite {
    None,
    /// Waiting for a frame boundary, or partly written. `frame` may start
    /// with other frames that must go first (the ACK of the last PING).
    Pending {
        frame: Vec<u8>,
        written: usize,
    },
    /// Written and the socket shut down: nothing more goes either way.
    Sent,
}

impl GoawayWrite {
    fn pending(frame: Vec<u8>) -> Self {
        Self::Pending { frame, written: 0 }
    }
}

/// An accepted TCP connection with this server's policies applied. hyper
/// reads and writes through it; it forwards every byte unchanged, watching
/// the frame headers go by.
#[derive(Debug)]
pub struct Connection {
    /// Bytes are counted as they reach the socket (below the coalescing
    /// buffer, and below TLS); those h2 hands over are counted here, as
    /// they are watched.
    stream: Coalesce<Transport>,
    info: ConnectionInfo,
    /// Held while the connection lives: one slot of the connection cap.
    _slot: OwnedSemaphorePermit,
    inbound: FrameTracker,
    outbound: FrameTracker,
    /// Running until the client has acknowledged the server's SETTINGS.
    handshake: Option<Pin<Box<Sleep>>>,
    handshake_timeout: Duration,
    /// The ping floor, the control-frame and window-update budgets, and
    /// the streams they read.
    rules: FrameRules,
    goaway: GoawayWrite,
    close_requested: Pin<Box<OwnedNotified>>,
    /// Running once [`crate::call::close::Closer::close`] was called: the
    /// GOAWAY must be out before it ends.
    closing: Option<Pin<Box<Sleep>>>,
    /// Running once hyper has shut the write side: what the client still
    /// sends is read and dropped until it closes ([`Linger`]).
    linger: Option<Box<Linger>>,
}

impl Connection {
    /// A plaintext connection over `stream`, whose socket options are set,
    /// with `handshake_deadline` for the HTTP/2 handshake.
    pub(crate) fn new(
        stream: TcpStream,
        remote_addr: SocketAddr,
        slot: OwnedSemaphorePermit,
        policy: ConnectionPolicy,
        handshake_deadline: tokio::time::Instant,
    ) -> Self {
        let sent = SentBytes::of(&stream);
        let plain = Either::Left(CountWrites::new(stream, Arc::clone(&sent)));
        Self::over(plain, sent, remote_addr, slot, policy, handshake_deadline)
    }

    /// A connection over `transport` (plaintext or TLS), whose bytes `sent`
    /// counts, with `handshake_deadline` for the HTTP/2 handshake.
    pub(crate) fn over(
        transport: Transport,
        sent: Arc<SentBytes>,
        remote_addr: SocketAddr,
        slot: OwnedSemaphorePermit,
        policy: ConnectionPolicy,
        handshake_deadline: tokio::time::Instant,
    ) -> Self {
        let notify = Arc::new(Notify::new());
        Self {
            stream: Coalesce::new(transport),
            info: ConnectionInfo::new(remote_addr, Arc::clone(&notify), sent),
            _slot: slot,
            // PING payloads are kept (8 bytes each) to ACK the PING that
            // earns a GOAWAY before it.
            inbound: FrameTracker::client_to_server().keeping(kind::PING, PING_PAYLOAD_LEN),
            outbound: FrameTracker::server_to_client(),
            handshake: Some(Box::pin(tokio::time::sleep_until(handshake_deadline))),
            handshake_timeout: policy.handshake_timeout,
            rules: FrameRules::new(&policy),
            goaway: GoawayWrite::None,
            close_requested: Box::pin(notify.notified_owned()),
            closing: None,
            linger: None,
        }
    }

    /// Writes slices of `memory` by reference rather than copying them
    /// (see [`Coalesce::sharing`]).
    #[must_use]
    pub fn sharing(mut self, memory: Arc<SharedMemory>) -> Self {
        self.stream = self.stream.sharing(Some(memory));
        self
    }

    /// Checks the frames the client just sent: each goes to its handler
    /// ([`FrameRules::on_frame_received`]), and the first GOAWAY one wants
    /// is queued.
    fn watch_inbound(&mut self, bytes: &[u8]) {
        let Self {
            inbound,
            rules,
            goaway: pending,
            info,
            ..
        } = self;
        let mut settings_acked = false;
        inbound.feed(bytes, |frame: Frame<'_>| {
            let going_away = !matches!(pending, GoawayWrite::None);
            if let Some(goaway) = rules.on_frame_received(&frame, going_away, info) {
                *pending = GoawayWrite::pending(goaway);
            }
            if frame.header.kind == kind::SETTINGS && frame.header.has(flag::ACK) {
                settings_acked = true;
            }
        });
        // The client has read the server's SETTINGS and answered: it is a
        // reader, and the handshake is over.
        if settings_acked {
            self.handshake = None;
        }
    }

    /// Checks the frames hyper just wrote ([`FrameRules::on_frame_sent`]),
    /// and counts their bytes as accepted ([`SentBytes`]).
    fn watch_outbound(&mut self, bytes: &[u8]) {
        self.info.sent.add_accepted(bytes.len());
        let Self {
            outbound, rules, ..
        } = self;
        outbound.feed(bytes, |frame: Frame<'_>| rules.on_frame_sent(&frame.header));
    }

    /// Writes the pending GOAWAY (only ever called at a frame boundary),
    /// then shuts the socket down.
    fn poll_send_goaway(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let GoawayWrite::Pending { frame, written } = &mut self.goaway {
            while *written < frame.len() {
                let n = ready!(Pin::new(&mut self.stream).poll_write(cx, &frame[*written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                // Counted as accepted too, so the socket's count never runs
                // ahead of it (which would end a response's wait early).
                self.info.sent.add_accepted(n);
                *written += n;
            }
            ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
            // FIN after the GOAWAY: the client reads it, then end of stream.
            let _ = ready!(Pin::new(&mut self.stream).poll_shutdown(cx));
            self.goaway = GoawayWrite::Sent;
        }
        Poll::Ready(Ok(()))
    }

    /// Once [`crate::call::close::Closer::close`] was called: queues its GOAWAY (unless one is
    /// already on its way), which the read and write paths send at the
    /// next frame boundary, and fails with an error if that has not
    /// happened within [`GOAWAY_WRITE_GRACE`].
    fn check_close_requested(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.closing.is_none() {
            if self.close_requested.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            let rule = self.info.closer.rule();
            if matches!(self.goaway, GoawayWrite::None) {
                self.rules.count_goaway(rule.into());
                let goaway =
                    GoAway::enhance_your_calm(self.rules.last_stream_id(), rule.debug_data());
                self.goaway = GoawayWrite::pending(goaway.encode());
            }
            self.closing = Some(Box::pin(tokio::time::sleep(GOAWAY_WRITE_GRACE)));
        }
        if matches!(self.goaway, GoawayWrite::Sent) {
            return Ok(());
        }
        let grace_over = self
            .closing
            .as_mut()
            .is_some_and(|grace| grace.as_mut().poll(cx).is_ready());
        if grace_over {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "closed by the server ({:?}); its GOAWAY could not be written within {GOAWAY_WRITE_GRACE:?}",
                    self.info.closer.rule()
                ),
            ));
        }
        Ok(())
    }
}

impl Connection {
    /// Who is on the other end, and how to close this connection.
    pub fn info(&self) -> &ConnectionInfo {
        &self.info
    }
}

impl AsyncRead for Connection {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.check_close_requested(cx)?;
        match this.goaway {
            // After our GOAWAY: end of stream, so hyper winds down.
            GoawayWrite::Sent => return Poll::Ready(Ok(())),
            GoawayWrite::Pending { .. } if this.outbound.at_boundary() => {
                ready!(this.poll_send_goaway(cx))?;
                return Poll::Ready(Ok(()));
            }
            _ => {}
        }
        if let Some(timer) = &mut this.handshake
            && timer.as_mut().poll(cx).is_ready()
        {
            tracing::debug!(peer = %this.info.remote_addr, "no HTTP/2 handshake in time: closing");
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no HTTP/2 preface, SETTINGS and SETTINGS ack within {:?}",
                    this.handshake_timeout
                ),
            )));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.stream).poll_read(cx, buf))?;
        this.watch_inbound(&buf.filled()[before..]);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Connection {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_close_requested(cx)?;
        // While a GOAWAY waits, hyper may finish the frame it started, and
        // not a byte more.
        let allowed = match this.goaway {
            GoawayWrite::None => buf.len(),
            GoawayWrite::Pending { .. } if !this.outbound.at_boundary() => {
                this.outbound.until_boundary(buf)
            }
            GoawayWrite::Pending { .. } | GoawayWrite::Sent => {
                ready!(this.poll_send_goaway(cx))?;
                return Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::BrokenPipe,
                    "connection closed after the server's GOAWAY ENHANCE_YOUR_CALM",
                )));
            }
        };
        let n = ready!(Pin::new(&mut this.stream).poll_write(cx, &buf[..allowed]))?;
        this.watch_outbound(&buf[..n]);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.check_close_requested(cx)?;
        if !matches!(this.goaway, GoawayWrite::None) {
            // Rare: fall back to one slice at a time, which poll_write limits.
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &b[..]);
            return Pin::new(this).poll_write(cx, first);
        }
        let n = ready!(Pin::new(&mut this.stream).poll_write_vectored(cx, bufs))?;
        let mut left = n;
        for slice in bufs {
            if left == 0 {
                break;
            }
            let take = left.min(slice.len());
            this.watch_outbound(&slice[..take]);
            left -= take;
        }
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.goaway, GoawayWrite::Pending { .. }) && this.outbound.at_boundary() {
            ready!(this.poll_send_goaway(cx))?;
        }
        if matches!(this.goaway, GoawayWrite::Sent) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    /// Shuts the write side (FIN after the last GOAWAY), then lingers: the
    /// connection ends once the client has closed too, or at the linger's
    /// bounds, so that its socket is not closed on bytes unread (`linger`).
    /// Not after a GOAWAY this layer wrote itself (a frame rule's or a close
    /// on request, `ENHANCE_YOUR_CALM`): that client has broken a rule, and
    /// its connection ends at once. (A read error or the handshake timeout
    /// ends hyper's connection without a shutdown, so without a linger.)
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.goaway, GoawayWrite::Sent) {
            return Poll::Ready(Ok(()));
        }
        if this.linger.is_none() {
            ready!(Pin::new(&mut this.stream).poll_shutdown(cx))?;
            this.linger = Some(Box::default());
        }
        let linger = this.linger.as_mut().expect("set above");
        ready!(linger.poll_done(&mut this.stream, cx));
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::net::TcpListener;
    use tokio::sync::Semaphore;

    use super::*;
    use h2_frames::GoAway;
    use h2_frames::encode_frame as frame;

    const FLOOR: Duration = Duration::from_secs(5);

    /// A loopback TCP connection: the client's end, and the server's end
    /// wrapped in a [`Connection`] with `policy`.
    async fn connected(policy: ConnectionPolicy) -> (TcpStream, Connection) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (accepted, peer) = listener.accept().await.expect("accept");
        let slot = Arc::new(Semaphore::new(1))
            .try_acquire_owned()
            .expect("a free slot");
        let deadline = tokio::time::Instant::now() + policy.handshake_timeout;
        (
            client,
            Connection::new(accepted, peer, slot, policy, deadline),
        )
    }

    /// Given a server that is halfway through writing a DATA frame when a
    /// client's fourth quick PING arrives, when the server writes on, then
    /// the client receives the rest of that frame and nothing else of the
    /// server's, then the ACK of that fourth PING, then the GOAWAY
    /// too_many_pings, then the end of the stream: the GOAWAY lands on a
    /// frame boundary, the PING that earned it is answered first (as grpc-go
    /// does), and no frame follows the GOAWAY.
    #[tokio::test]
    async fn goaway_waits_for_a_frame_boundary_and_nothing_follows_it() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (mut client, mut server) = connected(ConnectionPolicy {
            handshake_timeout: Duration::from_secs(10),
            min_ping_interval: Some(FLOOR),
            permit_pings_without_calls: true,
            control_frame_budget: Some(1000),
            tcp_user_timeout: None,
            tcp_notsent_lowat: None,
            window_update_budget: None,
            metrics: &crate::metrics::connection::OFF,
        })
        .await;

        // The server (standing in for hyper) starts a 100-byte DATA frame.
        let data = frame(kind::DATA, 0, 1, &[7; 100]);
        let (first, rest) = data.split_at(40);
        assert_eq!(server.write(first).await.expect("write"), first.len());

        // The client's opening and four PINGs, far quicker than the floor.
        let mut opening = h2_frames::PREFACE.to_vec();
        opening.extend(frame(kind::SETTINGS, 0, 0, &[]));
        for i in 0..4u8 {
            opening.extend(frame(kind::PING, 0, 0, &[i; 8]));
        }
        client.write_all(&opening).await.expect("client writes");
        let mut seen = 0;
        let mut buf = [0u8; 256];
        while seen < opening.len() {
            let n = server.read(&mut buf).await.expect("server reads");
            assert!(n > 0, "the server read the client's bytes");
            seen += n;
        }

        // Writing on: only the rest of the started frame goes out...
        let mut more = rest.to_vec();
        more.extend(frame(kind::PING, flag::ACK, 0, &[0; 8]));
        assert_eq!(server.write(&more).await.expect("write"), rest.len());
        // ...then the GOAWAY, and every later write fails.
        assert!(server.write(&more[rest.len()..]).await.is_err());
        assert!(server.write(b"anything").await.is_err());

        let mut received = Vec::new();
        client
            .read_to_end(&mut received)
            .await
            .expect("the client reads to the end");
        let mut expected = data;
        expected.extend(frame(kind::PING, flag::ACK, 0, &[3; 8]));
        expected.extend(GoAway::too_many_pings(0).encode());
        assert_eq!(received, expected);
    }

    /// Given a client that finished a call on stream 1 and then floods
    /// WINDOW_UPDATEs on it, when the server reads the flood, then the
    /// client receives GOAWAY ENHANCE_YOUR_CALM too_many_control_frames and
    /// the end of the stream, and every later write fails.
    #[tokio::test]
    async fn window_updates_on_a_closed_stream_get_the_goaway() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let (mut client, mut server) = connected(ConnectionPolicy {
            handshake_timeout: Duration::from_secs(10),
            min_ping_interval: None,
            permit_pings_without_calls: true,
            control_frame_budget: Some(10),
            tcp_user_timeout: None,
            tcp_notsent_lowat: None,
            window_update_budget: None,
            metrics: &crate::metrics::connection::OFF,
        })
        .await;

        // Stream 1: the client's request, and the server's whole answer.
        let mut opening = h2_frames::PREFACE.to_vec();
        opening.extend(frame(kind::SETTINGS, 0, 0, &[]));
        opening.extend(frame(kind::HEADERS, flag::END_HEADERS, 1, &[0x82]));
        client.write_all(&opening).await.expect("client writes");
        let mut buf = [0u8; 1024];
        let mut seen = 0;
        while seen < opening.len() {
            seen += server.read(&mut buf).await.expect("server reads");
        }
        let answer = frame(
            kind::HEADERS,
            flag::END_HEADERS | flag::END_STREAM,
            1,
            &[0x88],
        );
        server.write_all(&answer).await.expect("server answers");

        // The flood: SETTINGS spent 1 of 10, stream 1 paid 8 back (up to
        // 10 again), so the eleventh update is one too many.
        let mut flood = Vec::new();
        for _ in 0..20 {
            flood.extend(frame(kind::WINDOW_UPDATE, 0, 1, &1u32.to_be_bytes()));
        }
        client.write_all(&flood).await.expect("client floods");
        let mut seen = 0;
        while seen < flood.len() {
            let n = server.read(&mut buf).await.expect("server reads");
            if n == 0 {
                break;
            }
            seen += n;
        }
        // Whatever hyper writes next finds the GOAWAY first.
        assert!(server.write(b"anything").await.is_err());

        let mut received = Vec::new();
        client
            .read_to_end(&mut received)
            .await
            .expect("the client reads to the end");
        let mut expected = answer;
        expected.extend(GoAway::too_many_control_frames(1).encode());
        assert_eq!(received, expected);
    }
}
