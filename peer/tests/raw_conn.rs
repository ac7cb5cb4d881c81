//! The raw client against a real HTTP/2 server (the `h2` crate's, started
//! in-process on 127.0.0.1:0): the handshake, PING acks, and the GOAWAY that
//! h2's own guard sends once a client has made it reset too many streams.
//! These are the calls the server's integration tests can make.

use std::time::Duration;

use bytes::Bytes;
use h2_frames::{MAX_WINDOW, Reason, kind, setting};
use h2_peer::{RawConn, RawError, grpc};
use tokio::net::TcpListener;

const LIMIT: Duration = Duration::from_secs(5);

/// An h2 server that accepts every stream and answers nothing, with h2's
/// locally-reset-stream guard at `max_resets`.
async fn h2_server(max_resets: usize) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::Builder::new()
                    .max_concurrent_streams(100)
                    .max_local_error_reset_streams(Some(max_resets))
                    .handshake::<_, Bytes>(tcp)
                    .await
                else {
                    return;
                };
                let mut held = Vec::new();
                while let Some(Ok(stream)) = conn.accept().await {
                    held.push(stream);
                }
            });
        }
    });
    addr
}

/// Given an h2 server, when the raw client completes the handshake and sends
/// a PING, then it reads the server's settings and the PING's ack.
#[tokio::test]
async fn handshake_then_ping_ack() {
    let addr = h2_server(1024).await;
    let mut conn = RawConn::connect(addr).await.expect("connects");
    let settings = conn.handshake().await.expect("handshake");
    assert!(
        settings.contains(&(setting::MAX_CONCURRENT_STREAMS, 100)),
        "{settings:?}"
    );

    conn.send_ping(*b"harness!").await.expect("ping sent");
    // The server may also ack our SETTINGS first: skip to the PING.
    let ack = loop {
        let frame = conn
            .read_frame(LIMIT)
            .await
            .expect("a frame")
            .expect("open");
        if frame.kind == kind::PING {
            break frame;
        }
    };
    assert!(ack.is_ack());
    assert_eq!(ack.ping(), Ok(Some(*b"harness!")));
}

/// Given an h2 server whose guard allows 3 locally reset streams, when the
/// client overflows the send window of 4 open streams (MadeYouReset), then
/// the server resets 3 and answers the 4th with GOAWAY ENHANCE_YOUR_CALM
/// "too_many_internal_resets", naming the last stream it processed.
#[tokio::test]
async fn too_many_provoked_resets_get_a_goaway() {
    let addr = h2_server(3).await;
    let mut conn = RawConn::connect(addr).await.expect("connects");
    conn.handshake().await.expect("handshake");
    let authority = addr.to_string();
    let headers = grpc::request_headers(&authority, grpc::GET_QUOTE, grpc::CONTENT_TYPE);

    for stream_id in [1, 3, 5, 7] {
        conn.send_headers(stream_id, &headers, false)
            .await
            .expect("headers");
        conn.send_window_update(stream_id, MAX_WINDOW)
            .await
            .expect("window update");
    }

    let goaway = conn.expect_goaway(LIMIT).await.expect("a GOAWAY");
    assert_eq!(goaway.error_code, Reason::ENHANCE_YOUR_CALM);
    assert_eq!(goaway.debug_text(), "too_many_internal_resets");
    assert_eq!(goaway.last_stream_id, 7);
}

/// Given a server that has closed the connection, `expect_goaway` says
/// so instead of waiting out its limit; a silent server gives a timeout.
#[tokio::test]
async fn close_and_silence_are_told_apart() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        // Accept two connections: close the first at once, hold the second.
        let (first, _) = listener.accept().await.expect("first");
        drop(first);
        let (second, _) = listener.accept().await.expect("second");
        tokio::time::sleep(Duration::from_secs(2)).await;
        drop(second);
    });

    let mut closed = RawConn::connect(addr).await.expect("connects");
    assert!(matches!(
        closed.expect_goaway(LIMIT).await,
        Err(RawError::Closed | RawError::Io(_))
    ));

    let mut silent = RawConn::connect(addr).await.expect("connects");
    silent
        .send_raw(b"PRI * HTTP/2")
        .await
        .expect("half a preface");
    let limit = Duration::from_millis(200);
    assert!(matches!(
        silent.read_frame(limit).await,
        Err(RawError::Timeout(l)) if l == limit
    ));
    server.abort();
}
