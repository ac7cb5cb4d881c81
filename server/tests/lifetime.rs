//! Connection age and idleness (`server/src/connection/age.rs`), with small knobs:
//! what the client sees on the wire, and that no call is lost.
//!
//! Run with `cargo test -p routing-server --test lifetime`. The only times
//! asserted are upper bounds on waits (a test must end), never how long the
//! server took.

mod support;

use std::time::{Duration, Instant};

use h2_frames::{FrameTracker, GoAway, Reason, encode_frame, flag, kind};
use prost::Message;
use routing_clients::{CountingConnector, retry, sample_quote_request};
use routing_contracts::REPLICA_HEADER;
use routing_contracts::routing::{
    ListRoutesRequest, ListRoutesResponse, routing_service_client::RoutingServiceClient,
};
use routing_server::Config;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};
use tonic::transport::Endpoint;

/// GOAWAY's "graceful shutdown" code (RFC 9113 §7).
const NO_ERROR: Reason = Reason::NO_ERROR;

fn aged(age_secs: u64, grace_secs: u64) -> Config {
    Config {
        max_connection_age_secs: Some(age_secs),
        max_connection_age_grace_secs: Some(grace_secs),
        replica: Some("replica-t".into()),
        ..Default::default()
    }
}

/// Given a server whose connections age after 1 s (grace 5 s), when one
/// tonic channel calls GetQuote in a loop for 3.5 s while a 5.0 MB
/// ListRoutes response sits unread on another connection, then: no GetQuote
/// fails, the channel received a GOAWAY `NO_ERROR` and opened new
/// connections for its later calls, every answer names the replica, and the
/// ListRoutes call, in flight when its connection aged, still completes in
/// full.
///
/// Each GetQuote goes through `routing_clients::retry::sample_quote`, as
/// balance-client's do: a call the channel hands to a connection between
/// its GOAWAY and its close is dropped by hyper unsent, and is sent again
/// (tonic has no transparent retry; `clients/tests/retry.rs` shows the
/// race). A call the server saw and failed would still count as failed.
#[tokio::test]
async fn calls_cross_the_connection_age_and_none_fails() {
    let server = support::start_with(aged(1, 5)).await;

    // The call in flight: headers have arrived, the body waits on our window.
    let mut h2 = support::raw_h2(server.addr()).await;
    let full = ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    };
    let request = support::grpc_request(server.addr(), support::LIST_ROUTES, &full, false);
    let in_flight = h2.send_request(request).await.expect("response headers");

    let wire = CountingConnector::new();
    let channel = Endpoint::from_shared(server.url())
        .expect("url")
        .connect_with_connector_lazy(wire.clone());
    let client = RoutingServiceClient::new(channel);
    let (mut calls, mut failed, mut retried) = (0u32, 0u32, 0u32);
    let started = Instant::now();
    while started.elapsed() < Duration::from_millis(3500) {
        let answer = retry::sample_quote(&client).await;
        calls += 1;
        retried += answer.retried;
        match answer.result {
            Ok(answer) => assert_eq!(
                answer.metadata().get(REPLICA_HEADER).map(|v| v.as_bytes()),
                Some(&b"replica-t"[..])
            ),
            Err(status) => {
                failed += 1;
                eprintln!("call {calls} failed: {status:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    assert_eq!(
        failed, 0,
        "of {calls} calls ({retried} retried after hyper dropped them unsent)"
    );
    let goaway = wire.goaway().expect("the aged connection got a GOAWAY");
    assert_eq!(goaway.frame.error_code, NO_ERROR);
    assert!(
        wire.snapshot().connections >= 2,
        "new calls went to a new connection: {:?}",
        wire.snapshot()
    );

    // The call in flight since before the age finishes within the grace.
    let reply = support::read_reply(in_flight).await;
    assert_eq!(reply.grpc_status.as_deref(), Some("0"));
    let page = ListRoutesResponse::decode(reply.message).expect("complete message");
    assert_eq!(page.routes.len(), 25);
    server.shutdown().await.expect("server stops");
}

/// Given a server whose connections may idle 1 s, when a channel makes one
/// call and then stays idle, then within 5 s it receives a GOAWAY
/// `NO_ERROR`, and its next call succeeds on a new connection.
#[tokio::test]
async fn an_idle_connection_gets_its_goaway() {
    let server = support::start_with(Config {
        max_connection_idle_secs: Some(1),
        ..Default::default()
    })
    .await;
    let wire = CountingConnector::new();
    let channel = Endpoint::from_shared(server.url())
        .expect("url")
        .connect_with_connector_lazy(wire.clone());
    let client = RoutingServiceClient::new(channel);
    client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .expect("first call");

    let goaway = tokio::time::timeout(Duration::from_secs(5), wire.goaway_received())
        .await
        .expect("the idle connection gets a GOAWAY");
    assert_eq!(goaway.frame.error_code, NO_ERROR);

    // Sent again if it reaches the connection before its close does
    // (`routing_clients::retry`): the GOAWAY has arrived, the close may not.
    retry::sample_quote(&client)
        .await
        .result
        .expect("the next call reconnects");
    assert_eq!(wire.snapshot().connections, 2);
    server.shutdown().await.expect("server stops");
}

/// One frame the server sent, as the test keeps it.
#[derive(Debug, Clone)]
struct Seen {
    kind: u8,
    flags: u8,
    stream_id: u32,
    len: u32,
    kept: Vec<u8>,
}

/// Reads from `tcp` until `until` accepts the frames seen so far, or the
/// connection ends (`None`), or 10 s pass (a panic).
async fn read_frames(
    tcp: &mut TcpStream,
    tracker: &mut FrameTracker,
    seen: &mut Vec<Seen>,
    until: impl Fn(&[Seen]) -> bool,
) -> Option<()> {
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !until(seen) {
        let n = tokio::time::timeout_at(deadline, tcp.read(&mut buf))
            .await
            .expect("the server answers within 10 s")
            .expect("read");
        if n == 0 {
            return None;
        }
        tracker.feed(&buf[..n], |frame| {
            seen.push(Seen {
                kind: frame.header.kind,
                flags: frame.header.flags,
                stream_id: frame.header.stream_id,
                len: frame.header.len,
                kept: frame.kept.to_vec(),
            });
        });
    }
    Some(())
}

/// HEADERS and DATA of a GetQuote call on `stream`, HPACK without Huffman
/// or indexing, so the bytes are plain to read.
fn get_quote_frames(stream: u32) -> Vec<u8> {
    fn literal(out: &mut Vec<u8>, text: &str) {
        out.push(u8::try_from(text.len()).expect("short"));
        out.extend_from_slice(text.as_bytes());
    }
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http
    block.push(0x04); // :path, literal value
    literal(&mut block, support::GET_QUOTE);
    block.push(0x01); // :authority
    literal(&mut block, "localhost");
    block.extend_from_slice(&[0x0f, 0x10]); // content-type (static index 31)
    literal(&mut block, "application/grpc");
    block.push(0x00); // a new name: te
    literal(&mut block, "te");
    literal(&mut block, "trailers");
    let message = sample_quote_request().encode_to_vec();
    let mut data = vec![0];
    data.extend_from_slice(&u32::try_from(message.len()).expect("small").to_be_bytes());
    data.extend_from_slice(&message);
    let mut frames = encode_frame(kind::HEADERS, flag::END_HEADERS, stream, &block);
    frames.extend(encode_frame(kind::DATA, flag::END_STREAM, stream, &data));
    frames
}

/// A client that speaks raw HTTP/2 to `addr` (a server whose connections
/// age after 1 s), from its preface to the first GOAWAY of h2's graceful
/// shutdown (last-stream-id 2^31-1, `NO_ERROR`) and the PING after it: the
/// connection, the frames seen, and the PING's payload.
async fn at_the_first_goaway(
    addr: std::net::SocketAddr,
) -> (TcpStream, FrameTracker, Vec<Seen>, Vec<u8>) {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    let mut opening = h2_frames::PREFACE.to_vec();
    opening.extend(encode_frame(kind::SETTINGS, 0, 0, &[]));
    tcp.write_all(&opening).await.expect("preface");

    let mut tracker = FrameTracker::server_to_client()
        .keeping(kind::GOAWAY, 64)
        .keeping(kind::PING, 8);
    let mut seen = Vec::new();
    let goaway_then_ping = |seen: &[Seen]| {
        seen.iter()
            .position(|f| f.kind == kind::GOAWAY)
            .is_some_and(|at| {
                seen[at..]
                    .iter()
                    .any(|f| f.kind == kind::PING && !has(f, flag::ACK))
            })
    };
    // The server's SETTINGS must be acknowledged (the handshake timeout).
    read_frames(&mut tcp, &mut tracker, &mut seen, |s| {
        s.iter()
            .any(|f| f.kind == kind::SETTINGS && !has(f, flag::ACK))
    })
    .await
    .expect("server SETTINGS");
    tcp.write_all(&encode_frame(kind::SETTINGS, flag::ACK, 0, &[]))
        .await
        .expect("settings ack");

    read_frames(&mut tcp, &mut tracker, &mut seen, goaway_then_ping)
        .await
        .expect("GOAWAY and PING before the connection ends");
    let first = seen
        .iter()
        .find(|f| f.kind == kind::GOAWAY)
        .expect("GOAWAY");
    let first = GoAway::parse(&first.kept).expect("a GOAWAY payload");
    assert_eq!(first.last_stream_id, 0x7fff_ffff);
    assert_eq!(first.error_code, NO_ERROR);
    let ping = seen
        .iter()
        .rev()
        .find(|f| f.kind == kind::PING && !has(f, flag::ACK))
        .expect("PING")
        .kept
        .clone();
    (tcp, tracker, seen, ping)
}

/// Given a server whose connections age after 1 s, when a client that
/// speaks raw HTTP/2 waits for the age, then it receives GOAWAY
/// last-stream-id 2^31-1 `NO_ERROR` and a PING (h2's graceful shutdown).
/// When it then starts a GetQuote call on stream 1 (as a client does whose
/// request crossed the first GOAWAY on the wire) and only then acknowledges
/// the PING, then the final GOAWAY names stream 1 as the last one accepted,
/// the call is answered in full (a response message and trailers on stream
/// 1, no reset), and the server closes the connection.
#[tokio::test]
async fn a_call_started_between_the_two_goaways_is_served() {
    let server = support::start_with(aged(1, 5)).await;
    let (mut tcp, mut tracker, mut seen, ping) = at_the_first_goaway(server.addr()).await;

    // A call between the two GOAWAYs, then the PING's ACK.
    let mut late = get_quote_frames(1);
    late.extend(encode_frame(kind::PING, flag::ACK, 0, &ping));
    tcp.write_all(&late).await.expect("late call");
    let before = seen.len();
    let ended = read_frames(&mut tcp, &mut tracker, &mut seen, |_| false).await;
    assert!(ended.is_none(), "the server closes the connection");

    let after = &seen[before..];
    let last = after
        .iter()
        .find(|f| f.kind == kind::GOAWAY)
        .expect("the final GOAWAY");
    let last = GoAway::parse(&last.kept).expect("a GOAWAY payload");
    assert_eq!(last.last_stream_id, 1, "stream 1 was accepted");
    assert_eq!(last.error_code, NO_ERROR);
    let on_1 = |k| {
        after
            .iter()
            .filter(move |f| f.stream_id == 1 && f.kind == k)
    };
    assert!(
        on_1(kind::DATA).any(|f| f.len > 5),
        "a response message on stream 1: {after:?}"
    );
    assert!(
        on_1(kind::HEADERS).any(|f| has(f, flag::END_STREAM)),
        "trailers end stream 1: {after:?}"
    );
    assert_eq!(on_1(kind::RST_STREAM).count(), 0, "stream 1 is not reset");
    server.shutdown().await.expect("server stops");
}

/// Given a server whose connections age after 1 s, when a client that
/// speaks raw HTTP/2 acknowledges the graceful shutdown's PING and then,
/// before it reads again, starts 100 calls over 200 ms (calls that cross
/// the final GOAWAY on the wire, as a busy channel's do), then every write
/// is taken, and it then reads the final GOAWAY `NO_ERROR`, which accepts
/// none of the calls, and the connection's end, not a reset. A server
/// that closed its socket while calls still arrive answers them with a TCP
/// RST, which fails the client's next write (`BrokenPipe`) or read (the
/// GOAWAY still in its buffer lost): calls it could have sent again fail.
#[tokio::test]
async fn calls_that_cross_the_final_goaway_cost_no_reset() {
    let server = support::start_with(aged(1, 5)).await;
    let (mut tcp, mut tracker, mut seen, ping) = at_the_first_goaway(server.addr()).await;
    let before = seen.len();
    tcp.write_all(&encode_frame(kind::PING, flag::ACK, 0, &ping))
        .await
        .expect("the PING's ACK");
    for stream in (1u32..).step_by(2).take(100) {
        if let Err(e) = tcp.write_all(&get_quote_frames(stream)).await {
            panic!("call on stream {stream} not written: {e}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }

    // A reset fails read_frames' read.
    let ended = read_frames(&mut tcp, &mut tracker, &mut seen, |_| false).await;
    assert!(ended.is_none(), "the server closes the connection");
    let last = seen[before..]
        .iter()
        .find(|f| f.kind == kind::GOAWAY)
        .expect("the final GOAWAY");
    let last = GoAway::parse(&last.kept).expect("a GOAWAY payload");
    assert_eq!(last.error_code, NO_ERROR);
    assert_eq!(last.last_stream_id, 0, "no call after the ACK is accepted");
    server.shutdown().await.expect("server stops");
}

fn has(frame: &Seen, flag: u8) -> bool {
    frame.flags & flag == flag
}

/// Opens `n` GetQuote calls on `conn` whose request bodies never end, so
/// all `n` are open on the server at once, then cancels them (dropping a
/// stream's halves resets it).
async fn burst_of_open_calls(conn: &mut h2_peer::h2client::H2Conn, n: usize) {
    let mut open = Vec::new();
    for _ in 0..n {
        let call = conn
            .open_call(
                h2_peer::grpc::GET_QUOTE,
                h2_peer::grpc::CONTENT_TYPE,
                h2_peer::h2client::unfinished_message(100, 1),
                false,
                Duration::from_secs(5),
            )
            .await
            .expect("stream opens")
            .expect("under the stream limit");
        open.push(call);
    }
    // Give the server a moment to take every stream's HEADERS.
    tokio::time::sleep(Duration::from_millis(200)).await;
    drop(open);
}

/// Waits up to `limit` for the server to close `conn`; true if it did.
async fn closed_within(conn: &h2_peer::h2client::H2Conn, limit: Duration) -> bool {
    let until = Instant::now() + limit;
    while conn.is_open() && Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    !conn.is_open()
}

/// Given a server that sends away a connection idle for 1 s after a burst
/// of 4 streams at once (and no plain idle limit), when one connection has
/// 4 calls open at once and another only ever one at a time, then the
/// burst's connection is closed (graceful GOAWAY, then the close) within
/// 10 s of going idle, and the calm one is still open after 3 s: what h2
/// kept of the burst is given back, and an ordinary idle channel is left
/// alone.
#[tokio::test]
async fn a_connection_idle_after_a_burst_is_sent_away_and_a_calm_one_is_not() {
    use h2_peer::h2client::{H2Conn, ReceiveWindows};
    let server = support::start_with(Config {
        max_idle_after_burst_secs: 1,
        burst_streams: 4,
        ..Default::default()
    })
    .await;

    let mut burst = H2Conn::connect(server.addr(), ReceiveWindows::default())
        .await
        .expect("connects");
    let mut calm = H2Conn::connect(server.addr(), ReceiveWindows::default())
        .await
        .expect("connects");
    burst_of_open_calls(&mut burst, 4).await;
    burst_of_open_calls(&mut calm, 1).await;
    burst_of_open_calls(&mut calm, 1).await;

    assert!(
        closed_within(&burst, Duration::from_secs(10)).await,
        "the burst's connection is sent away once idle"
    );
    assert!(
        !closed_within(&calm, Duration::from_secs(3)).await,
        "a connection that never had 4 streams at once stays"
    );
    server.shutdown().await.expect("server stops");
}

/// `--replica` and `--replica-hostname` name the replica two ways: both at
/// once is a usage error (exit 2) that names them.
#[test]
fn replica_and_replica_hostname_conflict() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_routing-server"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--replica",
            "a",
            "--replica-hostname",
            "true",
        ])
        .env_remove("ROUTING_REPLICA")
        .env_remove("ROUTING_REPLICA_HOSTNAME")
        .output()
        .expect("routing-server runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--replica") && stderr.contains("cannot be used with"),
        "{stderr}"
    );
}
