//! Graceful shutdown: calls in flight finish, and the drain is bounded.

mod support;

use std::time::{Duration, Instant};

use prost::Message;
use routing_contracts::routing::{ListRoutesRequest, ListRoutesResponse};

fn full_catalog() -> ListRoutesRequest {
    ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    }
}

/// Given a 5.0 MB ListRoutes response held back by a client that has not read
/// it yet (64 KiB flow-control window), when shutdown starts, then the server
/// refuses new connections but the call in flight still completes in full.
#[tokio::test]
async fn call_in_flight_completes_during_graceful_shutdown() {
    let server = support::start().await;
    let addr = server.addr();
    let mut h2 = support::raw_h2(addr).await;
    let request = support::grpc_request(addr, support::LIST_ROUTES, &full_catalog(), false);
    // Headers have arrived; most of the body is still waiting on the server.
    let response = h2.send_request(request).await.expect("response headers");

    // Start the drain, and give it a moment to stop accepting.
    let stopped = tokio::spawn(server.shutdown());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "new connections are refused while draining"
    );

    // Now read the rest of the response.
    let reply = support::read_reply(response).await;
    assert_eq!(reply.grpc_status.as_deref(), Some("0"));
    let page = ListRoutesResponse::decode(reply.message).expect("complete message");
    assert_eq!(page.routes.len(), 25);

    let run_result = tokio::time::timeout(Duration::from_secs(5), stopped).await;
    run_result
        .expect("server stops once the call is done")
        .expect("task")
        .expect("run returns Ok");
}

/// Given a call whose client never reads its response, when shutdown starts,
/// then the server gives up after the drain bound instead of waiting forever.
#[tokio::test]
async fn drain_is_bounded_by_the_drain_timeout() {
    let config = routing_server::Config {
        drain_secs: 1,
        ..Default::default()
    };
    let server = support::start_with(config).await;
    let mut h2 = support::raw_h2(server.addr()).await;
    let request =
        support::grpc_request(server.addr(), support::LIST_ROUTES, &full_catalog(), false);
    let _stuck = h2.send_request(request).await.expect("response headers");

    let started = Instant::now();
    let stopped = tokio::time::timeout(Duration::from_secs(8), server.shutdown()).await;

    stopped
        .expect("run returns after the drain bound")
        .expect("run returns Ok");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "the stuck call got its drain time"
    );
}

/// Given a connection that has sent nothing, with a handshake timeout far
/// longer than the drain's, when shutdown starts, then the silent
/// connection is closed at once, with no byte from the server (it had built
/// nothing for HTTP/2 yet), and the drain does not wait for it.
#[tokio::test]
async fn a_silent_connection_does_not_hold_up_the_drain() {
    use tokio::io::AsyncReadExt;
    // Given: a silent connection, accepted and handed to its worker.
    let config = routing_server::Config {
        handshake_timeout_secs: 600,
        drain_secs: 600,
        ..Default::default()
    };
    let server = support::start_with(config).await;
    let mut silent = tokio::net::TcpStream::connect(server.addr())
        .await
        .expect("connects");
    support::others_are_served(&server).await;

    // When: the server shuts down.
    let stopped = tokio::time::timeout(Duration::from_secs(5), server.shutdown()).await;

    // Then: run returned well before either 600 s bound, and the silent
    // connection reads its end without a byte.
    stopped
        .expect("the drain does not wait for a silent connection")
        .expect("run returns Ok");
    let mut sink = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read_to_end(&mut sink))
        .await
        .expect("the silent connection is closed");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}: {sink:?}");
}
