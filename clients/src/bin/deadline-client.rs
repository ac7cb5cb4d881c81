//! `deadline-client`: where the tail comes from when a server is slow. The
//! same baseline as the other clients, against a server made slow on
//! purpose (`routing-server --fault-delay-ms 2000`), in four phases:
//!
//! - `no_deadline`: GetQuote at a fixed rate (`--rate` calls/s for
//!   `--phase-secs`) with no deadline on the wire. Every call waits out the
//!   delay, or the server's default deadline (`routing-server
//!   --default-deadline-secs`, 30 s) if that is shorter: the calls pile up
//!   on the server (rate × the shorter in flight) and the client's p99 is
//!   the shorter of the two.
//! - `endpoint_timeout`: the same, on a channel with
//!   `Endpoint::timeout(--deadline-ms)`. tonic enforces it in the client
//!   alone: no `grpc-timeout` is sent (`grpc_timeout_on_wire`, measured by
//!   a probe inside the client). The server still stops, because the
//!   client's give-up resets the stream; it counts the call `CANCELLED`.
//! - `request_deadline`: the same, with `Request::set_timeout`. The
//!   deadline travels as `grpc-timeout`, the server drops the handler at
//!   the deadline, and its calls in flight stay near rate × deadline.
//! - `cancelled`: `--cancel-calls` calls at once, each dropped by the client
//!   at `--cancel-after-ms`; the server's handlers still running
//!   `--settle-ms` later (grpc-go's per-request experiment: 500 calls,
//!   cancelled at 200 ms, read 300 ms later).
//!
//! What the server saw comes from the server: its `/metrics`
//! (`routing-server --metrics-listen`), scraped before, during and after
//! each phase (`--metrics`). Without `--metrics`, the `server` fields are
//! absent.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-server -- --fault-delay-ms 2000 --metrics-listen 127.0.0.1:9464
//! $ cargo run --release -p routing-clients --bin deadline-client -- --metrics http://127.0.0.1:9464/metrics
//! {"client":"deadline","deadline_ms":200,"rate":50,"phases":{"no_deadline":{"calls":100,...,"p99_s":2.01,"grpc_timeout_on_wire":null,"server":{"in_flight_peak":100,...}},...,"cancelled":{"calls":500,...,"server":{"in_flight_before_cancel":500,"handlers_running_after_settle":0}}}}
//! ```
//!
//! The whole line, field by field: docs/deadlines.md.

use std::{
    collections::BTreeMap,
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use routing_clients::{
    Baseline, Error, LinkReport, TlsReport, finish, header_probe, init_tracing,
    sample_quote_request, seconds,
    server_metrics::{self, MetricsUrl, Reading, ServerMetrics},
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;
use tokio::{sync::watch, task::JoinSet};
use tonic::{Code, Request, transport::Channel};

/// Calls routing-server lets one connection have open at once (its
/// `--max-concurrent-streams` default, 100): the client opens enough
/// channels that no call waits for a stream in the client, so what piles
/// up, piles up on the server.
const STREAMS_PER_CONNECTION: u32 = 100;

/// The statuses a server-side reading lists: the ones these phases can end with.
const SERVER_STATUSES: [&str; 4] = ["OK", "CANCELLED", "DEADLINE_EXCEEDED", "UNAVAILABLE"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
enum Phase {
    /// A fixed rate with no deadline on the wire: calls pile up.
    NoDeadline,
    /// Endpoint::timeout: enforced in the client only.
    EndpointTimeout,
    /// Request::set_timeout: grpc-timeout on the wire, the server stops.
    RequestDeadline,
    /// --cancel-calls calls dropped by the client at --cancel-after-ms.
    Cancelled,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Against a slow server: calls without a deadline, with Endpoint::timeout, with Request::set_timeout, and cancelled"
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
    /// Phases to run, comma-separated, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "no_deadline,endpoint_timeout,request_deadline,cancelled"
    )]
    phases: Vec<Phase>,
    /// The server's metrics (routing-server --metrics-listen), e.g.
    /// http://127.0.0.1:9464/metrics [default: none, no server fields].
    #[arg(long, env = "ROUTING_METRICS_URL")]
    metrics: Option<MetricsUrl>,
    /// The gauge of handlers alive in --metrics: routing-server's, or another
    /// server's (the grpc-go peer's is routing_peer_handlers_running).
    #[arg(long, default_value = server_metrics::CALLS_IN_FLIGHT)]
    in_flight_series: String,
    /// Calls started per second in the rate phases (a fixed arrival rate,
    /// whatever the answers do).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1000))]
    rate: u32,
    /// Seconds each rate phase starts calls for.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=60))]
    phase_secs: u32,
    /// The deadline of endpoint_timeout and request_deadline, in milliseconds.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    deadline_ms: u64,
    /// Calls the cancelled phase starts at once.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=5000))]
    cancel_calls: u32,
    /// Milliseconds after which the client drops each cancelled call.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    cancel_after_ms: u64,
    /// Milliseconds between the last call's end and the server's reading.
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    settle_ms: u64,
    /// Milliseconds between two readings of the server's calls in flight.
    #[arg(long, default_value_t = 250, value_parser = clap::value_parser!(u64).range(10..=10_000))]
    sample_ms: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    deadline_ms: u64,
    rate: u32,
    channels: u32,
    phases: BTreeMap<Phase, PhaseReport>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum PhaseReport {
    Rate(RatePhase),
    Cancel(CancelPhase),
}

/// A rate phase, as the client and the server saw it.
#[derive(Debug, Serialize)]
struct RatePhase {
    calls: u32,
    /// How the calls ended, by status, as the client saw them.
    statuses: BTreeMap<String, u32>,
    /// Of those, the calls tonic's own timer ended ("Timeout expired"):
    /// the client gave up before the server answered.
    ended_by_client_timer: u32,
    p50_s: f64,
    p99_s: f64,
    max_s: f64,
    /// The `grpc-timeout` this phase's settings put on the wire, as a
    /// probe received it; null: none.
    grpc_timeout_on_wire: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<ServerRate>,
    total_s: f64,
}

/// What the server counted during a rate phase.
#[derive(Debug, Serialize)]
struct ServerRate {
    /// GetQuote calls it started.
    started: u64,
    /// GetQuote calls it ended, by status (absent: none).
    ended: BTreeMap<&'static str, u64>,
    /// The most calls in flight at one reading, and every reading as
    /// [seconds into the phase, calls in flight].
    in_flight_peak: u64,
    in_flight: Vec<(f64, u64)>,
    /// Calls in flight --settle-ms after the client's last call ended.
    in_flight_after_settle: u64,
}

/// The cancelled phase.
#[derive(Debug, Serialize)]
struct CancelPhase {
    calls: u32,
    cancel_after_ms: u64,
    settle_ms: u64,
    /// Calls that ended before the client dropped them (0 against a server
    /// slower than --cancel-after-ms).
    answered: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    server: Option<ServerCancel>,
}

#[derive(Debug, Serialize)]
struct ServerCancel {
    /// Calls in flight just before the cancel (at 3/4 of --cancel-after-ms).
    in_flight_before_cancel: u64,
    /// Handlers still running --settle-ms after the cancel: what grpc-go's
    /// experiment counts.
    handlers_running_after_settle: u64,
    /// GetQuote calls the server ended, by status.
    ended: BTreeMap<&'static str, u64>,
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    finish(run(Args::parse()).await)
}

async fn run(args: Args) -> Result<Report, Error> {
    let deadline = Duration::from_millis(args.deadline_ms);
    let at_once = args.cancel_calls.max(args.rate * args.phase_secs);
    let channels = at_once.div_ceil(STREAMS_PER_CONNECTION);
    let wire = args.baseline.wire();
    // The baseline's channels: its 10 s call timeout is enforced in the
    // client only (no grpc-timeout, see endpoint_timeout), far above the delay.
    let plain = pool(&args.baseline, args.baseline.endpoint()?, channels, &wire).await?;
    let mut phases = BTreeMap::new();
    for &phase in &args.phases {
        let report = match phase {
            Phase::NoDeadline => {
                let on_wire =
                    header_probe::grpc_timeout_sent(|uri| args.baseline.endpoint_at(uri), None)
                        .await?;
                PhaseReport::Rate(rate_phase(&args, &plain, None, on_wire).await?)
            }
            Phase::EndpointTimeout => {
                // The lesson: a deadline on the channel, not on the request.
                let timed = |uri| Ok(args.baseline.endpoint_at(uri)?.timeout(deadline));
                let on_wire = header_probe::grpc_timeout_sent(timed, None).await?;
                let endpoint = args.baseline.endpoint()?.timeout(deadline);
                let timed_pool = pool(&args.baseline, endpoint, channels, &wire).await?;
                PhaseReport::Rate(rate_phase(&args, &timed_pool, None, on_wire).await?)
            }
            Phase::RequestDeadline => {
                // The lesson: the deadline on each request.
                let on_wire = header_probe::grpc_timeout_sent(
                    |uri| args.baseline.endpoint_at(uri),
                    Some(deadline),
                )
                .await?;
                PhaseReport::Rate(rate_phase(&args, &plain, Some(deadline), on_wire).await?)
            }
            Phase::Cancelled => PhaseReport::Cancel(cancel_phase(&args, &plain).await?),
        };
        phases.insert(phase, report);
    }
    Ok(Report {
        client: "deadline",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        deadline_ms: args.deadline_ms,
        rate: args.rate,
        channels,
        phases,
    })
}

/// `count` channels to the target through `endpoint`, so that no call waits
/// for a stream in the client.
async fn pool(
    baseline: &Baseline,
    endpoint: tonic::transport::Endpoint,
    count: u32,
    wire: &routing_clients::CountingConnector,
) -> Result<Vec<RoutingServiceClient<Channel>>, Error> {
    let mut clients = Vec::new();
    for _ in 0..count {
        let channel = baseline.connect(&endpoint, wire.clone()).await?;
        clients.push(RoutingServiceClient::new(channel));
    }
    Ok(clients)
}

/// Calls at `--rate` for `--phase-secs`, each with `request_timeout` if
/// given, and the server's readings around them.
async fn rate_phase(
    args: &Args,
    clients: &[RoutingServiceClient<Channel>],
    request_timeout: Option<Duration>,
    grpc_timeout_on_wire: Option<String>,
) -> Result<RatePhase, Error> {
    let started = Instant::now();
    let before = scrape(args).await?;
    let sampler = Sampler::start(args);
    let mut ticker = tokio::time::interval(Duration::from_secs(1) / args.rate);
    let mut calls = JoinSet::new();
    let count = args.rate * args.phase_secs;
    for i in 0..count {
        ticker.tick().await;
        let mut client = clients[i as usize % clients.len()].clone();
        calls.spawn(async move {
            let call = Instant::now();
            let mut request = Request::new(sample_quote_request());
            if let Some(timeout) = request_timeout {
                request.set_timeout(timeout);
            }
            let outcome = client.get_quote(request).await;
            (call.elapsed(), outcome.err())
        });
    }
    let mut durations = Vec::new();
    let mut statuses = BTreeMap::new();
    let mut ended_by_client_timer = 0;
    while let Some(joined) = calls.join_next().await {
        let (took, error) = joined?;
        durations.push(took);
        let code = error.as_ref().map_or(Code::Ok, tonic::Status::code);
        *statuses.entry(code_name(code)).or_insert(0) += 1;
        ended_by_client_timer += u32::from(error.is_some_and(|s| s.message() == "Timeout expired"));
    }
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let after = scrape(args).await?;
    let samples = sampler.stop().await;
    durations.sort_unstable();
    Ok(RatePhase {
        calls: count,
        statuses,
        ended_by_client_timer,
        p50_s: seconds(percentile(&durations, 50)),
        p99_s: seconds(percentile(&durations, 99)),
        max_s: seconds(durations.last().copied().unwrap_or_default()),
        grpc_timeout_on_wire,
        server: before.zip(after).map(|(before, after)| ServerRate {
            started: Reading {
                before: before.get_quote_started(),
                after: after.get_quote_started(),
            }
            .delta(),
            ended: ended_by_status(&before, &after),
            in_flight_peak: samples.iter().map(|&(_, n)| n).max().unwrap_or(0),
            in_flight: samples,
            in_flight_after_settle: count_of(after.sum(&args.in_flight_series, &[])),
        }),
        total_s: seconds(started.elapsed()),
    })
}

/// `--cancel-calls` calls at once, each dropped at `--cancel-after-ms`,
/// and the server's handlers `--settle-ms` later.
async fn cancel_phase(
    args: &Args,
    clients: &[RoutingServiceClient<Channel>],
) -> Result<CancelPhase, Error> {
    let cancel_after = Duration::from_millis(args.cancel_after_ms);
    let before = scrape(args).await?;
    let mut calls = JoinSet::new();
    for i in 0..args.cancel_calls {
        let mut client = clients[i as usize % clients.len()].clone();
        // Dropping the call's future is the cancel: tonic resets the stream
        // (RST_STREAM CANCEL), as a grpc-go client's cancel() does.
        calls.spawn(async move {
            tokio::time::timeout(cancel_after, client.get_quote(sample_quote_request()))
                .await
                .is_ok()
        });
    }
    tokio::time::sleep(cancel_after * 3 / 4).await;
    let during = scrape(args).await?;
    let mut answered = 0;
    while let Some(joined) = calls.join_next().await {
        answered += u32::from(joined?);
    }
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let after = scrape(args).await?;
    let server = match (before, during, after) {
        (Some(before), Some(during), Some(after)) => Some(ServerCancel {
            in_flight_before_cancel: count_of(during.sum(&args.in_flight_series, &[])),
            handlers_running_after_settle: count_of(after.sum(&args.in_flight_series, &[])),
            ended: ended_by_status(&before, &after),
        }),
        _ => None,
    };
    Ok(CancelPhase {
        calls: args.cancel_calls,
        cancel_after_ms: args.cancel_after_ms,
        settle_ms: args.settle_ms,
        answered,
        server,
    })
}

/// One scrape of `--metrics`, or `None` without it.
async fn scrape(args: &Args) -> Result<Option<ServerMetrics>, Error> {
    match &args.metrics {
        Some(url) => Ok(Some(ServerMetrics::fetch(url).await?)),
        None => Ok(None),
    }
}

/// The server's calls in flight, read every `--sample-ms` until stopped.
struct Sampler {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Vec<(f64, u64)>>,
}

impl Sampler {
    fn start(args: &Args) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let url = args.metrics.clone();
        let series = args.in_flight_series.clone();
        let period = Duration::from_millis(args.sample_ms);
        let task = tokio::spawn(async move {
            let mut samples = Vec::new();
            let Some(url) = url else { return samples };
            let started = Instant::now();
            let mut ticker = tokio::time::interval(period);
            loop {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stopped.changed() => return samples,
                }
                // A failed reading is skipped: the phase's own scrapes report errors.
                if let Ok(metrics) = ServerMetrics::fetch(&url).await {
                    let at = (started.elapsed().as_secs_f64() * 100.0).round() / 100.0;
                    samples.push((at, count_of(metrics.sum(&series, &[]))));
                }
            }
        });
        Self { stop, task }
    }

    async fn stop(self) -> Vec<(f64, u64)> {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// GetQuote calls ended during the phase, by status; statuses with none are left out.
fn ended_by_status(before: &ServerMetrics, after: &ServerMetrics) -> BTreeMap<&'static str, u64> {
    SERVER_STATUSES
        .into_iter()
        .map(|status| {
            let reading = Reading {
                before: before.get_quote_ended(status),
                after: after.get_quote_ended(status),
            };
            (status, reading.delta())
        })
        .filter(|&(_, n)| n > 0)
        .collect()
}

/// A gauge's reading as a count.
fn count_of(value: f64) -> u64 {
    value.max(0.0).round() as u64
}

/// The `p`-th percentile of sorted durations (nearest rank); 0 for none.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted.get(rank - 1).copied().unwrap_or_default()
}

/// A status code as gRPC spells it (`DEADLINE_EXCEEDED`), as the server's
/// metrics do: tonic's `DeadlineExceeded` in capitals with underscores.
fn code_name(code: Code) -> String {
    let mut name = String::new();
    for (i, c) in format!("{code:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}
