//! Each client binary, run as a reader runs it, against an in-process server:
//! one JSON line on stdout, facts measured on the wire, clear failures.

mod support;

use routing_server::{Config, LocalServer};
use support::{
    FOOTGUN, GZIP, KEEPALIVE, LIMIT, POOLED, json_line, run_bin, start_server, start_server_with,
};

/// The footgun opens one connection per call, counted on the wire.
#[tokio::test]
async fn footgun_opens_a_connection_per_call() {
    let server = start_server().await;
    let target = server.addr().to_string();

    let line = json_line(&run_bin(FOOTGUN, &["--target", &target, "--calls", "20"], LIMIT).await);

    assert_eq!(line["client"], "footgun");
    assert_eq!(line["calls"], 20);
    assert_eq!(line["connections"], 20);
    assert_timings(&line, 20);
}

/// The pooled client makes every call on one connection.
#[tokio::test]
async fn pooled_reuses_one_connection() {
    let server = start_server().await;
    let target = server.url(); // the http:// form is accepted too

    let line = json_line(&run_bin(POOLED, &["--target", &target, "--calls", "20"], LIMIT).await);

    assert_eq!(line["client"], "pooled");
    assert_eq!(line["calls"], 20);
    assert_eq!(line["connections"], 1);
    assert_timings(&line, 20);
}

/// The shape of `total_s` and `median_call_s`, and the one relation between
/// them that holds on any machine: at least half the calls last the median or
/// longer, and the total covers every call, so the median times half the
/// calls cannot exceed the total.
fn assert_timings(line: &serde_json::Value, calls: u32) {
    let total = line["total_s"].as_f64().expect("total_s is a number");
    let median = line["median_call_s"]
        .as_f64()
        .expect("median_call_s is a number");
    assert!(total > 0.0 && median > 0.0, "{line}");
    // Both are rounded to the microsecond: allow that much per term.
    let half = f64::from(calls.div_ceil(2));
    assert!(median * half <= total + half * 1e-6, "{line}");
}

/// Both answers match field for field, and gzip moves under 5% of the bytes.
/// The cost side is in the same line: both fetches timed, the break-even link
/// speed (or, when gzip was not slower, null and a flag saying so), and one
/// small GetQuote request each way, where gzip adds bytes instead of saving them.
#[tokio::test]
async fn gzip_matches_and_shrinks_the_catalog() {
    let server = start_server().await;
    let target = server.addr().to_string();

    let line = json_line(&run_bin(GZIP, &["--target", &target], LIMIT).await);

    assert_eq!(line["client"], "gzip");
    assert_eq!(line["result"], "MATCH");
    assert_eq!(line["routes"], 25);
    let identity = line["identity_wire_bytes"].as_u64().expect("a count");
    let gzip = line["gzip_wire_bytes"].as_u64().expect("a count");
    assert!(
        identity > 4 * 1024 * 1024,
        "identity moved the whole catalog: {identity}"
    );
    assert!(
        gzip * 100 < identity * 5,
        "gzip {gzip} bytes vs identity {identity} bytes"
    );

    // Each fetch is timed, in seconds.
    let identity_s = line["identity_s"].as_f64().expect("seconds");
    let gzip_s = line["gzip_s"].as_f64().expect("seconds");
    assert!(identity_s > 0.0 && gzip_s > 0.0, "{line}");
    // Either gzip was slower and a break-even speed exists, or it was not.
    let not_slower = line["gzip_not_slower"].as_bool().expect("a flag");
    match line["break_even_bit_s"].as_u64() {
        Some(bit_s) => {
            assert!(!not_slower && gzip_s >= identity_s, "{line}");
            // bytes saved × 8 / extra seconds, where the printed seconds
            // (rounded to the microsecond) are precise enough to check it.
            if gzip_s - identity_s > 1e-4 {
                let expected = (identity - gzip) as f64 * 8.0 / (gzip_s - identity_s);
                let ratio = bit_s as f64 / expected;
                assert!((0.9..1.1).contains(&ratio), "{line}");
            }
        }
        None => {
            assert!(line["break_even_bit_s"].is_null(), "{line}");
            assert!(not_slower && gzip_s <= identity_s, "{line}");
        }
    }

    // A small request gains nothing from gzip: it is larger on the wire.
    let quote_identity = line["quote_request_identity_wire_bytes"]
        .as_u64()
        .expect("a count");
    let quote_gzip = line["quote_request_gzip_wire_bytes"]
        .as_u64()
        .expect("a count");
    assert!(quote_identity > 0, "{line}");
    assert!(quote_gzip > quote_identity, "{line}");
}

/// Given the chapter's server, when keepalive-client runs only its idle
/// phase with the defaults (8 s idle, 5 s keepalive), then the connection
/// survives, and PING frames crossed the wire both ways while no call was in
/// flight. The other phases' fields are absent.
#[tokio::test]
async fn keepalive_survives_an_idle_gap_with_pings() {
    let server = start_server().await;
    let target = server.addr().to_string();
    let args = ["--target", &target, "--phases", "idle"];

    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);

    assert_eq!(line["client"], "keepalive");
    assert_eq!(line["result"], "SURVIVED");
    assert_eq!(line["connections"], 1);
    assert_eq!(line["idle_s"], 8);
    // A PING frame is 17 bytes: a 9-byte header and 8 bytes of payload.
    for field in ["idle_bytes_sent", "idle_bytes_received"] {
        assert!(line[field].as_u64().is_some_and(|n| n >= 17), "{line}");
    }
    // The client's own PING after 5 s, and the server's.
    for field in ["idle_pings_sent", "idle_pings_received"] {
        assert!(line[field].as_u64().is_some_and(|n| n >= 1), "{line}");
    }
    assert!(line.get("dead_peer").is_none(), "{line}");
    assert!(line.get("ping_floor").is_none(), "{line}");
}

/// Without keepalive nothing is sent while idle: the bytes above are PINGs.
#[tokio::test]
async fn without_pings_an_idle_gap_is_silent() {
    let server = start_server().await;
    let target = server.addr().to_string();
    // Pings every hour on the client; the server's come after 5 s, so idle 3 s.
    let args = [
        "--target",
        &target,
        "--phases",
        "idle",
        "--idle-secs",
        "3",
        "--keepalive-secs",
        "3600",
    ];

    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);

    assert_eq!(line["result"], "SURVIVED");
    assert_eq!(line["idle_bytes_sent"], 0);
    assert_eq!(line["idle_bytes_received"], 0);
    assert_eq!(line["idle_pings_sent"], 0);
    assert_eq!(line["idle_pings_received"], 0);
}

/// Given the chapter's server behind the client's own relays, when the
/// relays go silent after a first call, then the keepalive channel (PING
/// after 1 s, ack within 1 s) reports the dead peer after about 2 s, and the
/// control channel without keepalive is still hanging at three times that.
#[tokio::test]
async fn keepalive_catches_a_dead_peer_that_hangs_a_channel_without() {
    let server = start_server().await;
    let target = server.addr().to_string();
    let args = ["--target", &target, "--phases", "dead-peer"];

    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);

    assert_eq!(line["dead_peer"], "DETECTED", "{line}");
    let detect_s = line["dead_peer_detect_s"].as_f64().expect("a time");
    // Interval + timeout is 2 s; the PING may go out up to one interval early.
    assert!((1.0..10.0).contains(&detect_s), "{line}");
    assert_eq!(line["no_keepalive"], "STILL_HANGING", "{line}");
    let waited_s = line["no_keepalive_waited_s"].as_f64().expect("a time");
    assert!(waited_s >= 3.0 * detect_s, "{line}");
    assert!(line.get("result").is_none(), "{line}");
}

/// Runs only the ping-floor phase against `server` and returns its outcome
/// and the PINGs sent, after checking that no other phase reported.
async fn ping_floor(server: &LocalServer, ping_ms: &str, wait_secs: &str) -> (String, u64) {
    let target = server.addr().to_string();
    let args = [
        "--target",
        &target,
        "--phases",
        "ping-floor",
        "--fast-ping-ms",
        ping_ms,
        "--ping-floor-wait-secs",
        wait_secs,
    ];
    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);
    assert!(line.get("result").is_none(), "{line}");
    assert!(line.get("dead_peer").is_none(), "{line}");
    let outcome = line["ping_floor"].as_str().expect("an outcome").to_string();
    let pings = line["ping_floor_pings_sent"].as_u64().expect("a count");
    (outcome, pings)
}

/// Given the chapter's server (floor 5 s, PINGs without calls permitted),
/// when a channel pings every 200 ms while idle, then the server answers with
/// GOAWAY ENHANCE_YOUR_CALM "too_many_pings", read off the wire, and only
/// after the strikes it forgives (two) are used up.
#[tokio::test]
async fn pinging_below_the_floor_gets_too_many_pings() {
    let server = start_server().await;

    let (outcome, pings) = ping_floor(&server, "200", "10").await;

    assert_eq!(outcome, "TOO_MANY_PINGS");
    assert!(pings >= 3, "GOAWAY after only {pings} PINGs");
}

/// Given a server whose floor is scaled down from 5 s to 1 s, when a channel
/// pings every second while idle, at the floor and not below it, then six
/// seconds pass without a GOAWAY: a well-behaved client is never punished.
/// At least four PINGs must have gone out for that to mean anything: the
/// first starts the server's clock, and a pinger below the floor is sent
/// away at the third strike, its fourth PING.
#[tokio::test]
async fn pinging_at_the_floor_is_never_punished() {
    let server = start_server_with(Config {
        min_ping_interval_secs: 1,
        ..Config::default()
    })
    .await;

    let (outcome, pings) = ping_floor(&server, "1000", "6").await;

    assert_eq!(outcome, "NO_GOAWAY");
    assert!(pings >= 4, "only {pings} PINGs in 6 s");
}

/// A server that is not there: exit 1, nothing on stdout, the reason on stderr.
#[tokio::test]
async fn unreachable_server_fails_clearly() {
    let server = start_server().await;
    let target = server.addr().to_string();
    server.shutdown().await.expect("clean shutdown");

    for bin in [FOOTGUN, POOLED, GZIP, KEEPALIVE] {
        let output = run_bin(bin, &["--target", &target], LIMIT).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{bin}: {stderr}");
        assert!(output.stdout.is_empty(), "{bin} printed on stdout");
        assert!(
            stderr.contains("error: cannot connect to"),
            "{bin}: {stderr}"
        );
    }
}

/// Bad flags are usage errors (exit 2) with a hint; --help works everywhere.
#[tokio::test]
async fn bad_input_is_a_usage_error_and_help_works() {
    for bin in [FOOTGUN, POOLED, GZIP, KEEPALIVE] {
        let output = run_bin(bin, &["--target", "localhost"], LIMIT).await;
        assert_eq!(output.status.code(), Some(2), "{bin}");
        assert!(
            String::from_utf8_lossy(&output.stderr).contains("host:port"),
            "{bin}"
        );

        let help = run_bin(bin, &["--help"], LIMIT).await;
        assert!(help.status.success(), "{bin} --help");
        assert!(
            String::from_utf8_lossy(&help.stdout).contains("--target"),
            "{bin} --help"
        );
    }
    let output = run_bin(FOOTGUN, &["--calls", "0"], LIMIT).await;
    assert_eq!(output.status.code(), Some(2), "--calls 0 is refused");
}

/// A TLS server with fresh dev certificates (in a directory of its own,
/// `tag` naming it), issuing session tickets or not; returns the server and
/// the CA file a client trusts.
async fn start_tls_server(tag: &str, tickets: bool) -> (LocalServer, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("clients-tls-{tag}-{}", std::process::id()));
    let certs =
        routing_server::cmd::dev_cert::generate(&routing_server::cmd::dev_cert::SERVER_NAMES)
            .expect("certificates made");
    certs.write_to(&dir).expect("certificates written");
    let server = start_server_with(Config {
        tls_cert: Some(dir.join("server.pem")),
        tls_key: Some(dir.join("server.key")),
        tls_session_tickets: tickets,
        ..Config::default()
    })
    .await;
    (server, dir.join("ca.pem"))
}

/// Over TLS (`--tls-ca`), the footgun pays a handshake per call and the
/// pooled client one in all; the line names the version, and the footgun's
/// connections after the first resume the session its first was given,
/// unless the server issues no tickets. Without `--tls-ca` the line has no
/// `tls` at all (the plaintext tests above see the same line as before).
#[tokio::test]
async fn over_tls_the_line_counts_handshakes_and_resumptions() {
    for (tickets, resumed) in [(true, 9), (false, 0)] {
        let (server, ca) = start_tls_server(&format!("tickets-{tickets}"), tickets).await;
        let target = format!("localhost:{}", server.addr().port());
        let ca = ca.to_str().expect("UTF-8 path");
        let args = ["--target", &target, "--tls-ca", ca, "--calls", "10"];

        let footgun = json_line(&run_bin(FOOTGUN, &args, LIMIT).await);
        assert_eq!(footgun["connections"], 10);
        assert_eq!(footgun["tls"]["version"], "TLSv1_3", "{footgun}");
        assert_eq!(footgun["tls"]["handshakes"], 10, "{footgun}");
        assert_eq!(
            footgun["tls"]["resumed"], resumed,
            "tickets {tickets}: {footgun}"
        );

        let pooled = json_line(&run_bin(POOLED, &args, LIMIT).await);
        assert_eq!(pooled["connections"], 1);
        assert_eq!(pooled["tls"]["handshakes"], 1, "{pooled}");
    }
    let (server, _) = start_tls_server("plain-line", true).await;
    let plain = start_server().await;
    drop(server);
    let line = json_line(
        &run_bin(
            FOOTGUN,
            &["--target", &plain.addr().to_string(), "--calls", "2"],
            LIMIT,
        )
        .await,
    );
    assert!(line.get("tls").is_none(), "{line}");
}
