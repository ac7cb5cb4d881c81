//! The server's defaults under abuse, one test per attack in the README's
//! Hardening table, each driven by a misbehaving HTTP/2 client from the
//! `harness` crate. Knobs are scaled down (budgets in MiB, deadlines in
//! seconds) so each test runs in seconds. Tests assert behaviour only:
//! status codes, GOAWAY codes and debug data, connections closed, calls
//! refused fast, other clients served. Memory and CPU are the harness's job.

mod support;

use std::time::Duration;

use h2_frames::{GoAway, Reason, flag, kind, setting};
use h2_peer::{
    grpc,
    h2client::{CallEnd, H2Conn, ReceiveWindows, await_end, unfinished_message},
    raw::RawConn,
    stalled::TcpStalledReader,
};
use routing_clients::sample_quote_request;
use routing_contracts::routing::ListRoutesRequest;
use routing_server::{Config, LocalServer};
use tokio::{io::AsyncReadExt, net::TcpStream, time::Instant};

use support::{
    FramesCounted, GET_QUOTE, LIST_ROUTES, MIB, assert_calm, client, counted_h2, grpc_request,
    others_are_served, read_reply, start_with,
};

/// Long enough for anything that should happen; only a hang takes this long.
const BOUND: Duration = Duration::from_secs(10);

fn grpc_headers<'a>(server: &'a str, path: &'a str) -> [(&'a str, &'a str); 6] {
    grpc::request_headers(server, path, grpc::CONTENT_TYPE)
}

/// Given a client, when it connects, then the server's SETTINGS advertise
/// the stream limit tonic would leave out.
#[tokio::test]
async fn settings_advertise_the_stream_limit() {
    let server = start_with(Config::default()).await;
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    let settings = conn.handshake().await.expect("handshake");
    assert!(
        settings.contains(&(setting::MAX_CONCURRENT_STREAMS, 100)),
        "{settings:?}"
    );
}

/// Stalled readers: a connection with a zero flow-control window opens six
/// full-page ListRoutes calls and never reads. Two pages fit the 12 MiB
/// budget and stall; the other four are refused at once with
/// RESOURCE_EXHAUSTED. Other clients' quotes are served meanwhile. When the
/// send deadline passes, the server closes the stalled connection, and the
/// budget is free again for a client that reads.
#[tokio::test]
async fn stalled_readers_are_refused_past_the_budget_then_cut_off() {
    let server = start_with(Config {
        response_budget_bytes: 12 * MIB,
        // One connection may hold it all: this is about the budget itself.
        response_share_percent: 100,
        send_deadline_secs: 2,
        ..Config::default()
    })
    .await;
    // Six calls, none of which will ever be read.
    let started = Instant::now();
    let (stalled, _held, refused) = hold_full_pages(&server, 6).await;
    assert_eq!((6 - refused.len(), refused.len()), (2, 4));
    for message in &refused {
        assert!(
            message.starts_with("response%20budget%20(12%20MiB)"),
            "{message}"
        );
    }
    assert!(started.elapsed() < Duration::from_secs(2), "refused fast");

    // Meanwhile, quotes are served.
    others_are_served(&server).await;

    // The send deadline closes the stalled connection...
    let cut_off = Instant::now() + BOUND;
    while stalled.is_open() && Instant::now() < cut_off {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!stalled.is_open(), "the stalled connection is still open");

    // ...which frees the budget for a reader.
    let page = full_page_reader(&server)
        .await
        .list_routes(ListRoutesRequest {
            page_size: 25,
            ..Default::default()
        })
        .await
        .expect("the budget is free again");
    assert_eq!(page.into_inner().routes.len(), 25);
}

/// MadeYouReset (CVE-2025-8671): the client makes the server reset streams
/// itself, here with WINDOW_UPDATEs that overflow each stream's window.
/// Past the local-error-reset limit the server sends GOAWAY
/// ENHANCE_YOUR_CALM, and other clients are served throughout.
#[tokio::test]
async fn made_you_reset_gets_enhance_your_calm() {
    let server = start_with(Config {
        max_local_error_resets: 20,
        ..Config::default()
    })
    .await;
    let authority = server.addr().to_string();
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");

    let body = grpc::framed(&sample_quote_request());
    for i in 0..40u32 {
        let stream = 2 * i + 1;
        let writer = conn.writer();
        writer.queue_headers(stream, &grpc_headers(&authority, grpc::GET_QUOTE), false);
        writer.queue_data(stream, &body, false);
        // 65,535 + 2^31 - 1 overflows the stream's send window.
        writer.queue_window_update(stream, 0x7fff_ffff);
        if conn.writer().flush().await.is_err() {
            break; // The server has already closed us.
        }
    }
    let goaway: GoAway = conn.expect_goaway(BOUND).await.expect("a GOAWAY");
    assert_eq!(goaway.error_code, Reason::ENHANCE_YOUR_CALM, "{goaway:?}");
    others_are_served(&server).await;
}

/// A connection that sends nothing, and one that sends half the preface,
/// are both closed once the handshake timeout passes, the first without a
/// byte from the server; a real client that arrives meanwhile is served.
#[tokio::test]
async fn connections_without_a_handshake_are_closed() {
    let server = start_with(Config {
        handshake_timeout_secs: 1,
        ..Config::default()
    })
    .await;
    let mut silent = TcpStream::connect(server.addr()).await.expect("connects");
    let mut half = RawConn::connect(server.addr()).await.expect("connects");
    half.send_raw(&h2_frames::PREFACE[..12])
        .await
        .expect("half a preface");

    others_are_served(&server).await;

    // The server waits for the client's first byte before it says anything
    // (not even its SETTINGS), so the silent connection ends with nothing.
    let started = Instant::now();
    let mut sink = Vec::new();
    let read = tokio::time::timeout(BOUND, silent.read_to_end(&mut sink))
        .await
        .expect("the silent connection is closed in time");
    assert!(read.as_ref().map_or(true, |n| *n == 0), "{read:?}");
    let closed = half.expect_close(BOUND).await;
    assert!(closed.is_ok(), "{closed:?}");
    assert!(started.elapsed() < BOUND);
}

/// With a cap of two connections, a third is closed at once, without a
/// word; once one of the two leaves, a new client is served again.
#[tokio::test]
async fn connections_above_the_cap_are_closed_at_once() {
    let server = start_with(Config {
        max_connections: Some(2),
        handshake_timeout_secs: 60,
        ..Config::default()
    })
    .await;
    let first = TcpStream::connect(server.addr()).await.expect("connects");
    let _second = TcpStream::connect(server.addr()).await.expect("connects");

    let mut third = TcpStream::connect(server.addr())
        .await
        .expect("TCP connects");
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_secs(2), third.read(&mut byte))
        .await
        .expect("closed at once, not left waiting");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");

    drop(first);
    // The server notices the close on its next read; retry briefly.
    let deadline = Instant::now() + BOUND;
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(2), async {
            let channel = tonic::transport::Channel::from_shared(server.url())
                .expect("url")
                .connect()
                .await?;
            let mut client =
                routing_contracts::routing::routing_service_client::RoutingServiceClient::new(
                    channel,
                );
            client
                .get_quote(sample_quote_request())
                .await
                .map_err(|status| Box::new(status) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(())
        })
        .await;
        if matches!(attempt, Ok(Ok(()))) {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {attempt:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Opens a GetQuote call with `headers` whose body announces `declared`
/// bytes but sends only `sent`, and returns how and when the call ended.
async fn unfinished_call(
    server: &LocalServer,
    headers: &[(&'static str, &'static str)],
    declared: u32,
    sent: usize,
) -> (CallEnd, Duration) {
    let mut conn = H2Conn::connect(server.addr(), ReceiveWindows::default())
        .await
        .expect("connects");
    let started = Instant::now();
    let (response, _body) = conn
        .open_call_with(
            grpc::GET_QUOTE,
            grpc::CONTENT_TYPE,
            headers,
            unfinished_message(declared, sent),
            false,
            BOUND,
        )
        .await
        .expect("stream opens")
        .expect("under the stream limit");
    let (end, _) = await_end(response, BOUND, true, started).await;
    (end, started.elapsed())
}

/// A request body that announces 4 MiB and never finishes is cancelled with
/// DEADLINE_EXCEEDED once the request deadline passes.
#[tokio::test]
async fn unfinished_request_bodies_end() {
    let server = start_with(Config {
        request_deadline_secs: 1,
        ..Config::default()
    })
    .await;
    let (end, _) = unfinished_call(&server, &[], 4 * 1024 * 1024 - 16, 32 * 1024).await;
    assert_eq!(end, CallEnd::Grpc(tonic::Code::DeadlineExceeded));
}

/// The client's own deadline ends a call on the server too: a body that
/// never finishes, sent with `grpc-timeout: 300m`, gets DEADLINE_EXCEEDED
/// long before the 10 s request deadline.
#[tokio::test]
async fn the_clients_grpc_timeout_ends_the_call() {
    let server = start_with(Config::default()).await;
    let (end, took) = unfinished_call(&server, &[("grpc-timeout", "300m")], 1024, 16).await;
    assert_eq!(end, CallEnd::Grpc(tonic::Code::DeadlineExceeded));
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(5),
        "ended after {took:?}"
    );
}

/// The bytes of partly received requests are bounded server-wide: with a
/// 1 MiB request budget, one unfinished 768 KiB body fits, and a second
/// one, on another connection, is refused with RESOURCE_EXHAUSTED.
#[tokio::test]
async fn partly_received_requests_share_a_budget() {
    let server = start_with(Config {
        request_budget_bytes: MIB,
        request_deadline_secs: 30,
        ..Config::default()
    })
    .await;
    let chunk = 768 * 1024;
    let mut holders = Vec::new();
    let mut ends = Vec::new();
    for _ in 0..2 {
        let mut conn = H2Conn::connect(server.addr(), ReceiveWindows::default())
            .await
            .expect("connects");
        let started = Instant::now();
        let (response, body) = conn
            .open_call(
                grpc::GET_QUOTE,
                grpc::CONTENT_TYPE,
                unfinished_message(4 * 1024 * 1024 - 16, chunk),
                false,
                BOUND,
            )
            .await
            .expect("stream opens")
            .expect("under the stream limit");
        ends.push(
            await_end(response, Duration::from_secs(2), true, started)
                .await
                .0,
        );
        holders.push((conn, body));
    }
    assert_eq!(
        ends,
        [
            CallEnd::Pending,
            CallEnd::Grpc(tonic::Code::ResourceExhausted)
        ]
    );
}

/// A request that is not gRPC gets HTTP 415, with the gRPC status grpc-go
/// sends, instead of being served as if it were gRPC.
#[tokio::test]
async fn non_grpc_content_types_get_415() {
    let server = start_with(Config::default()).await;
    let mut conn = H2Conn::connect(server.addr(), ReceiveWindows::default())
        .await
        .expect("connects");
    for content_type in ["application/json", "text/plain"] {
        let (response, _body) = conn
            .open_call(
                grpc::GET_QUOTE,
                content_type,
                grpc::framed(&sample_quote_request()),
                true,
                BOUND,
            )
            .await
            .expect("stream opens")
            .expect("under the stream limit");
        let response = tokio::time::timeout(BOUND, response)
            .await
            .expect("answered")
            .expect("a response");
        assert_eq!(response.status(), 415, "{content_type}");
        assert_eq!(
            grpc::grpc_status(response.headers()),
            Some(tonic::Code::InvalidArgument)
        );
        let message = response.headers()["grpc-message"].to_str().expect("ascii");
        assert!(message.contains(content_type), "{message}");
    }
}

/// Sends a PING every `every` for `for_how_long`, answering the server's
/// own PINGs, and returns the GOAWAY if one came.
async fn ping_every(
    server: &LocalServer,
    every: Duration,
    for_how_long: Duration,
) -> Option<GoAway> {
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");
    let started = Instant::now();
    let mut n = 0u64;
    while started.elapsed() < for_how_long {
        if conn.send_ping(n.to_be_bytes()).await.is_err() {
            break;
        }
        n += 1;
        let next = started + every * u32::try_from(n).expect("few pings");
        // Read until the next ping is due: acks, the server's PINGs, a GOAWAY.
        while Instant::now() < next {
            match conn.read_frame(next - Instant::now()).await {
                Ok(Some(frame)) => {
                    if let Some(goaway) = frame.goaway().expect("a valid GOAWAY") {
                        return Some(goaway);
                    }
                    if frame.kind == kind::PING && !frame.has_flag(flag::ACK) {
                        let mut payload = [0u8; 8];
                        payload.copy_from_slice(&frame.payload[..8]);
                        conn.writer().queue_ping(payload, true);
                        conn.writer().flush().await.expect("ack");
                    }
                }
                Ok(None) | Err(_) => break,
            }
        }
    }
    None
}

fn assert_too_many_pings(goaway: Option<GoAway>) {
    assert_calm(goaway, "too_many_pings");
}

/// With a 1 s floor (the chapter's 5 s, scaled down), a client pinging
/// every 200 ms is sent away with GOAWAY ENHANCE_YOUR_CALM too_many_pings,
/// and one pinging exactly at the floor for 6 s is not.
#[tokio::test]
async fn ping_floor_sends_fast_pingers_away_and_spares_the_rest() {
    let server = start_with(Config {
        min_ping_interval_secs: 1,
        ..Config::default()
    })
    .await;
    let fast = ping_every(&server, Duration::from_millis(200), Duration::from_secs(5));
    let at_floor = ping_every(&server, Duration::from_secs(1), Duration::from_secs(6));
    let (fast, at_floor) = tokio::join!(fast, at_floor);
    assert_too_many_pings(fast);
    assert!(at_floor.is_none(), "{at_floor:?}");
}

/// A raw PING flood gets GOAWAY too_many_pings after the third strike, and
/// the server closes the connection: it answers at most three pings.
#[tokio::test]
async fn ping_flood_is_cut_off_after_three_strikes() {
    let server = start_with(Config::default()).await;
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");
    for i in 0..1000u64 {
        conn.writer().queue_ping(i.to_be_bytes(), false);
    }
    let _ = conn.writer().flush().await;

    let mut acks = 0;
    let mut goaway = None;
    while let Ok(Some(frame)) = conn.read_frame(BOUND).await {
        if frame.kind == kind::PING && frame.has_flag(flag::ACK) {
            acks += 1;
        }
        if let Some(g) = frame.goaway().expect("a valid GOAWAY") {
            goaway = Some(g);
        }
    }
    assert_too_many_pings(goaway);
    assert!(acks <= 4, "{acks} pings answered");
    others_are_served(&server).await;
}

/// With pings without calls not permitted, an idle client pinging slowly
/// (every 1.2 s, above the 1 s floor) is still sent away.
#[tokio::test]
async fn idle_pings_are_refused_when_not_permitted() {
    let server = start_with(Config {
        min_ping_interval_secs: 1,
        permit_pings_without_calls: false,
        ..Config::default()
    })
    .await;
    let goaway = ping_every(&server, Duration::from_millis(1200), Duration::from_secs(8)).await;
    assert_too_many_pings(goaway);
}

/// A client that can decode the full 5 MB page (tonic's default cap is 4 MiB).
async fn full_page_reader(
    server: &LocalServer,
) -> routing_contracts::routing::routing_service_client::RoutingServiceClient<
    tonic::transport::Channel,
> {
    client(server).await.max_decoding_message_size(16 * MIB)
}

/// Asks for a page of `page_size` routes until the answer is not OK, for at
/// most [`BOUND`], and returns that status.
async fn first_refusal(server: &LocalServer, page_size: i32) -> tonic::Status {
    let mut other = full_page_reader(server).await;
    let give_up = Instant::now() + BOUND;
    loop {
        let request = ListRoutesRequest {
            page_size,
            ..Default::default()
        };
        match other.list_routes(request).await {
            Err(status) => return status,
            Ok(_) if Instant::now() < give_up => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(_) => panic!("never refused within {BOUND:?}"),
        }
    }
}

/// A TCP-stalled reader (issue 14 B): a 4 KiB socket receive buffer, a
/// 2 GiB HTTP/2 window, a 2 MB page, the socket never read, and a GetQuote
/// every 200 ms, which hyper's keepalive counts as activity. HTTP/2 flow
/// control never stops the server, but the kernel's unsent queue is bounded
/// (TCP_NOTSENT_LOWAT), so the page stays in the server, charged: another
/// client's page does not fit the 3 MiB budget. With an 8 s keepalive
/// timeout, and so TCP_USER_TIMEOUT 8 s (long enough for a loaded test
/// machine to see the refusal first), and the send deadline 10 minutes
/// off, the kernel itself closes the connection, and the budget is free
/// again.
#[tokio::test]
async fn tcp_stalled_readers_stay_charged_until_the_kernel_closes_them() {
    let server = start_with(Config {
        response_budget_bytes: 3 * MIB,
        response_share_percent: 100,
        stalled_holder_secs: 600,
        keepalive_timeout_secs: 8,
        send_deadline_secs: 600,
        // It never acknowledges SETTINGS either: let the kernel act first.
        handshake_timeout_secs: 600,
        ..Config::default()
    })
    .await;
    // Given a reader that stalls at the TCP level, its page requested...
    let mut stalled = TcpStalledReader::open(server.addr(), 4096, 10)
        .await
        .expect("connects");
    // Let the server take that page first: a probe's page in flight at that
    // moment would get the stalled reader refused instead (with two workers
    // the two connections are served in parallel). Not a timing assertion.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // When another client asks for the same page, then it does not fit:
    // the stalled reader's page is still charged to the budget.
    let refused = first_refusal(&server, 10).await;
    assert_refused_by(&refused, "response budget (3 MiB)");

    // When the stalled reader keeps sending GetQuote, then its writes start
    // to fail: the server's kernel gave up on it and reset it.
    // The kernel checks at its zero-window probes (0.2 s, doubling), so it
    // closes the connection at about 12.6 s; 30 s is only a bound on a hang.
    poke_until_closed(&mut stalled, Duration::from_secs(30)).await;

    // Then the budget is free for a reader.
    served_within_bound(&mut client(&server).await, 10).await;
}

/// A `RESOURCE_EXHAUSTED` whose message starts with `budget`'s description.
fn assert_refused_by(refused: &tonic::Status, budget: &str) {
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().starts_with(budget),
        "{}",
        refused.message()
    );
}

/// Asks for a page of `page_size` routes until it is served, for at most
/// [`BOUND`].
async fn served_within_bound(
    reader: &mut routing_contracts::routing::routing_service_client::RoutingServiceClient<
        tonic::transport::Channel,
    >,
    page_size: i32,
) {
    let give_up = Instant::now() + BOUND;
    loop {
        let request = ListRoutesRequest {
            page_size,
            ..Default::default()
        };
        match reader.list_routes(request).await {
            Ok(page) => {
                assert_eq!(page.into_inner().routes.len(), page_size as usize);
                return;
            }
            Err(status) => assert!(Instant::now() < give_up, "still refused: {status:?}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A page in the kernel is not sent (issue 14 B): "sent" means the
/// client's kernel acknowledged it, as the server's send queue shows. With
/// `TCP_NOTSENT_LOWAT` off, a 2-route page (about 400 kB, no gzip) fits
/// the server socket's send buffer whole, so h2 hands every byte to the
/// kernel at once; the client set a 4 KiB receive buffer and does not
/// read, so the kernel cannot deliver more than that. The budget holds one
/// such page and a half. While the page sits in the kernel, another
/// client's page is refused; once the stalled client reads its page, the
/// budget is given back and the other client is served.
#[cfg(target_os = "linux")]
#[tokio::test]
async fn a_page_in_the_kernels_send_queue_stays_charged_until_it_is_read() {
    use h2_peer::procfs::ServerSockets;
    use routing_server::routing::catalog::Catalog;

    const RCVBUF: u32 = 4096;
    let request = ListRoutesRequest {
        page_size: 2,
        ..Default::default()
    };
    let page_len = std::sync::Arc::new(Catalog::new())
        .page(&request)
        .expect("a page")
        .encoded_len();
    let server = start_with(Config {
        response_budget_bytes: page_len * 3 / 2,
        response_share_percent: 100,
        no_gzip: true,
        tcp_notsent_lowat: 0,
        // It never acknowledges SETTINGS and sends no GetQuote: keep it.
        handshake_timeout_secs: 600,
        stalled_holder_secs: 600,
        send_deadline_secs: 600,
        ..Config::default()
    })
    .await;

    // Given a client that asks for the page and does not read it...
    let mut stalled = TcpStalledReader::open(server.addr(), RCVBUF, request.page_size)
        .await
        .expect("connects");
    // ...when the server's send queue holds the page, all but what the
    // client's receive buffer took (the kernel doubles SO_RCVBUF), and
    // stays so for a second: h2 has nothing left of it to write.
    let in_kernel = (page_len as u64).saturating_sub(2 * u64::from(RCVBUF));
    let give_up = Instant::now() + BOUND;
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let queued = ServerSockets::read(server.addr())
            .expect("/proc/net/tcp is readable")
            .send_queue_bytes;
        if queued >= in_kernel && queued == last {
            break;
        }
        last = queued;
        assert!(Instant::now() < give_up, "Send-Q {queued} of {page_len}");
    }

    // Then another client's page does not fit: the first is still charged.
    let mut other = client(&server).await;
    let Err(refused) = other.list_routes(request.clone()).await else {
        panic!("a second page was served while the first was unread: the first is not charged");
    };
    assert_refused_by(&refused, "response budget");

    // When the stalled client reads its page (all of it, and its trailers)...
    let read = stalled.read_page(BOUND).await.expect("the page arrives");
    assert_eq!(read, page_len + 5, "the page and its gRPC prefix");

    // ...then its budget is given back, and the other client is served.
    served_within_bound(&mut other, request.page_size).await;
}

/// A client that never reads the socket never acknowledges the server's
/// SETTINGS: however many requests it sends (a GetQuote every 200 ms here),
/// it is closed once the 1 s handshake timeout passes, and its writes start
/// to fail.
#[tokio::test]
async fn clients_that_never_acknowledge_settings_are_closed() {
    let server = start_with(Config {
        handshake_timeout_secs: 1,
        ..Config::default()
    })
    .await;
    let mut deaf = TcpStalledReader::open(server.addr(), 4096, 1)
        .await
        .expect("connects");
    poke_until_closed(&mut deaf, BOUND).await;
    others_are_served(&server).await;
}

/// Sends a GetQuote every 200 ms until a write fails (the server has closed
/// the connection, and its reset has arrived), for at most `bound`.
async fn poke_until_closed(reader: &mut TcpStalledReader, bound: Duration) {
    let give_up = Instant::now() + bound;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if reader.poke().await.is_err() {
            return;
        }
        assert!(Instant::now() < give_up, "still open after {bound:?}");
    }
}

/// Opens `calls` full-page calls on a connection with a zero stream window
/// and returns the connection, the calls still held (headers, no body) and
/// the `grpc-message` of each refused one.
async fn hold_full_pages(
    server: &LocalServer,
    calls: usize,
) -> (H2Conn, Vec<impl Sized + use<>>, Vec<String>) {
    let mut conn = H2Conn::connect(
        server.addr(),
        ReceiveWindows {
            stream: 0,
            connection: 65_535,
        },
    )
    .await
    .expect("connects");
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    for _ in 0..calls {
        let (response, body) = conn
            .open_call(
                grpc::LIST_ROUTES,
                grpc::CONTENT_TYPE,
                grpc::framed(&grpc::full_page_request()),
                true,
                BOUND,
            )
            .await
            .expect("stream opens")
            .expect("under the stream limit");
        let head = tokio::time::timeout(BOUND, response)
            .await
            .expect("response headers in time")
            .expect("a response");
        match grpc::grpc_status(head.headers()) {
            Some(code) => {
                assert_eq!(code, tonic::Code::ResourceExhausted);
                let message = head.headers()["grpc-message"].to_str().expect("ascii");
                refused.push(message.to_owned());
            }
            // Keep every stream handle: dropping one would cancel its call.
            None => held.push((head, body)),
        }
    }
    (conn, held, refused)
}

/// One client is held to its share (issue 14 C): with a 24 MiB response
/// budget and a 25 % share per connection (6 MiB), a connection with a
/// zero window that opens three full-page calls (about 4.8 MiB each) holds
/// one; the other two are refused at once with RESOURCE_EXHAUSTED naming
/// the per-connection share. Meanwhile a second client gets full pages,
/// one after another.
#[tokio::test]
async fn one_connection_is_held_to_its_share_of_the_budget() {
    let server = start_with(Config {
        response_budget_bytes: 24 * MIB,
        response_share_percent: 25,
        ..Config::default()
    })
    .await;
    // Given a stalled connection that asks for three full pages...
    let (_stalled, held, refused) = hold_full_pages(&server, 3).await;

    // ...then it holds one, and is refused the rest for its share.
    assert_eq!((held.len(), refused.len()), (1, 2), "{refused:?}");
    for message in &refused {
        assert!(
            message
                .starts_with("per-connection%20share%20of%20the%20response%20budget%20(6%20MiB)"),
            "{message}"
        );
    }

    // When another client asks for full pages, then it gets every one.
    let mut reader = full_page_reader(&server).await;
    for _ in 0..3 {
        let page = reader
            .list_routes(grpc::full_page_request())
            .await
            .expect("a full page while the stalled client holds its share");
        assert_eq!(page.into_inner().routes.len(), 25);
    }
}

/// A stalled holder makes room (issue 14 C): with a 12 MiB budget, a 50 %
/// share and a 1 s stall time, two zero-window connections hold one full
/// page each, and what is left (about 2.5 MiB) is too small for a third.
/// A client asking for the full page gets it, at once or once the holders
/// have sent nothing for 1 s: the stalled connection that holds the most is
/// closed to make room.
#[tokio::test]
async fn a_stalled_connection_is_closed_to_make_room() {
    let server = start_with(Config {
        response_budget_bytes: 12 * MIB,
        response_share_percent: 50,
        stalled_holder_secs: 1,
        ..Config::default()
    })
    .await;
    // Given two stalled connections holding a full page each...
    let (first, first_held, _) = hold_full_pages(&server, 1).await;
    let (second, second_held, _) = hold_full_pages(&server, 1).await;
    assert_eq!((first_held.len(), second_held.len()), (1, 1));

    // When a reader asks for the full page, then it gets it, retrying only
    // while neither holder has been stalled long enough.
    let mut reader = full_page_reader(&server).await;
    let give_up = Instant::now() + BOUND;
    let page = loop {
        match reader.list_routes(grpc::full_page_request()).await {
            Ok(page) => break page.into_inner(),
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                assert!(Instant::now() < give_up, "never made room: {status:?}");
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert_eq!(page.routes.len(), 25);

    // And one of the stalled connections was closed for it.
    let cut_off = Instant::now() + BOUND;
    while first.is_open() && second.is_open() && Instant::now() < cut_off {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        !first.is_open() || !second.is_open(),
        "neither stalled connection was closed"
    );
}

/// The PING that earns too_many_pings is acknowledged before the GOAWAY,
/// as grpc-go does, so the client's round-trip sample is not lost. Given
/// the 5 s floor, four quick PINGs, each sent once the previous one is
/// acked, get four ACKs; the fourth ACK comes right before GOAWAY
/// too_many_pings, and nothing comes after it.
#[tokio::test]
async fn the_ping_that_earns_too_many_pings_is_acked_before_the_goaway() {
    let server = start_with(Config::default()).await;
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");

    // When: four PINGs, one round trip apart.
    let mut seen = Vec::new();
    for i in 0..4u8 {
        conn.send_ping([i; 8]).await.expect("ping");
        loop {
            let frame = conn
                .read_frame(BOUND)
                .await
                .expect("a frame")
                .expect("open");
            if frame.kind == kind::PING && frame.has_flag(flag::ACK) {
                seen.push(format!("ack {}", frame.payload[0]));
                break;
            }
        }
    }
    // Then: the GOAWAY, and the end of the connection.
    let goaway = conn.expect_close(BOUND).await.expect("closed");
    assert_too_many_pings(goaway);
    assert_eq!(seen, ["ack 0", "ack 1", "ack 2", "ack 3"]);
}

/// Given a server with a control-frame budget of 50 and a client that has
/// finished one GetQuote on stream 1, when the client queues `flood` and
/// writes it, then it gets GOAWAY ENHANCE_YOUR_CALM too_many_control_frames
/// (stream 1 served) and the connection is closed; another client is served.
async fn flood_is_sent_away(flood: impl Fn(&mut RawConn)) {
    let server = start_with(Config {
        control_frame_budget: 50,
        ..Config::default()
    })
    .await;
    let authority = server.addr().to_string();
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");
    let writer = conn.writer();
    writer.queue_headers(1, &grpc_headers(&authority, grpc::GET_QUOTE), false);
    writer.queue_data(1, &grpc::framed(&sample_quote_request()), true);
    writer.flush().await.expect("request sent");
    // The call is over once its trailers (END_STREAM) arrive.
    loop {
        let frame = conn
            .read_frame(BOUND)
            .await
            .expect("a frame")
            .expect("open");
        if frame.kind == kind::HEADERS && frame.ends_stream() {
            break;
        }
    }

    flood(&mut conn);
    // The server may close while the flood is still being written.
    let _ = conn.writer().flush().await;

    let goaway = conn.expect_close(BOUND).await.expect("closed in time");
    let goaway = assert_calm(goaway, "too_many_control_frames");
    assert_eq!(goaway.last_stream_id, 1, "stream 1 was served");
    others_are_served(&server).await;
}

/// Attack D of issue 14: WINDOW_UPDATEs on a closed stream, which h2 drops
/// without counting, so no reset limit fires. Past the control-frame budget
/// the client is sent away.
#[tokio::test]
async fn window_updates_on_a_closed_stream_get_enhance_your_calm() {
    flood_is_sent_away(|conn| {
        for _ in 0..2000 {
            conn.writer().queue_window_update(1, 1);
        }
    })
    .await;
}

/// A SETTINGS flood (each one obliges an ACK) gets the same GOAWAY.
#[tokio::test]
async fn a_settings_flood_gets_enhance_your_calm() {
    flood_is_sent_away(|conn| {
        for _ in 0..2000 {
            conn.writer().queue_settings(&[]);
        }
    })
    .await;
}

/// A large download is never told off, however many WINDOW_UPDATEs it
/// sends on its open streams and on the connection. Given a control-frame
/// budget of 20 and a window-update budget of 20 (so the DATA sent must
/// pay for the updates, issue 23), a client with 64 KiB windows downloads
/// four full pages (5 MB each) at once on one connection; it sends far
/// more than 20 WINDOW_UPDATEs, every page arrives whole, the server sends
/// no GOAWAY, and the same connection then serves a GetQuote.
#[tokio::test]
async fn a_large_download_is_not_told_off() {
    let server = start_with(Config {
        control_frame_budget: 20,
        window_update_budget: 20,
        ..Config::default()
    })
    .await;
    let (h2, counts) = counted_h2(server.addr()).await;

    // When: four full pages at once, each in a task of its own.
    let mut pages = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let mut h2 = h2.clone();
        let request = grpc_request(
            server.addr(),
            LIST_ROUTES,
            &grpc::full_page_request(),
            false,
        );
        pages.spawn(async move {
            read_reply(h2.send_request(request).await.expect("a response")).await
        });
    }
    let replies = tokio::time::timeout(BOUND, pages.join_all())
        .await
        .expect("the pages arrive in time");

    // Then: whole pages, many updates, no GOAWAY.
    for reply in &replies {
        assert_eq!(reply.grpc_status.as_deref(), Some("0"));
        assert!(reply.message.len() > 5_000_000, "{}", reply.message.len());
    }
    let stream_updates = FramesCounted::get(&counts.stream_window_updates);
    let connection_updates = FramesCounted::get(&counts.connection_window_updates);
    assert!(
        stream_updates > 20 && connection_updates > 20,
        "{stream_updates} stream and {connection_updates} connection WINDOW_UPDATEs"
    );
    let mut h2 = h2;
    let quote = grpc_request(server.addr(), GET_QUOTE, &sample_quote_request(), false);
    let reply = read_reply(h2.send_request(quote).await.expect("a response")).await;
    assert_eq!(reply.grpc_status.as_deref(), Some("0"));
    assert_eq!(FramesCounted::get(&counts.goaways), 0);
}
