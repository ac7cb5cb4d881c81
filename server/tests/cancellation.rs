//! Work a handler spawns outlives a cancelled call; work tied to the call
//! by a drop guard does not.
//!
//! When a client cancels a call (or its deadline passes), hyper drops the
//! handler's future: whatever the handler *awaits* stops at its next
//! `.await` (routing-server's `--fault-delay-ms` sleep among them). What it
//! handed to `tokio::spawn` or `spawn_blocking` is not part of that future
//! and runs on: the Rust form of a grpc-go handler that ignores its
//! `ctx`. The fix is to tie the spawned work to the call: a
//! `CancellationToken` whose `drop_guard` the handler holds, so that
//! dropping the handler cancels the token, and the work watches it.
//! (`JoinHandle::abort` on drop would do for `tokio::spawn`, but cannot
//! stop a `spawn_blocking` closure, which can check `is_cancelled()`.)
//!
//! Run with `cargo test -p routing-server --test cancellation`. The only
//! times are bounds: the spawned work lasts 30 s, far beyond the test.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

mod support;

use routing_clients::sample_quote_request;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_contracts::routing::routing_service_server::{RoutingService, RoutingServiceServer};
use routing_contracts::routing::{
    GetQuoteRequest, GetQuoteResponse, ListRoutesRequest, ListRoutesResponse,
};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, transport::Server};

/// How long the spawned "slow dependency" works unless stopped: 30 s.
const WORK: Duration = Duration::from_secs(30);
/// Calls the client starts, then cancels.
const CALLS: usize = 20;
/// Each call is cancelled by its deadline after this: 100 ms.
const DEADLINE: Duration = Duration::from_millis(100);
/// The longest the test waits for the count it expects: 5 s.
const SETTLE_LIMIT: Duration = Duration::from_secs(5);

/// A GetQuote handler that hands its work to a spawned task.
#[derive(Debug)]
struct SpawningApi {
    /// Spawned tasks still working.
    running: Arc<AtomicUsize>,
    /// True: the task is tied to the call with a drop guard.
    tied: bool,
}

/// Counts one spawned task as running for as long as it lives.
struct Running(Arc<AtomicUsize>);

impl Running {
    fn start(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Self(Arc::clone(count))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tonic::async_trait]
impl RoutingService for SpawningApi {
    async fn get_quote(
        &self,
        _: Request<GetQuoteRequest>,
    ) -> Result<Response<GetQuoteResponse>, Status> {
        let running = Running::start(&self.running);
        let work = async move {
            let _running = running;
            tokio::time::sleep(WORK).await;
        };
        if self.tied {
            // The fix: the token is cancelled when this handler's future is
            // dropped (the guard goes with it), and the task watches it.
            let token = CancellationToken::new();
            let _cancel_on_drop = token.clone().drop_guard();
            let task = tokio::spawn(async move {
                tokio::select! {
                    () = token.cancelled() => {}
                    () = work => {}
                }
            });
            let _ = task.await;
        } else {
            // The footgun: the task is not part of this future.
            let _ = tokio::spawn(work).await;
        }
        Err(Status::unavailable("the work ended"))
    }

    async fn list_routes(
        &self,
        _: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        Err(Status::unimplemented("not in this test"))
    }
}

/// Serves a [`SpawningApi`] on a free loopback port; returns its address
/// and its count of running tasks.
async fn start(tied: bool) -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let running = Arc::new(AtomicUsize::new(0));
    let api = SpawningApi {
        running: Arc::clone(&running),
        tied,
    };
    let incoming = tonic::transport::server::TcpIncoming::from(listener);
    tokio::spawn(
        Server::builder()
            .add_service(RoutingServiceServer::new(api))
            .serve_with_incoming(incoming),
    );
    (addr, running)
}

/// Starts [`CALLS`] calls with a [`DEADLINE`] each, waits until the server
/// has seen them all, lets every deadline pass, and returns the tasks still
/// running once the count has settled on `expected` (or after [`SETTLE_LIMIT`]).
async fn cancel_calls(addr: SocketAddr, running: &AtomicUsize, expected: usize) -> usize {
    let client = RoutingServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("connects");
    let mut calls = Vec::new();
    for _ in 0..CALLS {
        let mut client = client.clone();
        let mut request = Request::new(sample_quote_request());
        request.set_timeout(DEADLINE);
        calls.push(tokio::spawn(async move { client.get_quote(request).await }));
    }
    for call in calls {
        let status = call
            .await
            .expect("call task")
            .expect_err("cut by the deadline");
        assert!(
            matches!(
                status.code(),
                tonic::Code::Cancelled | tonic::Code::DeadlineExceeded
            ),
            "{status:?}"
        );
    }
    let settled = tokio::time::Instant::now() + SETTLE_LIMIT;
    while running.load(Ordering::SeqCst) != expected && tokio::time::Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    running.load(Ordering::SeqCst)
}

/// Given a handler that spawns its work, when every call is cancelled by
/// its deadline, then every spawned task is still running: the handler was
/// dropped, its work was not.
#[tokio::test]
async fn spawned_work_outlives_a_cancelled_call() {
    let (addr, running) = start(false).await;

    let still_running = cancel_calls(addr, &running, CALLS).await;

    assert_eq!(still_running, CALLS, "every spawned task outlived its call");
}

/// Given the same handler with its work tied to the call by a drop guard,
/// when every call is cancelled, then no task is left running.
#[tokio::test]
async fn a_drop_guard_stops_the_work_with_the_call() {
    let (addr, running) = start(true).await;

    let still_running = cancel_calls(addr, &running, 0).await;

    assert_eq!(still_running, 0, "the guard cancelled every task");
}

/// Given routing-server made slow (`--fault-delay-ms 2000`), when a raw
/// HTTP/2 client (no timer of its own) sends GetQuote with
/// `grpc-timeout: 100m`, then the server itself answers DEADLINE_EXCEEDED
/// at the deadline, long before the delay: the deadline reached it on the
/// wire and ended the handler.
#[tokio::test]
async fn routing_server_answers_deadline_exceeded_at_the_clients_deadline() {
    let server = support::start_with(routing_server::Config {
        fault_delay_ms: 2000,
        ..routing_server::Config::default()
    })
    .await;
    let mut h2 = support::raw_h2(server.addr()).await;
    let mut request = support::grpc_request(
        server.addr(),
        support::GET_QUOTE,
        &sample_quote_request(),
        false,
    );
    request
        .headers_mut()
        .insert("grpc-timeout", http::HeaderValue::from_static("100m"));

    let sent = tokio::time::Instant::now();
    let response = h2.send_request(request).await.expect("an answer");
    let took = sent.elapsed();

    // Trailers-Only: the status is in the headers, and there is no message.
    let status = response
        .headers()
        .get("grpc-status")
        .map(|v| v.as_bytes().to_vec());
    assert_eq!(status.as_deref(), Some(&b"4"[..]), "DEADLINE_EXCEEDED is 4");
    assert!(
        took >= DEADLINE && took < Duration::from_secs(1),
        "answered after {took:?}, not after the 2 s delay"
    );
}

/// Given a stock tonic `Server` whose handler is slow, when a raw HTTP/2
/// client sends `grpc-timeout: 100m`, then tonic ends the call at the
/// deadline, but with CANCELLED ("Timeout expired"), where grpc-go and
/// routing-server answer DEADLINE_EXCEEDED.
#[tokio::test]
async fn stock_tonic_answers_cancelled_at_the_deadline() {
    let (addr, _running) = start(true).await;
    let mut h2 = support::raw_h2(addr).await;
    let mut request =
        support::grpc_request(addr, support::GET_QUOTE, &sample_quote_request(), false);
    request
        .headers_mut()
        .insert("grpc-timeout", http::HeaderValue::from_static("100m"));

    let response = h2.send_request(request).await.expect("an answer");

    let header = |name| response.headers().get(name).map(|v| v.as_bytes().to_vec());
    assert_eq!(
        header("grpc-status").as_deref(),
        Some(&b"1"[..]),
        "CANCELLED is 1"
    );
    // grpc-message is percent-encoded on the wire.
    assert_eq!(
        header("grpc-message").as_deref(),
        Some(&b"Timeout%20expired"[..])
    );
}
