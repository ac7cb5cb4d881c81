//! Per-connection policies: what this server enforces on every TCP
//! connection, before and around hyper, because tonic, hyper and h2 do not.
//!
//! - [`incoming`] is the accept loop. It caps connections served at once
//!   (above the cap a new connection is closed at once) and backs off on
//!   accept errors such as `EMFILE` instead of spinning. It yields each
//!   connection as [`Accepted`], a socket bound to no runtime yet, so the
//!   server can hand it to the worker that will serve it
//!   ([`crate::server`]); on Linux it costs one `accept4` and nothing else.
//! - [`Accepted::serve`] waits for the client's first byte before it sets
//!   a socket option or builds anything for HTTP/2 or TLS: a client that
//!   connects and closes costs the accept, one peek and the close.
//! - [`Connection`] wraps each accepted stream and watches its frames in
//!   both directions with [`h2_frames::FrameTracker`]:
//!   - **handshake timeout**: no preface, SETTINGS and acknowledgement of
//!     the server's SETTINGS in time, closed (RFC 9113 §6.5.3 allows this
//!     `SETTINGS_TIMEOUT`; a client that never reads never acknowledges);
//!   - **ping floor** ([`PingPolicy`]): the third PING strike gets that
//!     PING's ACK, then GOAWAY `ENHANCE_YOUR_CALM` `too_many_pings`, written
//!     between two outgoing frames, and the connection is closed once it is
//!     written;
//!   - **control-frame budget** ([`ControlFrameBudget`]): frames that make
//!     no progress (WINDOW_UPDATE on a stream that is not open, SETTINGS,
//!     PRIORITY) past the budget get GOAWAY `ENHANCE_YOUR_CALM`
//!     `too_many_control_frames`, written and followed in the same way;
//!   - **window-update budget**
//!     ([`crate::connection::window_updates::WindowUpdateBudget`]): WINDOW_UPDATEs on
//!     open streams and on the connection may number at most one per 2 KiB
//!     of DATA the server sent, 4 per stream opened, plus the budget; past
//!     it, GOAWAY `ENHANCE_YOUR_CALM` `too_many_window_updates`, written and
//!     followed in the same way. The reason: an update answers DATA read,
//!     so one the DATA does not call for makes no progress either, only on
//!     an open stream, where the control-frame budget does not look; four
//!     connections flooding them had both cores busy (issue 23);
//!   - **close on request**: [`Closer::close`] ends a connection whose
//!     response missed its send deadline ([`crate::call::edge`]), or that the
//!     response budget evicts ([`crate::call::budget`]): GOAWAY
//!     `ENHANCE_YOUR_CALM` naming the rule (`send_deadline`,
//!     `stalled_holder`) first, at a frame boundary as above, so the
//!     client learns why and which streams were not served; a connection
//!     whose socket takes no GOAWAY within
//!     [`crate::knobs::GOAWAY_WRITE_GRACE`] (a reader stalled at the TCP
//!     level) fails its next read or write without one, as before;
//!   - **fewer, larger writes** for bulk responses ([`crate::connection::coalesce`]);
//!   - **bytes counted**, as h2 hands them over and as they reach the
//!     socket, to tell when a response has been acknowledged
//!     ([`crate::kernel_queue`]).

use std::{
    collections::HashSet,
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::atomic::{AtomicUsize, Ordering},
    sync::{Arc, OnceLock},
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{Notify, OwnedSemaphorePermit, Semaphore, futures::OwnedNotified, mpsc},
    time::Sleep,
};

use crate::call::budget::Holder;
use crate::connection::age::DrainWatcher;
use crate::connection::coalesce::Coalesce;
use crate::connection::tls::{ServerTls, Transport};
use crate::connection::window_updates::WindowUpdateBudget;
use crate::kernel_queue::{CountWrites, SentBytes};
use crate::knobs::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, CONTROL_FRAMES_PER_STREAM, FD_HEADROOM,
    GOAWAY_WRITE_GRACE, MAX_PING_STRIKES,
};
use h2_frames::{Frame, FrameHeader, FrameTracker, GoAway, encode_frame, flag, kind};

/// A ping this much sooner than the floor is still on time: timers and
/// networks jitter by milliseconds, and a client that pings exactly at the
/// floor must never be punished for it.
const PING_FLOOR_TOLERANCE: Duration = Duration::from_millis(100);

/// A PING's payload is exactly 8 opaque bytes (RFC 9113 §6.7).
const PING_PAYLOAD_LEN: usize = 8;

/// The rules every connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionPolicy {
    /// Preface, SETTINGS and the ack of the server's SETTINGS must arrive
    /// within this.
    pub handshake_timeout: Duration,
    /// Least time between two client PINGs (`None`: no floor).
    pub min_ping_interval: Option<Duration>,
    /// Whether PINGs are allowed while no call is in flight.
    pub permit_pings_without_calls: bool,
    /// Control frames that make no progress a connection may send
    /// ([`ControlFrameBudget`]; `None`: no guard).
    pub control_frame_budget: Option<u32>,
    /// The kernel closes the connection when its sent bytes stay
    /// unacknowledged this long, zero-window probes included
    /// (`TCP_USER_TIMEOUT`, see [`crate::knobs::KEEPALIVE_TIMEOUT`]).
    /// `None`: the kernel's default (about 15 minutes of retransmissions).
    pub tcp_user_timeout: Option<Duration>,
    /// Unsent bytes the kernel may queue for the connection
    /// (`TCP_NOTSENT_LOWAT`, see [`crate::knobs::TCP_NOTSENT_LOWAT`]).
    /// `None`: as many as the send buffer holds.
    pub tcp_notsent_lowat: Option<u32>,
    /// WINDOW_UPDATEs on open streams and the connection beyond what the
    /// DATA sent calls for ([`WindowUpdateBudget`]; `None`: no guard).
    pub window_update_budget: Option<u32>,
}

/// Puts the kernel's buffers for an accepted socket inside the server's
/// bounds (Linux and Android; see [`ConnectionPolicy`]):
/// - `TCP_USER_TIMEOUT`: a peer that acknowledges nothing, or keeps its
///   receive window shut, is closed by the kernel itself, whatever requests
///   it keeps sending. hyper's keepalive cannot do this: it counts every
///   request as activity. grpc-go sets the same option to its keepalive
///   timeout.
/// - `TCP_NOTSENT_LOWAT`: the socket accepts more only while fewer unsent
///   bytes than this are queued, so a response bigger than that stays in
///   h2, charged to the response budget and under the send deadline, until
///   the peer really takes it. The kernel's autotuned send buffer still
///   grows for bytes in flight, so a fast, distant reader is not slowed.
///
/// On Linux a budgeted response also counts as sent only once the peer has
/// acknowledged it, read from the kernel's send queue
/// ([`crate::kernel_queue`]), so the bytes under the low-water mark stay
/// charged and under the send deadline too. These two options bound what
/// the kernel holds meanwhile, and for how long.
///
/// Elsewhere (macOS, Windows) neither option is set and the queue is not
/// read: a stalled reader is still closed by the send deadline, but the
/// last send buffer's worth of a response leaves the budget when the
/// kernel takes it.
fn bound_kernel_buffers(stream: &TcpStream, policy: &ConnectionPolicy) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let socket = socket2::SockRef::from(stream);
        socket.set_tcp_user_timeout(policy.tcp_user_timeout)?;
        if let Some(lowat) = policy.tcp_notsent_lowat {
            socket.set_tcp_notsent_lowat(lowat)?;
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (stream, policy);
    Ok(())
}

/// Raises the soft open-file limit to the hard limit, logs both, and returns
/// the connection cap that leaves [`FD_HEADROOM`] descriptors free.
pub fn default_max_connections() -> u64 {
    use rlimit::Resource;
    let (soft, hard) = match Resource::NOFILE.get() {
        Ok(limits) => limits,
        Err(e) => {
            tracing::warn!("cannot read the open-file limit ({e}); assuming 1024");
            (1024, 1024)
        }
    };
    let raised = if soft < hard {
        match Resource::NOFILE.set(hard, hard) {
            Ok(()) => hard,
            Err(e) => {
                tracing::warn!(soft, hard, "cannot raise the open-file limit: {e}");
                soft
            }
        }
    } else {
        soft
    };
    let cap = raised.saturating_sub(FD_HEADROOM).max(1);
    tracing::info!(
        soft_before = soft,
        hard,
        soft_now = raised,
        max_connections = cap,
        "open-file limit"
    );
    cap
}

/// Accepts connections on `listener` in a task of its own and yields them,
/// at most `max_connections` alive at once. The task ends when the receiver
/// is dropped, which closes the listening socket.
pub fn incoming(
    listener: TcpListener,
    max_connections: u64,
    policy: ConnectionPolicy,
) -> io::Result<mpsc::Receiver<Accepted>> {
    let listening = Listening::new(listener)?;
    let (tx, rx) = mpsc::channel(1);
    let slots = usize::try_from(max_connections)
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS);
    tokio::spawn(accept_loop(
        listening,
        Arc::new(Semaphore::new(slots)),
        policy,
        tx,
    ));
    Ok(rx)
}

async fn accept_loop(
    listening: Listening,
    slots: Arc<Semaphore>,
    policy: ConnectionPolicy,
    tx: mpsc::Sender<Accepted>,
) {
    let mut backoff: Option<Duration> = None;
    let mut at_cap = false;
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            accepted = listening.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = None;
                // Over the cap: close at once (dropping the stream). The
                // client sees its connection end; the server does no work.
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    if !at_cap {
                        tracing::warn!(%peer, "connection cap reached: closing new connections until one ends");
                        at_cap = true;
                    }
                    continue;
                };
                at_cap = false;
                let connection = Accepted {
                    stream,
                    peer,
                    slot,
                    policy,
                };
                if tx.send(connection).await.is_err() {
                    return;
                }
            }
            // These concern one connection that died in the backlog: next.
            Err(e) if is_per_connection(&e) => {}
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM...: retrying at once would
                // spin a core, so wait 5 ms, doubling up to 1 s.
                let delay = next_backoff(backoff);
                backoff = Some(delay);
                tracing::warn!(?delay, "accept failed, backing off: {e}");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// The listening socket, as the accept loop uses it: each
/// [`Listening::accept`] yields a socket registered with no runtime, ready
/// to be sent to the worker that will serve it.
///
/// On Linux the socket is watched for readiness alone, and accepted with
/// one `accept4` that makes the new socket non-blocking and close-on-exec.
/// tokio's `TcpListener::accept` registers every socket it accepts with
/// the accepting runtime, and the hand-off then takes it out again: two
/// `epoll_ctl` calls per connection, on the acceptor's thread, for nothing
/// (issue 23). tokio reports the readiness of a stream, not of a listener,
/// so the listening socket is held as a `TcpStream`: a listening socket is
/// readable when a connection waits in its queue. Elsewhere, tokio's
/// `accept`, and the socket taken out of the runtime.
#[derive(Debug)]
enum Listening {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Watched(TcpStream),
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    Tokio(TcpListener),
}

impl Listening {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn new(listener: TcpListener) -> io::Result<Self> {
        let fd = std::os::fd::OwnedFd::from(listener.into_std()?);
        TcpStream::from_std(std::net::TcpStream::from(fd)).map(Self::Watched)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn new(listener: TcpListener) -> io::Result<Self> {
        Ok(Self::Tokio(listener))
    }

    /// The next connection in the queue, waiting for one if there is none.
    async fn accept(&self) -> io::Result<(std::net::TcpStream, SocketAddr)> {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Self::Watched(socket) => {
                let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
                let (accepted, addr) = socket
                    .async_io(tokio::io::Interest::READABLE, || {
                        socket2::SockRef::from(socket).accept4(flags)
                    })
                    .await?;
                // A TCP listener's peer is always an IP address.
                let peer = addr
                    .as_socket()
                    .ok_or_else(|| io::Error::other("accepted a peer that is not an IP address"))?;
                Ok((accepted.into(), peer))
            }
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            Self::Tokio(listener) => {
                let (stream, peer) = listener.accept().await?;
                Ok((stream.into_std()?, peer))
            }
        }
    }
}

/// A connection accepted under the cap, not yet served: its socket belongs
/// to no runtime, so it may be sent to another thread. [`Accepted::serve`],
/// called on the thread that will serve it, registers it there, so that
/// thread's runtime alone reads, writes and wakes it for its whole life.
#[derive(Debug)]
pub struct Accepted {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    policy: ConnectionPolicy,
}

impl Accepted {
    /// Registers the socket with the runtime this is called on (it must be
    /// called inside one), waits for the client's first byte, and applies
    /// the connection's policies; with `tls`, then runs the TLS handshake
    /// ([`ServerTls::accept`]). The first byte, the TLS handshake and
    /// HTTP/2's share one handshake timeout. A connection closed before
    /// its first byte, or still silent when `drain` starts, ends here.
    ///
    /// The client speaks first in both protocols (the HTTP/2 preface, RFC
    /// 9113 §3.4; the TLS ClientHello), so nothing is lost by waiting for
    /// it: the server's own SETTINGS go out with the reply to the client's
    /// preface rather than before it. What it saves: a client that
    /// connects and closes (a reconnect storm without a preface, a load
    /// balancer's TCP health check, a port scan) costs no socket options,
    /// no HTTP/2 state, no write and no reset, only the accept, the
    /// registration and the close (issue 23).
    pub async fn serve(
        self,
        tls: Option<&ServerTls>,
        drain: &mut DrainWatcher,
    ) -> io::Result<Connection> {
        // accept4 (or into_std) left the socket non-blocking, as from_std
        // requires.
        let stream = TcpStream::from_std(self.stream)?;
        let deadline = tokio::time::Instant::now() + self.policy.handshake_timeout;
        tokio::select! {
            spoke = tokio::time::timeout_at(deadline, client_speaks(&stream)) => match spoke {
                Ok(spoke) => spoke?,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "not a byte within the handshake timeout ({:?})",
                            self.policy.handshake_timeout
                        ),
                    ));
                }
            },
            () = drain.draining() => {
                return Err(io::Error::other("the server is draining: closed before the client spoke"));
            }
        }
        // TCP_NODELAY: without it, small responses can wait ~40 ms for
        // Nagle's algorithm and the peer's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %self.peer, "cannot set TCP_NODELAY: {e}");
        }
        if let Err(e) = bound_kernel_buffers(&stream, &self.policy) {
            tracing::debug!(peer = %self.peer, "cannot bound the socket's kernel buffers: {e}");
        }
        let Some(tls) = tls else {
            return Ok(Connection::new(
                stream,
                self.peer,
                self.slot,
                self.policy,
                deadline,
            ));
        };
        // Boxed: the handshake's state (rustls's session, the ClientHello)
        // lives on the heap while it runs, and is not stored in every
        // connection's task, plaintext ones included, for the task's life.
        let (transport, sent) = Box::pin(tls.accept(stream, self.peer, deadline)).await?;
        Ok(Connection::over(
            transport,
            sent,
            self.peer,
            self.slot,
            self.policy,
            deadline,
        ))
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// Waits until the client has sent its first byte, without taking it;
/// `UnexpectedEof` if it closed first.
async fn client_speaks(stream: &TcpStream) -> io::Result<()> {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte).await? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before its first byte",
        )),
        _ => Ok(()),
    }
}

/// 5 ms after the first failure, then twice the previous wait, at most 1 s.
fn next_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(ACCEPT_BACKOFF_MIN, |d| (d * 2).min(ACCEPT_BACKOFF_MAX))
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

/// The ping floor, as grpc-go's `handlePing` enforces it: a PING is a strike
/// when it comes sooner than the floor after the previous one, or when no
/// call is in flight and such pings are not permitted. Sending HEADERS or
/// DATA forgives everything. The strike after [`MAX_PING_STRIKES`] is one too
/// many.
#[derive(Debug, Clone)]
pub struct PingPolicy {
    min_interval: Option<Duration>,
    permit_without_calls: bool,
    /// When the previous PING arrived; `None` right after data was sent.
    last_ping: Option<Instant>,
    /// Strikes since the server last sent HEADERS or DATA.
    strikes: u32,
}

/// What to do about one PING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingVerdict {
    Fine,
    /// A strike, with the count so far.
    Strike(u32),
    /// One strike too many: GOAWAY `too_many_pings`.
    TooMany,
}

impl PingPolicy {
    pub fn new(min_interval: Option<Duration>, permit_without_calls: bool) -> Self {
        Self {
            min_interval,
            permit_without_calls,
            last_ping: None,
            strikes: 0,
        }
    }

    /// A PING (not an ack) arrived at `now`.
    pub fn on_ping(&mut self, now: Instant, calls_in_flight: bool) -> PingVerdict {
        let too_soon = match (self.min_interval, self.last_ping) {
            (Some(floor), Some(last)) => {
                now.saturating_duration_since(last) + PING_FLOOR_TOLERANCE < floor
            }
            _ => false,
        };
        let idle_not_permitted = !calls_in_flight && !self.permit_without_calls;
        self.last_ping = Some(now);
        if !too_soon && !idle_not_permitted {
            return PingVerdict::Fine;
        }
        self.strikes += 1;
        if self.strikes > MAX_PING_STRIKES {
            PingVerdict::TooMany
        } else {
            PingVerdict::Strike(self.strikes)
        }
    }

    /// The server sent HEADERS or DATA: pings that ride along with real
    /// traffic (BDP probes) are never strikes.
    pub fn on_headers_or_data_sent(&mut self) {
        self.strikes = 0;
        self.last_ping = None;
    }
}

/// The control-frame budget ([`crate::knobs::CONTROL_FRAME_BUDGET`]). A
/// frame that makes no progress ([`makes_no_progress`]) spends one; each
/// stream the client opens adds [`CONTROL_FRAMES_PER_STREAM`] back, up to
/// the budget and never above it. The frame that finds nothing left is one
/// too many.
///
/// The allowance grows with real work, not with time, as in Envoy's rule
/// for WINDOW_UPDATEs (allowed: 1 + 2 × (streams opened + 10 × DATA frames
/// sent), in `protocol_constraints.cc`): a client that sends nothing but
/// such frames runs out however slowly it sends them. Unlike Envoy's running
/// total, it cannot be saved up: a connection that has opened a million
/// streams still has at most the budget to spend. h2's own limits do not
/// cover this: `max_local_error_reset_streams` and
/// `max_pending_accept_reset_streams` count resets, and h2 drops a
/// WINDOW_UPDATE on a closed stream without resetting anything. grpc-go
/// does not police it either; it only stops reading while more than 50
/// answers to control frames wait to be written
/// (`maxQueuedTransportResponseFrames`), which bounds memory, not CPU.
#[derive(Debug, Clone)]
pub struct ControlFrameBudget {
    budget: u32,
    /// Frames that make no progress this connection may still send.
    no_progress_frames_left: u32,
}

/// What to do about one frame that makes no progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlVerdict {
    Fine,
    /// The budget is spent: GOAWAY `too_many_control_frames`.
    TooMany,
}

impl ControlFrameBudget {
    pub fn new(budget: u32) -> Self {
        Self {
            budget,
            no_progress_frames_left: budget,
        }
    }

    /// The client opened a stream: real work, which earns a few frames.
    pub fn on_stream_opened(&mut self) {
        self.no_progress_frames_left = self
            .no_progress_frames_left
            .saturating_add(CONTROL_FRAMES_PER_STREAM)
            .min(self.budget);
    }

    /// A frame that makes no progress arrived.
    pub fn on_no_progress_frame(&mut self) -> ControlVerdict {
        match self.no_progress_frames_left.checked_sub(1) {
            Some(left) => {
                self.no_progress_frames_left = left;
                ControlVerdict::Fine
            }
            None => ControlVerdict::TooMany,
        }
    }
}

/// Whether a frame from the client moves no bytes and starts no call:
/// - a WINDOW_UPDATE on a stream that is not open (closed, refused, never
///   opened): there is nothing on it to send. On an open stream, or on the
///   connection (stream 0), it lets data flow, and is never counted;
/// - a SETTINGS frame (not an ack): the first is the handshake, a few more
///   change windows; a stream of them only costs the server ACKs;
/// - a PRIORITY frame: h2 ignores them, and gRPC clients send none.
pub fn makes_no_progress(header: &FrameHeader, open_streams: &HashSet<u32>) -> bool {
    match header.kind {
        kind::WINDOW_UPDATE => header.stream_id != 0 && !open_streams.contains(&header.stream_id),
        kind::SETTINGS => !header.has(flag::ACK),
        kind::PRIORITY => true,
        _ => false,
    }
}

/// What a handler learns about its connection (tonic puts this in every
/// request's extensions): the peer, a way to close the connection, and its
/// account with the response budget.
#[derive(Debug, Clone)]
pub struct ConnectionInfo {
    pub remote_addr: SocketAddr,
    pub closer: Closer,
    /// What this connection's responses hold of the response budget, held
    /// to its share (see [`crate::call::budget`]).
    pub responses: Arc<Holder>,
    /// Bytes written, and where the kernel lists the socket: when a
    /// response has been acknowledged (see [`crate::kernel_queue`]).
    pub sent: Arc<SentBytes>,
    /// The most streams this connection has had open at once, counted on
    /// the wire: from the client's HEADERS to the server's END_STREAM (or a
    /// RST_STREAM either way). What h2 keeps for the connection's life
    /// grows with it ([`crate::connection::age`]'s idle after a burst). A handler
    /// that finished its body early does not end the stream here: h2 may
    /// still hold its frames.
    pub peak_streams: Arc<AtomicUsize>,
}

/// Closes one connection from outside its task, e.g. when a response on it
/// missed its send deadline.
#[derive(Debug, Clone)]
pub struct Closer {
    notify: Arc<Notify>,
    /// Why, set by the first [`Closer::close`].
    rule: Arc<OnceLock<CloseRule>>,
}

/// Why a connection is closed from outside its task: the rule its GOAWAY
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseRule {
    /// A response on it was not acknowledged within the send deadline.
    SendDeadline,
    /// The response budget is full, and this connection held the most of
    /// it with no send progress for the stall time.
    StalledHolder,
}

impl CloseRule {
    /// The GOAWAY's debug data.
    pub fn debug_data(self) -> &'static [u8] {
        match self {
            Self::SendDeadline => GoAway::SEND_DEADLINE,
            Self::StalledHolder => GoAway::STALLED_HOLDER,
        }
    }
}

impl Closer {
    /// A closer that wakes `notify` (the connection's own, or a test's).
    pub(crate) fn new(notify: Arc<Notify>) -> Self {
        Self {
            notify,
            rule: Arc::new(OnceLock::new()),
        }
    }

    /// The connection sends GOAWAY `ENHANCE_YOUR_CALM` naming `rule` at its
    /// next frame boundary, then ends, and hyper drops it with every stream
    /// on it; if the GOAWAY cannot be written within
    /// [`GOAWAY_WRITE_GRACE`], it fails its next read or write without
    /// one. It is woken if it is waiting. Only the first call's rule counts.
    pub fn close(&self, rule: CloseRule) {
        let _ = self.rule.set(rule);
        self.notify.notify_one();
    }

    fn rule(&self) -> CloseRule {
        self.rule.get().copied().unwrap_or(CloseRule::SendDeadline)
    }
}

/// The GOAWAY this server may send on its own (h2 sends the others).
#[derive(Debug)]
enum Goaway {
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

impl Goaway {
    fn pending(frame: Vec<u8>) -> Self {
        Self::Pending { frame, written: 0 }
    }
}

/// The ACK of the PING that earned a GOAWAY, then the GOAWAY, as grpc-go's
/// `handlePing` sends them: the client's round-trip sample is not lost,
/// and h2's own ACK never goes out, because nothing follows our GOAWAY.
/// A PING of the wrong size gets no ACK (h2 calls it a FRAME_SIZE_ERROR).
fn ack_then(ping_payload: &[u8], goaway: GoAway) -> Vec<u8> {
    let mut frames = Vec::new();
    if ping_payload.len() == PING_PAYLOAD_LEN {
        frames = encode_frame(kind::PING, flag::ACK, 0, ping_payload);
    }
    frames.extend(goaway.encode());
    frames
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
    pings: PingPolicy,
    /// `None` when the guard is off.
    control_frames: Option<ControlFrameBudget>,
    /// `None` when the guard is off.
    window_updates: Option<WindowUpdateBudget>,
    /// Streams the client opened that the server has not ended yet.
    open_streams: HashSet<u32>,
    /// Highest stream id the client opened, for GOAWAY's last-stream-id.
    last_stream_id: u32,
    goaway: Goaway,
    close_requested: Pin<Box<OwnedNotified>>,
    /// Running once [`Closer::close`] was called: the GOAWAY must be out
    /// before it ends.
    closing: Option<Pin<Box<Sleep>>>,
}

impl Connection {
    /// A plaintext connection over `stream`, whose socket options are set,
    /// with `handshake_deadline` for the HTTP/2 handshake.
    fn new(
        stream: TcpStream,
        remote_addr: SocketAddr,
        slot: OwnedSemaphorePermit,
        policy: ConnectionPolicy,
        handshake_deadline: tokio::time::Instant,
    ) -> Self {
        let sent = SentBytes::of(&stream);
        let plain = Transport::Plain(CountWrites::new(stream, Arc::clone(&sent)));
        Self::over(plain, sent, remote_addr, slot, policy, handshake_deadline)
    }

    /// A connection over `transport` (plaintext or TLS), whose bytes `sent`
    /// counts, with `handshake_deadline` for the HTTP/2 handshake.
    fn over(
        transport: Transport,
        sent: Arc<SentBytes>,
        remote_addr: SocketAddr,
        slot: OwnedSemaphorePermit,
        policy: ConnectionPolicy,
        handshake_deadline: tokio::time::Instant,
    ) -> Self {
        let notify = Arc::new(Notify::new());
        let closer = Closer::new(Arc::clone(&notify));
        Self {
            stream: Coalesce::new(transport),
            info: ConnectionInfo {
                remote_addr,
                responses: Holder::new(closer.clone()),
                closer,
                sent,
                peak_streams: Arc::new(AtomicUsize::new(0)),
            },
            _slot: slot,
            // PING payloads are kept (8 bytes each) to ACK the PING that
            // earns a GOAWAY before it.
            inbound: FrameTracker::client_to_server().keeping(kind::PING, PING_PAYLOAD_LEN),
            outbound: FrameTracker::server_to_client(),
            handshake: Some(Box::pin(tokio::time::sleep_until(handshake_deadline))),
            handshake_timeout: policy.handshake_timeout,
            pings: PingPolicy::new(policy.min_ping_interval, policy.permit_pings_without_calls),
            control_frames: policy.control_frame_budget.map(ControlFrameBudget::new),
            window_updates: policy.window_update_budget.map(WindowUpdateBudget::new),
            open_streams: HashSet::new(),
            last_stream_id: 0,
            goaway: Goaway::None,
            close_requested: Box::pin(notify.notified_owned()),
            closing: None,
        }
    }

    /// Checks the frames the client just sent.
    fn watch_inbound(&mut self, bytes: &[u8]) {
        let Self {
            inbound,
            pings,
            control_frames,
            window_updates,
            open_streams,
            last_stream_id,
            goaway: pending,
            info,
            ..
        } = self;
        let mut settings_acked = false;
        inbound.feed(bytes, |frame: Frame<'_>| {
            let h = frame.header;
            if let Some(budget) = control_frames.as_mut()
                && makes_no_progress(&h, open_streams)
                && budget.on_no_progress_frame() == ControlVerdict::TooMany
                && matches!(pending, Goaway::None)
            {
                tracing::warn!(peer = %info.remote_addr, frame = kind::name(h.kind), "too many control frames: GOAWAY ENHANCE_YOUR_CALM too_many_control_frames");
                *pending = Goaway::pending(GoAway::too_many_control_frames(*last_stream_id).encode());
            }
            if let Some(updates) = window_updates.as_mut()
                && h.kind == kind::WINDOW_UPDATE
                && (h.stream_id == 0 || open_streams.contains(&h.stream_id))
                && updates.on_window_update() == ControlVerdict::TooMany
                && matches!(pending, Goaway::None)
            {
                tracing::warn!(peer = %info.remote_addr, stream = h.stream_id, "too many window updates: GOAWAY ENHANCE_YOUR_CALM too_many_window_updates");
                *pending = Goaway::pending(GoAway::too_many_window_updates(*last_stream_id).encode());
            }
            match h.kind {
                kind::SETTINGS if h.has(flag::ACK) => settings_acked = true,
                kind::HEADERS if h.stream_id > *last_stream_id => {
                    *last_stream_id = h.stream_id;
                    open_streams.insert(h.stream_id);
                    info.peak_streams
                        .fetch_max(open_streams.len(), Ordering::Relaxed);
                    if let Some(budget) = control_frames.as_mut() {
                        budget.on_stream_opened();
                    }
                    if let Some(updates) = window_updates.as_mut() {
                        updates.on_stream_opened();
                    }
                }
                kind::RST_STREAM => {
                    open_streams.remove(&h.stream_id);
                }
                kind::PING if !h.has(flag::ACK) => {
                    match pings.on_ping(Instant::now(), !open_streams.is_empty()) {
                        PingVerdict::Fine => {}
                        PingVerdict::Strike(n) => {
                            tracing::debug!(peer = %info.remote_addr, strikes = n, "ping strike");
                        }
                        PingVerdict::TooMany if matches!(pending, Goaway::None) => {
                            tracing::warn!(peer = %info.remote_addr, "too many pings: PING ACK, then GOAWAY ENHANCE_YOUR_CALM too_many_pings");
                            *pending = Goaway::pending(ack_then(
                                frame.kept,
                                GoAway::too_many_pings(*last_stream_id),
                            ));
                        }
                        PingVerdict::TooMany => {}
                    }
                }
                _ => {}
            }
        });
        // The client has read the server's SETTINGS and answered: it is a
        // reader, and the handshake is over.
        if settings_acked {
            self.handshake = None;
        }
    }

    /// Checks the frames hyper just wrote, and counts their bytes as
    /// accepted ([`SentBytes`]).
    fn watch_outbound(&mut self, bytes: &[u8]) {
        self.info.sent.add_accepted(bytes.len());
        let Self {
            outbound,
            pings,
            open_streams,
            window_updates,
            ..
        } = self;
        outbound.feed(bytes, |frame: Frame<'_>| {
            let h = frame.header;
            if let (kind::DATA, Some(updates)) = (h.kind, window_updates.as_mut()) {
                updates.on_data_sent(h.len);
            }
            match h.kind {
                kind::HEADERS | kind::DATA => {
                    pings.on_headers_or_data_sent();
                    if h.has(flag::END_STREAM) {
                        open_streams.remove(&h.stream_id);
                    }
                }
                kind::RST_STREAM => {
                    open_streams.remove(&h.stream_id);
                }
                _ => {}
            }
        });
    }

    /// Writes the pending GOAWAY (only ever called at a frame boundary),
    /// then shuts the socket down.
    fn poll_send_goaway(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Goaway::Pending { frame, written } = &mut self.goaway {
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
            self.goaway = Goaway::Sent;
        }
        Poll::Ready(Ok(()))
    }

    /// Once [`Closer::close`] was called: queues its GOAWAY (unless one is
    /// already on its way), which the read and write paths send at the
    /// next frame boundary, and fails with an error if that has not
    /// happened within [`GOAWAY_WRITE_GRACE`].
    fn check_close_requested(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.closing.is_none() {
            if self.close_requested.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            let rule = self.info.closer.rule();
            if matches!(self.goaway, Goaway::None) {
                let goaway = GoAway::enhance_your_calm(self.last_stream_id, rule.debug_data());
                self.goaway = Goaway::pending(goaway.encode());
            }
            self.closing = Some(Box::pin(tokio::time::sleep(GOAWAY_WRITE_GRACE)));
        }
        if matches!(self.goaway, Goaway::Sent) {
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
            Goaway::Sent => return Poll::Ready(Ok(())),
            Goaway::Pending { .. } if this.outbound.at_boundary() => {
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
            Goaway::None => buf.len(),
            Goaway::Pending { .. } if !this.outbound.at_boundary() => {
                this.outbound.until_boundary(buf)
            }
            Goaway::Pending { .. } | Goaway::Sent => {
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
        if !matches!(this.goaway, Goaway::None) {
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
        if matches!(this.goaway, Goaway::Pending { .. }) && this.outbound.at_boundary() {
            ready!(this.poll_send_goaway(cx))?;
        }
        if matches!(this.goaway, Goaway::Sent) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if matches!(this.goaway, Goaway::Sent) {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_secs(5);

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    /// Given a listener with two clients waiting in its queue, when the
    /// accept loop's listener takes them, then each comes with its client's
    /// address, non-blocking (as a runtime needs it) and registered with no
    /// runtime, so a worker's runtime can take it; the second waits in the
    /// queue until asked for.
    #[tokio::test]
    async fn accepted_sockets_come_non_blocking_with_their_peer() {
        // Given: two clients connected before anything is accepted.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let first = TcpStream::connect(addr).await.expect("connects");
        let second = TcpStream::connect(addr).await.expect("connects");
        let listening = Listening::new(listener).expect("watched");

        for client in [first, second] {
            // When: one is accepted.
            let (accepted, peer) = tokio::time::timeout(Duration::from_secs(5), listening.accept())
                .await
                .expect("a queued connection is taken at once")
                .expect("accepted");

            // Then: it is the client's, non-blocking, and a runtime takes it.
            assert_eq!(peer, client.local_addr().expect("client address"));
            assert!(
                socket2::SockRef::from(&accepted)
                    .nonblocking()
                    .expect("flags")
            );
            let stream = TcpStream::from_std(accepted).expect("registers with this runtime");
            assert_eq!(stream.peer_addr().expect("peer"), peer);
        }
    }

    /// Given the chapter's 5 s floor, a PING every second is fine once, then
    /// two strikes, then one too many: the third strike.
    #[test]
    fn third_quick_ping_is_one_too_many() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        assert_eq!(policy.on_ping(at(t0, 0), false), PingVerdict::Fine);
        assert_eq!(policy.on_ping(at(t0, 1000), false), PingVerdict::Strike(1));
        assert_eq!(policy.on_ping(at(t0, 2000), false), PingVerdict::Strike(2));
        assert_eq!(policy.on_ping(at(t0, 3000), false), PingVerdict::TooMany);
    }

    /// Pings exactly at the floor, or a hair early, are never strikes.
    #[test]
    fn pings_at_the_floor_are_fine() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        for i in 0..20 {
            // 4.95 s, 9.95 s, ...: 50 ms early every time.
            let when = at(t0, i * 5000).checked_sub(Duration::from_millis(50 * u64::from(i > 0)));
            let when = when.expect("after t0");
            assert_eq!(policy.on_ping(when, false), PingVerdict::Fine, "ping {i}");
        }
    }

    /// Sending HEADERS or DATA resets the strikes and the clock, as grpc-go does.
    #[test]
    fn data_sent_forgives_strikes() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        policy.on_ping(at(t0, 0), true);
        assert_eq!(policy.on_ping(at(t0, 100), true), PingVerdict::Strike(1));
        assert_eq!(policy.on_ping(at(t0, 200), true), PingVerdict::Strike(2));
        policy.on_headers_or_data_sent();
        assert_eq!(policy.on_ping(at(t0, 300), true), PingVerdict::Fine);
        assert_eq!(policy.on_ping(at(t0, 400), true), PingVerdict::Strike(1));
    }

    /// With pings without calls not permitted, every idle PING is a strike,
    /// however slow; with a call in flight the same pace is fine.
    #[test]
    fn idle_pings_strike_when_not_permitted() {
        let t0 = Instant::now();
        let mut idle = PingPolicy::new(Some(FLOOR), false);
        assert_eq!(idle.on_ping(at(t0, 0), false), PingVerdict::Strike(1));
        assert_eq!(idle.on_ping(at(t0, 60_000), false), PingVerdict::Strike(2));
        assert_eq!(idle.on_ping(at(t0, 120_000), false), PingVerdict::TooMany);

        let mut busy = PingPolicy::new(Some(FLOOR), false);
        for i in 0..5 {
            assert_eq!(busy.on_ping(at(t0, i * 60_000), true), PingVerdict::Fine);
        }
    }

    use h2_frames::encode_frame as frame;

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

    fn header(kind: u8, flags: u8, stream_id: u32) -> FrameHeader {
        FrameHeader {
            len: 4,
            kind,
            flags,
            stream_id,
        }
    }

    /// WINDOW_UPDATEs count only on streams that are not open; SETTINGS
    /// count unless they are acks; PRIORITY always; real work never.
    #[test]
    fn only_frames_that_move_nothing_make_no_progress() {
        let open: HashSet<u32> = [1, 5].into();
        let counted = |kind, flags, stream| makes_no_progress(&header(kind, flags, stream), &open);
        // A download's updates: on its open stream and on the connection.
        assert!(!counted(kind::WINDOW_UPDATE, 0, 1));
        assert!(!counted(kind::WINDOW_UPDATE, 0, 0));
        // Closed (3) or never opened (7, 2^31 - 1).
        assert!(counted(kind::WINDOW_UPDATE, 0, 3));
        assert!(counted(kind::WINDOW_UPDATE, 0, 7));
        assert!(counted(kind::WINDOW_UPDATE, 0, 0x7fff_ffff));
        assert!(counted(kind::SETTINGS, 0, 0));
        assert!(!counted(kind::SETTINGS, flag::ACK, 0));
        assert!(counted(kind::PRIORITY, 0, 9));
        for kind in [kind::HEADERS, kind::DATA, kind::RST_STREAM, kind::PING] {
            assert!(!counted(kind, 0, 3), "{}", kind::name(kind));
        }
    }

    /// Given a budget of 10, ten frames that make no progress are fine and
    /// the eleventh is one too many, and stays so.
    #[test]
    fn the_frame_past_the_budget_is_one_too_many() {
        let mut budget = ControlFrameBudget::new(10);
        for i in 0..10 {
            assert_eq!(budget.on_no_progress_frame(), ControlVerdict::Fine, "{i}");
        }
        assert_eq!(budget.on_no_progress_frame(), ControlVerdict::TooMany);
        assert_eq!(budget.on_no_progress_frame(), ControlVerdict::TooMany);
    }

    /// A client that opens streams and sends a few late WINDOW_UPDATEs for
    /// each (the most any stack sends, 4) never runs out: each stream pays
    /// for its own, with room to spare.
    #[test]
    fn streams_pay_for_their_late_window_updates() {
        let mut budget = ControlFrameBudget::new(10);
        for stream in 0..100_000 {
            budget.on_stream_opened();
            for _ in 0..4 {
                assert_eq!(
                    budget.on_no_progress_frame(),
                    ControlVerdict::Fine,
                    "stream {stream}"
                );
            }
        }
    }

    /// The allowance cannot be saved up: after a million streams, a flood
    /// still gets exactly the budget, then the GOAWAY.
    #[test]
    fn the_allowance_is_never_above_the_budget() {
        let mut budget = ControlFrameBudget::new(10);
        for _ in 0..1_000_000 {
            budget.on_stream_opened();
        }
        let fine = (0..100)
            .take_while(|_| budget.on_no_progress_frame() == ControlVerdict::Fine)
            .count();
        assert_eq!(fine, 10);
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

    #[test]
    fn accept_backoff_doubles_from_5_ms_to_1_s() {
        let mut waits = Vec::new();
        let mut previous = None;
        for _ in 0..10 {
            let next = next_backoff(previous);
            waits.push(next.as_millis());
            previous = Some(next);
        }
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }

    #[test]
    fn no_floor_means_no_strikes() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(None, true);
        for i in 0..1000 {
            assert_eq!(policy.on_ping(at(t0, i), false), PingVerdict::Fine);
        }
    }
}
