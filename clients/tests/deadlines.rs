//! Lever 6's clients, run as a reader runs them, against in-process servers
//! with faults on (`--fault-delay-ms`, `--fault-unavailable-percent`).
//!
//! Run with `cargo test -p routing-clients --test deadlines`. The server's
//! own counts (its `/metrics`) are checked by verify.sh, which starts the
//! server with them; here the clients' own facts are asserted.

mod support;

use routing_server::Config;
use support::{LIMIT, json_line, run_bin, start_server, start_server_with};

const DEADLINE: &str = env!("CARGO_BIN_EXE_deadline-client");
const RETRY: &str = env!("CARGO_BIN_EXE_retry-client");

/// Given a server that takes 2 s per GetQuote, when the client gives its
/// calls a 100 ms deadline on the channel and then on each request, then
/// only the request's deadline is on the wire, and both end every call.
#[tokio::test]
async fn only_the_request_deadline_reaches_the_wire() {
    let server = start_server_with(Config {
        fault_delay_ms: 2000,
        ..Config::default()
    })
    .await;
    let target = server.addr().to_string();

    let args = [
        "--target",
        &target,
        "--phases",
        "endpoint_timeout,request_deadline",
        "--rate",
        "20",
        "--phase-secs",
        "1",
        "--deadline-ms",
        "100",
        "--settle-ms",
        "0",
    ];
    let line = json_line(&run_bin(DEADLINE, &args, LIMIT).await);

    assert_eq!(line["client"], "deadline");
    let phases = &line["phases"];
    // Endpoint::timeout: no header, every call ended by tonic's own timer.
    assert_eq!(
        phases["endpoint_timeout"]["grpc_timeout_on_wire"],
        serde_json::Value::Null
    );
    assert_eq!(
        phases["endpoint_timeout"]["ended_by_client_timer"], 20,
        "{line}"
    );
    // Request::set_timeout: the header, 100 ms in microseconds; no call succeeds.
    assert_eq!(
        phases["request_deadline"]["grpc_timeout_on_wire"],
        "100000u"
    );
    assert!(
        phases["request_deadline"]["statuses"].get("OK").is_none(),
        "{line}"
    );
    assert!(
        line["phases"]["request_deadline"].get("server").is_none(),
        "no --metrics"
    );
}

/// Given a server in an outage and a healthy one, when retry-client runs its
/// three phases, then the naive policy sends 5 times per call, the throttled
/// one spends half its bucket on the first call and then sends once per
/// call, and the healthy server sees exactly one send per call.
#[tokio::test]
async fn throttling_keeps_an_outage_from_multiplying() {
    let outage = start_server_with(Config {
        fault_unavailable_percent: 100,
        ..Config::default()
    })
    .await;
    let healthy = start_server().await;
    let (outage, healthy) = (outage.addr().to_string(), healthy.addr().to_string());

    let args = [
        "--target",
        &outage,
        "--healthy-target",
        &healthy,
        "--calls",
        "20",
    ];
    let line = json_line(&run_bin(RETRY, &args, LIMIT).await);

    let phases = &line["phases"];
    assert_eq!(phases["naive"]["attempts"], 100, "{line}");
    // 10 tokens: 5 sends take it to 5 (not above half), then 1 per call.
    assert_eq!(phases["throttled"]["attempts"], 5 + 19, "{line}");
    assert_eq!(phases["healthy"]["attempts"], 20, "{line}");
    assert_eq!(phases["healthy"]["multiplier"], 1.0, "{line}");
}

/// The healthy phase needs its server: a usage error, exit 2, naming the flag.
#[tokio::test]
async fn the_healthy_phase_without_its_server_is_a_usage_error() {
    let output = run_bin(RETRY, &["--target", "127.0.0.1:1"], LIMIT).await;
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--healthy-target"));
    for bin in [DEADLINE, RETRY] {
        let help = run_bin(bin, &["--help"], LIMIT).await;
        assert!(help.status.success(), "{bin} --help");
    }
}
