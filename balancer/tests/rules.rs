//! The balancer's rules, one test each, against routing-server replicas
//! started in-process on loopback, fed by a resolver the test controls.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use ready_balance::{
    Aggregate, BalancedChannel, Balancer, Knobs, Named, Pick, Resolve, ResolveError, State,
    WaitForReady,
};
use routing_contracts::{
    REPLICA_HEADER,
    routing::{GetQuoteRequest, routing_service_client::RoutingServiceClient},
    types::CargoItem,
};
use routing_server::{Config, LocalServer};
use tonic::Code;

type Client = RoutingServiceClient<BalancedChannel>;

/// The longest a test waits for a change it expects.
const PATIENCE: Duration = Duration::from_secs(10);

/// Short knobs, so that a test sees resolves and reconnects in a second.
fn fast(pick: Pick) -> Knobs {
    Knobs {
        resolve_interval: Duration::from_millis(300),
        min_resolve_gap: Duration::from_millis(100),
        resolve_timeout: Duration::from_secs(2),
        connect_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        pick,
        ..Knobs::default()
    }
}

/// A resolver whose answer the test sets.
#[derive(Clone)]
struct Scripted(Arc<Mutex<Result<Vec<SocketAddr>, ResolveError>>>);

impl Scripted {
    fn answering(addrs: &[SocketAddr]) -> Self {
        Self(Arc::new(Mutex::new(Ok(addrs.to_vec()))))
    }

    fn set(&self, answer: Result<Vec<SocketAddr>, ResolveError>) {
        *self.0.lock().expect("answer lock") = answer;
    }
}

impl Resolve for Scripted {
    async fn resolve(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        self.0.lock().expect("answer lock").clone()
    }
}

impl Named for Scripted {
    fn authority(&self) -> String {
        "routing.test:9000".into()
    }
}

async fn replica(name: &str, config: Config) -> LocalServer {
    let config = Config {
        replica: Some(name.to_owned()),
        ..config
    };
    LocalServer::start(config).await.expect("server starts")
}

/// A balancer over `resolver`'s answers, and a client on its channel.
async fn start(
    resolver: Scripted,
    tls: Option<ready_balance::TlsTo>,
    knobs: Knobs,
) -> (Balancer, Client) {
    let balancer = Balancer::start(resolver, tls, knobs).await.expect("starts");
    let client = RoutingServiceClient::new(balancer.channel());
    (balancer, client)
}

/// Replica `a`, which drains for `drain_secs` when shut down, and `b`.
async fn draining_and_steady(drain_secs: u64) -> (LocalServer, LocalServer) {
    let draining = Config {
        drain_secs,
        ..Config::default()
    };
    (
        replica("a", draining).await,
        replica("b", Config::default()).await,
    )
}

/// An address nothing listens on: bound, then let go.
fn refusing() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("address")
}

fn request() -> GetQuoteRequest {
    GetQuoteRequest {
        origin: "NLRTM".into(),
        destination: "SGSIN".into(),
        cargo: vec![CargoItem {
            description: "machine parts".into(),
            weight_kg: 400.4,
        }],
    }
}

/// One call: the replica that answered, or the status.
///
/// A call that no server processed (hyper dropped it, unsent, on a
/// connection that had just closed, or h2 refused it for a GOAWAY read a
/// moment before) is sent once more, as a caller's transparent retry does
/// (the crate's README, "Retries are the caller's").
async fn call(client: &Client) -> Result<String, tonic::Status> {
    let mut answer = tokio::time::timeout(PATIENCE, client.clone().get_quote(request()))
        .await
        .expect("a call hung");
    if answer.as_ref().is_err_and(never_sent) {
        answer = tokio::time::timeout(PATIENCE, client.clone().get_quote(request()))
            .await
            .expect("a call hung");
    }
    let response = answer?;
    Ok(response
        .metadata()
        .get(REPLICA_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(no header)")
        .to_owned())
}

/// CANCELLED with hyper's own cancellation in the source chain (hyper
/// cancels a request only before sending it), or h2's error for a stream a
/// graceful GOAWAY refused (the rule of `routing_clients::retry::never_sent`).
fn never_sent(status: &tonic::Status) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(err) = source {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return status.code() == Code::Cancelled;
        }
        if err.downcast_ref::<h2::Error>().is_some_and(|e| {
            e.is_go_away() && e.is_remote() && e.reason() == Some(h2::Reason::NO_ERROR)
        }) {
            return true;
        }
        source = err.source();
    }
    false
}

/// `n` calls with `concurrency` in flight: calls per replica, and failures.
async fn spread(
    client: &Client,
    n: usize,
    concurrency: usize,
) -> (BTreeMap<String, u32>, Vec<String>) {
    let per_replica = Arc::new(Mutex::new(BTreeMap::new()));
    let failures = Arc::new(Mutex::new(Vec::new()));
    let mut callers = Vec::new();
    for caller in 0..concurrency {
        let (client, per_replica, failures) =
            (client.clone(), per_replica.clone(), failures.clone());
        let calls = n / concurrency + usize::from(caller < n % concurrency);
        callers.push(tokio::spawn(async move {
            for _ in 0..calls {
                match call(&client).await {
                    Ok(replica) => {
                        *per_replica
                            .lock()
                            .expect("lock")
                            .entry(replica)
                            .or_insert(0) += 1
                    }
                    Err(status) => failures.lock().expect("lock").push(format!("{status}")),
                }
            }
        }));
    }
    for caller in callers {
        caller.await.expect("caller");
    }
    let per_replica = per_replica.lock().expect("lock").clone();
    let failures = failures.lock().expect("lock").clone();
    (per_replica, failures)
}

/// Waits until `check` holds on the balancer's stats.
async fn until(balancer: &Balancer, what: &str, check: impl Fn(&ready_balance::Stats) -> bool) {
    let started = Instant::now();
    while !check(&balancer.stats()) {
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not within {PATIENCE:?}: {:?}",
            balancer.stats()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Given two replicas and an address that refuses connections, every call
/// lands on a replica: the refusing one is `failing` and never picked
/// (tonic's balancer keeps picking it, tonic #2839).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_endpoint_is_never_picked() {
    let (a, b) = (
        replica("a", Config::default()).await,
        replica("b", Config::default()).await,
    );
    let dead = refusing();
    let resolver = Scripted::answering(&[a.addr(), b.addr(), dead]);
    let (balancer, client) = start(resolver, None, fast(Pick::LeastRequest)).await;

    let (per_replica, failures) = spread(&client, 120, 4).await;

    assert!(failures.is_empty(), "failed calls: {failures:?}");
    assert_eq!(per_replica.values().sum::<u32>(), 120);
    let stats = balancer.stats();
    assert_eq!(
        stats.endpoints.get(&dead),
        Some(&State::Failing),
        "{stats:?}"
    );
    assert!(stats.connect_failures >= 1, "{stats:?}");
    assert_eq!(stats.calls_not_ready, 0);
    // The failed connection also asked for a resolve, made after the gap.
    until(&balancer, "an early resolve", |s| s.early_resolves >= 1).await;
}

/// Given two replicas under steady calls, when one drains (GOAWAY, then
/// it stops listening), no call fails, and from then on every call goes to
/// the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_goaway_the_endpoint_is_not_picked() {
    let (a, b) = draining_and_steady(1).await;
    let resolver = Scripted::answering(&[a.addr(), b.addr()]);
    let (balancer, client) = start(resolver, None, fast(Pick::PeakEwma)).await;
    let (warm, failures) = spread(&client, 60, 2).await;
    assert!(
        failures.is_empty() && warm.len() == 2,
        "{warm:?} {failures:?}"
    );

    // When a drains while 4 callers keep calling,
    let calling = tokio::spawn({
        let client = client.clone();
        async move { spread(&client, 400, 4).await }
    });
    a.shutdown().await.expect("a drains");
    let (_, failures) = calling.await.expect("callers");

    // then no call failed, and b alone serves.
    assert!(
        failures.is_empty(),
        "failed calls during the drain: {failures:?}"
    );
    let stats = balancer.stats();
    assert!(stats.goaways >= 1, "{stats:?}");
    let (after, failures) = spread(&client, 60, 2).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(after.keys().collect::<Vec<_>>(), vec!["b"], "{after:?}");
    assert_eq!(balancer.stats().calls_not_ready, 0);
}

/// Given a fast replica and one that takes 100 ms a call, least request
/// sends the slow one fewer calls when calls overlap, and peak EWMA, which
/// learns the latency, sends it almost none even one call at a time. A
/// random pick would give each about half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_less_loaded_endpoint_wins() {
    let slow_config = Config {
        fault_delay_ms: 100,
        ..Config::default()
    };
    let (fast_one, slow) = (
        replica("fast", Config::default()).await,
        replica("slow", slow_config).await,
    );
    let addrs = [fast_one.addr(), slow.addr()];

    let least = Balancer::start(Scripted::answering(&addrs), None, fast(Pick::LeastRequest))
        .await
        .expect("starts");
    let (per_replica, failures) = spread(&RoutingServiceClient::new(least.channel()), 200, 8).await;
    assert!(failures.is_empty(), "{failures:?}");
    let slow_calls = per_replica.get("slow").copied().unwrap_or(0);
    assert!(
        slow_calls < 50,
        "least request gave the slow replica {slow_calls} of 200"
    );

    let ewma = Balancer::start(Scripted::answering(&addrs), None, fast(Pick::PeakEwma))
        .await
        .expect("starts");
    let (per_replica, failures) = spread(&RoutingServiceClient::new(ewma.channel()), 100, 1).await;
    assert!(failures.is_empty(), "{failures:?}");
    let slow_calls = per_replica.get("slow").copied().unwrap_or(0);
    assert!(
        slow_calls <= 10,
        "peak EWMA gave the slow replica {slow_calls} of 100"
    );
}

/// Given only addresses that refuse, a call fails at once with UNAVAILABLE;
/// a call that asked to wait for ready waits, and lands once the name
/// resolves to a live replica.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_every_endpoint_fails_calls_fail_fast_unless_they_wait_for_ready() {
    let resolver = Scripted::answering(&[refusing(), refusing()]);
    let (balancer, client) = start(resolver.clone(), None, fast(Pick::PeakEwma)).await;
    until(&balancer, "every endpoint failing", |s| {
        s.aggregate == Aggregate::Failing
    })
    .await;

    let started = Instant::now();
    let status = call(&client).await.expect_err("no endpoint can answer");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "failing fast took {:?}",
        started.elapsed()
    );

    let waiting = tokio::spawn({
        let client = client.clone();
        async move {
            let mut request = tonic::Request::new(request());
            request.extensions_mut().insert(WaitForReady);
            client.clone().get_quote(request).await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the wait-for-ready call did not wait"
    );
    let live = replica("late", Config::default()).await;
    resolver.set(Ok(vec![live.addr()]));
    let answer = tokio::time::timeout(PATIENCE, waiting)
        .await
        .expect("it lands")
        .expect("task");
    assert!(answer.is_ok(), "{answer:?}");
    assert!(balancer.stats().failed_fast >= 1);
}

/// Given an address whose kernel accepts connections but whose process
/// never speaks (a frozen pod), it stays `connecting` and is not picked,
/// and a call with only that endpoint waits rather than failing, until its
/// own deadline, which the channel keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_listener_is_never_ready() {
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let silent_addr = silent.local_addr().expect("address");
    let holding = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let knobs = Knobs {
        connect_timeout: Duration::from_secs(5),
        ..fast(Pick::PeakEwma)
    };
    let (balancer, client) = start(Scripted::answering(&[silent_addr]), None, knobs).await;

    let mut with_deadline = tonic::Request::new(request());
    with_deadline.set_timeout(Duration::from_millis(300));
    let started = Instant::now();
    let outcome = tokio::time::timeout(PATIENCE, client.clone().get_quote(with_deadline)).await;

    // The call waited for a ready endpoint, then ended at its deadline.
    let status = outcome
        .expect("the deadline ended it")
        .expect_err("no answer");
    assert_eq!(status.code(), Code::DeadlineExceeded, "{status}");
    assert!(
        started.elapsed() >= Duration::from_millis(300),
        "{:?}",
        started.elapsed()
    );
    let stats = balancer.stats();
    assert_eq!(
        stats.endpoints.get(&silent_addr),
        Some(&State::Connecting),
        "{stats:?}"
    );
    assert_eq!(stats.aggregate, Aggregate::Connecting);
    holding.abort();
}

/// Given one replica, when the name stops resolving (NXDOMAIN, then no
/// address, then a timeout), each is counted apart and calls go on to the
/// last good set; when a second replica joins the answer, it gets calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_resolve_keeps_the_last_good_set() {
    let a = replica("a", Config::default()).await;
    let resolver = Scripted::answering(&[a.addr()]);
    let (balancer, client) = start(resolver.clone(), None, fast(Pick::PeakEwma)).await;

    for (answer, counted) in [
        (Err(ResolveError::NxDomain("routing.test".into())), 0),
        (Ok(vec![]), 1),
        (Err(ResolveError::Timeout), 2),
    ] {
        resolver.set(answer);
        until(&balancer, "the failed resolve counted", |s| {
            [s.kept_nxdomain, s.kept_empty, s.kept_timeout][counted] >= 1
        })
        .await;
        assert_eq!(call(&client).await.expect("the last good set answers"), "a");
    }

    let b = replica("b", Config::default()).await;
    resolver.set(Ok(vec![a.addr(), b.addr()]));
    until(&balancer, "b held", |s| {
        s.endpoints.get(&b.addr()) == Some(&State::Ready)
    })
    .await;
    let (per_replica, failures) = spread(&client, 60, 4).await;
    assert!(failures.is_empty(), "{failures:?}");
    assert!(per_replica.contains_key("b"), "{per_replica:?}");
}

/// With A17 health checking on, a replica that starts draining says
/// NOT_SERVING on its health service, and is not picked from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a17_not_serving_is_not_picked() {
    let (a, b) = draining_and_steady(3).await;
    let knobs = Knobs {
        health_service: Some(String::new()),
        ..fast(Pick::PeakEwma)
    };
    let (balancer, client) = start(Scripted::answering(&[a.addr(), b.addr()]), None, knobs).await;
    until(&balancer, "both ready", |s| {
        s.endpoints.values().all(|&e| e == State::Ready)
    })
    .await;

    let a_addr = a.addr();
    let draining = tokio::spawn(a.shutdown());
    until(&balancer, "a not ready", |s| {
        s.endpoints.get(&a_addr) != Some(&State::Ready)
    })
    .await;
    let (per_replica, failures) = spread(&client, 40, 2).await;

    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(
        per_replica.keys().collect::<Vec<_>>(),
        vec!["b"],
        "{per_replica:?}"
    );
    draining.await.expect("task").expect("a drains");
}

/// Given three equal replicas and calls paced at 100 a second for 6 s, one
/// at a time (most picks compare two idle endpoints), each pick measure
/// still spreads the calls: no replica starves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_replicas_share_the_calls_under_each_pick() {
    let replicas = [
        replica("a", Config::default()).await,
        replica("b", Config::default()).await,
        replica("c", Config::default()).await,
    ];
    let addrs: Vec<SocketAddr> = replicas.iter().map(LocalServer::addr).collect();
    // 6 s per pick: several times peak EWMA's decay (2 s), so one late
    // answer early on cannot decide the shares.
    const CALLS: u32 = 600;
    for pick in [Pick::PeakEwma, Pick::LeastRequest, Pick::Random] {
        let (_balancer, client) = start(Scripted::answering(&addrs), None, fast(pick)).await;
        let mut per_replica: BTreeMap<String, u32> = BTreeMap::new();
        let mut pace = tokio::time::interval(Duration::from_millis(10));
        for _ in 0..CALLS {
            pace.tick().await;
            *per_replica
                .entry(call(&client).await.expect("a call"))
                .or_default() += 1;
        }
        let least = per_replica.values().copied().min().unwrap_or(0);
        // Peak EWMA follows latency, and here the three servers share two
        // cores with the other tests, whose load it reads as a slow pod:
        // the test asks only that none starves. Row k4 asks a fifth of it
        // on the cluster, in release builds.
        let floor = match pick {
            Pick::PeakEwma => CALLS / 10,
            Pick::LeastRequest | Pick::Random => CALLS / 5,
        };
        assert!(
            per_replica.len() == 3 && least >= floor,
            "{pick:?}: {per_replica:?}"
        );
    }
}

/// Given one replica whose latency peak EWMA has learned, when a second
/// joins the answer, it gets a call within 2 s: its first guess
/// (`EWMA_DEFAULT_RTT`, 1 ms) is about a learned one here, and decays (2 s)
/// below it while the endpoint is not picked. Linkerd's 30 ms takes about
/// 2 × ln(30 / 0.5) ≈ 8 s to decay that far.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_endpoint_gets_calls_at_once_under_peak_ewma() {
    let a = replica("a", Config::default()).await;
    let resolver = Scripted::answering(&[a.addr()]);
    let (balancer, client) = start(resolver.clone(), None, fast(Pick::PeakEwma)).await;
    let (_, failures) = spread(&client, 100, 1).await;
    assert!(failures.is_empty(), "{failures:?}");

    let b = replica("b", Config::default()).await;
    resolver.set(Ok(vec![a.addr(), b.addr()]));
    until(&balancer, "b ready", |s| {
        s.endpoints.get(&b.addr()) == Some(&State::Ready)
    })
    .await;
    // Calls paced every 10 ms until b answers one.
    let joined = Instant::now();
    let mut pace = tokio::time::interval(Duration::from_millis(10));
    while call(&client).await.expect("a call") != "b" {
        assert!(
            joined.elapsed() < Duration::from_secs(2),
            "b had no call within 2 s of joining"
        );
        pace.tick().await;
    }
}

/// TLS to an address, checked against the name: a replica whose
/// certificate names `routing.test` answers through a balancer that dials
/// its address and checks `routing.test`; with another name the handshake
/// fails, the endpoint is `failing`, and a call fails fast.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_dialled_by_address_and_checked_by_name() {
    use routing_server::cmd::dev_cert;
    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject};

    let made = dev_cert::generate(&["routing.test"]).expect("certificates");
    let dir = std::env::temp_dir().join(format!("ready-balance-tls-{}", std::process::id()));
    made.write_to(&dir).expect("written");
    let config = Config {
        tls_cert: Some(dir.join("server.pem")),
        tls_key: Some(dir.join("server.key")),
        ..Config::default()
    };
    let server = replica("tls", config).await;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(made.ca_pem.as_bytes()) {
        roots.add(cert.expect("a PEM certificate")).expect("a CA");
    }
    let client_config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = |n: &str| ServerName::try_from(n.to_owned()).expect("a name");

    let right = ready_balance::TlsTo::new(&client_config, name("routing.test"));
    let (_balancer, client) = start(
        Scripted::answering(&[server.addr()]),
        Some(right),
        fast(Pick::PeakEwma),
    )
    .await;
    assert_eq!(call(&client).await.expect("the right name answers"), "tls");

    let wrong = ready_balance::TlsTo::new(&client_config, name("other.test"));
    let balancer = Balancer::start(
        Scripted::answering(&[server.addr()]),
        Some(wrong),
        fast(Pick::PeakEwma),
    )
    .await
    .expect("starts");
    until(&balancer, "the wrong name failing", |s| {
        s.aggregate == Aggregate::Failing
    })
    .await;
    let client = RoutingServiceClient::new(balancer.channel());
    let status = call(&client).await.expect_err("the wrong name is refused");
    assert_eq!(status.code(), Code::Unavailable, "{status}");
    let _ = std::fs::remove_dir_all(&dir);
}
