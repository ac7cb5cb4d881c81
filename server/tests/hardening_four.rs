//! Hardening, round four (issue 43), in-process where it can be: a
//! malformed `grpc-timeout` gets `INTERNAL` before the handler; a call
//! that brought no deadline ends at the server's default one; bad flags
//! name themselves and every start-up error is exit 2; idle sockets cannot
//! keep a scrape off the metrics port. Behaviour only, never timing or
//! memory: the numbers are the harness's (`abuse`).
//!
//! ```console
//! $ cargo test -p routing-server --test hardening_four
//! ```

mod support;

use std::{
    net::SocketAddr,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use h2_frames::{flag, kind};
use h2_peer::{grpc, raw::RawConn};
use http_body_util::BodyExt;
use routing_server::{
    Config, LocalServer,
    knobs::{METRICS_MAX_CONNECTIONS, METRICS_MAX_REQUEST_BYTES},
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
};

use support::{GET_QUOTE, grpc_request, http_get, metrics_addr, raw_h2};

/// Long enough for anything that should happen on loopback, and far
/// shorter than the handler's injected delay below.
const BOUND: Duration = Duration::from_secs(10);

/// Values the spec does not allow: 9 digits, a sign, no unit, no digits,
/// an unknown unit, a space, nothing, and 1 KiB.
fn malformed_timeouts() -> Vec<String> {
    let mut values: Vec<String> = ["100000000H", "-5S", "5", "S", "5X", " 5S", ""]
        .map(String::from)
        .to_vec();
    values.push("1".repeat(1023) + "S");
    values
}

/// A server whose GetQuote waits 60 s, with metrics on.
async fn slow_server_with_metrics(default_deadline_secs: u64, delay_ms: u64) -> LocalServer {
    support::start_with(Config {
        fault_delay_ms: delay_ms,
        default_deadline_secs,
        metrics_listen: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        ..Config::default()
    })
    .await
}

/// A scrape: the status code (0 for an empty reply) and the body.
async fn scrape(addr: SocketAddr) -> (u16, String) {
    http_get(addr, "GET", "/metrics").await
}

/// The value of the sample `name{labels}`, or 0 if it is not there yet.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().expect("a number"))
        })
        .unwrap_or(0.0)
}

fn quote_ended(text: &str, status: &str) -> f64 {
    sample(
        text,
        &format!(
            "grpc_server_call_duration_seconds_count{{grpc_method=\"{}\",grpc_status=\"{status}\"}}",
            GET_QUOTE.trim_start_matches('/')
        ),
    )
}

/// Issue 43, attack 2, on raw HTTP/2 frames: GetQuote with each malformed
/// `grpc-timeout`, on one connection, against a handler that would wait
/// 60 s. Each stream is answered trailers-only (one HEADERS frame that
/// ends the stream, no DATA) well before the handler could have answered,
/// and the A66 layer records each call as `INTERNAL`.
#[tokio::test]
async fn malformed_grpc_timeouts_get_internal_on_the_wire() {
    // Given: a slow GetQuote (60 s) with metrics on.
    let server = slow_server_with_metrics(0, 60_000).await;
    let authority = server.addr().to_string();
    let mut conn = RawConn::connect(server.addr()).await.expect("connects");
    conn.handshake().await.expect("handshake");
    let values = malformed_timeouts();
    for (i, value) in values.iter().enumerate() {
        // When: a call carries the value.
        let stream = 1 + 2 * u32::try_from(i).expect("few streams");
        let mut headers = grpc::request_headers(&authority, GET_QUOTE, grpc::CONTENT_TYPE).to_vec();
        headers.push(("grpc-timeout", value.as_str()));
        let writer = conn.writer();
        writer.queue_headers(stream, &headers, false);
        writer.queue_data(stream, &grpc::framed_quote(), true);
        writer.flush().await.expect("request sent");
        // Then: its answer is one HEADERS frame that ends the stream.
        let started = Instant::now();
        loop {
            let frame = conn
                .read_frame(BOUND.saturating_sub(started.elapsed()))
                .await
                .unwrap_or_else(|e| panic!("{value:?}: {e}"))
                .expect("a frame");
            if frame.stream_id != stream {
                continue; // SETTINGS, WINDOW_UPDATE, PING
            }
            assert_eq!(
                frame.kind,
                kind::HEADERS,
                "{value:?}: no DATA, trailers only"
            );
            assert!(frame.has_flag(flag::END_STREAM), "{value:?}: trailers only");
            break;
        }
    }
    // And: the A66 layer saw each as INTERNAL, and none as anything else.
    let (_, text) = scrape(metrics_addr(&server)).await;
    assert_eq!(
        quote_ended(&text, "INTERNAL"),
        values.len() as f64,
        "{text}"
    );
    assert_eq!(quote_ended(&text, "OK"), 0.0);
}

/// The same calls through hyper's HTTP/2 client, which decodes what the
/// raw client cannot (HPACK): `grpc-status` 13 and a message that names
/// the header; a well-formed deadline is still honoured.
#[tokio::test]
async fn malformed_grpc_timeouts_are_named_in_the_message() {
    // Given: a slow GetQuote (60 s).
    let server = slow_server_with_metrics(0, 60_000).await;
    let mut h2 = raw_h2(server.addr()).await;
    for value in malformed_timeouts() {
        // When: a call carries the value.
        let mut request = grpc_request(
            server.addr(),
            GET_QUOTE,
            &routing_clients::sample_quote_request(),
            false,
        );
        request.headers_mut().insert(
            "grpc-timeout",
            http::HeaderValue::from_str(&value).expect("a header value"),
        );
        let response = tokio::time::timeout(BOUND, h2.send_request(request))
            .await
            .expect("answered in time")
            .expect("a response");
        // Then: INTERNAL "malformed grpc-timeout ...".
        let headers = response.headers().clone();
        let _ = response.into_body().collect().await;
        assert_eq!(
            headers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"13"[..]),
            "{value:?}: {headers:?}"
        );
        let message = headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        assert!(
            message.starts_with("malformed%20grpc-timeout")
                || message.starts_with("malformed grpc-timeout"),
            "{value:?}: {message}"
        );
    }
}

/// One call through hyper's client with `grpc-timeout` (or none): its
/// `grpc-status` and `grpc-message`.
async fn quote_with_timeout(
    server: &LocalServer,
    timeout: Option<&'static str>,
) -> (String, String) {
    let mut h2 = raw_h2(server.addr()).await;
    let mut request = grpc_request(
        server.addr(),
        GET_QUOTE,
        &routing_clients::sample_quote_request(),
        false,
    );
    if let Some(timeout) = timeout {
        request
            .headers_mut()
            .insert("grpc-timeout", http::HeaderValue::from_static(timeout));
    }
    let response = tokio::time::timeout(BOUND, h2.send_request(request))
        .await
        .expect("answered in time")
        .expect("a response");
    let mut headers = response.headers().clone();
    let collected = tokio::time::timeout(BOUND, response.into_body().collect())
        .await
        .expect("ends in time")
        .expect("a body");
    if let Some(trailers) = collected.trailers() {
        headers.extend(trailers.clone());
    }
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &http::HeaderValue| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    (text("grpc-status"), text("grpc-message"))
}

/// Issue 43, attack 3: a call that brings no deadline ends with
/// `DEADLINE_EXCEEDED` at the server's default deadline (1 s here), while
/// its handler would wait 2 s; a client's own deadline wins either way:
/// 5 s lets the call finish, 500 ms ends it with the client's message.
#[tokio::test]
async fn calls_without_a_deadline_end_at_the_default_and_the_clients_wins() {
    // Given: GetQuote waits 2 s; the default deadline is 1 s.
    let server = slow_server_with_metrics(1, 2_000).await;
    // When: no grpc-timeout. Then: the default deadline ends the call.
    let (status, message) = quote_with_timeout(&server, None).await;
    assert_eq!(status, "4", "{message}");
    assert!(message.contains("--default-deadline-secs"), "{message}");
    // When: a longer deadline of the client's own. Then: it wins.
    let (status, message) = quote_with_timeout(&server, Some("5S")).await;
    assert_eq!(status, "0", "{message}");
    // When: a shorter one. Then: it ends the call, and says so.
    let (status, message) = quote_with_timeout(&server, Some("500m")).await;
    assert_eq!(status, "4", "{message}");
    assert!(message.contains("grpc-timeout"), "{message}");
    assert!(!message.contains("--default-deadline-secs"), "{message}");
    // And: the A66 layer recorded two DEADLINE_EXCEEDED and one OK.
    let (_, text) = scrape(metrics_addr(&server)).await;
    assert_eq!(quote_ended(&text, "DEADLINE_EXCEEDED"), 2.0, "{text}");
    assert_eq!(quote_ended(&text, "OK"), 1.0, "{text}");
}

/// Runs `routing-server` with `args` (and `--listen 127.0.0.1:0` unless
/// `args` has a `--listen`); returns its exit code and stderr. Killed
/// after 20 s: a start-up error must stop it long before.
fn run_server(args: &[&str]) -> (Option<i32>, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_routing-server"));
    if !args.contains(&"--listen") {
        command.args(["--listen", "127.0.0.1:0"]);
    }
    let mut child = command
        .args(args)
        .env_remove("ROUTING_TLS_CERT")
        .env_remove("ROUTING_TLS_KEY")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("routing-server runs");
    let started = Instant::now();
    while child.try_wait().expect("waits").is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            child.kill().expect("kills the server it started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().expect("its output");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Issue 43, attack 4: a bad value names its flag whether it follows `=`
/// or a space, negative or not, and exits 2.
#[test]
fn bad_fault_values_name_their_flag_and_exit_2() {
    let cases: [&[&str]; 7] = [
        &["--fault-delay-ms", "-1"],
        &["--fault-delay-ms=-1"],
        &["--fault-delay-ms", "60001"],
        &["--fault-unavailable-percent", "-3"],
        &["--fault-unavailable-percent=-3"],
        &["--fault-unavailable-percent", "101"],
        &["--default-deadline-secs", "-1"],
    ];
    for args in cases {
        let (code, stderr) = run_server(args);
        let flag = args[0].split('=').next().expect("a flag");
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

/// Every start-up error that is the configuration's is exit 2: a gRPC port
/// or a metrics port that another socket holds; `--help` says so.
#[test]
fn ports_in_use_exit_2_and_help_lists_exit_codes() {
    // Given: a port some other socket listens on.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = taken.local_addr().expect("an address").to_string();
    // Then: as the gRPC address, exit 2 naming it.
    let (code, stderr) = run_server(&["--listen", &addr]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains(&addr) && stderr.contains("--listen"),
        "{stderr}"
    );
    // And: as the metrics address, exit 2 naming the flag.
    let (code, stderr) = run_server(&["--metrics-listen", &addr]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--metrics-listen"), "{stderr}");
    // And: --help says what each code means.
    let help = Command::new(env!("CARGO_BIN_EXE_routing-server"))
        .arg("--help")
        .output()
        .expect("runs");
    let help = String::from_utf8_lossy(&help.stdout);
    assert!(
        help.contains("Exit codes:") && help.contains("  2  "),
        "{help}"
    );
    assert!(help.contains("--default-deadline-secs"), "{help}");
}

/// Issue 43, attack 1: eight sockets that send half a request line fill
/// every metrics slot; then a scrape is still answered, because it closes
/// the one that has waited longest. It holds while 200 more half-requests
/// come (and are closed in turn), and each closing is counted.
#[tokio::test]
async fn idle_half_requests_cannot_keep_a_scrape_out() {
    // Given: a server with metrics, and half-requests holding every slot.
    let server = slow_server_with_metrics(0, 0).await;
    let addr = metrics_addr(&server);
    let half_request = |addr| async move {
        let mut stream = TcpStream::connect(addr).await.expect("connects");
        stream.write_all(b"GET /metr").await.expect("writes");
        stream
    };
    let mut idle = Vec::new();
    for _ in 0..METRICS_MAX_CONNECTIONS {
        idle.push(half_request(addr).await);
    }
    // When: a scrape arrives. Then: it is answered.
    let (code, _) = scrape(addr).await;
    assert_eq!(code, 200, "a scrape behind a half-request in every slot");
    // When: 200 more half-requests come, with a scrape every 20.
    for round in 0..10 {
        for _ in 0..20 {
            idle.push(half_request(addr).await);
        }
        let (code, _) = scrape(addr).await;
        assert_eq!(code, 200, "round {round}");
    }
    // Then: the oldest were closed (read sees the end), and counted: of
    // the slots' worth and 200 more half-requests, at most one per slot
    // holds it, so 200 or more were closed, for a newcomer or by the
    // header timeout.
    let mut byte = [0u8; 1];
    let read = tokio::time::timeout(BOUND, idle[0].read(&mut byte))
        .await
        .expect("the oldest is closed in time");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    let (_, text) = scrape(addr).await;
    let dropped = |reason| {
        sample(
            &text,
            &format!("routing_server_metrics_connections_dropped_total{{reason=\"{reason}\"}}"),
        )
    };
    let closed = dropped("closed_idle") + dropped("header_timeout");
    assert!(dropped("closed_idle") > 0.0 && closed >= 200.0, "{text}");
}

/// Given a metrics request whose head outgrows the buffer a slot may hold
/// (`METRICS_MAX_REQUEST_BYTES`), the listener answers 431 and closes,
/// rather than buffering on; a scrape after it is answered.
#[tokio::test]
async fn a_request_head_over_the_buffer_gets_431() {
    let server = slow_server_with_metrics(0, 0).await;
    let addr = metrics_addr(&server);
    let mut stream = TcpStream::connect(addr).await.expect("connects");
    let long = "a".repeat(METRICS_MAX_REQUEST_BYTES + 1);
    let request = format!("GET /metrics HTTP/1.1\r\nhost: {addr}\r\nx-long: {long}\r\n\r\n");
    // The server may close before it has read all of it: a failed write
    // is fine, the answer is what counts.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(BOUND, stream.read_to_end(&mut answer))
        .await
        .expect("closed in time");
    assert!(
        answer.starts_with(b"HTTP/1.1 431"),
        "{:?}",
        String::from_utf8_lossy(&answer[..answer.len().min(40)])
    );
    assert_eq!(scrape(addr).await.0, 200);
}
