//! `window-client`: the HTTP/2 flow-control window, the fifth lever. A
//! receiver's window is the most its peer may send before it hears back, so
//! a download can never go faster than window ÷ RTT, whatever the link's
//! rate. On loopback that ceiling is out of sight; on a long link it is the
//! whole story. This client fetches the catalog, uncompressed (no gzip is
//! accepted, so every byte crosses the link), over an emulated `longhaul`
//! link (1 Gbit/s, 400 ms round trip) unless `--link` says otherwise, in
//! five phases that run at the same time, each on channels of its own:
//!
//! 1. **small**: a 64 KiB window (65,535 bytes), the HTTP/2 default where
//!    grpc-go and grpc-core start, fetching 2 routes (about 400 KB);
//! 2. **tonic_default**: nothing set, so hyper's 2 MiB stream and 5 MiB
//!    connection windows, fetching the full catalog (25 routes, 5.0 MB);
//! 3. **adaptive**: `http2_adaptive_window(true)`, hyper's BDP estimation,
//!    fetching the full catalog;
//! 4. **one_channel**: 4 fetches of 1 route at once on 1 channel with 64 KiB
//!    windows: the streams share one 64 KiB connection window;
//! 5. **n_channels**: the same 4 fetches on 4 channels, a window each. This
//!    is the one honest reason for more than one channel: a window too small
//!    for the link that the client cannot raise.
//!
//! The small-window phases fetch fewer routes so that the run stays short:
//! at 64 KiB per 400 ms round trip the full catalog would take 31 s, past
//! both the 10 s call deadline and the server's 30 s send deadline. Each
//! phase reports its throughput against its own ceiling, so the byte counts
//! need not match. The phases run at once because each has its own
//! emulated link (`--sequential` runs them one after another, to check that
//! they do not slow each other down).
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin window-client
//! {"client":"window","link":{"preset":"longhaul","rtt_ms":400.0,"mbit":1000.0,"queue_kib":64},"small":{"channels":1,"fetches":1,"routes":2,"bytes":400200,"s":2.836234,"mbit_s":1.129,"window_ceiling_mbit_s":1.311,"stream_window":65535,"connection_window":65535,"grown_stream_window":65535,"grown_connection_window":65535},"tonic_default":{"channels":1,"fetches":1,"routes":25,"bytes":5002500,"s":1.641016,"mbit_s":24.387,"window_ceiling_mbit_s":41.943,"stream_window":2097152,"connection_window":5242880,"grown_stream_window":2097152,"grown_connection_window":5242880},"adaptive":{"channels":1,"fetches":1,"routes":25,"bytes":5002500,"s":4.076303,"mbit_s":9.818,"window_ceiling_mbit_s":76.237,"stream_window":65535,"connection_window":65535,"grown_stream_window":3811866,"grown_connection_window":3811866},"one_channel":{"channels":1,"fetches":4,"routes":4,"bytes":800428,"s":5.676755,"mbit_s":1.128,"window_ceiling_mbit_s":1.311,"stream_window":65535,"connection_window":65535,"grown_stream_window":65535,"grown_connection_window":65535},"n_channels":{"channels":4,"fetches":4,"routes":4,"bytes":800428,"s":1.632819,"mbit_s":3.922,"window_ceiling_mbit_s":5.243,"stream_window":65535,"connection_window":65535,"grown_stream_window":65535,"grown_connection_window":65535}}
//! ```
//!
//! Every phase reports `s` (from the call to the last decoded answer),
//! `bytes` (DATA payload received, counted on the wire), `mbit_s` (bytes ×
//! 8 ÷ s) and `window_ceiling_mbit_s`: the most its windows allowed in
//! flight, ÷ the round trip. `stream_window` and `connection_window` are
//! what the client's first SETTINGS and WINDOW_UPDATE frames granted, and
//! `grown_*` the largest they reached, read off the wire: with the adaptive
//! window they show where tonic starts and how far it grew.
//!
//! In that run: 64 KiB moved 1.1 Mbit/s on a 1 Gbit/s link, under its
//! 1.3 Mbit/s ceiling (2 routes took 7 round trips: 400,200 bytes ÷ 65,535
//! per trip); tonic's default moved the catalog 22× faster; the adaptive
//! window started at 65,535 and grew to 3.8 MB, too late to beat the
//! default on a 5 MB answer; and 4 fetches went 3.5× faster on 4 channels
//! than on 1, where they shared one 64 KiB connection window.

use std::{future::Future, process::ExitCode, time::Duration};

use clap::Parser;
use h2_frames::DEFAULT_WINDOW;
use routing_clients::{
    Baseline, Error, LinkReport, TlsReport,
    catalog::{FULL_CATALOG_ROUTES, catalog_client, fetch_routes},
    finish, init_tracing, seconds,
    windows::{ReceiveWindow, window_ceiling_bit_s},
};
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

/// The small window: 65,535 bytes, HTTP/2's initial window (RFC 9113
/// §6.9.2), where grpc-go and grpc-core start their BDP estimation.
const SMALL_WINDOW: ReceiveWindow = ReceiveWindow::Fixed(DEFAULT_WINDOW);

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Fetch the catalog over a long link with a 64 KiB window, tonic's default and the adaptive window; 1 channel vs N",
    // The lesson needs a long link: `longhaul` unless `--link` names another.
    mut_arg("preset", |link| link.default_value("longhaul"))
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,

    /// Routes the 64 KiB-window fetch asks for (200 kB each). At 400 ms a
    /// round trip each takes about 1.3 s, so above 6 the fetch runs into the
    /// 10 s call deadline (`--call-timeout-secs`).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=25))]
    small_routes: u32,

    /// Routes the tonic-default and adaptive fetches ask for: the full
    /// catalog.
    #[arg(long, default_value_t = FULL_CATALOG_ROUTES, value_parser = clap::value_parser!(u32).range(1..=25))]
    routes: u32,

    /// Fetches at once in the 1-channel and N-channel phases (N is this), 1
    /// route each, with 64 KiB windows.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(2..=8))]
    fetches: u32,

    /// Run the phases one after another instead of at the same time.
    #[arg(long)]
    sequential: bool,
}

/// One phase's result.
#[derive(Debug, Serialize)]
struct Phase {
    /// Channels (connections) the phase used.
    channels: u32,
    /// Fetches it made, all at once.
    fetches: u32,
    /// Routes received, over all fetches.
    routes: usize,
    /// DATA payload bytes received, over all fetches.
    bytes: u64,
    /// From the first call to the last decoded answer.
    s: f64,
    mbit_s: f64,
    /// The most the windows allowed in flight (at their largest) ÷ the round
    /// trip; null on a link without delay.
    window_ceiling_mbit_s: Option<f64>,
    /// The stream and connection windows the client granted first.
    stream_window: u32,
    connection_window: u64,
    /// The largest they reached during the phase.
    grown_stream_window: u32,
    grown_connection_window: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    /// The emulated link; absent with `--link local`.
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    small: Phase,
    tonic_default: Phase,
    adaptive: Phase,
    one_channel: Phase,
    n_channels: Phase,
}

/// A phase to run: how many channels, how many fetches of how many routes,
/// with which windows.
#[derive(Debug, Clone, Copy)]
struct Plan {
    window: ReceiveWindow,
    channels: u32,
    fetches: u32,
    routes_each: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    finish(run(Args::parse()).await)
}

async fn run(args: Args) -> Result<Report, Error> {
    let rtt = args.baseline.link().rtt();
    let small = |channels, fetches, routes_each| Plan {
        window: SMALL_WINDOW,
        channels,
        fetches,
        routes_each,
    };
    let full = |window| Plan {
        window,
        channels: 1,
        fetches: 1,
        routes_each: args.routes,
    };
    let plans = [
        small(1, 1, args.small_routes),
        full(ReceiveWindow::TonicDefault),
        full(ReceiveWindow::Adaptive),
        small(1, args.fetches, 1),
        small(args.fetches, args.fetches, 1),
    ];
    let phases = plans.map(|plan| run_phase(args.baseline.clone(), plan, rtt));
    let [small, tonic_default, adaptive, one_channel, n_channels] = if args.sequential {
        let mut done = Vec::with_capacity(phases.len());
        for phase in phases {
            done.push(phase.await?);
        }
        done
    } else {
        all_at_once(phases).await?
    }
    .try_into()
    .map_err(|_| "a phase is missing")?;
    Ok(Report {
        client: "window",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        small,
        tonic_default,
        adaptive,
        one_channel,
        n_channels,
    })
}

/// Opens the plan's channels (before the clock starts), then makes its
/// fetches at once and measures them.
async fn run_phase(baseline: Baseline, plan: Plan, rtt: Duration) -> Result<Phase, Error> {
    let endpoint = plan.window.apply(baseline.endpoint()?);
    // A link of its own for each phase; a phase's channels share theirs.
    let wire = baseline.wire();
    let mut channels = Vec::new();
    for _ in 0..plan.channels {
        channels.push(baseline.connect(&endpoint, wire.clone()).await?);
    }
    let before = wire.windows();
    let started = Instant::now();
    let fetches = (0..plan.fetches as usize).map(|i| {
        let client = catalog_client(channels[i % channels.len()].clone());
        fetch_routes(client, plan.routes_each)
    });
    let routes = all_at_once(fetches)
        .await?
        .iter()
        .map(|(routes, _)| routes)
        .sum();
    let elapsed = started.elapsed();
    let seen = wire.windows().since(before);

    let streams_per_channel = plan.fetches.div_ceil(plan.channels);
    let in_flight = u64::from(plan.channels) * seen.in_flight_limit(streams_per_channel);
    let mbit = |bit_s: f64| (bit_s / 1e3).round() / 1e3;
    Ok(Phase {
        channels: plan.channels,
        fetches: plan.fetches,
        routes,
        bytes: seen.data_bytes_received,
        s: seconds(elapsed),
        mbit_s: mbit(seen.data_bytes_received as f64 * 8.0 / elapsed.as_secs_f64()),
        window_ceiling_mbit_s: window_ceiling_bit_s(in_flight, rtt).map(mbit),
        stream_window: seen.first_stream_window,
        connection_window: seen.first_connection_window,
        grown_stream_window: seen.largest_stream_window,
        grown_connection_window: seen.largest_connection_window,
    })
}

/// Runs every task at once, each in its own tokio task, and returns their
/// outputs in order; the first failure ends the rest.
async fn all_at_once<T: Send + 'static>(
    tasks: impl IntoIterator<Item = impl Future<Output = Result<T, Error>> + Send + 'static>,
) -> Result<Vec<T>, Error> {
    let mut set = JoinSet::new();
    let mut done = Vec::new();
    for (i, task) in tasks.into_iter().enumerate() {
        set.spawn(async move { (i, task.await) });
        done.push(None);
    }
    while let Some(joined) = set.join_next().await {
        let (i, outcome) = joined?;
        done[i] = Some(outcome?);
    }
    Ok(done.into_iter().flatten().collect())
}
