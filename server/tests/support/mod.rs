//! Helpers shared by the server's integration tests: start a server on a free
//! loopback port, and speak raw HTTP/2 when a test must see the wire itself.

#![allow(dead_code)] // Each test file uses a different subset.

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    task::{Context, Poll},
};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2_frames::{FrameTracker, GoAway, Reason, kind};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use routing_clients::sample_quote_request;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_server::{Config, LocalServer};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
};
use tonic::transport::Channel;

pub const MIB: usize = 1024 * 1024;
pub const GET_QUOTE: &str = routing_contracts::GET_QUOTE;
pub const LIST_ROUTES: &str = routing_contracts::LIST_ROUTES;

/// Sets how many workers serve every test server: a whole number of at
/// least 1. Unset, it is 1, or 2 in the [`SEVERAL_WORKERS_SUITE`].
pub const WORKERS_ENV: &str = "ROUTING_TEST_WORKERS";

/// The test crate (`server/tests/two_workers.rs`) that runs the hardening,
/// shutdown and contract suites again with two workers, so that
/// `cargo test` alone runs them both ways.
pub const SEVERAL_WORKERS_SUITE: &str = "two_workers";

/// Workers for the servers these tests start (see [`WORKERS_ENV`]). A test
/// that sets `worker_threads` itself keeps its own.
pub fn workers() -> usize {
    if let Ok(text) = std::env::var(WORKERS_ENV) {
        return match text.trim().parse() {
            Ok(n) if n >= 1 => n,
            _ => panic!("{WORKERS_ENV}={text:?}: expected a whole number of at least 1"),
        };
    }
    if env!("CARGO_CRATE_NAME") == SEVERAL_WORKERS_SUITE {
        2
    } else {
        1
    }
}

/// A server with the chapter's settings on `127.0.0.1:0`.
pub async fn start() -> LocalServer {
    start_with(Config::default()).await
}

/// A server with `config` on `127.0.0.1:0`, served by [`workers`] workers
/// unless `config` names its own number.
pub async fn start_with(mut config: Config) -> LocalServer {
    config.worker_threads = config.worker_threads.or_else(|| Some(workers()));
    LocalServer::start(config).await.expect("server starts")
}

/// A plain tonic client: every tonic default, including the 4 MiB decode cap.
pub async fn client(server: &LocalServer) -> RoutingServiceClient<Channel> {
    RoutingServiceClient::new(channel(server).await)
}

pub async fn channel(server: &LocalServer) -> Channel {
    channel_at(server.url()).await
}

/// A channel to `http://HOST:PORT`, any server.
pub async fn channel_at(url: String) -> Channel {
    Channel::from_shared(url)
        .expect("valid url")
        .connect()
        .await
        .expect("connects")
}

/// A raw HTTP/2 connection with small flow-control windows (64 KiB), so a
/// test controls how fast a large response may flow by reading it or not.
pub async fn raw_h2(addr: SocketAddr) -> SendRequest<Full<Bytes>> {
    let tcp = TcpStream::connect(addr).await.expect("tcp connects");
    h2_over(tcp).await
}

/// [`raw_h2`], counting the frames that cross the connection.
pub async fn counted_h2(addr: SocketAddr) -> (SendRequest<Full<Bytes>>, Arc<FramesCounted>) {
    let tcp = TcpStream::connect(addr).await.expect("tcp connects");
    let counts = Arc::new(FramesCounted::default());
    let counted = Counted {
        io: tcp,
        sent: FrameTracker::client_to_server(),
        received: FrameTracker::server_to_client(),
        counts: Arc::clone(&counts),
    };
    (h2_over(counted).await, counts)
}

async fn h2_over<T>(io: T) -> SendRequest<Full<Bytes>>
where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .adaptive_window(false)
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .handshake(TokioIo::new(io))
        .await
        .expect("http/2 handshake");
    tokio::spawn(connection);
    sender
}

/// Frames a [`counted_h2`] connection carried, counted as they passed.
#[derive(Debug, Default)]
pub struct FramesCounted {
    /// WINDOW_UPDATEs the client sent for a stream.
    pub stream_window_updates: AtomicU64,
    /// WINDOW_UPDATEs the client sent for the whole connection (stream 0).
    pub connection_window_updates: AtomicU64,
    /// GOAWAYs the server sent.
    pub goaways: AtomicU64,
}

impl FramesCounted {
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// A socket that passes every byte through and counts frames on the way.
struct Counted<T> {
    io: T,
    sent: FrameTracker,
    received: FrameTracker,
    counts: Arc<FramesCounted>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Counted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        let counts = &this.counts;
        this.received.feed(&buf.filled()[before..], |frame| {
            if frame.header.kind == kind::GOAWAY {
                counts.goaways.fetch_add(1, Ordering::Relaxed);
            }
        });
        read
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Counted<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = written {
            let counts = &this.counts;
            this.sent.feed(&buf[..n], |frame| {
                let h = frame.header;
                if h.kind == kind::WINDOW_UPDATE {
                    let counter = if h.stream_id == 0 {
                        &counts.connection_window_updates
                    } else {
                        &counts.stream_window_updates
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        written
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A unary gRPC request built by hand: one uncompressed length-prefixed message.
pub fn grpc_request(
    addr: SocketAddr,
    path: &str,
    message: &impl Message,
    accept_gzip: bool,
) -> http::Request<Full<Bytes>> {
    let payload = message.encode_to_vec();
    let mut frame = BytesMut::with_capacity(5 + payload.len());
    frame.put_u8(0); // compressed flag: no
    frame.put_u32(u32::try_from(payload.len()).expect("small request"));
    frame.put_slice(&payload);
    let mut request = http::Request::post(format!("http://{addr}{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if accept_gzip {
        request = request.header("grpc-accept-encoding", "gzip");
    }
    request
        .body(Full::new(frame.freeze()))
        .expect("valid request")
}

/// What came back on the wire for one raw unary call.
#[derive(Debug)]
pub struct RawReply {
    /// The `grpc-encoding` response header, if any.
    pub encoding: Option<String>,
    /// The compressed-flag byte of the response message (0 or 1).
    pub compressed_flag: u8,
    /// The message bytes as sent (compressed if the flag is 1).
    pub message: Bytes,
    /// The `grpc-status` trailer.
    pub grpc_status: Option<String>,
}

/// Reads a whole raw response: headers, one message, trailers.
pub async fn read_reply(response: http::Response<hyper::body::Incoming>) -> RawReply {
    let encoding = response
        .headers()
        .get("grpc-encoding")
        .map(|v| v.to_str().expect("ascii header").to_owned());
    let collected = response.into_body().collect().await.expect("body arrives");
    let grpc_status = collected
        .trailers()
        .and_then(|t| t.get("grpc-status"))
        .map(|v| v.to_str().expect("ascii trailer").to_owned());
    let mut body = collected.to_bytes();
    assert!(
        body.len() >= 5,
        "a gRPC message has a 5-byte prefix, got {} bytes",
        body.len()
    );
    let compressed_flag = body.get_u8();
    let len = body.get_u32() as usize;
    assert_eq!(body.len(), len, "exactly one message in the body");
    RawReply {
        encoding,
        compressed_flag,
        message: body,
        grpc_status,
    }
}

/// Another, well-behaved client gets its quote.
pub async fn others_are_served(server: &LocalServer) {
    let mut client = client(server).await;
    let quote = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.get_quote(sample_quote_request()),
    )
    .await
    .expect("GetQuote answered in time")
    .expect("GetQuote succeeds");
    assert_eq!(
        quote
            .into_inner()
            .quote
            .expect("a quote")
            .price
            .expect("a price")
            .amount,
        "1001.00"
    );
}

/// GOAWAY ENHANCE_YOUR_CALM, with debug data naming `rule`; returns it.
pub fn assert_calm(goaway: Option<GoAway>, rule: &str) -> GoAway {
    let goaway = goaway.expect("a GOAWAY");
    assert_eq!(goaway.error_code, Reason::ENHANCE_YOUR_CALM, "{goaway:?}");
    assert_eq!(goaway.debug_text(), rule);
    goaway
}

/// Where `server` serves `GET /metrics` (it must have metrics on).
pub fn metrics_addr(server: &LocalServer) -> SocketAddr {
    server
        .metrics_url()
        .expect("metrics are on")
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .expect("an address")
}

/// One HTTP/1.0 request to the metrics port: the status code (0 for an
/// empty reply: the connection closed unanswered) and the body.
pub async fn http_get(addr: SocketAddr, method: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let request = format!("{method} {path} HTTP/1.0\r\nhost: {addr}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("writes");
    let mut answer = String::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        stream.read_to_string(&mut answer),
    )
    .await
    .expect("answers in time")
    .expect("reads");
    let code = answer
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (code, body.to_owned())
}
