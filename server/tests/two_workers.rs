//! The hardening (both rounds' files), shutdown and contract suites again, each server served by
//! two workers instead of one: every connection-level rule must hold on
//! whichever worker a connection lands, and the drain must reach them all.
//! The support module reads this crate's name (`support::workers`); set
//! `ROUTING_TEST_WORKERS` to run every suite with another number.
//!
//! ```console
//! $ cargo test -p routing-server --test two_workers
//! ```

// Each suite declares `mod support` itself, as it must when compiled alone,
// so this crate holds one copy of it per suite.
#![allow(clippy::duplicate_mod)]

#[path = "contract.rs"]
mod contract;
#[path = "hardening.rs"]
mod hardening;
#[path = "hardening_three.rs"]
mod hardening_three;
#[path = "shutdown.rs"]
mod shutdown;

mod support;

/// Given a server started as every suite here starts one, when it serves,
/// then its second worker thread is running in this process: the suites
/// above really are served by more than one worker.
#[tokio::test]
async fn servers_here_run_a_second_worker_thread() {
    // Given: two workers, unless ROUTING_TEST_WORKERS asked for one, which
    // leaves nothing to check here.
    if support::workers() < 2 {
        eprintln!(
            "{} asks for one worker: nothing to check",
            support::WORKERS_ENV
        );
        return;
    }
    let server = support::start().await;

    // When: it serves a call.
    let mut client = support::client(&server).await;
    client
        .get_quote(routing_clients::sample_quote_request())
        .await
        .expect("GetQuote succeeds");

    // Then: a worker thread of its own is listed under /proc/self/task.
    let threads = h2_peer::procfs::Process::new(std::process::id()).threads();
    assert!(threads.iter().any(|t| t.name == "worker-1"), "{threads:?}");
    server.shutdown().await.expect("run returns Ok");
}
