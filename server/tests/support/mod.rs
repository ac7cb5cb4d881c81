//! Helpers shared by the server's integration tests: start a server on a free
//! loopback port, and speak raw HTTP/2 when a test must see the wire itself.

#![allow(dead_code)] // Each test file uses a different subset.

use std::net::SocketAddr;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use prost::Message;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_server::{Config, LocalServer};
use tokio::net::TcpStream;
use tonic::transport::Channel;

pub const MIB: usize = 1024 * 1024;
pub const GET_QUOTE: &str = "/shipping.routing.v1.RoutingService/GetQuote";
pub const LIST_ROUTES: &str = "/shipping.routing.v1.RoutingService/ListRoutes";

/// A server with the chapter's settings on `127.0.0.1:0`.
pub async fn start() -> LocalServer {
    start_with(Config::default()).await
}

pub async fn start_with(config: Config) -> LocalServer {
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
    let (sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .adaptive_window(false)
        .initial_stream_window_size(65_535)
        .initial_connection_window_size(65_535)
        .handshake(TokioIo::new(tcp))
        .await
        .expect("http/2 handshake");
    tokio::spawn(connection);
    sender
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
