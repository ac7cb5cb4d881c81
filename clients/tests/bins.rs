//! Each client binary, run as a reader runs it, against an in-process server:
//! one JSON line on stdout, facts measured on the wire, clear failures.

mod support;

use std::time::Duration;

use support::{json_line, run_bin, start_server};

const FOOTGUN: &str = env!("CARGO_BIN_EXE_footgun-client");
const POOLED: &str = env!("CARGO_BIN_EXE_pooled-client");
const GZIP: &str = env!("CARGO_BIN_EXE_gzip-client");
const KEEPALIVE: &str = env!("CARGO_BIN_EXE_keepalive-client");
const LIMIT: Duration = Duration::from_secs(60);

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
}

/// With the defaults (8 s idle, 5 s keepalive) the connection survives, and
/// PING frames crossed the wire while no call was in flight.
#[tokio::test]
async fn keepalive_survives_an_idle_gap_with_pings() {
    let server = start_server().await;
    let target = server.addr().to_string();

    let line = json_line(&run_bin(KEEPALIVE, &["--target", &target], LIMIT).await);

    assert_eq!(line["client"], "keepalive");
    assert_eq!(line["result"], "SURVIVED");
    assert_eq!(line["connections"], 1);
    assert_eq!(line["idle_s"], 8);
    // A PING frame is 17 bytes: a 9-byte header and 8 bytes of payload.
    assert!(
        line["idle_bytes_sent"].as_u64().is_some_and(|n| n >= 17),
        "{line}"
    );
    assert!(
        line["idle_bytes_received"]
            .as_u64()
            .is_some_and(|n| n >= 17),
        "{line}"
    );
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
        "--idle-secs",
        "3",
        "--keepalive-secs",
        "3600",
    ];

    let line = json_line(&run_bin(KEEPALIVE, &args, LIMIT).await);

    assert_eq!(line["result"], "SURVIVED");
    assert_eq!(line["idle_bytes_sent"], 0);
    assert_eq!(line["idle_bytes_received"], 0);
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
