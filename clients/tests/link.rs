//! The clients over the emulated link (`--link`, `--rtt-ms`, `--mbit`,
//! `--nat-idle-secs`), run as a reader runs them, against in-process
//! servers. These check what each line says and that the NAT lever behaves;
//! how long things take is verify.sh's business, against physics bounds.

mod support;

use std::time::Duration;

use routing_clients::{
    Link,
    link_proxy::{self, ProxyConfig},
    sample_quote_request,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_server::Config;
use support::{
    FOOTGUN, GZIP, KEEPALIVE, LIMIT, POOLED, ROUTING_LINK, json_line, run_bin, start_server,
    start_server_with,
};
use tokio::{io::AsyncReadExt, net::TcpListener, sync::oneshot};

/// Given a 20 ms link, when footgun and pooled make 5 calls each, then each
/// line names the link and gives the median call in round trips as well as
/// seconds, and the connection counts are as without a link.
#[tokio::test]
async fn footgun_and_pooled_report_round_trips_over_a_link() {
    let server = start_server().await;
    let target = server.addr().to_string();
    let args = ["--target", &target, "--calls", "5", "--rtt-ms", "20"];

    for (bin, connections) in [(FOOTGUN, 5), (POOLED, 1)] {
        let line = json_line(&run_bin(bin, &args, LIMIT).await);

        assert_eq!(line["connections"], connections, "{line}");
        assert_eq!(line["link"]["rtt_ms"], 20.0, "{line}");
        assert!(line["link"]["mbit"].is_null(), "no rate: {line}");
        assert!(line["link"].get("preset").is_none(), "{line}");
        // The median in round trips is the median in seconds over 20 ms.
        let median_s = line["median_call_s"].as_f64().expect("seconds");
        let rtts = line["median_call_rtts"].as_f64().expect("round trips");
        assert!((rtts - median_s / 0.020).abs() <= 0.01, "{line}");
    }
}

/// Without a link, the line is what it always was: no link, no round trips.
#[tokio::test]
async fn without_a_link_the_line_is_unchanged() {
    let server = start_server().await;
    let target = server.addr().to_string();

    let line = json_line(&run_bin(POOLED, &["--target", &target, "--calls", "2"], LIMIT).await);

    assert!(line.get("link").is_none(), "{line}");
    assert!(line.get("median_call_rtts").is_none(), "{line}");
}

/// Given a 50 Mbit/s link, when gzip-client fetches the catalog both ways,
/// then the line says which fetch finished first, and the least time the
/// identity bytes take at the rate: bytes × 8 ÷ rate.
#[tokio::test]
async fn gzip_names_the_winner_over_a_link() {
    let server = start_server().await;
    let target = server.addr().to_string();
    let args = ["--target", &target, "--mbit", "50", "--rtt-ms", "10"];

    let line = json_line(&run_bin(GZIP, &args, LIMIT).await);

    assert_eq!(line["result"], "MATCH");
    let faster = line["faster_end_to_end"].as_str().expect("a winner");
    let (identity_s, gzip_s) = (line["identity_s"].as_f64(), line["gzip_s"].as_f64());
    let expected = if gzip_s < identity_s {
        "gzip"
    } else {
        "identity"
    };
    assert_eq!(faster, expected, "{line}");
    let identity = line["identity_wire_bytes"].as_u64().expect("a count") as f64;
    let over_rate = line["identity_bytes_over_rate_s"]
        .as_f64()
        .expect("seconds");
    assert!((over_rate - identity * 8.0 / 50e6).abs() < 1e-5, "{line}");
}

/// Given a NAT that forgets flows idle for 2 s, a 4 s gap, a quiet server
/// (no PINGs of its own, no ping floor) and a server that PINGs every
/// second: the channel with keepalive (every second) survives; the channel
/// with no keepalive at either end loses its flow, so the call after the gap
/// goes unanswered and is abandoned; the channel without keepalive to the
/// pinging server survives on the server's PINGs.
#[tokio::test]
async fn keepalive_keeps_a_flow_the_nat_forgets_without() {
    let quiet = start_server_with(Config {
        keepalive_secs: 3600,
        min_ping_interval_secs: 0,
        ..Config::default()
    })
    .await;
    let pinging = start_server_with(Config {
        keepalive_secs: 1,
        ..Config::default()
    })
    .await;
    let (target, quiet_target) = (pinging.addr().to_string(), quiet.addr().to_string());
    let args = [
        "--target",
        &target,
        "--quiet-target",
        &quiet_target,
        "--phases",
        "nat",
        "--nat-idle-secs",
        "2",
        "--idle-secs",
        "4",
        "--keepalive-secs",
        "1",
        "--nat-abandon-secs",
        "1",
        "--rtt-ms",
        "10",
    ];

    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);

    assert_eq!(line["nat_idle_timeout_s"], 2, "{line}");
    assert_eq!(line["nat_gap_s"], 4, "{line}");
    assert_eq!(line["nat_quiet_target"], quiet_target.as_str(), "{line}");
    assert_eq!(line["nat_keepalive"], "SURVIVED", "{line}");
    assert!(
        line["nat_keepalive_pings_sent"].as_u64() >= Some(1),
        "{line}"
    );
    assert_eq!(line["nat_no_keepalive"], "ABANDONED", "{line}");
    assert_eq!(line["nat_no_keepalive_pings"], 0, "{line}");
    assert_eq!(line["nat_server_keepalive"], "SURVIVED", "{line}");
    assert!(
        line["nat_server_keepalive_pings_received"].as_u64() >= Some(1),
        "{line}"
    );
    assert!(line.get("result").is_none(), "only the nat phase: {line}");
}

/// The NAT phase without a NAT is a clear error, and a preset that does not
/// exist is a usage error that lists the ones that do.
#[tokio::test]
async fn link_flags_fail_clearly() {
    let server = start_server().await;
    let target = server.addr().to_string();

    let output = run_bin(KEEPALIVE, &["--target", &target, "--phases", "nat"], LIMIT).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--nat-idle-secs"), "{stderr}");

    let output = run_bin(POOLED, &["--target", &target, "--link", "moon"], LIMIT).await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("wan"), "{stderr}");

    let output = run_bin(POOLED, &["--target", &target, "--mbit", "0"], LIMIT).await;
    assert_eq!(output.status.code(), Some(2), "--mbit 0 is refused");

    let output = run_bin(ROUTING_LINK, &["--upstream", "nowhere"], LIMIT).await;
    assert_eq!(output.status.code(), Some(2), "a bad --upstream is refused");
    let help = run_bin(ROUTING_LINK, &["--help"], LIMIT).await;
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    for flag in [
        "--preset",
        "--rtt-ms",
        "--mbit",
        "--nat-idle-secs",
        "--max-connections",
    ] {
        assert!(text.contains(flag), "--help lists {flag}: {text}");
    }
}

/// Given routing-link's core with a 10 ms link and room for one connection
/// in front of the chapter's server: a GetQuote through it is answered; a
/// second connection while the first is open is closed on arrival; and on
/// shutdown the proxy stops once the open connection is gone.
#[tokio::test]
async fn the_proxy_carries_calls_bounds_connections_and_shuts_down() {
    let server = start_server().await;
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let proxy_addr = listener.local_addr().expect("addr");
    let config = ProxyConfig {
        upstream: server.addr().to_string(),
        link: Link {
            one_way_delay: Duration::from_millis(5),
            ..Link::LOCAL
        },
        max_connections: 1,
    };
    let (stop, stopped) = oneshot::channel::<()>();
    let proxy = tokio::spawn(link_proxy::serve(listener, config, async {
        let _ = stopped.await;
    }));

    // When a client calls through the proxy, then the server answers.
    let mut client = RoutingServiceClient::connect(format!("http://{proxy_addr}"))
        .await
        .expect("connect through the proxy");
    let quote = client
        .get_quote(sample_quote_request())
        .await
        .expect("GetQuote through the proxy")
        .into_inner();
    let price = quote.quote.and_then(|q| q.price).expect("a price");
    assert_eq!(price.amount, "1001.00");

    // When a second connection arrives, then it is closed at once.
    let mut second = tokio::net::TcpStream::connect(proxy_addr)
        .await
        .expect("the kernel accepts");
    let mut byte = [0u8; 1];
    let closed = tokio::time::timeout(LIMIT, second.read(&mut byte))
        .await
        .expect("the close arrives");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");

    // When told to stop, with the client gone, then it stops.
    drop(client);
    stop.send(()).expect("the proxy listens");
    tokio::time::timeout(LIMIT, proxy)
        .await
        .expect("the proxy stops")
        .expect("no panic")
        .expect("no error");
}
