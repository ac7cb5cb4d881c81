//! The Hardening table's file-descriptor row, in-process: more idle
//! connections than the open-file limit allows. This file is its own test
//! binary on purpose: it lowers the process's own open-file limit, which
//! must not starve any other test.

mod support;

use std::time::Duration;

use routing_clients::sample_quote_request;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_server::Config;
use tokio::{net::TcpStream, time::Instant};

use support::start_with;

/// Descriptors left free above those already open when the test starts.
const SPARE_FDS: u64 = 60;
/// The most idle connections the attacker tries: more than the spare
/// descriptors allow, since each costs one per side in this process.
const IDLE_TRIES: usize = 100;

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map_or(0, |dir| dir.count() as u64)
}

/// Given a server whose process has only 60 spare file descriptors and no
/// connection cap to stop it first, when a client fills them all with idle
/// connections (until its own connects fail with EMFILE; the server's
/// accepts fail the same way, and it backs off), then once the 1 s
/// handshake timeout has closed the idle connections the server accepted, a
/// new client is served while the attacker still holds every connection.
#[tokio::test]
async fn out_of_file_descriptors_the_server_recovers() {
    let server = start_with(Config {
        max_connections: Some(10_000),
        handshake_timeout_secs: 1,
        ..Config::default()
    })
    .await;
    let (_, hard) = rlimit::Resource::NOFILE.get().expect("read the limit");
    rlimit::Resource::NOFILE
        .set(open_fds() + SPARE_FDS, hard)
        .expect("lower the soft limit");

    // The attacker: idle TCP connections that never send a preface.
    let mut idle = Vec::new();
    for _ in 0..IDLE_TRIES {
        match TcpStream::connect(server.addr()).await {
            Ok(stream) => idle.push(stream),
            Err(e) if e.raw_os_error() == Some(24) => break, // EMFILE
            Err(e) => panic!("unexpected connect error: {e}"),
        }
    }
    let held = idle.len();
    assert!(
        (10..IDLE_TRIES).contains(&held),
        "the spare descriptors should run out after some connections, got {held}"
    );

    // Served again once the handshake timeout has freed the server's side.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let attempt = tokio::time::timeout(Duration::from_secs(2), async {
            // No panic on a refused connection: that is expected at first.
            let channel = tonic::transport::Channel::from_shared(server.url())
                .map_err(|e| e.to_string())?
                .connect()
                .await
                .map_err(|e| e.to_string())?;
            RoutingServiceClient::new(channel)
                .get_quote(sample_quote_request())
                .await
                .map_err(|status| status.to_string())
        })
        .await;
        if matches!(attempt, Ok(Ok(_))) {
            break;
        }
        assert!(Instant::now() < deadline, "never served: {attempt:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(
        idle.len(),
        held,
        "the attacker still holds every connection"
    );
}
