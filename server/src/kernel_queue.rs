//! When a response's bytes have really reached the client: the kernel's
//! send queue of each connection, read from `/proc/net/tcp{,6}`.
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
//! Why `/proc` and not the ioctl: no crate in this workspace's lock file
//! wraps `SIOCOUTQ` or `TCP_INFO` safely (socket2 0.6, rustix 1.1 and nix
//! 0.32 do not), and the workspace forbids `unsafe`. The `tx_queue` column
//! of `/proc/net/tcp` and `/proc/net/tcp6` is the same number: the kernel
//! prints `write_seq - snd_una` there (`get_tcp4_sock`, `get_tcp6_sock`),
//! and `tcp_ioctl` returns it for `SIOCOUTQ`. A socket is found by its
//! inode, read once at accept from `/proc/self/fd/N`.
//!
//! Why acknowledged, not "left this machine" (unsent bytes only, what
//! `SIOCOUTQNSD` reports): `/proc` does not show the unsent part alone, and
//! acknowledged is the stronger promise. A byte in flight to a peer whose
//! receive buffer is full is not read either; the peer's kernel
//! acknowledges only what fits its receive buffer.
//!
//! Per response, not per connection: several responses can be in flight on
//! one connection, so its queue may never be empty. Each connection counts
//! the bytes it accepted from h2 ([`SentBytes::accepted`], above the
//! write-coalescing buffer) and the bytes it wrote to the socket
//! ([`SentBytes::written`], below it). A response ends at the first count
//! when it is released; it has drained once `written - tx_queue` (bytes the
//! peer has acknowledged) reaches that end ([`is_drained`]).
//!
//! Cost: one thread reads the tables, at most every
//! [`crate::knobs::KERNEL_QUEUE_POLL`], and only while some response waits
//! to drain; every waiting response shares each read.
//!
//! Elsewhere than Linux, or when `/proc/net/tcp` cannot be read (logged
//! once, at warn), a response counts as sent when h2 releases it, as before:
//! the send queue is then bounded only by `TCP_NOTSENT_LOWAT` and
//! `TCP_USER_TIMEOUT` ([`crate::connection`]).

use std::{
    collections::{HashMap, HashSet},
    io,
    pin::Pin,
    sync::{
        Arc, Condvar, Mutex, OnceLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    task::{Context, Poll, ready},
};

use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::watch,
};

use crate::knobs::KERNEL_QUEUE_POLL;

/// Which table lists a socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// `/proc/net/tcp`: IPv4 sockets.
    V4,
    /// `/proc/net/tcp6`: IPv6 sockets, IPv4-mapped peers of a dual-stack
    /// listener included.
    V6,
}

impl Table {
    fn path(self) -> &'static str {
        match self {
            Table::V4 => "/proc/net/tcp",
            Table::V6 => "/proc/net/tcp6",
        }
    }
}

/// One socket's row of `/proc/net/tcp{,6}`: the fields this module reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    pub inode: u64,
    /// Unsent and unacknowledged bytes (`write_seq - snd_una`).
    pub tx_queue: u32,
}

/// Parses one line of `/proc/net/tcp` or `/proc/net/tcp6`:
///
/// ```text
///    0: 0100007F:23DC 0100007F:C1A2 01 0001F400:00000000 01:00000014 00000000  1000  0 48213 ...
/// ```
///
/// Whitespace-separated: slot, local and remote address, state,
/// `tx_queue:rx_queue` in hex, timer, retransmits, uid, timeout, inode in
/// decimal. `None` for the header line or anything malformed.
pub fn parse_row(line: &str) -> Option<Row> {
    let mut fields = line.split_ascii_whitespace();
    let slot = fields.next()?;
    if !slot.ends_with(':') {
        return None;
    }
    let queues = fields.nth(3)?;
    let (tx, _rx) = queues.split_once(':')?;
    let tx_queue = u32::from_str_radix(tx, 16).ok()?;
    let inode = fields.nth(4)?.parse().ok()?;
    Some(Row { inode, tx_queue })
}

/// The bytes the peer has acknowledged, at least: `written_before` (the
/// socket's write count read *before* the table) minus the table's
/// `tx_queue`. Bytes written between the two reads are in the queue but
/// not in the count, so this can only be low, never high.
pub fn acked_at_least(written_before: u64, tx_queue: u32) -> u64 {
    written_before.saturating_sub(u64::from(tx_queue))
}

/// Whether a response that ends at byte `end` of its connection has
/// drained, `acked` bytes of the connection being acknowledged.
pub fn is_drained(acked: u64, end: u64) -> bool {
    acked >= end
}

/// One connection's byte counts and where the kernel lists its socket.
#[derive(Debug, Default)]
pub struct SentBytes {
    /// The socket's table and inode; `None` where it cannot be watched.
    socket: Option<(Table, u64)>,
    /// Bytes the connection's writer accepted from h2 (some may still be
    /// in the coalescing buffer).
    accepted: AtomicU64,
    /// Bytes written to the socket.
    written: AtomicU64,
}

impl SentBytes {
    /// Counts for `stream`, found in its table by inode (Linux). Elsewhere,
    /// or if `/proc/self/fd` cannot tell the inode, nothing is watched.
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

    fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }
}

#[cfg(target_os = "linux")]
fn socket_of(stream: &TcpStream) -> Option<(Table, u64)> {
    use std::os::{fd::AsRawFd, unix::fs::MetadataExt};
    let table = match stream.local_addr().ok()? {
        std::net::SocketAddr::V4(_) => Table::V4,
        std::net::SocketAddr::V6(_) => Table::V6,
    };
    // The link is `socket:[INODE]`; stat through it gives the same inode.
    let fd = stream.as_raw_fd();
    match std::fs::metadata(format!("/proc/self/fd/{fd}")) {
        Ok(meta) => Some((table, meta.ino())),
        Err(e) => {
            warn_unavailable(&e);
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn socket_of(_: &TcpStream) -> Option<(Table, u64)> {
    None
}

/// Which count a [`CountWrites`] adds to.
#[derive(Debug, Clone, Copy)]
pub enum Count {
    Accepted,
    Written,
}

/// An IO that counts the bytes written through it into [`SentBytes`].
#[derive(Debug)]
pub struct CountWrites<T> {
    inner: T,
    bytes: Arc<SentBytes>,
    count: Count,
}

impl<T> CountWrites<T> {
    pub fn new(inner: T, bytes: Arc<SentBytes>, count: Count) -> Self {
        Self {
            inner,
            bytes,
            count,
        }
    }

    fn add(&self, n: usize) {
        let counter = match self.count {
            Count::Accepted => &self.bytes.accepted,
            Count::Written => &self.bytes.written,
        };
        counter.fetch_add(n as u64, Ordering::AcqRel);
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
    /// The socket is no longer in its table: closed (an orphaned socket is
    /// listed with inode 0).
    Gone,
    /// Not watched: not Linux, or `/proc` unreadable. Sent, as before.
    Unknown,
}

/// Waits until the peer has acknowledged the connection's bytes up to
/// `end`, calling `progressed` whenever it has acknowledged more.
pub async fn drained(bytes: &Arc<SentBytes>, end: u64, mut progressed: impl FnMut()) -> Drain {
    let Some((table, inode)) = bytes.socket else {
        return Drain::Unknown;
    };
    let poller = poller();
    let mut published = poller.published.subscribe();
    let _waiting = poller.wait_for(table, inode, bytes);
    let mut acked = 0;
    loop {
        match poller.state_of(inode) {
            None => return Drain::Unknown,
            Some(Watched { gone: true, .. }) => return Drain::Gone,
            Some(w) if is_drained(w.acked, end) => return Drain::Acked,
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

/// The one thread that reads the tables, and what it found.
struct Poller {
    sockets: Mutex<HashMap<u64, Watched>>,
    /// Signalled when the first socket starts waiting.
    someone_waits: Condvar,
    /// Bumped after every read of the tables.
    published: watch::Sender<u64>,
    /// `/proc` could not be read: nothing is watched any more.
    unavailable: AtomicBool,
}

/// A socket some response waits on.
#[derive(Debug, Clone)]
struct Watched {
    table: Table,
    bytes: Arc<SentBytes>,
    /// Responses waiting on it.
    waiters: usize,
    /// Bytes acknowledged, at least, as of the last read.
    acked: u64,
    gone: bool,
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

    fn wait_for(&self, table: Table, inode: u64, bytes: &Arc<SentBytes>) -> Waiting<'_> {
        let mut sockets = self.lock();
        let first = sockets.is_empty();
        sockets
            .entry(inode)
            .or_insert_with(|| Watched {
                table,
                bytes: Arc::clone(bytes),
                waiters: 0,
                acked: 0,
                gone: false,
            })
            .waiters += 1;
        drop(sockets);
        if first {
            self.someone_waits.notify_one();
        }
        Waiting {
            poller: self,
            inode,
        }
    }

    /// `None` once `/proc` proved unreadable.
    fn state_of(&self, inode: u64) -> Option<Watched> {
        if self.unavailable.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(&inode).cloned()
    }

    /// Reads the tables while anyone waits, at most every
    /// [`KERNEL_QUEUE_POLL`]; sleeps on the condvar while no one does.
    fn run(&self) {
        let mut text = String::new();
        loop {
            let wanted: Vec<(u64, Table, u64)> = {
                let mut sockets = self.lock();
                while sockets.is_empty() {
                    sockets = self
                        .someone_waits
                        .wait(sockets)
                        .unwrap_or_else(|e| e.into_inner());
                }
                // Each count before the table: see `acked_at_least`.
                sockets
                    .iter()
                    .map(|(inode, w)| (*inode, w.table, w.bytes.written()))
                    .collect()
            };
            match read_queues(&wanted, &mut text) {
                Ok(found) => {
                    let mut sockets = self.lock();
                    for (inode, _, written_before) in &wanted {
                        let Some(w) = sockets.get_mut(inode) else {
                            continue;
                        };
                        match found.get(inode) {
                            Some(tx_queue) => {
                                w.acked = w.acked.max(acked_at_least(*written_before, *tx_queue));
                            }
                            None => w.gone = true,
                        }
                    }
                }
                Err(e) => {
                    warn_unavailable(&e);
                    self.unavailable.store(true, Ordering::Release);
                    self.published.send_modify(|n| *n += 1);
                    return;
                }
            }
            self.published.send_modify(|n| *n += 1);
            std::thread::sleep(KERNEL_QUEUE_POLL);
        }
    }
}

/// The `tx_queue` of each wanted inode found in its table. Reads only the
/// tables some wanted socket is in, into `text`, reused between reads.
fn read_queues(wanted: &[(u64, Table, u64)], text: &mut String) -> io::Result<HashMap<u64, u32>> {
    use std::io::Read;
    let inodes: HashSet<u64> = wanted.iter().map(|(inode, _, _)| *inode).collect();
    let mut found = HashMap::with_capacity(wanted.len());
    for table in [Table::V4, Table::V6] {
        if !wanted.iter().any(|(_, t, _)| *t == table) {
            continue;
        }
        text.clear();
        std::fs::File::open(table.path())?.read_to_string(text)?;
        for row in text.lines().filter_map(parse_row) {
            if inodes.contains(&row.inode) {
                found.insert(row.inode, row.tx_queue);
            }
        }
    }
    Ok(found)
}

/// Logs, once per process, that responses count as sent when h2 lets go.
fn warn_unavailable(e: &io::Error) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "cannot read the kernel's send queues from /proc ({e}): a response counts as sent once the kernel has taken it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode";
    const V4: &str = "   3: 0100007F:23DC 0100007F:C1A2 01 0001F400:00000000 01:00000014 00000000  1000        0 48213 1 0000000000000000 20 4 30 10 -1";
    const V6: &str = "   0: 00000000000000000000000001000000:23DC 00000000000000000000000001000000:D3C2 01 00000000:00000000 00:00000000 00000000  1000        0 77001 1 0000000000000000 20 4 31 10 -1";
    /// A socket closed by its process but still sending: no inode.
    const ORPHAN: &str = "   7: 0100007F:23DC 0100007F:C1A6 04 00000400:00000000 01:00000014 00000000     0        0 0 1 0000000000000000 20 4 30 10 -1";

    #[test]
    fn rows_give_inode_and_send_queue() {
        assert_eq!(
            parse_row(V4),
            Some(Row {
                inode: 48213,
                tx_queue: 0x1F400
            })
        );
        assert_eq!(
            parse_row(V6),
            Some(Row {
                inode: 77001,
                tx_queue: 0
            })
        );
        assert_eq!(parse_row(ORPHAN).map(|r| r.inode), Some(0));
    }

    /// The header, blank and cut-off lines, and garbage give no row and no
    /// panic.
    #[test]
    fn malformed_lines_give_no_row() {
        for bad in [
            HEADER,
            "",
            "   ",
            "   3:",
            "   3: 0100007F:23DC 0100007F:C1A2 01",
            "   3: 0100007F:23DC 0100007F:C1A2 01 0001F400",
            "   3: 0100007F:23DC 0100007F:C1A2 01 XYZ:00000000 01:00000014 00000000  1000 0 48213",
            "   3: 0100007F:23DC 0100007F:C1A2 01 0001F400:00000000 01:00000014 00000000  1000 0",
            "   3: 0100007F:23DC 0100007F:C1A2 01 0001F400:00000000 01:00000014 00000000  1000 0 -5",
            "3 0100007F:23DC 0100007F:C1A2 01 0001F400:00000000 01:00000014 00000000  1000 0 48213",
            "   3: 0100007F:23DC 0100007F:C1A2 01 1FFFFFFFF:0 01:00000014 00000000  1000 0 48213",
            "é: ü ö ä ß",
        ] {
            assert_eq!(parse_row(bad), None, "{bad:?}");
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

    /// Bytes written after the count was read but before the table was
    /// can make the queue larger than the count: that is nothing acked.
    #[test]
    fn a_queue_larger_than_the_count_acks_nothing() {
        assert_eq!(acked_at_least(100, 500), 0);
        assert!(!is_drained(acked_at_least(100, 500), 1));
        assert!(is_drained(0, 0), "a response that wrote nothing");
    }

    /// The cost behind [`KERNEL_QUEUE_POLL`]: given 1,000 loopback
    /// connections (2,000 sockets in `/proc/net/tcp`), all waited on, when
    /// the table is read 500 times, then every socket is found each time;
    /// the time per read is printed, not asserted (a measurement, run by
    /// hand: `cargo test -p routing-server --release --lib -- --ignored
    /// --nocapture table_read_cost`).
    #[cfg(target_os = "linux")]
    #[tokio::test]
    #[ignore = "opens 2,000 sockets and prints a measurement"]
    async fn table_read_cost_at_2000_sockets() {
        const PAIRS: usize = 1000;
        const READS: u32 = 500;
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
        let wanted: Vec<(u64, Table, u64)> = pairs
            .iter()
            .map(|(_, server)| {
                let (table, inode) = socket_of(server).expect("listed");
                (inode, table, 0)
            })
            .collect();
        let mut text = String::new();
        let (cpu_before, started) = (cpu_ticks(), std::time::Instant::now());
        for _ in 0..READS {
            let found = read_queues(&wanted, &mut text).expect("readable");
            assert_eq!(found.len(), PAIRS, "every waited-on socket is found");
        }
        let wall = started.elapsed() / READS;
        let cpu_ms = (cpu_ticks() - cpu_before) as f64 * 10.0 / f64::from(READS);
        eprintln!(
            "{} lines, {} bytes in /proc/net/tcp: {wall:?} per read (wall), {cpu_ms:.2} ms CPU per read",
            text.lines().count(),
            text.len()
        );
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

    /// Given a loopback connection whose server side wrote 100 kB that the
    /// client has read, when its table is read, then the socket is found by
    /// the inode taken at accept, and everything is acknowledged.
    #[cfg(target_os = "linux")]
    #[tokio::test]
    async fn a_socket_is_found_by_its_inode() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let bytes = SentBytes::of(&server);
        let (table, inode) = bytes.socket.expect("Linux lists the socket");
        assert_eq!(table, Table::V4);
        let mut server = CountWrites::new(server, Arc::clone(&bytes), Count::Written);
        server.write_all(&[7; 100_000]).await.expect("write");
        let mut read = vec![0; 100_000];
        client.read_exact(&mut read).await.expect("read");
        let drain = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            drained(&bytes, 100_000, || {}),
        )
        .await
        .expect("drained in time");
        assert_eq!(drain, Drain::Acked);
        let mut text = String::new();
        let found = read_queues(&[(inode, table, 0)], &mut text).expect("readable");
        assert!(found.contains_key(&inode));
        drop((server, client));
    }
}
