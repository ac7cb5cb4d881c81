//! The re-resolving balancer (`routing_clients::dns_balance`) against real
//! replicas on loopback, fed by a resolver the test controls: the address
//! sets a headless Service's DNS would give as pods come and go.

mod support;

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use routing_clients::{
    Error,
    dns_balance::{DnsBalance, Knobs, ReResolveOnFailure, Resolve},
    sample_quote_request,
};
use routing_contracts::{REPLICA_HEADER, routing::routing_service_client::RoutingServiceClient};
use routing_server::{Config, LocalServer};
use support::start_server_with;
use tonic::transport::{Channel, Endpoint};

type Client = RoutingServiceClient<ReResolveOnFailure<Channel>>;

/// Short knobs so a test sees several resolves in a second.
const FAST: Knobs = Knobs {
    interval: Duration::from_millis(200),
    min_gap: Duration::from_millis(50),
    resolve_timeout: Duration::from_secs(2),
    max_endpoints: 8,
};
/// The longest a test waits for a change it expects.
const PATIENCE: Duration = Duration::from_secs(10);
/// Calls per check: a replica of three misses all of them with odds of
/// (2/3)^60, about 3e-11.
const CALLS: usize = 60;

/// A resolver whose answer the test sets, counting how often it is asked.
#[derive(Clone)]
struct Scripted {
    answer: Arc<Mutex<Result<Vec<SocketAddr>, String>>>,
    asked: Arc<AtomicU64>,
}

impl Scripted {
    fn answering(addrs: &[SocketAddr]) -> Self {
        Self {
            answer: Arc::new(Mutex::new(Ok(addrs.to_vec()))),
            asked: Arc::new(AtomicU64::new(0)),
        }
    }

    fn set(&self, answer: Result<Vec<SocketAddr>, String>) {
        *self.answer.lock().expect("answer lock") = answer;
    }

    fn asked(&self) -> u64 {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Resolve for Scripted {
    async fn resolve(&self) -> Result<Vec<SocketAddr>, Error> {
        self.asked.fetch_add(1, Ordering::SeqCst);
        Ok(self.answer.lock().expect("answer lock").clone()?)
    }
}

/// Replicas named as given, each on its own loopback port.
async fn replicas(names: &[&str]) -> Vec<LocalServer> {
    let mut servers = Vec::new();
    for name in names {
        let config = Config {
            replica: Some((*name).to_owned()),
            ..Config::default()
        };
        servers.push(start_server_with(config).await);
    }
    servers
}

fn addrs(servers: &[LocalServer]) -> Vec<SocketAddr> {
    servers.iter().map(LocalServer::addr).collect()
}

async fn start(resolver: Scripted, knobs: Knobs) -> (Client, DnsBalance) {
    let endpoint_for = |addr: SocketAddr| -> Result<Endpoint, Error> {
        Ok(Endpoint::from_shared(format!("http://{addr}"))?
            .connect_timeout(Duration::from_secs(2))
            .timeout(Duration::from_secs(5)))
    };
    let (channel, balance) = DnsBalance::start(resolver, endpoint_for, knobs)
        .await
        .expect("first resolve");
    (RoutingServiceClient::new(channel), balance)
}

/// `n` calls, one after another: calls per replica, and failures.
async fn spread(client: &Client, n: usize) -> (BTreeMap<String, u32>, u32) {
    let mut per_replica = BTreeMap::new();
    let mut failed = 0;
    for _ in 0..n {
        let mut client = client.clone();
        let call = client.get_quote(sample_quote_request());
        match tokio::time::timeout(PATIENCE, call).await {
            Ok(Ok(response)) => {
                let replica = response
                    .metadata()
                    .get(REPLICA_HEADER)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("(no header)")
                    .to_owned();
                *per_replica.entry(replica).or_default() += 1;
            }
            Ok(Err(_)) => failed += 1,
            Err(_) => panic!("a call hung for {PATIENCE:?}"),
        }
    }
    (per_replica, failed)
}

/// Waits, bounded by PATIENCE, until `done` holds; false if it never does.
async fn eventually(mut done: impl FnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// Three replicas in the answer: calls reach every one of them.
#[tokio::test]
async fn calls_spread_over_every_endpoint() {
    // Given three replicas in the first answer,
    let servers = replicas(&["a", "b", "c"]).await;
    let (client, balance) = start(Scripted::answering(&addrs(&servers)), FAST).await;
    // when calls are made one after another,
    let (per_replica, failed) = spread(&client, CALLS).await;
    // then each replica serves some, and none fails.
    assert_eq!(failed, 0);
    assert_eq!(per_replica.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
    assert_eq!(balance.stats().inserted, 3);
}

/// A replica that joins the answer (a pod turned Ready) gets calls after
/// the next resolve, without a new channel.
#[tokio::test]
async fn an_inserted_endpoint_gets_calls_after_the_next_resolve() {
    // Given a channel over a and b,
    let servers = replicas(&["a", "b", "c"]).await;
    let all = addrs(&servers);
    let resolver = Scripted::answering(&all[..2]);
    let (client, balance) = start(resolver.clone(), FAST).await;
    let (before, _) = spread(&client, CALLS).await;
    assert!(!before.contains_key("c"), "c served before it was resolved");
    // when c joins the answer,
    resolver.set(Ok(all.clone()));
    // then the balancer inserts it at a resolve,
    assert!(eventually(|| balance.stats().endpoints.len() == 3).await);
    // and it serves calls on the same channel.
    let (after, failed) = spread(&client, CALLS).await;
    assert_eq!(failed, 0);
    assert!(after.contains_key("c"), "c never served: {after:?}");
}

/// A replica that leaves the answer (a pod deleted) stops getting calls.
#[tokio::test]
async fn a_removed_endpoint_stops_getting_calls() {
    // Given a channel over a, b and c,
    let servers = replicas(&["a", "b", "c"]).await;
    let all = addrs(&servers);
    let resolver = Scripted::answering(&all);
    let (client, balance) = start(resolver.clone(), FAST).await;
    // when c leaves the answer,
    resolver.set(Ok(all[..2].to_vec()));
    assert!(eventually(|| balance.stats().removed == 1).await);
    // then no call reaches c, though its server still runs.
    let (per_replica, failed) = spread(&client, CALLS).await;
    assert_eq!(failed, 0);
    assert_eq!(per_replica.keys().collect::<Vec<_>>(), ["a", "b"]);
}

/// An empty answer and a failed resolve each leave the set as it was, as
/// grpc-go does: a DNS hiccup must not take every endpoint away.
#[tokio::test]
async fn an_empty_or_failed_answer_keeps_the_set() {
    let servers = replicas(&["a", "b"]).await;
    let resolver = Scripted::answering(&addrs(&servers));
    let (client, balance) = start(resolver.clone(), FAST).await;
    for answer in [Ok(vec![]), Err("SERVFAIL".to_owned())] {
        // Given the name now answers nothing, or fails,
        let kept = balance.stats().kept;
        resolver.set(answer);
        // when two resolves have happened,
        assert!(eventually(|| balance.stats().kept >= kept + 2).await);
        // then both endpoints are still held and both serve.
        let stats = balance.stats();
        assert_eq!((stats.endpoints.len(), stats.removed), (2, 0));
        let (per_replica, failed) = spread(&client, CALLS).await;
        assert_eq!(failed, 0);
        assert_eq!(per_replica.keys().collect::<Vec<_>>(), ["a", "b"]);
    }
}

/// A call that cannot reach its endpoint asks for a resolve at once: the
/// interval here is a minute, so only the failure explains the resolve
/// that drops the dead address.
#[tokio::test]
async fn a_failed_call_triggers_an_early_resolve() {
    // Given replicas a and b, and an address where nothing listens,
    let servers = replicas(&["a", "b"]).await;
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("local addr")
    };
    let mut answer = addrs(&servers);
    answer.push(dead);
    let resolver = Scripted::answering(&answer);
    let slow = Knobs {
        interval: Duration::from_secs(60),
        ..FAST
    };
    let (client, balance) = start(resolver.clone(), slow).await;
    // and DNS that has since dropped the dead address,
    resolver.set(Ok(addrs(&servers)));
    // when calls are made until one fails on the dead address,
    let mut calls = 0;
    let mut failed = 0;
    while failed == 0 && calls < 10 * CALLS {
        failed += spread(&client, 1).await.1;
        calls += 1;
    }
    assert!(
        failed > 0,
        "no call reached the dead address in {calls} calls"
    );
    // then an early resolve follows and removes it,
    assert!(eventually(|| balance.stats().removed == 1).await);
    assert!(balance.stats().early >= 1);
    // and the calls after it all succeed.
    let (per_replica, failed) = spread(&client, CALLS).await;
    assert_eq!(failed, 0);
    assert_eq!(per_replica.keys().collect::<Vec<_>>(), ["a", "b"]);
}

/// Dropping the handle stops the resolving task; the channel keeps working
/// with the endpoints it had.
#[tokio::test]
async fn dropping_the_handle_stops_resolving() {
    let servers = replicas(&["a"]).await;
    let resolver = Scripted::answering(&addrs(&servers));
    let (client, balance) = start(resolver.clone(), FAST).await;
    assert!(eventually(|| resolver.asked() >= 2).await);
    drop(balance);
    let asked = resolver.asked();
    // Five intervals: a running task would have resolved about five times.
    tokio::time::sleep(FAST.interval * 5).await;
    assert_eq!(resolver.asked(), asked);
    let (per_replica, failed) = spread(&client, 3).await;
    assert_eq!((failed, per_replica.get("a")), (0, Some(&3)));
}

/// A name that resolves to nothing at start is refused with a clear error.
#[tokio::test]
async fn an_empty_first_answer_is_an_error() {
    let endpoint_for = |addr: SocketAddr| -> Result<Endpoint, Error> {
        Ok(Endpoint::from_shared(format!("http://{addr}"))?)
    };
    let outcome = DnsBalance::start(Scripted::answering(&[]), endpoint_for, FAST).await;
    let error = outcome.expect_err("an empty first answer fails");
    assert!(error.to_string().contains("no address"), "{error}");
}

/// `balance-client --phases dns` end to end: one JSON line with the calls
/// per replica and what the resolver did.
#[tokio::test]
async fn balance_client_dns_phase_prints_per_replica_counts() {
    // Given two replicas and a name (here an address literal) for one,
    let servers = replicas(&["a", "b"]).await;
    let target = format!("dns:///{}", servers[0].addr());
    // when the client calls through the dns phase for a second,
    let output = support::run_bin(
        env!("CARGO_BIN_EXE_balance-client"),
        &[
            "--phases",
            "dns",
            "--resolve",
            &target,
            "--dns-secs",
            "1",
            "--dns-rate",
            "20",
            "--expect-replicas",
            "1",
            "--report-secs",
            "0",
        ],
        support::LIMIT,
    )
    .await;
    // then every call went to the one replica the name gives.
    let line = support::json_line(&output);
    let dns = &line["phases"]["dns"];
    assert!(dns["calls"].as_u64().is_some_and(|n| n > 0), "{line}");
    assert_eq!(dns["failed"], 0, "{line}");
    assert_eq!(dns["per_replica"]["a"], dns["calls"], "{line}");
    assert_eq!(dns["resolver"]["inserted"], 1, "{line}");
    assert!(dns["first_served_s"]["a"].is_number(), "{line}");
}
