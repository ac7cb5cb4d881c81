//! `bench balancer`: what the client-side balancer (balancer/, the
//! `ready-balance` crate) costs the *client*, per GetQuote, beside a plain
//! tonic `Channel` to one server and tonic's own `balance_channel` over the
//! same three. It starts three `routing-server` processes itself (the
//! release binary beside this one) on free loopback ports, and stops them
//! when it ends.
//!
//! Each round runs the three channels in turn, in a rotating order, each
//! warmed up and then timed over `--calls` calls with `--concurrency` in
//! flight: the CPU this process used (`/proc/self/stat`, user + system)
//! divided by the calls. The servers run in other processes, so their CPU
//! is not counted. Each row is the median of the rounds.
//!
//! Run with:
//!
//! ```console
//! $ cargo build --release -p routing-server -p harness
//! $ target/release/bench balancer --rounds 5
//! ```
//!
//! It prints a table on stdout: µs of client CPU per call for each channel,
//! each round's value, and the ratio to the plain channel; the issue's
//! bound is the balancer's median at most 1.15 times the plain channel's.

use std::{
    ffi::{OsStr, OsString},
    net::SocketAddr,
    process::ExitCode,
    sync::Arc,
    time::{Duration, Instant},
};

use clap::Parser;
use h2_peer::procfs;
use ready_balance::{Balancer, Fixed, Knobs, Pick};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use tonic::transport::{Channel, Endpoint};

use crate::{
    Error,
    folklore::{
        report::Stack,
        servers::{self, Running},
    },
};

/// The bound this mode reports on: the balancer's client CPU per call at
/// most this many times a plain channel's (median of the rounds).
pub const BOUND: f64 = 1.15;

#[derive(Debug, Parser)]
#[command(
    name = "bench balancer",
    bin_name = "bench balancer",
    about = "Client CPU per GetQuote: a plain Channel, tonic's balance_channel, and ready-balance over 3 servers"
)]
pub struct Args {
    /// Rounds; each runs every channel once, in a rotating order.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=50))]
    rounds: u32,
    /// Calls timed per channel per round.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    calls: u32,
    /// Calls in flight.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=512))]
    concurrency: u32,
    /// How ready-balance picks.
    #[arg(long, value_enum, default_value = "peak-ewma")]
    pick: PickArg,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum PickArg {
    PeakEwma,
    LeastRequest,
    Random,
}

/// `bench balancer ...`: true when the first argument names this mode.
pub fn is_balancer(first: Option<&OsStr>) -> bool {
    first == Some(OsStr::new("balancer"))
}

/// The three channels measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Tonic,
    Ready,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Plain, Kind::Tonic, Kind::Ready];

    fn label(self) -> &'static str {
        match self {
            Kind::Plain => "plain Channel, one server",
            Kind::Tonic => "tonic balance_channel, 3 servers",
            Kind::Ready => "ready-balance, 3 servers",
        }
    }
}

pub async fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = Args::parse_from(args);
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("bench balancer: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &Args) -> Result<(), Error> {
    let profile = servers::profile_dir()?;
    let program = profile.join("routing-server");
    let mut running: Vec<Running> = Vec::new();
    for _ in 0..3 {
        running.push(
            servers::start(Stack::RoutingServer, &program, |addr| {
                vec!["--listen".into(), addr.to_string().into()]
            })
            .await?,
        );
    }
    let addrs: Vec<SocketAddr> = running
        .iter()
        .map(|r| r.server.target.to_string().parse())
        .collect::<Result<_, _>>()?;
    let mut per_call: Vec<Vec<f64>> = vec![Vec::new(); Kind::ALL.len()];
    for round in 0..args.rounds as usize {
        for turn in 0..Kind::ALL.len() {
            let index = (round + turn) % Kind::ALL.len();
            let us = measure(Kind::ALL[index], &addrs, args).await?;
            eprintln!(
                "round {}: {}: {us:.2} µs per call",
                round + 1,
                Kind::ALL[index].label()
            );
            per_call[index].push(us);
        }
    }
    print_table(&per_call);
    Ok(())
}

/// One channel of `kind`: warmed up, then `--calls` calls timed.
async fn measure(kind: Kind, addrs: &[SocketAddr], args: &Args) -> Result<f64, Error> {
    let endpoint = |addr: &SocketAddr| Endpoint::from_shared(format!("http://{addr}"));
    let (client, _balancer) = match kind {
        Kind::Plain => {
            let channel = endpoint(&addrs[0])?.connect().await?;
            (Client::Plain(RoutingServiceClient::new(channel)), None)
        }
        Kind::Tonic => {
            let channel = Channel::balance_list(
                addrs
                    .iter()
                    .map(endpoint)
                    .collect::<Result<Vec<_>, _>>()?
                    .into_iter(),
            );
            (Client::Plain(RoutingServiceClient::new(channel)), None)
        }
        Kind::Ready => {
            let pick = match args.pick {
                PickArg::PeakEwma => Pick::PeakEwma,
                PickArg::LeastRequest => Pick::LeastRequest,
                PickArg::Random => Pick::Random,
            };
            let knobs = Knobs {
                pick,
                ..Knobs::default()
            };
            let balancer = Balancer::start(Fixed(addrs.to_vec()), None, knobs).await?;
            (
                Client::Ready(RoutingServiceClient::new(balancer.channel())),
                Some(balancer),
            )
        }
    };
    let warm_up = (args.calls / 10).max(100);
    calls(&client, warm_up, args.concurrency).await?;
    let before = own_cpu()?;
    calls(&client, args.calls, args.concurrency).await?;
    let used = own_cpu()? - before;
    Ok(used.as_secs_f64() * 1e6 / f64::from(args.calls))
}

#[derive(Debug, Clone)]
enum Client {
    Plain(RoutingServiceClient<Channel>),
    Ready(RoutingServiceClient<ready_balance::BalancedChannel>),
}

/// `n` GetQuote calls with `concurrency` in flight; the first failure ends it.
async fn calls(client: &Client, n: u32, concurrency: u32) -> Result<(), Error> {
    let left = Arc::new(std::sync::atomic::AtomicU32::new(n));
    let mut callers = Vec::new();
    for _ in 0..concurrency {
        let (client, left) = (client.clone(), Arc::clone(&left));
        callers.push(tokio::spawn(async move {
            while left
                .fetch_update(
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                    |n| n.checked_sub(1),
                )
                .is_ok()
            {
                let request = routing_clients::sample_quote_request();
                let answer = match &client {
                    Client::Plain(c) => c.clone().get_quote(request).await.map(drop),
                    Client::Ready(c) => c.clone().get_quote(request).await.map(drop),
                };
                answer.map_err(|s| format!("a GetQuote failed: {s}"))?;
            }
            Ok::<(), Error>(())
        }));
    }
    let deadline = Instant::now() + Duration::from_secs(300);
    for caller in callers {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, caller)
            .await
            .map_err(|_| "calls took more than 300 s")???;
    }
    Ok(())
}

/// This process's CPU time so far, user and system.
fn own_cpu() -> Result<Duration, Error> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let ticks = procfs::stat_cpu_ticks(&stat).ok_or("cannot read /proc/self/stat")?;
    // Linux's USER_HZ is 100 on every architecture it runs on.
    Ok(Duration::from_millis(ticks * 10))
}

fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted.get(sorted.len() / 2).copied().unwrap_or(f64::NAN)
}

fn print_table(per_call: &[Vec<f64>]) {
    let plain = median(&per_call[0]);
    let mut out = String::new();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    out.push_str(&format!(
        "# {cores} cores; client CPU per GetQuote (µs), median of {} rounds\n",
        per_call[0].len()
    ));
    out.push_str(&format!(
        "{:<36} {:>8} {:>7}  rounds\n",
        "channel", "median", "÷ plain"
    ));
    for (kind, values) in Kind::ALL.iter().zip(per_call) {
        let m = median(values);
        let rounds: Vec<String> = values.iter().map(|v| format!("{v:.2}")).collect();
        out.push_str(&format!(
            "{:<36} {:>8.2} {:>6.2}×  {}\n",
            kind.label(),
            m,
            m / plain,
            rounds.join(" ")
        ));
    }
    let ready = median(&per_call[2]) / plain;
    out.push_str(&format!(
        "bound: ready-balance <= {BOUND:.2}× a plain Channel: {:.2}×, {}\n",
        ready,
        if ready <= BOUND { "met" } else { "missed" }
    ));
    let _ = std::io::Write::write_all(&mut std::io::stdout(), out.as_bytes());
}
