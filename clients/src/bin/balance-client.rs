//! `balance-client`: where one reused channel meets a load balancer. The
//! same baseline as the other clients, through HAProxy (`lb/haproxy.cfg`)
//! or straight to three replicas, in phases:
//!
//! - `l4_pooled`: one channel through an L4 (`mode tcp`) balancer. One
//!   connection, so one replica, serves every call.
//! - `l4_footgun`: a channel per call through L4. The calls spread, and each
//!   pays a handshake: the median call is reported.
//! - `l7_pooled`: one channel through an L7 (`mode http`, h2) balancer,
//!   which balances each call. The calls spread.
//! - `client_side`: tonic's own balancer (`Channel::balance_list`) over the
//!   replicas' addresses, no proxy. The calls spread.
//! - `l4_aged`: one channel through L4 to replicas that send GOAWAY at an
//!   age (`routing-server --max-connection-age-secs 3`), calling for
//!   `--aged-secs`. The channel reconnects at each GOAWAY and the balancer
//!   picks the next replica: every replica serves calls, none fails.
//!   A call that meets a GOAWAY before it leaves the client is sent again
//!   on the next connection (`retried`, see `routing_clients::retry`):
//!   tonic has no transparent retry of its own.
//! - `dns`: the client-side balancer (the `ready-balance` crate,
//!   balancer/) over a name resolved again and again (`--resolve
//!   dns:///HOST:PORT`, a Kubernetes headless Service), `--dns-rate` calls a
//!   second for `--dns-secs`, each sent on schedule from one of
//!   `--dns-concurrency` callers (an open loop). Only pods whose connection
//!   is ready get calls, picked by `--dns-pick`; pods that join the answer
//!   get calls after the next resolve (every `--resolve-interval-secs`, and
//!   soon after a connection fails). `--dns-balancer tonic` calls through
//!   tonic's own balancer instead, fed the same addresses.
//! - `l4_idle`, `l7_idle`: the keepalive experiment through balancers with
//!   short idle timeouts (6 s in `lb/haproxy.cfg`): a call, an idle gap
//!   (`--idle-gap-secs`, 8), a call, on a channel with the chapter's 5 s
//!   keepalive and on one without. Both phases run at the same time.
//!
//! Each phase reports the calls each replica served (read from the
//! `routing-replica` response header, `routing-server --replica NAME`), the
//! calls that failed and the connections opened (counted on the wire;
//! `client_side` dials with tonic's own connector, which cannot be counted,
//! so it reports none), and the calls sent again because they never left
//! the client (`retried`). The client starts no server and no balancer: it
//! takes their addresses as flags.
//!
//! Run with (verify.sh starts the replicas and HAProxy; by hand, see
//! docs/balancing.md):
//!
//! ```console
//! $ balance-client --phases l4_pooled,l7_pooled --target 127.0.0.1:9280 --l7 127.0.0.1:9281
//! {"client":"balance","phases":{"l4_pooled":{"calls":300,"failed":0,"connections":1,"per_replica":{"a":300},"top_share":1.0,"min_share":0.0,...},"l7_pooled":{...}}}
//! $ docker compose --profile lb up -d haproxy
//! $ docker compose --profile tools run --rm clients balance-client --target haproxy:9280 \
//!     --l7 haproxy:9281 --replicas replica:9000 --phases l4_pooled,l7_pooled,client_side
//! ```
//!
//! In a Kubernetes Job (the replicas run with `ROUTING_REPLICA_HOSTNAME=true`, so each
//! pod names itself), scaled from 3 to 4 while it runs:
//!
//! ```console
//! $ balance-client --phases dns --resolve dns:///routing-headless.routing.svc.cluster.local:9180 \
//!     --dns-secs 90 --dns-rate 50 --expect-replicas 4
//! dns t=10s endpoints=3 per_replica={"routing-7d9f-2xk4p":168,...}      (stderr, every --report-secs)
//! {"client":"balance","phases":{"dns":{"calls":4500,"failed":0,"per_replica":{...},"min_share":0.12,
//!   "first_served_s":{"routing-7d9f-x8c1m":41.3,...},"started_unix_s":1796412345.2,
//!   "resolver":{"resolves":10,"early":0,"kept":0,"inserted":4,"removed":0,"endpoints":[...]},...}}}
//! ```
//!
//! `first_served_s` is when each replica served its first call, in seconds
//! after `started_unix_s`: for the new pod, compare it with the time the pod
//! turned Ready.
//!
//! In compose, `--replicas replica:9000` is one name for three containers:
//! each name is resolved once, and tonic's balancer gets one endpoint per
//! address.
//!
//! `--target` is the L4 frontend. Exit 2 when a phase lacks its address,
//! 1 when nothing can be reached; failed calls are counted, not fatal.

use std::{
    collections::BTreeMap,
    future::Future,
    process::ExitCode,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use clap::{CommandFactory, Parser, error::ErrorKind};
use ready_balance::{Balancer, DnsName, Knobs, Pick, State, knobs};
use routing_clients::{
    Baseline, CallTimer, CountingConnector, Error, finish, init_tracing, retry,
    sample_quote_request, seconds, target::Target, tonic_balance,
};
use routing_contracts::{
    REPLICA_HEADER,
    routing::{GetQuoteResponse, routing_service_client::RoutingServiceClient},
};
use serde::Serialize;
use tokio::sync::Semaphore;
use tonic::{
    body::Body,
    transport::{Channel, Endpoint},
};
use tower::{ServiceExt, util::BoxCloneSyncService};

/// Pause between two calls of the aged phase: 20 ms, about 500 calls in
/// 10 s, enough to see each connection's replica without loading anything.
const AGED_PAUSE: Duration = Duration::from_millis(20);
/// Failed calls whose end is timed in the report: the first 100.
const FAILURES_TIMED: usize = 100;
/// The chapter's client keepalive, as keepalive-client's.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
enum Phase {
    /// One channel through L4 (--target): one replica serves all.
    L4Pooled,
    /// A channel per call through L4 (--target): spread, at a handshake each.
    L4Footgun,
    /// One channel through L7 (--l7): spread.
    L7Pooled,
    /// tonic's balance_list over --replicas: spread, no proxy.
    ClientSide,
    /// One channel through L4 to aging replicas (--l4-aged), for --aged-secs.
    L4Aged,
    /// tonic's balancer over a re-resolved DNS name (--resolve), for --dns-secs.
    Dns,
    /// Idle gap through L4 with a short timeout (--l4-short).
    L4Idle,
    /// Idle gap through L7 with a short timeout (--l7-short).
    L7Idle,
}

/// The dns phase's balancer.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
#[clap(rename_all = "snake_case")]
enum DnsBalancer {
    /// The ready-balance crate (balancer/).
    Ready,
    /// tonic's `Channel::balance_channel`.
    Tonic,
}

/// `ready_balance::Pick`, as a flag.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
#[clap(rename_all = "snake_case")]
enum DnsPick {
    /// Lower latency × calls in flight (Linkerd's peak EWMA).
    PeakEwma,
    /// Fewer calls in flight (gRFC A48).
    LeastRequest,
    /// At random, as tonic's own balancer.
    Random,
}

impl From<DnsPick> for Pick {
    fn from(pick: DnsPick) -> Self {
        match pick {
            DnsPick::PeakEwma => Pick::PeakEwma,
            DnsPick::LeastRequest => Pick::LeastRequest,
            DnsPick::Random => Pick::Random,
        }
    }
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Calls per replica behind a load balancer: L4 pins, L7 and client-side spread, a connection age spreads L4"
)]
struct Args {
    /// The L4 frontend (`--target`), and the rest of the baseline.
    #[command(flatten)]
    baseline: Baseline,
    /// Phases to run, comma-separated, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "l4_pooled,l4_footgun"
    )]
    phases: Vec<Phase>,
    /// The L7 frontend (HAProxy mode http, proto h2).
    #[arg(long)]
    l7: Option<Target>,
    /// The replicas themselves, comma-separated, for client_side. A name that
    /// resolves to several addresses (a scaled compose service) is one
    /// replica per address, as a DNS resolver in front of a balancer gives.
    #[arg(long, value_delimiter = ',')]
    replicas: Vec<Target>,
    /// The L4 frontend in front of replicas with a connection age.
    #[arg(long)]
    l4_aged: Option<Target>,
    /// The L4 frontend with a short idle timeout.
    #[arg(long)]
    l4_short: Option<Target>,
    /// The L7 frontend with a short idle timeout.
    #[arg(long)]
    l7_short: Option<Target>,
    /// Calls per phase (the aged phase calls for --aged-secs instead).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    calls: u32,
    /// Replicas the balancer has: shares are computed over this many, so a
    /// replica that served nothing counts as 0.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=64))]
    expect_replicas: u32,
    /// Seconds the aged phase calls for.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    aged_secs: u64,
    /// Make l4_pooled call for this many seconds, paced as l4_aged, with a
    /// timeline, instead of --calls calls (for the figure: pooled vs aged).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=600))]
    pooled_secs: Option<u64>,
    /// The name the dns phase resolves again and again: dns:///HOST:PORT or
    /// HOST:PORT, e.g. a headless Service's
    /// dns:///routing-headless.routing.svc.cluster.local:9180.
    #[arg(long)]
    resolve: Option<String>,
    /// Seconds the dns phase calls for.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3600))]
    dns_secs: u64,
    /// Calls a second in the dns phase, each sent on schedule (an open loop).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    dns_rate: u32,
    /// Callers the dns phase's calls leave from: the most calls in flight.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=256))]
    dns_concurrency: u32,
    /// Which balancer the dns phase calls through: this repository's
    /// (`ready-balance`) or tonic's own `balance_channel`, fed the same
    /// addresses, for comparison.
    #[arg(long, value_enum, default_value = "ready")]
    dns_balancer: DnsBalancer,
    /// How the dns phase's balancer compares two ready pods (ready only).
    #[arg(long, value_enum, default_value = "peak_ewma")]
    dns_pick: DnsPick,
    /// Seconds between two resolves of --resolve when no connection fails
    /// (ready_balance::knobs::RESOLVE_INTERVAL says why 10).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(2..=300))]
    resolve_interval_secs: u64,
    /// Seconds between two progress lines of the dns phase on stderr (0: none).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(0..=3600))]
    report_secs: u64,
    /// Seconds the idle phases stay idle between their two calls.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=600))]
    idle_gap_secs: u64,
}

/// One calling phase's outcome.
#[derive(Debug, Default, Serialize)]
struct Spread {
    calls: u32,
    failed: u32,
    /// Calls sent a second time because hyper dropped the first before
    /// sending it, on a connection that had just received a GOAWAY
    /// (`routing_clients::retry`). Counted in `calls` once.
    retried: u32,
    /// TCP connections opened, counted on the wire; absent when not countable.
    #[serde(skip_serializing_if = "Option::is_none")]
    connections: Option<u64>,
    /// Calls each replica answered, by its `routing-replica` name.
    per_replica: BTreeMap<String, u32>,
    /// The busiest replica's share of the calls that succeeded.
    top_share: f64,
    /// The least busy replica's share, over --expect-replicas.
    min_share: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    median_call_s: Option<f64>,
    /// GOAWAY frames received. A graceful close sends two, but a client
    /// with no call open closes after the first, so it often sees one.
    #[serde(skip_serializing_if = "Option::is_none")]
    goaways: Option<u64>,
    /// Connections opened after the first.
    #[serde(skip_serializing_if = "Option::is_none")]
    reconnects: Option<u64>,
    /// Calls each replica answered in each second of the phase, as
    /// [second, replica, calls] (timed phases only): the figure's data.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    timeline: Vec<(u64, String, u32)>,
    /// When each replica served its first call, in seconds after
    /// `started_unix_s` (dns phase).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    first_served_s: BTreeMap<String, f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    started_unix_s: Option<f64>,
    /// What the balancer did, and its endpoints at the end (dns phase):
    /// `calls_not_ready` is the calls handed to a pod that was not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    balancer: Option<Box<ready_balance::Stats>>,
    /// Ticks that found every caller busy and left late (dns phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    late: Option<u32>,
    /// Call latency, from send to answer (dns phase).
    #[serde(skip_serializing_if = "Option::is_none")]
    p50_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
    /// When the first failed calls ended, in seconds after the phase began
    /// (at most FAILURES_TIMED): were they at a kill, or after it?
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed_at_s: Vec<f64>,
    total_s: f64,
}

/// The idle experiment on one channel.
#[derive(Debug, Serialize)]
struct IdleGap {
    /// SURVIVED: the second call succeeded on the first connection;
    /// RECONNECTED: it succeeded on a new one; FAILED: it failed.
    result: &'static str,
    connections: u64,
    pings_sent: u64,
    /// PINGs the client received: in L4 the replica's, in L7 none cross HAProxy.
    pings_received: u64,
    goaways: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct IdlePhase {
    gap_s: u64,
    keepalive: IdleGap,
    no_keepalive: IdleGap,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PhaseReport {
    Spread(Spread),
    Idle(IdlePhase),
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    phases: BTreeMap<Phase, PhaseReport>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    let args = Args::parse();
    if let Err(message) = check_addresses(&args) {
        Args::command()
            .error(ErrorKind::MissingRequiredArgument, message)
            .exit();
    }
    finish(run(args).await)
}

/// Every phase asked for has its address.
fn check_addresses(args: &Args) -> Result<(), String> {
    for phase in &args.phases {
        let missing = match phase {
            Phase::L7Pooled => args.l7.is_none().then_some("--l7"),
            Phase::ClientSide => args.replicas.is_empty().then_some("--replicas"),
            Phase::L4Aged => args.l4_aged.is_none().then_some("--l4-aged"),
            Phase::L4Idle => args.l4_short.is_none().then_some("--l4-short"),
            Phase::L7Idle => args.l7_short.is_none().then_some("--l7-short"),
            Phase::Dns => args.resolve.is_none().then_some("--resolve"),
            Phase::L4Pooled | Phase::L4Footgun => None,
        };
        if let Some(flag) = missing {
            return Err(format!("phase {phase:?} needs {flag} ADDRESS"));
        }
    }
    Ok(())
}

async fn run(args: Args) -> Result<Report, Error> {
    let mut phases = BTreeMap::new();
    for &phase in &args.phases {
        let report = match phase {
            Phase::L4Pooled => {
                let endpoint = args.baseline.endpoint()?;
                let calling = args.pooled_secs.map(Duration::from_secs);
                PhaseReport::Spread(pooled(&args, &endpoint, calling).await?)
            }
            Phase::L4Footgun => PhaseReport::Spread(footgun(&args).await?),
            Phase::L7Pooled => {
                let endpoint = endpoint_of(&args, args.l7.as_ref())?;
                PhaseReport::Spread(pooled(&args, &endpoint, None).await?)
            }
            Phase::ClientSide => PhaseReport::Spread(client_side(&args).await?),
            Phase::Dns => PhaseReport::Spread(dns(&args).await?),
            Phase::L4Aged => {
                let endpoint = endpoint_of(&args, args.l4_aged.as_ref())?;
                let calling = Duration::from_secs(args.aged_secs);
                PhaseReport::Spread(pooled(&args, &endpoint, Some(calling)).await?)
            }
            // Run together below: each waits out its gap.
            Phase::L4Idle | Phase::L7Idle => continue,
        };
        phases.insert(phase, report);
    }
    let wants = |phase| args.phases.contains(&phase);
    let (l4, l7) = tokio::join!(
        async {
            match wants(Phase::L4Idle) {
                true => Some(idle(&args, args.l4_short.as_ref()).await),
                false => None,
            }
        },
        async {
            match wants(Phase::L7Idle) {
                true => Some(idle(&args, args.l7_short.as_ref()).await),
                false => None,
            }
        }
    );
    for (phase, report) in [(Phase::L4Idle, l4), (Phase::L7Idle, l7)] {
        if let Some(report) = report {
            phases.insert(phase, PhaseReport::Idle(report?));
        }
    }
    Ok(Report {
        client: "balance",
        phases,
    })
}

fn endpoint_of(args: &Args, target: Option<&Target>) -> Result<Endpoint, Error> {
    let target = target.ok_or("address checked in check_addresses")?;
    args.baseline.endpoint_at(target.uri())
}

/// Counts the replica behind each call, in order.
struct Tally {
    spread: Spread,
    started: Instant,
    expect: u32,
}

impl Tally {
    fn new(expect: u32) -> Self {
        Self {
            spread: Spread::default(),
            started: Instant::now(),
            expect,
        }
    }

    fn record<T>(&mut self, answer: retry::Retried<tonic::Response<T>>) {
        let spread = &mut self.spread;
        spread.calls += 1;
        spread.retried += answer.retried;
        let replica = match answer.result {
            Ok(response) => response
                .metadata()
                .get(REPLICA_HEADER)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("(no header)")
                .to_owned(),
            Err(status) => {
                spread.failed += 1;
                if spread.failed_at_s.len() < FAILURES_TIMED {
                    spread.failed_at_s.push(seconds(self.started.elapsed()));
                }
                spread
                    .first_error
                    .get_or_insert_with(|| format!("{:?}: {}", status.code(), status.message()));
                return;
            }
        };
        *spread.per_replica.entry(replica.clone()).or_default() += 1;
        let second = self.started.elapsed().as_secs();
        match spread.timeline.last_mut() {
            Some((at, last, n)) if *at == second && *last == replica => *n += 1,
            _ => spread.timeline.push((second, replica, 1)),
        }
    }

    fn finish(mut self, keep_timeline: bool) -> Spread {
        let spread = &mut self.spread;
        let served: u32 = spread.per_replica.values().sum();
        let share = |n: u32| {
            if served == 0 {
                0.0
            } else {
                (f64::from(n) / f64::from(served) * 1000.0).round() / 1000.0
            }
        };
        let top = spread.per_replica.values().copied().max().unwrap_or(0);
        let seen = u32::try_from(spread.per_replica.len()).unwrap_or(u32::MAX);
        let least = if seen < self.expect {
            0
        } else {
            spread.per_replica.values().copied().min().unwrap_or(0)
        };
        spread.top_share = share(top);
        spread.min_share = share(least);
        spread.total_s = seconds(self.started.elapsed());
        if !keep_timeline {
            spread.timeline.clear();
        }
        self.spread
    }
}

/// One channel, reused: `calls` calls, or calls for `calling` with a pause
/// between them (the aged phase, which also counts GOAWAYs and reconnects).
async fn pooled(
    args: &Args,
    endpoint: &Endpoint,
    calling: Option<Duration>,
) -> Result<Spread, Error> {
    let wire = args.baseline.wire();
    let channel = args.baseline.connect(endpoint, wire.clone()).await?;
    let client = RoutingServiceClient::new(channel);
    let mut tally = Tally::new(args.expect_replicas);
    let started = Instant::now();
    loop {
        let done = match calling {
            Some(limit) => started.elapsed() >= limit,
            None => tally.spread.calls >= args.calls,
        };
        if done {
            break;
        }
        tally.record(retry::sample_quote(&client).await);
        if calling.is_some() {
            tokio::time::sleep(AGED_PAUSE).await;
        }
    }
    let mut spread = tally.finish(calling.is_some());
    let connections = wire.snapshot().connections;
    spread.connections = Some(connections);
    if calling.is_some() {
        spread.goaways = Some(wire.goaways_received());
        spread.reconnects = Some(connections.saturating_sub(1));
    }
    Ok(spread)
}

/// A new channel for every call, through the L4 frontend.
async fn footgun(args: &Args) -> Result<Spread, Error> {
    let endpoint = args.baseline.endpoint()?;
    let wire = args.baseline.wire();
    let mut tally = Tally::new(args.expect_replicas);
    let mut timer = CallTimer::start();
    for _ in 0..args.calls {
        let call = Instant::now();
        let channel = args.baseline.connect(&endpoint, wire.clone()).await?;
        tally.record(retry::sample_quote(&RoutingServiceClient::new(channel)).await);
        timer.record(call);
    }
    let mut spread = tally.finish(false);
    spread.connections = Some(wire.snapshot().connections);
    spread.median_call_s = Some(timer.finish(Duration::ZERO).median_call_s);
    Ok(spread)
}

/// tonic's balancer over the replicas' own addresses, each name resolved
/// once to all its addresses.
async fn client_side(args: &Args) -> Result<Spread, Error> {
    let mut addrs = std::collections::BTreeSet::new();
    for target in &args.replicas {
        let found = tokio::net::lookup_host(target.to_string())
            .await
            .map_err(|e| format!("--replicas {target}: cannot resolve it: {e}"))?;
        addrs.extend(found);
    }
    tracing::info!(?addrs, "client_side: one endpoint per replica address");
    let endpoints = addrs
        .iter()
        .map(|addr| args.baseline.endpoint_at(format!("http://{addr}")))
        .collect::<Result<Vec<_>, _>>()?;
    let channel = Channel::balance_list(endpoints.into_iter());
    let client = RoutingServiceClient::new(channel);
    let mut tally = Tally::new(args.expect_replicas);
    for _ in 0..args.calls {
        tally.record(retry::sample_quote(&client).await);
    }
    Ok(tally.finish(false))
}

/// The balancer (`ready_balance`) over `--resolve`, called in an open
/// loop: a call leaves every 1/`--dns-rate` s on one of
/// `--dns-concurrency` callers, whether or not earlier calls have ended,
/// so a slow pod cannot slow the schedule. A tick that finds every caller
/// busy waits for one and is counted `late`. A progress line goes to
/// stderr every `--report-secs`.
async fn dns(args: &Args) -> Result<Spread, Error> {
    let target = args
        .resolve
        .as_deref()
        .ok_or("--resolve checked in check_addresses")?;
    let name = DnsName::from_system_conf(target).map_err(|e| format!("--resolve {target}: {e}"))?;
    let interval = Duration::from_secs(args.resolve_interval_secs);
    let (channel, balancer, _tonic) = match args.dns_balancer {
        DnsBalancer::Ready => {
            let knobs = Knobs {
                resolve_interval: interval,
                connect_timeout: Duration::from_secs(args.baseline.connect_timeout_secs),
                pick: args.dns_pick.into(),
                ..Knobs::default()
            };
            let balancer = Balancer::start(name, None, knobs)
                .await
                .map_err(|e| format!("--resolve {target}: {e}"))?;
            (boxed(balancer.channel()), Some(balancer), None)
        }
        DnsBalancer::Tonic => {
            let baseline = args.baseline.clone();
            let endpoint_for =
                move |addr: std::net::SocketAddr| baseline.endpoint_at(format!("http://{addr}"));
            let (channel, feed) =
                tonic_balance::start(name, endpoint_for, interval, knobs::MAX_ENDPOINTS)
                    .await
                    .map_err(|e| format!("--resolve {target}: {e}"))?;
            (boxed(channel), None, Some(feed))
        }
    };
    let client = RoutingServiceClient::new(channel);
    let started_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(seconds)
        .ok();
    let tally = Arc::new(Mutex::new((Tally::new(args.expect_replicas), Vec::new())));
    let callers = Arc::new(Semaphore::new(args.dns_concurrency as usize));
    let call_timeout = Duration::from_secs(args.baseline.call_timeout_secs);
    let mut pace = tokio::time::interval(Duration::from_secs(1) / args.dns_rate);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let (calling, report_every) = (
        Duration::from_secs(args.dns_secs),
        Duration::from_secs(args.report_secs),
    );
    let (started, mut next_report, mut late) = (Instant::now(), report_every, 0_u32);
    let mut first_served_s = BTreeMap::new();
    while started.elapsed() < calling {
        pace.tick().await;
        let caller = match Arc::clone(&callers).try_acquire_owned() {
            Ok(caller) => caller,
            Err(_) => {
                late += 1;
                Arc::clone(&callers).acquire_owned().await?
            }
        };
        let (client, shared) = (client.clone(), Arc::clone(&tally));
        tokio::spawn(async move {
            let sent = Instant::now();
            let answer = quote_within(client, call_timeout).await;
            let took = sent.elapsed().as_secs_f64();
            if let Ok(mut tally) = shared.lock() {
                tally.0.record(answer);
                tally.1.push(took);
            }
            drop(caller);
        });
        let now = started.elapsed();
        if let Ok(tally) = tally.lock() {
            for replica in tally.0.spread.per_replica.keys() {
                if !first_served_s.contains_key(replica) {
                    first_served_s.insert(replica.clone(), seconds(now));
                }
            }
            if !report_every.is_zero() && now >= next_report {
                next_report += report_every;
                let per_replica = serde_json::to_string(&tally.0.spread.per_replica)?;
                let ready = balancer.as_ref().map_or(0, |b| {
                    let endpoints = b.stats().endpoints;
                    endpoints.values().filter(|s| **s == State::Ready).count()
                });
                eprintln!(
                    "dns t={}s ready={ready} per_replica={per_replica}",
                    now.as_secs()
                );
            }
        }
    }
    // Every caller back: the last calls have ended.
    let _all = callers.acquire_many(args.dns_concurrency).await?;
    let (tally, mut took) = Arc::try_unwrap(tally)
        .map_err(|_| "a caller outlived the phase")?
        .into_inner()
        .map_err(|_| "a caller panicked")?;
    let mut spread = tally.finish(false);
    spread.first_served_s = first_served_s;
    spread.started_unix_s = started_unix_s;
    spread.late = Some(late);
    took.sort_by(f64::total_cmp);
    spread.p50_ms = quantile_ms(&took, 0.50);
    spread.p99_ms = quantile_ms(&took, 0.99);
    spread.balancer = balancer.map(|b| Box::new(b.stats()));
    Ok(spread)
}

/// One GetQuote with `grpc-timeout` on the wire, sent again if it never
/// left the client (`retry::transparent`).
fn quote_within(
    client: RoutingServiceClient<AnyChannel>,
    limit: Duration,
) -> impl Future<Output = retry::Retried<tonic::Response<GetQuoteResponse>>> + Send {
    retry::transparent::call(move || {
        let mut client = client.clone();
        let mut request = tonic::Request::new(sample_quote_request());
        request.set_timeout(limit);
        async move { client.get_quote(request).await }
    })
}

/// A channel of either balancer, as one type for the same client code.
/// Its error is a `Status` (made as tonic would make it from the
/// channel's error, source kept), not a boxed error, whose `Into` bound
/// rustc cannot prove inside a spawned task.
type AnyChannel = BoxCloneSyncService<http::Request<Body>, http::Response<Body>, tonic::Status>;

fn boxed<S, B>(channel: S) -> AnyChannel
where
    S: tower::Service<http::Request<Body>, Response = http::Response<B>>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Error: Into<Error>,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<Error>,
{
    BoxCloneSyncService::new(
        channel
            .map_response(|response| response.map(Body::new))
            .map_err(|e| tonic::Status::from_error(e.into())),
    )
}

/// The `q` quantile of sorted seconds, in milliseconds to 0.01.
fn quantile_ms(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    let at = ((last as f64) * q).round() as usize;
    Some((sorted[at.min(last)] * 100_000.0).round() / 100.0)
}

/// Both channels of the idle experiment, side by side.
async fn idle(args: &Args, target: Option<&Target>) -> Result<IdlePhase, Error> {
    let endpoint = endpoint_of(args, target)?;
    let gap = Duration::from_secs(args.idle_gap_secs);
    let with = endpoint
        .clone()
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let (keepalive, no_keepalive) =
        tokio::join!(idle_gap(args, &with, gap), idle_gap(args, &endpoint, gap));
    Ok(IdlePhase {
        gap_s: args.idle_gap_secs,
        keepalive: keepalive?,
        no_keepalive: no_keepalive?,
    })
}

/// A call, `gap` of silence, a call, on one channel.
async fn idle_gap(args: &Args, endpoint: &Endpoint, gap: Duration) -> Result<IdleGap, Error> {
    let wire: CountingConnector = args.baseline.wire();
    let channel = args.baseline.connect(endpoint, wire.clone()).await?;
    let client = RoutingServiceClient::new(channel);
    client
        .clone()
        .get_quote(sample_quote_request())
        .await
        .map_err(routing_clients::rpc_error("GetQuote before the gap"))?;
    tokio::time::sleep(gap).await;
    let second = client.clone().get_quote(sample_quote_request()).await;
    let seen = wire.snapshot();
    let (result, error) = match second {
        Ok(_) if seen.connections == 1 => ("SURVIVED", None),
        Ok(_) => ("RECONNECTED", None),
        Err(status) => (
            "FAILED",
            Some(format!("{:?}: {}", status.code(), status.message())),
        ),
    };
    Ok(IdleGap {
        result,
        connections: seen.connections,
        pings_sent: seen.pings_sent,
        pings_received: seen.pings_received,
        goaways: wire.goaways_received(),
        error,
    })
}
