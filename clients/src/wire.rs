//! A connector that counts what crosses the wire.
//!
//! tonic dials through any `tower::Service<Uri>` that yields a byte stream
//! (`Endpoint::connect_with_connector`). This one opens a plain TCP stream and
//! wraps it so every byte read and written, and every connection opened, is
//! counted. The clients report these counts, so their claims (one connection,
//! gzip bytes, idle PING bytes) are measured, not assumed.
//!
//! The counts include everything on the connection: the HTTP/2 preface,
//! SETTINGS, HEADERS, DATA and PING frames.
//!
//! Both directions also pass through a [`FrameTracker`], which counts PING
//! frames and keeps the first GOAWAY a server sends, with its error code and
//! debug data, and follows the receive windows the client grants
//! ([`crate::windows`]): tonic reports none of these.
//!
//! With `--tls-ca` ([`CountingConnector::with_tls`]) the connector also
//! runs the TLS handshake, between the two: bytes are counted below TLS, at
//! the socket (so the counts include the handshake and each record's
//! header and tag), and frames are followed above it, in plaintext.
//!
//! [`CountingConnector::with_link`] routes every connection through an
//! emulated [`Link`](crate::link::Link). The counting sits on the client's
//! side of the link, so the counts are still what crosses the wire: bytes
//! sent as the client sends them, bytes received as they arrive.

use std::{
    future::Future,
    io,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use http::Uri;
use hyper_util::rt::TokioIo;
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::watch,
};
use tokio_util::either::Either;

use h2_frames::{Frame, FrameTracker, GoAway, flag, kind};

use crate::{
    link::{Link, LinkedStream, SharedLink},
    tls::ClientTls,
    windows::{
        SETTINGS_KEPT_BYTES, SharedWindows, WINDOW_UPDATE_KEPT_BYTES, WindowTracker, WindowsGranted,
    },
};

/// GOAWAY payload bytes kept: the 8 fixed bytes and up to 256 bytes of
/// debug data, enough for any reason a server gives.
const GOAWAY_KEPT_BYTES: usize = 8 + 256;

/// Counters shared by every connection a [`CountingConnector`] opens.
#[derive(Debug)]
struct Counters {
    connections: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    pings_sent: AtomicU64,
    pings_received: AtomicU64,
    /// GOAWAY frames received, on every connection (a graceful close sends two).
    goaways_received: AtomicU64,
    /// The first GOAWAY any connection received; waiters subscribe to it.
    goaway: watch::Sender<Option<GoAwayReceived>>,
    windows: SharedWindows,
}

impl Default for Counters {
    fn default() -> Self {
        Self {
            connections: AtomicU64::default(),
            bytes_read: AtomicU64::default(),
            bytes_written: AtomicU64::default(),
            pings_sent: AtomicU64::default(),
            pings_received: AtomicU64::default(),
            goaways_received: AtomicU64::default(),
            goaway: watch::Sender::new(None),
            windows: SharedWindows::default(),
        }
    }
}

/// A GOAWAY from the server, and how many PINGs its connection had sent by then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAwayReceived {
    /// The frame: error code and debug data.
    pub frame: GoAway,
    /// PINGs (not acks) this connection had written when the GOAWAY arrived.
    pub pings_sent_before: u64,
}

/// The counters at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireSnapshot {
    /// TCP connections opened so far.
    pub connections: u64,
    /// Bytes received from the server.
    pub bytes_read: u64,
    /// Bytes sent to the server.
    pub bytes_written: u64,
    /// PING frames sent to the server, not counting acks of its PINGs.
    pub pings_sent: u64,
    /// PING frames received from the server, not counting acks of ours.
    pub pings_received: u64,
}

impl WireSnapshot {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            connections: self.connections - earlier.connections,
            bytes_read: self.bytes_read - earlier.bytes_read,
            bytes_written: self.bytes_written - earlier.bytes_written,
            pings_sent: self.pings_sent - earlier.pings_sent,
            pings_received: self.pings_received - earlier.pings_received,
        }
    }
}

/// Dials TCP and counts connections and bytes. Clones share the counters.
///
/// tonic does not apply `Endpoint::tcp_nodelay` or `tcp_keepalive` to custom
/// connectors, so TCP_NODELAY is set here: without it a small request can sit
/// in the kernel for ~40 ms (Nagle's algorithm meeting delayed ACKs).
#[derive(Debug, Clone, Default)]
pub struct CountingConnector {
    counters: Arc<Counters>,
    /// The emulated link every connection goes through; `None`: none.
    link: Option<SharedLink>,
    /// TLS over every connection; `None`: plaintext.
    tls: Option<ClientTls>,
}

impl CountingConnector {
    pub fn new() -> Self {
        Self::default()
    }

    /// A connector whose connections all go through one emulated `link`:
    /// set-up costs its round trip, and they share its rate, as flows on one
    /// real link do (clones share it too). [`Link::LOCAL`] adds nothing.
    pub fn with_link(link: Link) -> Self {
        Self {
            counters: Arc::default(),
            link: (!link.is_local()).then(|| SharedLink::new(link)),
            tls: None,
        }
    }

    /// The same connector, speaking TLS on every connection it opens.
    pub fn with_tls(mut self, tls: Option<ClientTls>) -> Self {
        self.tls = tls;
        self
    }

    /// The link's settings ([`Link::LOCAL`] without one).
    pub fn link(&self) -> Link {
        self.link.as_ref().map_or(Link::LOCAL, SharedLink::link)
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> WireSnapshot {
        WireSnapshot {
            connections: self.counters.connections.load(Ordering::Relaxed),
            bytes_read: self.counters.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.counters.bytes_written.load(Ordering::Relaxed),
            pings_sent: self.counters.pings_sent.load(Ordering::Relaxed),
            pings_received: self.counters.pings_received.load(Ordering::Relaxed),
        }
    }

    /// The receive windows this connector's connections granted, read from
    /// their SETTINGS and WINDOW_UPDATE frames, and the DATA received.
    pub fn windows(&self) -> WindowsGranted {
        self.counters.windows.snapshot()
    }

    /// GOAWAY frames received so far, on every connection. A graceful
    /// close (h2's, grpc-go's) sends two, but a client with no call open
    /// may close after the first, and then sees one.
    pub fn goaways_received(&self) -> u64 {
        self.counters.goaways_received.load(Ordering::Relaxed)
    }

    /// The first GOAWAY a connection of this connector received, if any yet.
    pub fn goaway(&self) -> Option<GoAwayReceived> {
        self.counters.goaway.borrow().clone()
    }

    /// Waits for the first GOAWAY. Bound the wait: a server may never send one.
    pub async fn goaway_received(&self) -> GoAwayReceived {
        let mut first = self.counters.goaway.subscribe();
        // The sender lives as long as `self`, so the wait cannot fail.
        let seen = first.wait_for(Option::is_some).await;
        seen.ok()
            .and_then(|goaway| goaway.clone())
            .expect("the GOAWAY sender outlives this borrow")
    }
}

impl tower::Service<Uri> for CountingConnector {
    type Response = TokioIo<CountingStream>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let counters = self.counters.clone();
        let link = self.link.clone();
        let tls = self.tls.clone();
        Box::pin(async move {
            let invalid = || {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("no host:port in {uri}"),
                )
            };
            let host = uri.host().ok_or_else(invalid)?;
            // IPv6 literals arrive bracketed ("[::1]"); the resolver wants them bare.
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().ok_or_else(invalid)?;
            let stream = TcpStream::connect((host, port)).await?;
            stream.set_nodelay(true)?;
            tracing::debug!(%uri, local = ?stream.local_addr().ok(), "connection opened");
            let wire = match link {
                None => Either::Left(stream),
                Some(link) => Either::Right(link.connect(stream).await),
            };
            let socket = SocketCount {
                inner: wire,
                counters: Arc::clone(&counters),
            };
            let inner = match tls {
                None => Either::Left(socket),
                Some(tls) => Either::Right(Box::new(tls.connect(socket).await?)),
            };
            counters.connections.fetch_add(1, Ordering::Relaxed);
            Ok(TokioIo::new(CountingStream {
                inner,
                counters,
                inbound: FrameTracker::server_to_client().keeping(kind::GOAWAY, GOAWAY_KEPT_BYTES),
                outbound: FrameTracker::client_to_server()
                    .keeping(kind::SETTINGS, SETTINGS_KEPT_BYTES)
                    .keeping(kind::WINDOW_UPDATE, WINDOW_UPDATE_KEPT_BYTES),
                pings_sent: 0,
                windows: WindowTracker::default(),
            }))
        })
    }
}

/// A connection that follows the frames in both directions; the socket
/// below it adds every byte it moves to the shared counters.
#[derive(Debug)]
pub struct CountingStream {
    inner: Transport,
    counters: Arc<Counters>,
    inbound: FrameTracker,
    outbound: FrameTracker,
    /// PINGs this connection has written, for the GOAWAY record.
    pings_sent: u64,
    windows: WindowTracker,
}

/// What a counted connection runs on: the TCP stream itself (`Left`), or
/// the near side of an emulated link in front of it (`Right`).
type Wire = Either<TcpStream, LinkedStream>;

/// The socket (or link) with its bytes counted as they cross it.
#[derive(Debug)]
struct SocketCount {
    inner: Wire,
    counters: Arc<Counters>,
}

/// What the frames are read from and written to: the counted socket
/// (`Left`), or TLS over it (`Right`). TLS sits above the count, so the
/// counters see the bytes TLS puts on the wire, records and all.
type Transport = Either<SocketCount, Box<tokio_rustls::client::TlsStream<SocketCount>>>;

impl AsyncRead for SocketCount {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        this.counters
            .bytes_read
            .fetch_add(read as u64, Ordering::Relaxed);
        polled
    }
}

impl AsyncWrite for SocketCount {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.count_written(&polled);
        polled
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.count_written(&polled);
        polled
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

impl SocketCount {
    fn count_written(&self, polled: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = polled {
            self.counters
                .bytes_written
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

impl AsyncRead for CountingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = &buf.filled()[before..];
        let this = &mut *self;
        let (counters, pings_sent, windows) = (&this.counters, this.pings_sent, &mut this.windows);
        this.inbound
            .feed(read, |frame: Frame<'_>| match frame.header.kind {
                kind::DATA => windows.received(frame, &counters.windows),
                kind::PING if !frame.header.has(flag::ACK) => {
                    counters.pings_received.fetch_add(1, Ordering::Relaxed);
                }
                kind::GOAWAY => {
                    counters.goaways_received.fetch_add(1, Ordering::Relaxed);
                    let Some(frame) = GoAway::parse(frame.kept) else {
                        return;
                    };
                    tracing::debug!(?frame, "GOAWAY received");
                    let received = GoAwayReceived {
                        frame,
                        pings_sent_before: pings_sent,
                    };
                    // Keep the first: a later one (e.g. at close) must not hide it.
                    counters.goaway.send_if_modified(|first| {
                        first.is_none() && first.replace(received).is_none()
                    });
                }
                _ => {}
            });
        polled
    }
}

impl AsyncWrite for CountingStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = polled {
            self.written(&[io::IoSlice::new(buf)], n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.written(bufs, n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl CountingStream {
    /// Follows the frames in the first `n` bytes of `bufs`: what the
    /// transport accepted (the socket counts its own bytes).
    fn written(&mut self, bufs: &[io::IoSlice<'_>], n: usize) {
        let mut left = n;
        for buf in bufs {
            if left == 0 {
                break;
            }
            let taken = left.min(buf.len());
            left -= taken;
            let (counters, pings_sent, windows) =
                (&self.counters, &mut self.pings_sent, &mut self.windows);
            self.outbound.feed(&buf[..taken], |frame: Frame<'_>| {
                if frame.header.kind == kind::PING && !frame.header.has(flag::ACK) {
                    *pings_sent += 1;
                    counters.pings_sent.fetch_add(1, Ordering::Relaxed);
                }
                windows.sent(frame, &counters.windows);
            });
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tower::ServiceExt;

    use super::*;

    /// An echo server on a free loopback port that serves every connection.
    pub(crate) async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = socket.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    /// Opens one connection through `connector`, as tonic would.
    async fn dial(connector: &CountingConnector, addr: SocketAddr) -> CountingStream {
        let uri: Uri = format!("http://{addr}").parse().expect("uri");
        connector
            .clone()
            .oneshot(uri)
            .await
            .expect("connect")
            .into_inner()
    }

    /// Given an echo server, when 5 bytes go out and come back on each of two
    /// connections, then the counters say 2 connections, 10 bytes each way.
    #[tokio::test]
    async fn counts_connections_and_bytes_both_ways() {
        let addr = echo_server().await;
        let connector = CountingConnector::new();
        for _ in 0..2 {
            let mut io = dial(&connector, addr).await;
            io.write_all(b"hello").await.expect("write");
            let mut echoed = [0u8; 5];
            io.read_exact(&mut echoed).await.expect("read");
            assert_eq!(&echoed, b"hello");
        }

        let seen = connector.snapshot();
        assert_eq!(
            seen,
            WireSnapshot {
                connections: 2,
                bytes_read: 10,
                bytes_written: 10,
                pings_sent: 0,
                pings_received: 0,
            }
        );
        assert_eq!(seen.since(seen), WireSnapshot::default());
        assert_eq!(connector.goaway(), None);
    }

    /// Given a server that answers the preface with a PING, a PING ack and a
    /// GOAWAY too_many_pings, written a few bytes at a time, when a client
    /// sends its preface and two PINGs, then the connector counts two PINGs
    /// sent, one received, and reports the GOAWAY with the two PINGs before it.
    #[tokio::test]
    async fn sees_pings_and_the_goaway_through_split_reads() {
        use h2_frames::{PREFACE as CLIENT_PREFACE, Reason};

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ping = |flags: u8| [&[0, 0, 8, 6, flags, 0, 0, 0, 0][..], &[0; 8]].concat();
        let client_bytes = [CLIENT_PREFACE.as_slice(), &ping(0), &ping(0)].concat();
        let expected_len = client_bytes.len();
        let mut goaway = vec![0, 0, 22, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xb];
        goaway.extend_from_slice(b"too_many_pings");
        let server_bytes = [ping(0), ping(1), goaway].concat();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            // Wait for the client's PINGs, so the GOAWAY comes after them.
            let mut received = vec![0; expected_len];
            socket
                .read_exact(&mut received)
                .await
                .expect("client bytes");
            for piece in server_bytes.chunks(4) {
                socket.write_all(piece).await.expect("write");
                socket.flush().await.expect("flush");
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });

        let connector = CountingConnector::new();
        let mut io = dial(&connector, addr).await;
        io.write_all(&client_bytes).await.expect("write");
        // The tracker sees what is read, as hyper would read it; the server
        // closes after its last byte.
        let mut from_server = Vec::new();
        io.read_to_end(&mut from_server).await.expect("read");
        let goaway = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            connector.goaway_received(),
        )
        .await
        .expect("the GOAWAY was recorded");

        assert_eq!(goaway.frame.error_code, Reason::ENHANCE_YOUR_CALM);
        assert!(goaway.frame.is_too_many_pings(), "{goaway:?}");
        assert_eq!(goaway.pings_sent_before, 2);
        let seen = connector.snapshot();
        assert_eq!((seen.pings_sent, seen.pings_received), (2, 1));
        assert_eq!(connector.goaway(), Some(goaway));
    }
}
