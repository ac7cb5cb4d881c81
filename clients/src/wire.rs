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
};

/// Counters shared by every connection a [`CountingConnector`] opens.
#[derive(Debug, Default)]
struct Counters {
    connections: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
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
}

impl WireSnapshot {
    /// What happened between `earlier` and `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            connections: self.connections - earlier.connections,
            bytes_read: self.bytes_read - earlier.bytes_read,
            bytes_written: self.bytes_written - earlier.bytes_written,
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
}

impl CountingConnector {
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the counters.
    pub fn snapshot(&self) -> WireSnapshot {
        WireSnapshot {
            connections: self.counters.connections.load(Ordering::Relaxed),
            bytes_read: self.counters.bytes_read.load(Ordering::Relaxed),
            bytes_written: self.counters.bytes_written.load(Ordering::Relaxed),
        }
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
            counters.connections.fetch_add(1, Ordering::Relaxed);
            tracing::debug!(%uri, local = ?stream.local_addr().ok(), "connection opened");
            Ok(TokioIo::new(CountingStream {
                inner: stream,
                counters,
            }))
        })
    }
}

/// A TCP stream that adds every byte it moves to the shared counters.
#[derive(Debug)]
pub struct CountingStream {
    inner: TcpStream,
    counters: Arc<Counters>,
}

impl AsyncRead for CountingStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = (buf.filled().len() - before) as u64;
        self.counters.bytes_read.fetch_add(read, Ordering::Relaxed);
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
        self.count_written(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count_written(&polled);
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
    fn count_written(&self, polled: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = polled {
            self.counters
                .bytes_written
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tower::ServiceExt;

    use super::*;

    /// Given an echo server, when 5 bytes go out and come back on each of two
    /// connections, then the counters say 2 connections, 10 bytes each way.
    #[tokio::test]
    async fn counts_connections_and_bytes_both_ways() {
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

        let connector = CountingConnector::new();
        for _ in 0..2 {
            let uri: Uri = format!("http://{addr}").parse().expect("uri");
            let mut io = connector
                .clone()
                .oneshot(uri)
                .await
                .expect("connect")
                .into_inner();
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
                bytes_written: 10
            }
        );
        assert_eq!(seen.since(seen), WireSnapshot::default());
    }
}
