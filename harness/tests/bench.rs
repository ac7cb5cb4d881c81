//! The benchmark harness end to end, on a small scale: `bench` against the
//! workspace's server, in this process, compared with itself. It asserts
//! the table's shape, not its numbers: performance targets are checked by
//! running `bench` by hand.
//!
//! ```console
//! $ cargo test -p harness --test bench
//! ```

use harness::{
    bench::{self, BenchKnobs, Server},
    measure::monitor::ServerProcess,
};
use routing_server::{Config, LocalServer};

/// The server with the chapter's settings on `127.0.0.1:0`, on one worker
/// as the server's own tests run it.
async fn start() -> LocalServer {
    let config = Config {
        worker_threads: Some(1),
        ..Config::default()
    };
    LocalServer::start(config).await.expect("server starts")
}

#[tokio::test]
async fn bench_measures_every_phase_on_both_servers() {
    let server = start().await;
    let target: harness::LoopbackTarget = server.addr().to_string().parse().expect("loopback");
    let servers: Vec<Server> = (0..2)
        .map(|_| Server {
            target,
            process: ServerProcess::locate(server.addr(), Some(std::process::id())),
        })
        .collect();
    let knobs = BenchKnobs {
        calls: 40,
        concurrency: 4,
        channels: vec![1, 2],
        warmup: 10,
        list_calls: 2,
        list_concurrency: 1,
        idle_conns: 20,
        max_secs: 20,
    };
    let measured = bench::run(&servers, &knobs).await.expect("bench runs");
    for m in &measured {
        assert_eq!(m.quote.len(), 2, "one GetQuote run per channel count");
        for run in m.runs() {
            assert_eq!(run.errors, 0, "{:?}", run.first_error);
            assert!(run.calls > 0 && run.p50.is_some() && run.p99.is_some());
        }
        assert_eq!(m.idle.opened, 20);
    }
    let table = bench::table(&servers, &knobs, &measured);
    for label in [
        "GetQuote -c 4 on 1 conn: server CPU per call (µs)",
        "GetQuote -c 4 on 2 conns: server CPU per call (µs)",
        "ListRoutes page 25 -c 1 identity: server CPU per call (ms)",
        "ListRoutes page 25 -c 1 gzip: server CPU per call (ms)",
        "server RSS per idle HTTP/2 connection (KiB, 20 held)",
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in\n{table}"));
        // Two numbers read from /proc (0.0 is possible at this scale: CPU
        // time comes in 10 ms ticks), then the ratio, or "-" when it is 0/0.
        let cells: Vec<&str> = row[label.len()..].split_whitespace().collect();
        assert_eq!(cells.len(), 3, "{row}");
        assert!(
            cells[..2].iter().all(|c| c.parse::<f64>().is_ok()),
            "measured on both: {row}"
        );
        assert!(cells[2].ends_with('×') || cells[2] == "-", "{row}");
    }
    let errors = table
        .lines()
        .find(|l| l.starts_with("errors"))
        .expect("errors row");
    assert!(
        errors.split_whitespace().skip(1).take(2).all(|v| v == "0"),
        "{errors}"
    );
}
