//! The transparent retry (`clients/src/retry.rs`) against a small HTTP/2
//! server that sends a graceful GOAWAY while a call is still open on the
//! connection, as a server with a connection age does to a long call. The
//! channel is tonic's, unchanged; the server is `h2` alone, so that the
//! test controls when the GOAWAY goes out and counts the calls that
//! arrive on each connection.
//!
//! Run with `cargo test -p routing-clients --test retry`. No time is
//! asserted: the only waits are upper bounds (a test must end).

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use bytes::{Bytes, BytesMut};
use h2_frames::FrameDecoder;
use routing_clients::{CountingConnector, retry, sample_quote_request};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};
use tonic::{Code, transport::Endpoint};

/// How the test server answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// On the first connection, keep the first call open and send the
    /// graceful GOAWAY; on later ones, answer every call with OK.
    HoldFirstThenGoAway,
    /// Answer every call with the status CANCELLED, as a server may.
    Cancelled,
    /// On the first connection, once the first call's HEADERS frame has
    /// arrived, send a graceful GOAWAY (NO_ERROR) whose last stream is 0,
    /// processing nothing; on later ones, answer every call with OK.
    RefuseFirstConnection,
}

/// Calls received, per connection, in the order the connections came.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<u32>>>);

impl Seen {
    fn counts(&self) -> std::sync::MutexGuard<'_, Vec<u32>> {
        self.0.lock().expect("no test task panicked holding it")
    }

    fn calls(&self) -> Vec<u32> {
        self.counts().clone()
    }
}

async fn start(answer: Answer) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let seen = Seen::default();
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let index = {
                let mut counts = counts.counts();
                counts.push(0);
                counts.len() - 1
            };
            let hold = answer == Answer::HoldFirstThenGoAway && index == 0;
            tokio::spawn(serve(tcp, answer, hold, counts.clone(), index));
        }
    });
    (url, seen)
}

async fn serve(tcp: TcpStream, answer: Answer, hold: bool, seen: Seen, index: usize) {
    if answer == Answer::RefuseFirstConnection && index == 0 {
        refuse(tcp).await;
        return;
    }
    let Ok(mut connection) = h2::server::handshake(tcp).await else {
        return;
    };
    let mut held = Vec::new();
    while let Some(Ok((request, mut respond))) = connection.accept().await {
        seen.counts()[index] += 1;
        if hold {
            // The call stays open, so the connection does too: GOAWAY, PING,
            // and the second GOAWAY once the PING is answered (h2's order).
            held.push((request, respond));
            connection.graceful_shutdown();
            continue;
        }
        let head = http::Response::builder()
            .header("content-type", "application/grpc")
            .body(())
            .expect("response head");
        let Ok(mut body) = respond.send_response(head, false) else {
            continue;
        };
        let mut trailers = http::HeaderMap::new();
        if answer == Answer::Cancelled {
            trailers.insert("grpc-status", http::HeaderValue::from_static("1"));
            trailers.insert(
                "grpc-message",
                http::HeaderValue::from_static("cancelled%20here"),
            );
        } else {
            // One empty GetQuoteResponse: no compression, length 0.
            let _ = body.send_data(Bytes::from_static(&[0, 0, 0, 0, 0]), false);
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
        }
        let _ = body.send_trailers(trailers);
    }
}

/// Written with frames, not `h2`: h2's server processes a stream as it
/// reads it, so its GOAWAY would name that stream. This one reads until a
/// HEADERS frame has arrived (so the call was sent before the GOAWAY), then
/// sends SETTINGS and a GOAWAY naming stream 0, and holds the connection
/// until the client closes it (a close with unread bytes would be a reset,
/// which could reach the client first).
async fn refuse(mut tcp: TcpStream) {
    let mut frames = FrameDecoder::new();
    let mut preface = [0; h2_frames::PREFACE.len()];
    if tcp.read_exact(&mut preface).await.is_err() {
        return;
    }
    let mut answered = false;
    let mut buf = [0; 4096];
    while let Ok(n @ 1..) = tcp.read(&mut buf).await {
        frames.extend(&buf[..n]);
        while let Some(frame) = frames.next_frame() {
            if frame.kind == h2_frames::kind::HEADERS && !answered {
                let mut out = BytesMut::new();
                h2_frames::encode_settings(&mut out, &[]);
                h2_frames::encode_goaway(&mut out, 0, h2_frames::Reason::NO_ERROR, b"");
                if tcp.write_all(&out).await.is_err() {
                    return;
                }
                answered = true;
            }
        }
    }
}

/// A channel to `url` whose connections are counted, and whose GOAWAYs
/// are seen.
fn channel(
    url: &str,
) -> (
    RoutingServiceClient<tonic::transport::Channel>,
    CountingConnector,
) {
    let wire = CountingConnector::new();
    let channel = Endpoint::from_shared(url.to_owned())
        .expect("url")
        .connect_with_connector_lazy(wire.clone());
    (RoutingServiceClient::new(channel), wire)
}

/// Starts a call that the server keeps open, and waits (at most 10 s) until
/// the channel has received the server's GOAWAY on that connection.
async fn open_call_then_goaway(
    client: &RoutingServiceClient<tonic::transport::Channel>,
    wire: &CountingConnector,
) -> tokio::task::JoinHandle<()> {
    let mut held = client.clone();
    let open = tokio::spawn(async move {
        let _ = held.get_quote(sample_quote_request()).await;
    });
    tokio::time::timeout(Duration::from_secs(10), async {
        while wire.goaway().is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("the server's GOAWAY within 10 s");
    open
}

/// Given a connection that has received a graceful GOAWAY but is still
/// open (a call on it), when the same channel makes its next call, then
/// that call fails CANCELLED without reaching the server, [`never_sent`]
/// says so, and the call after it succeeds on a new connection.
///
/// [`never_sent`]: routing_clients::retry::never_sent
#[tokio::test]
async fn a_call_after_the_goaway_never_leaves_the_client() {
    let (url, seen) = start(Answer::HoldFirstThenGoAway).await;
    let (client, wire) = channel(&url);
    let open = open_call_then_goaway(&client, &wire).await;

    let status = client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .expect_err("hyper drops a call on a connection that received GOAWAY");
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert!(retry::never_sent(&status), "{status:?}");
    assert_eq!(seen.calls(), vec![1], "the server saw only the open call");

    client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .expect("the next call reconnects");
    assert_eq!(seen.calls(), vec![1, 1]);
    assert_eq!(wire.snapshot().connections, 2);
    open.abort();
}

/// Given the same connection, when the next call goes through
/// [`retry::sample_quote`] ([`retry::call`] with the sample request), then it succeeds, sent once more, on a new connection,
/// and the server saw it once.
#[tokio::test]
async fn the_retry_sends_it_once_more_on_a_new_connection() {
    let (url, seen) = start(Answer::HoldFirstThenGoAway).await;
    let (client, wire) = channel(&url);
    let open = open_call_then_goaway(&client, &wire).await;

    let answer = retry::sample_quote(&client).await;
    answer.result.expect("the retried call succeeds");
    assert_eq!(answer.retried, 1);
    assert_eq!(
        seen.calls(),
        vec![1, 1],
        "the second connection saw it once"
    );
    assert_eq!(wire.snapshot().connections, 2);
    open.abort();
}

/// Given a connection whose server sends a graceful GOAWAY naming no
/// stream, when a call is made on it, then h2 refuses the call (INTERNAL,
/// h2's `GoAway(NO_ERROR, Remote)` in its source), the server processed
/// none, [`never_sent`] says so, and the next call lands on a new
/// connection.
///
/// [`never_sent`]: routing_clients::retry::never_sent
#[tokio::test]
async fn a_stream_the_goaway_refused_never_reached_the_server() {
    let (url, seen) = start(Answer::RefuseFirstConnection).await;
    let (client, wire) = channel(&url);

    let status = client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .expect_err("the GOAWAY refuses the call");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(retry::never_sent(&status), "{status:?}");

    client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .expect("the next call reconnects");
    assert_eq!(
        seen.calls(),
        vec![0, 1],
        "the first connection processed none"
    );
    assert_eq!(wire.snapshot().connections, 2);
}

/// Given the same server, when the call goes through
/// [`retry::sample_quote`], then it succeeds, sent once more, and the
/// server processed it once.
#[tokio::test]
async fn the_retry_sends_a_refused_stream_once_more() {
    let (url, seen) = start(Answer::RefuseFirstConnection).await;
    let (client, _wire) = channel(&url);

    let answer = retry::sample_quote(&client).await;
    answer.result.expect("the retried call succeeds");
    assert_eq!(answer.retried, 1);
    assert_eq!(seen.calls(), vec![0, 1]);
}

/// Given a server that answers CANCELLED, when a call goes through
/// [`retry::sample_quote`], then it is not sent again: the server saw the call,
/// so only the client's own cancellation is retried.
#[tokio::test]
async fn a_cancelled_status_from_the_server_is_not_retried() {
    let (url, seen) = start(Answer::Cancelled).await;
    let (client, _wire) = channel(&url);

    let answer = retry::sample_quote(&client).await;
    let status = answer.result.expect_err("the server said CANCELLED");
    assert_eq!(status.code(), Code::Cancelled);
    assert_eq!(status.message(), "cancelled here");
    assert!(!retry::never_sent(&status));
    assert_eq!(answer.retried, 0);
    assert_eq!(seen.calls(), vec![1]);
}
