//! Hardening, round three (issue 23), in-process, with small knobs: the
//! window-update budget sends a flood on open streams away and never an
//! ordinary download. Like `hardening.rs`, these tests assert behaviour
//! only (GOAWAY codes and debug data, pages whole, other clients served),
//! never timing or memory; the numbers are the harness's (`abuse`).
//!
//! ```console
//! $ cargo test -p routing-server --test hardening_three
//! ```

mod support;

use std::time::Duration;

use h2_frames::{kind, setting};
use h2_peer::{grpc, raw::RawConn};
use routing_clients::{CountingConnector, Link, windows::ReceiveWindow};
use routing_contracts::routing::{ListRoutesRequest, routing_service_client::RoutingServiceClient};
use routing_server::{Config, LocalServer};
use tonic::transport::Endpoint;

use support::{MIB, assert_calm, others_are_served};

/// Long enough for anything that should happen on loopback.
const BOUND: Duration = Duration::from_secs(10);

/// Long enough for two full pages over the emulated `longhaul` link (400 ms
/// round trip; a page takes a few of them with hyper's 2 MiB windows).
const LONGHAUL_BOUND: Duration = Duration::from_secs(60);

/// A budget so small that a download's updates must be paid for by its DATA.
const TINY_WINDOW_UPDATE_BUDGET: u32 = 1;

/// A raw connection that announces a stream window of `window` bytes and
/// asks for a full page on stream 1.
async fn full_page_on_stream_1(server: &LocalServer, window: u32) -> RawConn {
    let authority = server.addr().to_string();
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake_with(&[(setting::INITIAL_WINDOW_SIZE, window)], BOUND)
        .await
        .expect("handshake");
    let writer = conn.writer();
    let headers = grpc::request_headers(&authority, grpc::LIST_ROUTES, grpc::CONTENT_TYPE);
    writer.queue_headers(1, &headers, false);
    writer.queue_data(1, &grpc::framed(&grpc::full_page_request()), true);
    writer.flush().await.expect("request sent");
    conn
}

/// Issue 23, attack 1: a client asks for a full page with a 1-byte stream
/// window, then floods WINDOW_UPDATEs of 1 byte on that open stream. Each
/// lets the server send one byte, so the DATA pays for none of them: past
/// the window-update budget (50 here) the client gets GOAWAY
/// ENHANCE_YOUR_CALM too_many_window_updates and the connection is closed;
/// another client is served. The control-frame budget alone never fired
/// here: the stream is open.
#[tokio::test]
async fn window_updates_on_an_open_stream_get_enhance_your_calm() {
    // Given: a server with a window-update budget of 50.
    let server = support::start_with(Config {
        window_update_budget: 50,
        ..Config::default()
    })
    .await;
    let mut conn = full_page_on_stream_1(&server, 1).await;
    // The response HEADERS: the call is open, its page held by the window.
    loop {
        let frame = conn
            .read_frame(BOUND)
            .await
            .expect("a frame")
            .expect("open");
        if frame.kind == kind::HEADERS && frame.stream_id == 1 {
            assert!(!frame.ends_stream(), "the page was refused");
            break;
        }
    }

    // When: 2,000 one-byte WINDOW_UPDATEs on the open stream.
    for _ in 0..2000 {
        conn.writer().queue_window_update(1, 1);
    }
    // The server may close while the flood is still being written.
    let _ = conn.writer().flush().await;

    // Then: the GOAWAY naming the rule, and the end of the connection.
    let goaway = conn.expect_close(BOUND).await.expect("closed in time");
    let goaway = assert_calm(goaway, "too_many_window_updates");
    assert_eq!(goaway.last_stream_id, 1);
    others_are_served(&server).await;
}

/// A server whose window-update budget is 1: every update past the first
/// must be paid for by DATA sent or streams opened.
async fn strict_server() -> LocalServer {
    support::start_with(Config {
        window_update_budget: TINY_WINDOW_UPDATE_BUDGET,
        ..Config::default()
    })
    .await
}

/// Reads two full pages (25 routes, about 5 MB each) one after the other
/// on one connection through `wire` with `windows`, within `bound`, and
/// checks each is whole.
async fn two_full_pages(
    server: &LocalServer,
    windows: ReceiveWindow,
    wire: &CountingConnector,
    bound: Duration,
) {
    let endpoint = windows.apply(Endpoint::from_shared(server.url()).expect("valid url"));
    let reading = async {
        let channel = endpoint
            .connect_with_connector(wire.clone())
            .await
            .expect("connects");
        let mut client = RoutingServiceClient::new(channel).max_decoding_message_size(16 * MIB);
        for _ in 0..2 {
            let page = client
                .list_routes(ListRoutesRequest {
                    page_size: 25,
                    ..Default::default()
                })
                .await
                .expect("the page is served");
            assert_eq!(page.into_inner().routes.len(), 25);
        }
    };
    tokio::time::timeout(bound, reading)
        .await
        .expect("both pages arrive in time");
}

/// Ordinary downloads are never told off. Given a window-update budget of
/// 1, when tonic reads two full pages over 64 KiB windows, then over
/// hyper's adaptive window, then both pages arrive whole, the client sent
/// more than one WINDOW_UPDATE (so the DATA paid for them), and no GOAWAY
/// came.
#[tokio::test]
async fn full_pages_over_small_and_adaptive_windows_are_not_told_off() {
    let server = strict_server().await;
    for windows in [ReceiveWindow::Fixed(65_535), ReceiveWindow::Adaptive] {
        let wire = CountingConnector::new();
        two_full_pages(&server, windows, &wire, BOUND).await;
        let updates = wire.windows().window_updates_sent;
        assert!(
            updates > u64::from(TINY_WINDOW_UPDATE_BUDGET),
            "{windows:?}: {updates} updates"
        );
        assert!(wire.goaway().is_none(), "{windows:?}: {:?}", wire.goaway());
    }
    others_are_served(&server).await;
}

/// The same over the emulated `longhaul` link (1 Gbit/s, 400 ms round
/// trip), with hyper's default windows and with the adaptive one: whole
/// pages, no GOAWAY.
#[tokio::test]
async fn full_pages_over_the_longhaul_link_are_not_told_off() {
    let server = strict_server().await;
    for windows in [ReceiveWindow::TonicDefault, ReceiveWindow::Adaptive] {
        let wire = CountingConnector::with_link(Link::LONGHAUL);
        two_full_pages(&server, windows, &wire, LONGHAUL_BOUND).await;
        assert!(wire.goaway().is_none(), "{windows:?}: {:?}", wire.goaway());
    }
}

/// Issue 23: the send-deadline close comes with a GOAWAY. Given a 2 s send
/// deadline and a client that announces a zero stream window, asks for a
/// full page and never lets it through, when the deadline passes, then the
/// client receives GOAWAY ENHANCE_YOUR_CALM send_deadline (stream 1 was
/// taken) and then the end of the connection; another client is served.
#[tokio::test]
async fn the_send_deadline_close_is_preceded_by_a_goaway() {
    // Given: the stalled reader, its page opened and held by the window.
    let server = support::start_with(Config {
        send_deadline_secs: 2,
        ..Config::default()
    })
    .await;
    let mut conn = full_page_on_stream_1(&server, 0).await;

    // When: the deadline passes (nothing is read but frames; the window
    // stays shut). Then: the GOAWAY naming the rule, then the close.
    let goaway = conn.expect_close(BOUND).await.expect("closed in time");
    let goaway = assert_calm(goaway, "send_deadline");
    assert_eq!(goaway.last_stream_id, 1);
    others_are_served(&server).await;
}
