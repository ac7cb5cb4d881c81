//! The server's metrics (`--metrics-listen`) against what clients saw on
//! the wire: gRFC A66's per-call metrics with the status each call ended
//! with, the gzip page's compressed size against the DATA bytes a client
//! read, `other` for a method the server does not serve, and a connection
//! counter (the ping floor's GOAWAY). Also: the metrics listener's 404 and
//! 405, and no listener at all when metrics are off.

mod support;

use std::{net::SocketAddr, time::Duration};

use bytes::Bytes;
use h2_frames::kind;
use h2_peer::{
    grpc::{framed, framed_quote, full_page_request},
    h2client::{H2Conn, ReceiveWindows},
    raw::RawConn,
};
use routing_contracts::routing::GetQuoteRequest;
use routing_server::{Config, LocalServer};
use support::{GET_QUOTE, LIST_ROUTES, http_get, metrics_addr, start_with};

const BOUND: Duration = Duration::from_secs(10);
const GRPC: &str = "application/grpc";
const QUOTE: &str = "shipping.routing.v1.RoutingService/GetQuote";
const PAGE: &str = "shipping.routing.v1.RoutingService/ListRoutes";

async fn with_metrics() -> LocalServer {
    start_with(Config {
        // Any address: LocalServer serves metrics on a free loopback port.
        metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Config::default()
    })
    .await
}

async fn scrape(server: &LocalServer) -> String {
    let addr = metrics_addr(server);
    let (code, body) = http_get(addr, "GET", "/metrics").await;
    assert_eq!(code, 200, "{body}");
    body
}

/// The value of the sample `name{labels}` (labels as rendered, in order),
/// or 0 if the series does not exist yet.
fn sample(text: &str, name: &str, labels: &str) -> f64 {
    let series = if labels.is_empty() {
        name.to_owned()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines()
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().expect("a number"))
        })
        .unwrap_or(0.0)
}

fn ended(text: &str, method: &str, status: &str) -> f64 {
    sample(
        text,
        "grpc_server_call_duration_seconds_count",
        &format!("grpc_method=\"{method}\",grpc_status=\"{status}\""),
    )
}

/// Calls `path` with `body` (ended) and reads the whole answer, releasing
/// flow control as it goes: the gRPC status and the DATA bytes received.
async fn call(
    conn: &mut H2Conn,
    path: &str,
    headers: &[(&'static str, &'static str)],
    body: Bytes,
) -> (Option<tonic::Code>, usize) {
    call_open(conn, path, headers, body, true).await
}

/// [`call`], leaving the request open unless `end_stream`.
async fn call_open(
    conn: &mut H2Conn,
    path: &str,
    headers: &[(&'static str, &'static str)],
    body: Bytes,
    end_stream: bool,
) -> (Option<tonic::Code>, usize) {
    let (response, _stream) = conn
        .open_call_with(path, GRPC, headers, body, end_stream, BOUND)
        .await
        .expect("opens")
        .expect("a stream within the bound");
    let response = tokio::time::timeout(BOUND, response)
        .await
        .expect("answers in time")
        .expect("a response");
    let (head, mut body) = response.into_parts();
    if let Some(code) = h2_peer::grpc::grpc_status(&head.headers) {
        return (Some(code), 0);
    }
    let mut bytes = 0;
    while let Some(chunk) = tokio::time::timeout(BOUND, body.data())
        .await
        .expect("in time")
    {
        let chunk = chunk.expect("a chunk");
        bytes += chunk.len();
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    let trailers = body.trailers().await.expect("trailers").expect("trailers");
    (h2_peer::grpc::grpc_status(&trailers), bytes)
}

/// Every A66 metric against what the client saw: one call of each status
/// where it happens, the gzip page's message bytes against the DATA bytes
/// read (minus the one 5-byte prefix), and unknown methods as `other`.
#[tokio::test]
async fn a66_metrics_match_what_the_client_saw() {
    let server = with_metrics().await;
    let mut conn = H2Conn::connect(
        server.addr(),
        ReceiveWindows {
            stream: 16 << 20,
            connection: 16 << 20,
        },
    )
    .await
    .expect("connects");

    let quote = framed_quote();
    let (status, quote_bytes) = call(&mut conn, GET_QUOTE, &[], quote.clone()).await;
    assert_eq!(status, Some(tonic::Code::Ok));

    let invalid = framed(&GetQuoteRequest::default());
    let (status, _) = call(&mut conn, GET_QUOTE, &[], invalid).await;
    assert_eq!(status, Some(tonic::Code::InvalidArgument));

    // A client whose request never arrives, with a 100 ms deadline: the
    // server ends the call at the deadline.
    let deadline = [("grpc-timeout", "100m")];
    let (status, _) = call_open(&mut conn, GET_QUOTE, &deadline, Bytes::new(), false).await;
    assert_eq!(status, Some(tonic::Code::DeadlineExceeded));

    let page = framed(&full_page_request());
    let (status, page_bytes) = call(
        &mut conn,
        LIST_ROUTES,
        &[("grpc-accept-encoding", "gzip")],
        page.clone(),
    )
    .await;
    assert_eq!(status, Some(tonic::Code::Ok));

    for path in [
        "/shipping.routing.v1.RoutingService/Nope",
        "/made.up.Service/Anything",
    ] {
        let (status, _) = call(&mut conn, path, &[], quote.clone()).await;
        assert_eq!(status, Some(tonic::Code::Unimplemented), "{path}");
    }

    let text = scrape(&server).await;
    let started = |method: &str| {
        sample(
            &text,
            "grpc_server_call_started_total",
            &format!("grpc_method=\"{method}\""),
        )
    };
    assert_eq!(started(QUOTE), 3.0);
    assert_eq!(started(PAGE), 1.0);
    assert_eq!(started("other"), 2.0, "unknown methods are `other`");
    assert!(
        !text.contains("Nope") && !text.contains("made.up"),
        "no label from a client's path"
    );
    assert_eq!(ended(&text, QUOTE, "OK"), 1.0);
    assert_eq!(ended(&text, QUOTE, "INVALID_ARGUMENT"), 1.0);
    assert_eq!(ended(&text, QUOTE, "DEADLINE_EXCEEDED"), 1.0);
    assert_eq!(ended(&text, "other", "UNIMPLEMENTED"), 2.0);
    let deadline_s = sample(
        &text,
        "grpc_server_call_duration_seconds_sum",
        &format!("grpc_method=\"{QUOTE}\",grpc_status=\"DEADLINE_EXCEEDED\""),
    );
    assert!(
        (0.1..5.0).contains(&deadline_s),
        "the deadline call took {deadline_s} s"
    );

    // Sizes: one message each way, so the DATA bytes less one prefix.
    let size = |which: &str, method: &str| {
        sample(
            &text,
            &format!("grpc_server_call_{which}_total_compressed_message_size_bytes_sum"),
            &format!("grpc_method=\"{method}\",grpc_status=\"OK\""),
        )
    };
    assert_eq!(size("rcvd", QUOTE), (quote.len() - 5) as f64);
    assert_eq!(size("sent", QUOTE), (quote_bytes - 5) as f64);
    assert_eq!(size("rcvd", PAGE), (page.len() - 5) as f64);
    assert_eq!(size("sent", PAGE), (page_bytes - 5) as f64);
    assert!(
        page_bytes < 1_000_000,
        "the page went out gzipped: {page_bytes} bytes"
    );
    // A66's size buckets, cumulative: the gzip page is under 256 KiB.
    let bucket = |le: &str| {
        sample(
            &text,
            "grpc_server_call_sent_total_compressed_message_size_bytes_bucket",
            &format!("grpc_method=\"{PAGE}\",grpc_status=\"OK\",le=\"{le}\""),
        )
    };
    assert_eq!(bucket("262144"), 1.0);
    assert_eq!(sample(&text, "routing_server_calls_in_flight", ""), 0.0);
    assert_eq!(sample(&text, "routing_server_connections_open", ""), 1.0);
    server.shutdown().await.expect("stops");
}

/// A call the client resets before its trailers is recorded as CANCELLED.
#[tokio::test]
async fn a_reset_call_is_recorded_as_cancelled() {
    let server = with_metrics().await;
    // The default 64 KiB windows: the 5 MB identity page cannot finish.
    let mut conn = H2Conn::connect(server.addr(), ReceiveWindows::default())
        .await
        .expect("connects");
    let (response, mut stream) = conn
        .open_call(LIST_ROUTES, GRPC, framed(&full_page_request()), true, BOUND)
        .await
        .expect("opens")
        .expect("a stream");
    let response = tokio::time::timeout(BOUND, response)
        .await
        .expect("in time")
        .expect("headers");
    stream.send_reset(h2_frames::Reason::CANCEL);
    drop(response);
    let mut cancelled = 0.0;
    for _ in 0..50 {
        cancelled = ended(&scrape(&server).await, PAGE, "CANCELLED");
        if cancelled > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(cancelled, 1.0);
    assert_eq!(
        sample(&scrape(&server).await, "routing_server_calls_in_flight", ""),
        0.0
    );
    server.shutdown().await.expect("stops");
}

/// The ping floor's GOAWAY and the PINGs before it are counted.
#[tokio::test]
async fn a_ping_flood_counts_its_goaway() {
    let server = with_metrics().await;
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");
    for i in 0..100u64 {
        conn.writer().queue_ping(i.to_be_bytes(), false);
    }
    let _ = conn.writer().flush().await;
    let mut goaway = false;
    while let Ok(Some(frame)) = conn.read_frame(BOUND).await {
        goaway |= frame.kind == kind::GOAWAY;
    }
    assert!(goaway, "the flood was sent away");
    let text = scrape(&server).await;
    assert_eq!(
        sample(
            &text,
            "routing_server_goaways_sent_total",
            "reason=\"too_many_pings\""
        ),
        1.0
    );
    assert!(sample(&text, "routing_server_pings_received_total", "") >= 3.0);
    assert_eq!(
        sample(&text, "routing_server_connections_accepted_total", ""),
        1.0
    );
    server.shutdown().await.expect("stops");
}

/// Only `GET /metrics` is answered with metrics.
#[tokio::test]
async fn the_metrics_listener_answers_404_and_405() {
    let server = with_metrics().await;
    let url = server.metrics_url().expect("on");
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/metrics")
        .parse()
        .expect("an address");
    assert_eq!(http_get(addr, "GET", "/").await.0, 404);
    assert_eq!(http_get(addr, "GET", "/metrics/x").await.0, 404);
    assert_eq!(http_get(addr, "POST", "/metrics").await.0, 405);
    let (code, body) = http_get(addr, "GET", "/metrics").await;
    assert_eq!(code, 200);
    assert!(
        body.contains("# TYPE grpc_server_call_started_total counter"),
        "{body}"
    );
    server.shutdown().await.expect("stops");
}

/// Without --metrics-listen nothing listens, as in grpc-go.
#[tokio::test]
async fn metrics_are_off_by_default() {
    let server = start_with(Config::default()).await;
    assert_eq!(server.metrics_url(), None);
    server.shutdown().await.expect("stops");
}

/// The worker count is a gauge, so a pod's CPU limit can be read from its
/// own metrics (`./verify.sh --k8s`): here it is the configured count.
#[tokio::test]
async fn the_worker_count_is_a_gauge() {
    // Given a server told to run two workers
    let server = start_with(Config {
        metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        worker_threads: Some(2),
        ..Config::default()
    })
    .await;
    // When it is scraped
    let text = scrape(&server).await;
    // Then the gauge says two
    assert_eq!(sample(&text, "routing_server_worker_threads", ""), 2.0);
    server.shutdown().await.expect("stops");
}
