//! When a response's bytes have really reached the client: the kernel's
//! send queue of each connection, asked of the kernel by `sock_diag`.
//!
//! h2 lets go of a response's last chunk when it has handed the bytes to
//! the connection's writer, and the socket takes them into its send queue.
//! From there a client that stopped reading at the TCP level never takes
//! them: the bytes are still in this machine, in kernel memory. So a
//! budgeted response ([`crate::edge`]) counts as sent only when the peer
//! has *acknowledged* it: the kernel's unsent and unacknowledged bytes for
//! the connection cover none of it. That is what `ioctl(SIOCOUTQ)` (also
//! called `TIOCOUTQ`) reports, `write_seq - snd_una`.
//!
//! Why netlink and not the ioctl: no crate in this workspace's lock file
//! wraps `SIOCOUTQ` or `TCP_INFO` safely (socket2 0.6, rustix 1.1 and nix
//! 0.32 do not), and the workspace forbids `unsafe`. A `NETLINK_SOCK_DIAG`
//! socket (what `ss` uses) is opened and read with socket2's safe calls,
//! and its answer for one TCP socket carries the same number:
//! `idiag_wqueue` is `write_seq - snd_una` (`tcp_diag_get_info`), as
//! `tcp_ioctl` returns for `SIOCOUTQ`. Each query names one socket by its
//! addresses, so the kernel looks it up in its hash table: about 10 µs
//! (see [`crate::knobs::KERNEL_QUEUE_POLL`]). `/proc/net/tcp` has the same
//! number, but reading it walks every socket of the namespace, about 5 ms
//! a read even with a dozen sockets: the first version of this module read
//! it, and it cost each ListRoutes call 1.5 ms more server CPU.
//!
//! Why acknowledged, not "left this machine" (unsent bytes only, what
//! `SIOCOUTQNSD` reports): acknowledged is the stronger promise. A byte in
//! flight to a peer whose receive buffer is full is not read either; the
//! peer's kernel acknowledges only what fits its receive buffer.
//!
//! Per response, not per connection: several responses can be in flight on
//! one connection, so its queue may never be empty. Each connection counts
//! the bytes it accepted from h2 ([`SentBytes::accepted`], above the
//! write-coalescing buffer) and the bytes it wrote to the socket
//! (`SentBytes::written`, below it). A response ends at the first count
//! when it is released; it has drained once `written - wqueue` (bytes the
//! peer has acknowledged) reaches that end ([`is_drained`]).
//!
//! Cost: one thread asks, only while some response waits to drain, at most
//! every [`crate::knobs::KERNEL_QUEUE_POLL`] for each waited-on socket, and
//! less often for a socket whose peer acknowledges nothing (the interval
//! doubles up to [`crate::knobs::QUIET_SOCKET_POLL`]); every response waiting on one
//! socket shares its answer.
//!
//! Over TLS the socket carries more than h2 handed over: the handshake,
//! each record's header and tag (22 bytes per record of up to 16 KiB in
//! TLS 1.3), session tickets, alerts. So the two counts are in different
//! units, ciphertext at the socket and plaintext above TLS, and comparing
//! them directly would call a response drained up to that overhead too
//! early. [`SentBytes::plaintext_acked`] converts, never too early: at each
//! moment rustls holds no ciphertext back ([`crate::tls`] records it), the
//! socket has been given exactly the plaintext so far plus the overhead so
//! far. A plaintext byte up to that point sits at most that overhead past
//! its own offset on the socket, so once the peer has acknowledged `acked`
//! socket bytes, it has every plaintext byte up to `acked - overhead`.
//!
//! Elsewhere than Linux, or when the kernel refuses `sock_diag` (logged
//! once, at warn), a response counts as sent when h2 releases it, as before:
//! the send queue is then bounded only by `TCP_NOTSENT_LOWAT` and
//! `TCP_USER_TIMEOUT` ([`crate::connection`]).

use std::{
    collections::HashMap,
    io,
    net::{IpAddr, SocketAddr},
    pin::Pin,
    sync::{
        Arc, Condvar, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, ready},
    time::{Duration, Instant},
};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::watch,
};

use crate::knobs::{KERNEL_QUEUE_POLL, QUIET_SOCKET_POLL};

/// A socket as `sock_diag` finds it: its two addresses, and its inode,
/// which tells it from a later socket with the same addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketId {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub inode: u64,
}

/// Linux's numbers for the one request this module makes
/// (`linux/netlink.h`, `linux/sock_diag.h`, `linux/inet_diag.h`).
mod abi {
    pub const AF_NETLINK: i32 = 16;
    pub const NETLINK_SOCK_DIAG: i32 = 4;
    pub const SOCK_DIAG_BY_FAMILY: u16 = 20;
    pub const NLMSG_ERROR: u16 = 2;
    pub const NLM_F_REQUEST: u16 = 1;
    pub const AF_INET: u8 = 2;
    pub const AF_INET6: u8 = 10;
    pub const IPPROTO_TCP: u8 = 6;
    pub const ENOENT: i32 = 2;
    /// `struct nlmsghdr`.
    pub const HEADER_LEN: usize = 16;
    /// `nlmsghdr` + `struct inet_diag_req_v2`.
    pub const REQUEST_LEN: usize = HEADER_LEN + 56;
    /// `nlmsghdr` + `struct inet_diag_msg`.
    pub const REPLY_LEN: usize = HEADER_LEN + 72;
    /// Where `idiag_wqueue` and `idiag_inode` sit in a reply.
    pub const WQUEUE_AT: usize = HEADER_LEN + 60;
    pub const INODE_AT: usize = HEADER_LEN + 68;
}

/// The `sock_diag` request, numbered `seq`, for the TCP socket `id`: the
/// kernel looks it up by its addresses (an exact lookup, not a dump).
pub fn request(id: &SocketId, seq: u32) -> [u8; abi::REQUEST_LEN] {
    let mut b = [0; abi::REQUEST_LEN];
    // nlmsghdr, in host byte order; the port id (12..16) stays 0.
    b[0..4].copy_from_slice(&(abi::REQUEST_LEN as u32).to_ne_bytes());
    b[4..6].copy_from_slice(&abi::SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    b[6..8].copy_from_slice(&abi::NLM_F_REQUEST.to_ne_bytes());
    b[8..12].copy_from_slice(&seq.to_ne_bytes());
    // inet_diag_req_v2: family, protocol, no extensions, every state.
    b[16] = match id.local {
        SocketAddr::V4(_) => abi::AF_INET,
        SocketAddr::V6(_) => abi::AF_INET6,
    };
    b[17] = abi::IPPROTO_TCP;
    b[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid, ports and addresses in network byte order: this
    // socket's side is the source; any interface (60..64); no cookie.
    b[24..26].copy_from_slice(&id.local.port().to_be_bytes());
    b[26..28].copy_from_slice(&id.peer.port().to_be_bytes());
    put_address(&mut b[28..44], id.local.ip());
    put_address(&mut b[44..60], id.peer.ip());
    b[64..72].fill(0xFF);
    b
}

fn put_address(field: &mut [u8], ip: IpAddr) {
    match ip {
        IpAddr::V4(ip) => field[..4].copy_from_slice(&ip.octets()),
        IpAddr::V6(ip) => field.copy_from_slice(&ip.octets()),
    }
}

/// What the kernel answered to request `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// The socket, with its unsent and unacknowledged bytes.
    Queue {
        seq: u32,
        inode: u32,
        wqueue: u32,
    },
    /// No socket with those addresses (`ENOENT`): it is closed.
    NotFound {
        seq: u32,
    },
    /// Any other error, as a positive errno.
    Error {
        seq: u32,
        errno: i32,
    },
    Malformed,
}

/// Parses the kernel's answer: one netlink message.
pub fn parse_reply(b: &[u8]) -> Reply {
    let u32_at = |i: usize| {
        b.get(i..i + 4)
            .and_then(|s| s.try_into().ok())
            .map(u32::from_ne_bytes)
    };
    let u16_at = |i: usize| {
        b.get(i..i + 2)
            .and_then(|s| s.try_into().ok())
            .map(u16::from_ne_bytes)
    };
    let (Some(len), Some(kind), Some(seq)) = (u32_at(0), u16_at(4), u32_at(8)) else {
        return Reply::Malformed;
    };
    let len = len as usize;
    if len < abi::HEADER_LEN || len > b.len() {
        return Reply::Malformed;
    }
    match kind {
        abi::NLMSG_ERROR if len >= abi::HEADER_LEN + 4 => {
            let errno = u32_at(abi::HEADER_LEN).map_or(0, |e| (e as i32).wrapping_neg());
            if errno == abi::ENOENT {
                Reply::NotFound { seq }
            } else {
                Reply::Error { seq, errno }
            }
        }
        abi::SOCK_DIAG_BY_FAMILY if len >= abi::REPLY_LEN => {
            match (u32_at(abi::INODE_AT), u32_at(abi::WQUEUE_AT)) {
                (Some(inode), Some(wqueue)) => Reply::Queue { seq, inode, wqueue },
                _ => Reply::Malformed,
            }
        }
        _ => Reply::Malformed,
    }
}

/// What one question about a socket told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// Unsent and unacknowledged bytes (`write_seq - snd_una`).
    Queue(u32),
    /// Closed, or its addresses now belong to another socket (an orphaned
    /// socket, closed by this process but still sending, has inode 0).
    Gone,
}

/// A `NETLINK_SOCK_DIAG` socket, with a bound on each answer's wait.
pub(crate) fn open_diag() -> io::Result<Socket> {
    let diag = Socket::new(
        Domain::from(abi::AF_NETLINK),
        Type::DGRAM,
        Some(Protocol::from(abi::NETLINK_SOCK_DIAG)),
    )?;
    diag.set_read_timeout(Some(DIAG_ANSWER_LIMIT))?;
    Ok(diag)
}

/// The kernel answers at once; a missing answer is an error, not a hang.
const DIAG_ANSWER_LIMIT: Duration = Duration::from_secs(1);

/// Asks the kernel about `id`, as request `seq`. Unconnected, a netlink
/// socket sends to the kernel. Answers to earlier, timed-out requests are
/// skipped by their number.
fn query(diag: &Socket, id: &SocketId, seq: u32, buf: &mut [u8]) -> io::Result<Found> {
    use std::io::Read;
    diag.send(&request(id, seq))?;
    loop {
        let mut reader: &Socket = diag;
        let n = reader.read(buf)?;
        match parse_reply(&buf[..n]) {
            Reply::Queue { seq: s, .. }
            | Reply::NotFound { seq: s }
            | Reply::Error { seq: s, .. }
                if s != seq =>
            {
                continue;
            }
            Reply::Queue { inode, wqueue, .. } if u64::from(inode) == id.inode => {
                return Ok(Found::Queue(wqueue));
            }
            Reply::Queue { .. } | Reply::NotFound { .. } => return Ok(Found::Gone),
            Reply::Error { errno, .. } => return Err(io::Error::from_raw_os_error(errno)),
            Reply::Malformed => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "malformed sock_diag answer",
                ));
            }
        }
    }
}

/// The bytes the peer has acknowledged, at least: `written_before` (the
/// socket's write count read *before* the kernel was asked) minus its
/// `wqueue`. Bytes written between the two are in the queue but not in the
/// count, so this can only be low, never high.
pub fn acked_at_least(written_before: u64, wqueue: u32) -> u64 {
    written_before.saturating_sub(u64::from(wqueue))
}

/// Whether a response that ends at byte `end` of its connection has
/// drained, `acked` bytes of the connection being acknowledged.
pub fn is_drained(acked: u64, end: u64) -> bool {
    acked >= end
}

/// One connection's byte counts and where the kernel lists its socket.
#[derive(Debug, Default)]
pub struct SentBytes {
    /// The socket, as the kernel finds it; `None` where it cannot be
    /// watched.
    socket: Option<SocketId>,
    /// Bytes the connection's writer accepted from h2 (some may still be
    /// in the coalescing buffer).
    accepted: AtomicU64,
    /// Bytes written to the socket.
    written: AtomicU64,
    /// Over TLS: the last moment rustls held nothing back (`None` in
    /// plaintext, where both counts are in the same units).
    tls: Option<QuietPoint>,
}

/// The last moment a TLS connection's writer held no ciphertext back:
/// `plaintext` bytes had been encrypted and written, with `overhead` bytes
/// of TLS on top (handshake, record headers and tags, tickets).
#[derive(Debug, Default)]
struct QuietPoint {
    plaintext: AtomicU64,
    overhead: AtomicU64,
}

impl SentBytes {
    /// Counts for `stream` (Linux). Elsewhere, or if its addresses or
    /// inode cannot be read, nothing is watched.
    pub fn of(stream: &TcpStream) -> Arc<Self> {
        Arc::new(Self {
            socket: socket_of(stream),
            ..Self::default()
        })
    }

    /// Bytes accepted so far: where a response released now ends.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }

    /// Counts `n` bytes the connection's writer took from h2.
    pub fn add_accepted(&self, n: usize) {
        self.accepted.fetch_add(n as u64, Ordering::AcqRel);
    }

    fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Counts for `stream`, which will carry TLS: the socket's count is
    /// then converted to plaintext ([`Self::plaintext_acked`]).
    pub fn of_tls(stream: &TcpStream) -> Arc<Self> {
        Arc::new(Self {
            socket: socket_of(stream),
            tls: Some(QuietPoint::default()),
            ..Self::default()
        })
    }

    /// Records that rustls holds nothing back: `plaintext` bytes have gone
    /// through TLS, and every byte it made of them is on the socket. Call it
    /// only at such a moment (see [`crate::tls`]).
    pub fn tls_quiet(&self, plaintext: u64) {
        if let Some(point) = &self.tls {
            let overhead = self.written().saturating_sub(plaintext);
            // The overhead first: whoever reads the new plaintext count
            // (Acquire) reads this overhead or a later, larger one.
            point.overhead.fetch_max(overhead, Ordering::Relaxed);
            point.plaintext.fetch_max(plaintext, Ordering::Release);
        }
    }

    /// Plaintext bytes the peer has acknowledged, at least, when it has
    /// acknowledged `acked` bytes of the socket. In plaintext, `acked`.
    pub fn plaintext_acked(&self, acked: u64) -> u64 {
        match &self.tls {
            None => acked,
            Some(point) => {
                let plaintext = point.plaintext.load(Ordering::Acquire);
                let overhead = point.overhead.load(Ordering::Relaxed);
                tls_plaintext_acked(acked, plaintext, overhead)
            }
        }
    }
}

/// Plaintext bytes acknowledged, at least, when the peer has acknowledged
/// `acked` socket bytes and, at a quiet moment, `plaintext` bytes had gone
/// out with `overhead` bytes of TLS: each of those bytes ends at most
/// `overhead` past its plaintext offset, and nothing later is known yet.
pub fn tls_plaintext_acked(acked: u64, plaintext: u64, overhead: u64) -> u64 {
    acked.saturating_sub(overhead).min(plaintext)
}

#[cfg(target_os = "linux")]
fn socket_of(stream: &TcpStream) -> Option<SocketId> {
    use std::os::{fd::AsRawFd, unix::fs::MetadataExt};
    let (local, peer) = (stream.local_addr().ok()?, stream.peer_addr().ok()?);
    // The link is `socket:[INODE]`; stat through it gives the inode.
    let fd = stream.as_raw_fd();
    match std::fs::metadata(format!("/proc/self/fd/{fd}")) {
        Ok(meta) => Some(SocketId {
            local,
            peer,
            inode: meta.ino(),
        }),
        Err(e) => {
            warn_unavailable(&e);
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn socket_of(_: &TcpStream) -> Option<SocketId> {
    None
}

/// The socket under the coalescing buffer, counting the bytes written to
/// it into `SentBytes::written`. (The bytes accepted from h2 are counted
/// by [`crate::connection::Connection`], which sees each one it writes.)
#[derive(Debug)]
pub struct CountWrites<T> {
    inner: T,
    bytes: Arc<SentBytes>,
}

impl<T> CountWrites<T> {
    pub fn new(inner: T, bytes: Arc<SentBytes>) -> Self {
        Self { inner, bytes }
    }

    fn add(&self, n: usize) {
        self.bytes.written.fetch_add(n as u64, Ordering::AcqRel);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for CountWrites<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for CountWrites<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        this.add(n);
        Poll::Ready(Ok(n))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write_vectored(cx, bufs))?;
        this.add(n);
        Poll::Ready(Ok(n))
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// How the wait for a response to drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// The peer acknowledged every byte of it.
    Acked,
    /// The kernel no longer has the socket: closed.
    Gone,
    /// Not watched: not Linux, or `sock_diag` refused. Sent, as before.
    Unknown,
}

/// Waits until the peer has acknowledged the connection's bytes up to
/// `end`, calling `progressed` whenever it has acknowledged more.
pub async fn drained(bytes: &Arc<SentBytes>, end: u64, mut progressed: impl FnMut()) -> Drain {
    let Some(id) = bytes.socket else {
        return Drain::Unknown;
    };
    let inode = id.inode;
    let poller = poller();
    let mut published = poller.published.subscribe();
    let _waiting = poller.wait_for(id, bytes);
    let mut acked = 0;
    loop {
        match poller.state_of(inode) {
            None => return Drain::Unknown,
            Some(Watched { gone: true, .. }) => return Drain::Gone,
            Some(w) if is_drained(w.plaintext_acked, end) => return Drain::Acked,
            Some(w) => {
                if w.acked > acked {
                    acked = w.acked;
                    progressed();
                }
            }
        }
        if published.changed().await.is_err() {
            return Drain::Unknown;
        }
    }
}

/// The one thread that asks the kernel, and what it found.
struct Poller {
    /// The sockets some response waits on, by inode.
    sockets: Mutex<HashMap<u64, Watched>>,
    /// Signalled when a socket starts being waited on.
    someone_waits: Condvar,
    /// Bumped after a round of questions that found a socket gone or more
    /// of it acknowledged.
    published: watch::Sender<u64>,
    /// `sock_diag` was refused: nothing is watched any more.
    unavailable: AtomicBool,
}

/// A socket some response waits on.
#[derive(Debug, Clone)]
struct Watched {
    id: SocketId,
    bytes: Arc<SentBytes>,
    /// Responses waiting on it.
    waiters: usize,
    /// Bytes acknowledged, at least, as of the last answer: of the socket
    /// (send progress), and of what h2 handed over (what a response's end
    /// counts in); the same in plaintext.
    acked: u64,
    plaintext_acked: u64,
    gone: bool,
    /// When to ask next, and how long after that: doubled while the peer
    /// acknowledges nothing, up to [`QUIET_SOCKET_POLL`].
    next: Instant,
    interval: Duration,
}

/// Removes a waiter when its wait ends (or its task is dropped).
struct Waiting<'a> {
    poller: &'a Poller,
    inode: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut sockets = self.poller.lock();
        if let Some(w) = sockets.get_mut(&self.inode) {
            w.waiters -= 1;
            if w.waiters == 0 {
                sockets.remove(&self.inode);
            }
        }
    }
}

fn poller() -> &'static Poller {
    static POLLER: OnceLock<&'static Poller> = OnceLock::new();
    POLLER.get_or_init(|| {
        let poller: &'static Poller = Box::leak(Box::new(Poller {
            sockets: Mutex::new(HashMap::new()),
            someone_waits: Condvar::new(),
            published: watch::Sender::new(0),
            unavailable: AtomicBool::new(false),
        }));
        let started = std::thread::Builder::new()
            .name("kernel-queue".into())
            .spawn(move || poller.run());
        if let Err(e) = started {
            warn_unavailable(&e);
            poller.unavailable.store(true, Ordering::Release);
        }
        poller
    })
}

impl Poller {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        self.sockets.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_for(&self, id: SocketId, bytes: &Arc<SentBytes>) -> Waiting<'_> {
        let mut sockets = self.lock();
        let mut first = false;
        sockets
            .entry(id.inode)
            .or_insert_with(|| {
                first = true;
                Watched {
                    id,
                    bytes: Arc::clone(bytes),
                    waiters: 0,
                    acked: 0,
                    plaintext_acked: 0,
                    gone: false,
                    next: Instant::now() + KERNEL_QUEUE_POLL,
                    interval: KERNEL_QUEUE_POLL,
                }
            })
            .waiters += 1;
        drop(sockets);
        if first {
            self.someone_waits.notify_one();
        }
        Waiting {
            poller: self,
            inode: id.inode,
        }
    }

    /// `None` once `sock_diag` proved unavailable.
    fn state_of(&self, inode: u64) -> Option<Watched> {
        if self.unavailable.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(&inode).cloned()
    }

    /// Asks about each waited-on socket when it is due; sleeps on the
    /// condvar until the next is due, or while no one waits.
    fn run(&self) {
        let diag = match open_diag() {
            Ok(diag) => diag,
            Err(e) => return self.give_up(&e),
        };
        let mut buf = vec![0; 4096];
        let mut seq = 0_u32;
        loop {
            let due: Vec<(u64, SocketId, u64)> = {
                let mut sockets = self.lock();
                loop {
                    let now = Instant::now();
                    match sockets.values().map(|w| w.next).min() {
                        Some(next) if next <= now => break,
                        Some(next) => {
                            sockets = self
                                .someone_waits
                                .wait_timeout(sockets, next - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        None => {
                            sockets = self
                                .someone_waits
                                .wait(sockets)
                                .unwrap_or_else(|e| e.into_inner());
                        }
                    }
                }
                let now = Instant::now();
                // Each count before the question: see `acked_at_least`.
                sockets
                    .iter()
                    .filter(|(_, w)| w.next <= now)
                    .map(|(inode, w)| (*inode, w.id, w.bytes.written()))
                    .collect()
            };
            let mut answers = Vec::with_capacity(due.len());
            for (inode, id, written_before) in due {
                seq = seq.wrapping_add(1);
                match query(&diag, &id, seq, &mut buf) {
                    Ok(found) => answers.push((inode, written_before, found)),
                    Err(e) => return self.give_up(&e),
                }
            }
            let mut sockets = self.lock();
            let now = Instant::now();
            let mut changed = false;
            for (inode, written_before, found) in answers {
                let Some(w) = sockets.get_mut(&inode) else {
                    continue;
                };
                match found {
                    Found::Queue(wqueue) => {
                        let acked = acked_at_least(written_before, wqueue);
                        // Over TLS this can grow with no new acknowledgement:
                        // the writer became quiet after the count was read.
                        let plaintext_acked = w.bytes.plaintext_acked(w.acked.max(acked));
                        if plaintext_acked > w.plaintext_acked {
                            changed = true;
                            w.plaintext_acked = plaintext_acked;
                        }
                        w.interval = if acked > w.acked {
                            changed = true;
                            KERNEL_QUEUE_POLL
                        } else {
                            (w.interval * 2).min(QUIET_SOCKET_POLL)
                        };
                        w.acked = w.acked.max(acked);
                        w.next = now + w.interval;
                    }
                    Found::Gone => {
                        changed = true;
                        w.gone = true;
                    }
                }
            }
            drop(sockets);
            // Every waiting response looks again, so only when one may be
            // done or has progressed.
            if changed {
                self.published.send_modify(|n| *n += 1);
            }
        }
    }

    /// `sock_diag` failed: from now on every response counts as sent when
    /// h2 lets go of it.
    fn give_up(&self, e: &io::Error) {
        warn_unavailable(e);
        self.unavailable.store(true, Ordering::Release);
        self.published.send_modify(|n| *n += 1);
    }
}

/// Logs, once per process, that responses count as sent when h2 lets go.
fn warn_unavailable(e: &io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "cannot ask the kernel for its send queues ({e}): a response counts as sent once the kernel has taken it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(local: &str, peer: &str) -> SocketId {
        SocketId {
            local: local.parse().expect("address"),
            peer: peer.parse().expect("address"),
            inode: 48213,
        }
    }

    /// Given a loopback IPv4 socket, the request is `nlmsghdr` +
    /// `inet_diag_req_v2` for TCP in any state: its own side as the source,
    /// ports big-endian, no cookie.
    #[test]
    fn a_request_names_one_tcp_socket_by_its_addresses() {
        let b = request(&id("127.0.0.1:9180", "127.0.0.2:50000"), 7);
        assert_eq!(b.len(), 72);
        assert_eq!(b[0..4], 72_u32.to_ne_bytes(), "length");
        assert_eq!(b[4..6], 20_u16.to_ne_bytes(), "SOCK_DIAG_BY_FAMILY");
        assert_eq!(b[6..8], 1_u16.to_ne_bytes(), "NLM_F_REQUEST");
        assert_eq!(b[8..12], 7_u32.to_ne_bytes(), "sequence number");
        assert_eq!((b[16], b[17]), (2, 6), "AF_INET, IPPROTO_TCP");
        assert_eq!(b[20..24], [0xFF; 4], "every state");
        assert_eq!(b[24..28], [0x23, 0xDC, 0xC3, 0x50], "ports 9180, 50000");
        assert_eq!(
            b[28..44],
            [127, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(b[44..48], [127, 0, 0, 2]);
        assert_eq!(b[60..64], [0; 4], "any interface");
        assert_eq!(b[64..72], [0xFF; 8], "INET_DIAG_NOCOOKIE");
        let v6 = request(&id("[::1]:9180", "[::ffff:127.0.0.1]:50000"), 8);
        assert_eq!(v6[16], 10, "AF_INET6");
        assert_eq!(v6[28..44], std::net::Ipv6Addr::LOCALHOST.octets());
        assert_eq!(v6[54..60], [0xFF, 0xFF, 127, 0, 0, 1], "v4-mapped peer");
    }

    /// A reply of `len` bytes, of netlink type `kind`, numbered `seq`.
    fn reply(kind: u16, seq: u32, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        b[0..4].copy_from_slice(&(len as u32).to_ne_bytes());
        b[4..6].copy_from_slice(&kind.to_ne_bytes());
        b[8..12].copy_from_slice(&seq.to_ne_bytes());
        b
    }

    #[test]
    fn replies_give_the_queue_or_say_the_socket_is_gone() {
        let mut found = reply(20, 7, 88);
        found[76..80].copy_from_slice(&0x1F400_u32.to_ne_bytes());
        found[84..88].copy_from_slice(&48213_u32.to_ne_bytes());
        assert_eq!(
            parse_reply(&found),
            Reply::Queue {
                seq: 7,
                inode: 48213,
                wqueue: 0x1F400
            }
        );
        let mut gone = reply(2, 8, 36);
        gone[16..20].copy_from_slice(&(-2_i32).to_ne_bytes());
        assert_eq!(parse_reply(&gone), Reply::NotFound { seq: 8 });
        let mut refused = reply(2, 9, 36);
        refused[16..20].copy_from_slice(&(-1_i32).to_ne_bytes());
        assert_eq!(parse_reply(&refused), Reply::Error { seq: 9, errno: 1 });
    }

    /// Short, cut-off, over-long and unknown messages give `Malformed`, and
    /// no panic.
    #[test]
    fn malformed_replies_are_told_apart() {
        let mut says_longer = reply(20, 1, 88);
        says_longer[0..4].copy_from_slice(&200_u32.to_ne_bytes());
        for bad in [
            vec![],
            vec![0; 11],
            reply(20, 1, 16),
            reply(20, 1, 87),
            reply(2, 1, 19),
            reply(3, 1, 88),
            reply(20, 1, 88)[..40].to_vec(),
            says_longer,
        ] {
            assert_eq!(parse_reply(&bad), Reply::Malformed, "{bad:?}");
        }
    }

    /// Given two responses on one connection, the first ending at byte
    /// 1,000 and the second at 5,000, when 6,000 bytes have been written
    /// and 3,000 are still queued, then the first has drained and the
    /// second has not, though the queue is not empty; once the queue holds
    /// only bytes after 5,000, the second has drained too.
    #[test]
    fn responses_drain_in_turn_while_the_queue_is_never_empty() {
        let (first, second) = (1_000, 5_000);
        let acked = acked_at_least(6_000, 3_000);
        assert_eq!(acked, 3_000);
        assert!(is_drained(acked, first));
        assert!(!is_drained(acked, second));
        let acked = acked_at_least(9_000, 4_000);
        assert!(is_drained(acked, second));
        assert!(is_drained(acked_at_least(5_000, 0), second), "exactly");
        assert!(
            !is_drained(acked_at_least(5_000, 1), second),
            "one byte short"
        );
    }

    /// Given a TLS connection that, at its last quiet moment, had written
    /// 10,000 plaintext bytes with 3,000 bytes of TLS on top (13,000 on the
    /// socket), when the peer has acknowledged socket bytes, then the
    /// plaintext acknowledged is never more than the socket bytes minus the
    /// overhead, nor more than the plaintext known to be out: a response
    /// ending at plaintext byte 10,000 is drained only once all 13,000 are
    /// acknowledged, and one ending at 4,000 once 7,000 are.
    #[test]
    fn over_tls_a_response_drains_only_once_its_records_are_acknowledged() {
        let (plaintext, overhead) = (10_000, 3_000);
        let acked = |socket| tls_plaintext_acked(socket, plaintext, overhead);
        assert_eq!(acked(2_000), 0, "the handshake alone");
        assert!(!is_drained(acked(6_999), 4_000));
        assert!(is_drained(acked(7_000), 4_000));
        assert!(!is_drained(acked(12_999), 10_000));
        assert!(is_drained(acked(13_000), 10_000));
        // More socket bytes than the quiet moment covers: written since,
        // not yet known to be plaintext of ours.
        assert_eq!(acked(20_000), plaintext);
    }

    /// Bytes written after the count was read but before the kernel was
    /// asked can make the queue larger than the count: that is nothing
    /// acked.
    #[test]
    fn a_queue_larger_than_the_count_acks_nothing() {
        assert_eq!(acked_at_least(100, 500), 0);
        assert!(!is_drained(acked_at_least(100, 500), 1));
        assert!(is_drained(0, 0), "a response that wrote nothing");
    }

    /// The cost behind [`KERNEL_QUEUE_POLL`]: given 1,000 loopback
    /// connections (2,000 sockets), when the kernel is asked about each
    /// server-side socket 20 times, then every one is found each time; the
    /// time per question is printed, not asserted (a measurement, run by
    /// hand: `cargo test -p routing-server --release --lib -- --ignored
    /// --nocapture query_cost`).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    #[ignore = "opens 2,000 sockets and prints a measurement"]
    async fn query_cost_at_2000_sockets() {
        const PAIRS: usize = 1000;
        const ROUNDS: u32 = 20;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut pairs = Vec::with_capacity(PAIRS);
        for _ in 0..PAIRS {
            let client = TcpStream::connect(addr).await.expect("connect");
            let (server, _) = listener.accept().await.expect("accept");
            pairs.push((client, server));
        }
        let ids: Vec<SocketId> = pairs
            .iter()
            .map(|(_, server)| socket_of(server).expect("listed"))
            .collect();
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        let (cpu_before, started) = (cpu_ticks(), Instant::now());
        let mut seq = 0;
        for _ in 0..ROUNDS {
            for id in &ids {
                seq += 1;
                let found = query(&diag, id, seq, &mut buf).expect("answered");
                assert_eq!(found, Found::Queue(0), "found, nothing queued");
            }
        }
        let questions = ROUNDS * PAIRS as u32;
        let wall = started.elapsed() / questions;
        let cpu_us = (cpu_ticks() - cpu_before) as f64 * 10_000.0 / f64::from(questions);
        eprintln!("{questions} questions: {wall:?} per question (wall), {cpu_us:.1} µs CPU each");
    }

    /// This process's user + system CPU time, in clock ticks (1/100 s).
    #[cfg(target_os = "linux")]
    fn cpu_ticks() -> u64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let after_name = stat.rsplit_once(") ").expect("stat format").1;
        let fields: Vec<&str> = after_name.split_whitespace().collect();
        let tick = |i: usize| fields[i].parse::<u64>().expect("ticks");
        tick(11) + tick(12)
    }

    /// Given a loopback connection whose server side wrote 100 kB, when
    /// the kernel is asked before the client reads, then the socket is
    /// found by the addresses and inode taken at accept, with bytes queued;
    /// once the client has read them, the wait ends with every byte
    /// acknowledged; once the socket is closed, the kernel has it no more.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_socket_is_found_and_its_queue_drains() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let bytes = SentBytes::of(&server);
        let id = bytes.socket.expect("Linux lists the socket");
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        assert_eq!(
            query(&diag, &id, 1, &mut buf).expect("answered"),
            Found::Queue(0)
        );
        let mut server = CountWrites::new(server, Arc::clone(&bytes));
        server.write_all(&[7; 100_000]).await.expect("write");
        let mut read = vec![0; 100_000];
        client.read_exact(&mut read).await.expect("read");
        let drain = tokio::time::timeout(Duration::from_secs(10), drained(&bytes, 100_000, || {}))
            .await
            .expect("drained in time");
        assert_eq!(drain, Drain::Acked);
        drop((server, client));
        // Closed first, the server's side is in FIN_WAIT or TIME_WAIT: the
        // kernel still finds the addresses, but with no inode.
        assert_eq!(
            query(&diag, &id, 2, &mut buf).expect("answered"),
            Found::Gone
        );
    }

    /// Given a dual-stack listener (`[::]`) and clients on `::1` and on
    /// `127.0.0.1` (a v4-mapped peer), when the kernel is asked about each
    /// server-side socket, then both are found by their IPv6 addresses.
    /// Where this machine has no IPv6 loopback the test says so and passes.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn ipv6_and_v4_mapped_sockets_are_found() {
        let Ok(listener) = tokio::net::TcpListener::bind("[::]:0").await else {
            eprintln!("no IPv6 on this machine: nothing to check");
            return;
        };
        let port = listener.local_addr().expect("addr").port();
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        for (n, client_ip) in ["::1", "127.0.0.1"].into_iter().enumerate() {
            let Ok(client) = TcpStream::connect((client_ip, port)).await else {
                eprintln!("cannot reach the listener from {client_ip}: skipped");
                continue;
            };
            let (server, _) = listener.accept().await.expect("accept");
            let id = SentBytes::of(&server)
                .socket
                .expect("Linux lists the socket");
            assert!(id.local.is_ipv6(), "{id:?}");
            let seq = u32::try_from(n).expect("small") + 1;
            assert_eq!(
                query(&diag, &id, seq, &mut buf).expect("answered"),
                Found::Queue(0),
                "{client_ip}: {id:?}"
            );
            drop((server, client));
        }
    }
}
