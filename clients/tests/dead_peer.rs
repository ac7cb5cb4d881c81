//! The half of the keepalive lesson the chapter could not show: a peer that
//! silently disappears. Without keepalive a call waits forever (or until its
//! deadline); with keepalive the dead connection is found and the call fails.
//!
//! Neither channel sets a call deadline here, on purpose: the only thing that
//! can end the call is keepalive.

mod support;

use std::time::{Duration, Instant};

use routing_clients::{CountingConnector, SilentRelay, sample_quote_request};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use tonic::transport::{Channel, Endpoint};

/// Test-sized keepalive: PING after 1 s of silence, give up 1 s later.
const PING_AFTER: Duration = Duration::from_secs(1);
const ACK_WITHIN: Duration = Duration::from_secs(1);
/// Far more than PING_AFTER + ACK_WITHIN: only a hang takes this long.
const HANG_BOUND: Duration = Duration::from_secs(20);

async fn start_relay(server: &routing_server::LocalServer) -> SilentRelay {
    SilentRelay::start(server.addr().to_string(), HANG_BOUND)
        .await
        .expect("relay starts")
}

async fn healthy_client(endpoint: Endpoint) -> RoutingServiceClient<Channel> {
    let channel = endpoint
        .connect_with_connector(CountingConnector::new())
        .await
        .expect("connects");
    let mut client = RoutingServiceClient::new(channel);
    client
        .get_quote(sample_quote_request())
        .await
        .expect("works while the relay forwards");
    client
}

/// Given a keepalive channel through a relay, when the relay silently stops
/// forwarding, then the next call fails within a bounded time.
#[tokio::test]
async fn keepalive_fails_a_call_to_a_silent_peer() {
    let server = support::start_server().await;
    let relay = start_relay(&server).await;
    let endpoint = Endpoint::from_shared(relay.url())
        .expect("url")
        .http2_keep_alive_interval(PING_AFTER)
        .keep_alive_timeout(ACK_WITHIN)
        .keep_alive_while_idle(true);
    let mut client = healthy_client(endpoint).await;

    // The peer vanishes: no FIN, no RST, just silence.
    relay.go_silent();
    let started = Instant::now();
    let outcome = tokio::time::timeout(HANG_BOUND, client.get_quote(sample_quote_request())).await;
    let detected_after = started.elapsed();

    let status = outcome
        .expect("keepalive ends the call instead of hanging")
        .expect_err("the peer is gone");
    eprintln!(
        "dead peer detected after {detected_after:?}: {:?}: {}",
        status.code(),
        status.message()
    );
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(
        detected_after < PING_AFTER + ACK_WITHIN + Duration::from_secs(5),
        "{detected_after:?}"
    );
}

/// The control: the same silent relay without keepalive leaves the call
/// hanging long after the keepalive channel would have failed it.
#[tokio::test]
async fn without_keepalive_a_call_to_a_silent_peer_hangs() {
    let server = support::start_server().await;
    let relay = start_relay(&server).await;
    let endpoint = Endpoint::from_shared(relay.url()).expect("url");
    let mut client = healthy_client(endpoint).await;

    relay.go_silent();
    // Three times as long as the keepalive channel needs to notice.
    let waited = 3 * (PING_AFTER + ACK_WITHIN);
    let outcome = tokio::time::timeout(waited, client.get_quote(sample_quote_request())).await;

    assert!(
        outcome.is_err(),
        "without keepalive the call should still be waiting, got {outcome:?}"
    );
}
