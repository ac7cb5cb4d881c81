//! `window-client`, run as a reader runs it, against an in-process server:
//! the windows it reports are the ones its frames granted on the wire.

mod support;

use std::time::Duration;

use routing_server::routing::catalog::CARRIER_PADDING;
use serde_json::Value;
use support::{json_line, run_bin, start_server};

const WINDOW: &str = env!("CARGO_BIN_EXE_window-client");
const LIMIT: Duration = Duration::from_secs(60);

/// Given the chapter's server behind a short emulated link (20 ms round
/// trip, no rate), when window-client runs with small fetches, then every
/// phase reports the windows its setting sends on the wire: 65,535 for the
/// small window, hyper's 2 MiB stream and 5 MiB connection windows by
/// default, 65,535 at the start of the adaptive window and growth from
/// there; every route arrives; and each ceiling is the windows ÷ 20 ms.
#[tokio::test]
async fn reports_the_windows_granted_on_the_wire() {
    // Given
    let server = start_server().await;
    let target = server.addr().to_string();
    let args = [
        "--target",
        &target,
        "--rtt-ms",
        "20",
        "--small-routes",
        "1",
        "--routes",
        "3",
        "--fetches",
        "2",
    ];

    // When
    let line = json_line(&run_bin(WINDOW, &args, LIMIT).await);

    // Then
    assert_eq!(line["client"], "window");
    assert_eq!(line["link"]["rtt_ms"], 20.0, "{line}");
    let windows = |phase: &str| {
        let p = &line[phase];
        [
            "stream_window",
            "connection_window",
            "grown_stream_window",
            "grown_connection_window",
        ]
        .map(|field| {
            p[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{phase}.{field}: {line}"))
        })
    };
    let small = 65_535;
    assert_eq!(windows("small"), [small; 4]);
    assert_eq!(windows("one_channel"), [small; 4]);
    assert_eq!(windows("n_channels"), [small; 4]);
    let (mib2, mib5) = (2 * 1024 * 1024, 5 * 1024 * 1024);
    assert_eq!(windows("tonic_default"), [mib2, mib5, mib2, mib5]);
    let [stream, connection, grown_stream, grown_connection] = windows("adaptive");
    assert_eq!([stream, connection], [small, small]);
    // hyper's BDP estimation never shrinks a window, and stops at 16 MiB.
    let bdp_limit = 16 * 1024 * 1024;
    assert!((small..=bdp_limit).contains(&grown_stream), "{line}");
    assert!((small..=bdp_limit).contains(&grown_connection), "{line}");

    for (phase, routes, channels) in [
        ("small", 1, 1),
        ("tonic_default", 3, 1),
        ("adaptive", 3, 1),
        ("one_channel", 2, 1),
        ("n_channels", 2, 2),
    ] {
        let p = &line[phase];
        assert_eq!(p["routes"], routes, "{phase}: {line}");
        assert_eq!(p["channels"], channels, "{phase}: {line}");
        // Every route carries at least one leg of padding, uncompressed.
        let bytes = p["bytes"].as_u64().expect("a count");
        assert!(bytes >= routes * CARRIER_PADDING as u64, "{phase}: {line}");
        assert!(p["s"].as_f64().is_some_and(|s| s > 0.0), "{phase}: {line}");
    }

    // The ceilings are arithmetic on the windows: bytes × 8 ÷ 20 ms.
    let ceiling = |p: &Value| p["window_ceiling_mbit_s"].as_f64().expect("a ceiling");
    let mbit = |bytes: u64| (bytes as f64 * 8.0 / 0.020 / 1e3).round() / 1e3;
    assert_eq!(ceiling(&line["small"]), mbit(small));
    // Two streams on one channel share one 65,535-byte connection window;
    // two channels have one each.
    assert_eq!(ceiling(&line["one_channel"]), mbit(small));
    assert_eq!(ceiling(&line["n_channels"]), mbit(2 * small));
    // tonic's default: one stream, held to its 2 MiB stream window.
    assert_eq!(ceiling(&line["tonic_default"]), mbit(mib2));
}

/// A fetch count the client cannot split into phases is refused by name,
/// before anything is sent.
#[tokio::test]
async fn refuses_a_single_fetch_for_the_channel_phases() {
    let output = run_bin(WINDOW, &["--fetches", "1"], LIMIT).await;

    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--fetches"), "{stderr}");
    assert!(output.stdout.is_empty());
}
