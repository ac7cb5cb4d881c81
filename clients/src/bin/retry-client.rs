//! `retry-client`: retries that do not multiply an outage. The same
//! baseline as the other clients, plus gRFC A6's retry policy and its
//! throttling (`routing_clients::retry`), in three phases:
//!
//! - `naive`: `--calls` GetQuote calls against a server in trouble
//!   (`--target`, e.g. `routing-server --fault-unavailable-percent 100`),
//!   each retried on `UNAVAILABLE` up to `--max-attempts` sends, with no
//!   throttling. During an outage the server does `--max-attempts` times
//!   the work.
//! - `throttled`: the same policy with A6's token bucket (`--max-tokens`,
//!   `--token-ratio`). Once the first failures have spent half the bucket,
//!   nothing is retried: the server does about 1× the work.
//! - `healthy`: the throttled policy against a healthy server
//!   (`--healthy-target`, 0 % faults): no retries, exactly 1×.
//!
//! Each phase reports the calls, the sends the client made (`attempts`),
//! and the calls the server started, counted by the server itself
//! (`server_started`, from its `/metrics`: `--metrics` for `--target`,
//! `--healthy-metrics` for `--healthy-target`), and `multiplier`: the
//! server's calls per client call. The calls run one after another on one
//! channel.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-server -- --fault-unavailable-percent 100 --metrics-listen 127.0.0.1:9464
//! $ cargo run --release -p routing-server -- --listen 127.0.0.1:9182 --metrics-listen 127.0.0.1:9465
//! $ cargo run --release -p routing-clients --bin retry-client -- --metrics http://127.0.0.1:9464/metrics \
//!     --healthy-target 127.0.0.1:9182 --healthy-metrics http://127.0.0.1:9465/metrics
//! {"client":"retry","calls":50,"max_attempts":5,"max_tokens":10,"token_ratio":0.1,"phases":{"naive":{"ok":0,"failed":50,"attempts":250,"server_started":250,"multiplier":5.0,...},"throttled":{...,"attempts":54,"server_started":54,"multiplier":1.08,...},"healthy":{"ok":50,...,"multiplier":1.0,...}}}
//! ```
//!
//! Every field, and a flaky server (50 %): docs/deadlines.md.

use std::{collections::BTreeMap, process::ExitCode};

use clap::{CommandFactory, Parser, error::ErrorKind};
use routing_clients::{
    Baseline, Error, LinkReport, TlsReport, finish, init_tracing,
    retry::{self, RetryPolicy, Throttle},
    sample_quote_request, seconds,
    server_metrics::{MetricsUrl, Reading, ServerMetrics},
    target::Target,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[clap(rename_all = "snake_case")]
enum Phase {
    /// --max-attempts sends per call, no throttling, against --target.
    Naive,
    /// The same with A6's token bucket, against --target.
    Throttled,
    /// The throttled policy against --healthy-target.
    Healthy,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "gRFC A6 retries against a server in trouble: naive, throttled, and against a healthy server"
)]
struct Args {
    /// The server in trouble (`--target`), and the rest of the baseline.
    #[command(flatten)]
    baseline: Baseline,
    /// Phases to run, comma-separated, in this order.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "naive,throttled,healthy"
    )]
    phases: Vec<Phase>,
    /// --target's metrics (routing-server --metrics-listen), e.g.
    /// http://127.0.0.1:9464/metrics [default: none, no server fields].
    #[arg(long, env = "ROUTING_METRICS_URL")]
    metrics: Option<MetricsUrl>,
    /// A healthy server (no faults), for the healthy phase.
    #[arg(long)]
    healthy_target: Option<Target>,
    /// --healthy-target's metrics.
    #[arg(long)]
    healthy_metrics: Option<MetricsUrl>,
    /// GetQuote calls per phase, one after another.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    calls: u32,
    /// A6 maxAttempts: sends per call, the first included (A6 caps it at 5).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=5))]
    max_attempts: u32,
    /// A6 retryThrottling maxTokens: the bucket's size.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1000))]
    max_tokens: u32,
    /// A6 retryThrottling tokenRatio: tokens a success gives back (3 decimals).
    #[arg(long, default_value_t = 0.1, value_parser = token_ratio)]
    token_ratio: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    calls: u32,
    max_attempts: u32,
    max_tokens: u32,
    token_ratio: f64,
    phases: BTreeMap<Phase, PhaseReport>,
}

/// One phase: what the client sent and what the server started.
#[derive(Debug, Serialize)]
struct PhaseReport {
    target: String,
    ok: u32,
    failed: u32,
    /// Sends the client made, retries included (transparent resends not).
    attempts: u32,
    /// GetQuote calls the server started, by its own count; absent without metrics.
    #[serde(skip_serializing_if = "Option::is_none")]
    server_started: Option<u64>,
    /// server_started ÷ calls (without metrics: attempts ÷ calls), to 2 decimals.
    multiplier: f64,
    /// Tokens left in the bucket at the end (throttled phases).
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_left: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
    total_s: f64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    let args = Args::parse();
    if args.phases.contains(&Phase::Healthy) && args.healthy_target.is_none() {
        Args::command()
            .error(
                ErrorKind::MissingRequiredArgument,
                "phase healthy needs --healthy-target ADDRESS (a server with no faults)",
            )
            .exit();
    }
    finish(run(args).await)
}

/// tokenRatio: greater than 0, at most 1,000, three decimals at most used.
fn token_ratio(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(ratio) if ratio > 0.0 && ratio <= 1000.0 => Ok(ratio),
        _ => Err(format!("{text:?}: a number above 0, e.g. 0.1")),
    }
}

async fn run(args: Args) -> Result<Report, Error> {
    let policy = RetryPolicy::new(args.max_attempts);
    let mut phases = BTreeMap::new();
    for &phase in &args.phases {
        let (target, metrics, throttle) = match phase {
            Phase::Naive => (&args.baseline.target, &args.metrics, None),
            Phase::Throttled => (
                &args.baseline.target,
                &args.metrics,
                Some(Throttle::new(args.max_tokens, args.token_ratio)),
            ),
            Phase::Healthy => (
                args.healthy_target
                    .as_ref()
                    .unwrap_or(&args.baseline.target),
                &args.healthy_metrics,
                Some(Throttle::new(args.max_tokens, args.token_ratio)),
            ),
        };
        let report = run_phase(&args, target, metrics.as_ref(), &policy, throttle).await?;
        phases.insert(phase, report);
    }
    Ok(Report {
        client: "retry",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        calls: args.calls,
        max_attempts: args.max_attempts,
        max_tokens: args.max_tokens,
        token_ratio: args.token_ratio,
        phases,
    })
}

/// `--calls` calls to `target` under `policy` and `throttle`, and the
/// server's count of the calls it started.
async fn run_phase(
    args: &Args,
    target: &Target,
    metrics: Option<&MetricsUrl>,
    policy: &RetryPolicy,
    throttle: Option<Throttle>,
) -> Result<PhaseReport, Error> {
    let started_at = std::time::Instant::now();
    let endpoint = args.baseline.endpoint_at(target.uri())?;
    let channel = args
        .baseline
        .connect(&endpoint, args.baseline.wire())
        .await?;
    let client = RoutingServiceClient::new(channel);
    let before = started(metrics).await?;
    let (mut ok, mut failed, mut attempts) = (0, 0, 0);
    let mut first_error = None;
    for _ in 0..args.calls {
        // The lesson: every call through the A6 policy, and its throttle if any.
        let outcome = retry::call(policy, throttle.as_ref(), || {
            let mut client = client.clone();
            async move { client.get_quote(sample_quote_request()).await }
        })
        .await;
        attempts += outcome.attempts;
        match outcome.result {
            Ok(_) => ok += 1,
            Err(status) => {
                failed += 1;
                first_error
                    .get_or_insert_with(|| format!("{:?}: {}", status.code(), status.message()));
            }
        }
    }
    let after = started(metrics).await?;
    let server_started = before
        .zip(after)
        .map(|(before, after)| Reading { before, after }.delta());
    let sends = server_started.unwrap_or(u64::from(attempts));
    Ok(PhaseReport {
        target: target.to_string(),
        ok,
        failed,
        attempts,
        server_started,
        multiplier: (sends as f64 / f64::from(args.calls) * 100.0).round() / 100.0,
        tokens_left: throttle.map(|t| f64::from(t.milli_tokens()) / 1000.0),
        first_error,
        total_s: seconds(started_at.elapsed()),
    })
}

/// The server's count of GetQuote calls started, or `None` without `--metrics`.
async fn started(metrics: Option<&MetricsUrl>) -> Result<Option<f64>, Error> {
    match metrics {
        Some(url) => Ok(Some(ServerMetrics::fetch(url).await?.get_quote_started())),
        None => Ok(None),
    }
}
