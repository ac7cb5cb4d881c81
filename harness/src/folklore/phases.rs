//! The measurements of `bench folklore`, one function per claim. Each runs
//! its cases on every server in turn, bounded by a call count and a time,
//! and returns [`Measurement`]s. CPU and RSS come from `/proc` of the
//! server's process, as in [`crate::bench`]; load comes from this process.

use std::{
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use h2::client::SendRequest;
use h2_peer::{
    grpc,
    h2client::{CallEnd, H2Conn, ReceiveWindows, await_end, unfinished_message},
};
use tokio::{sync::watch, task::JoinSet, time::Instant};
use tonic::transport::Channel;

use super::report::{Claim, Measurement, Metric, Stack};
use crate::{
    Error,
    bench::{self, CALL_DEADLINE, Load, RunResult, Server},
    measure::{
        latency::Latencies,
        probe::{self, PROBE_DEADLINE, Probe},
    },
};

/// The longest any closed-loop run below may take: 20 s. Their call
/// counts end them far sooner on any machine that can run the chapter.
const RUN_BOUND: Duration = Duration::from_secs(20);

/// A server under measurement and which column it is.
#[derive(Debug, Clone)]
pub struct Contender {
    pub stack: Stack,
    pub server: Server,
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

fn us(secs: Option<f64>) -> Option<f64> {
    secs.map(|s| s * 1e6)
}

fn per_sec(r: &RunResult) -> Option<f64> {
    (r.secs > 0.0).then(|| r.calls as f64 / r.secs)
}

/// Server CPU time over wall time, in cores.
fn cores(r: &RunResult) -> Option<f64> {
    r.cpu_per_call
        .filter(|_| r.secs > 0.0)
        .map(|cpu| cpu * r.calls as f64 / r.secs)
}

fn errors(r: &RunResult) -> Option<f64> {
    if let Some(e) = &r.first_error {
        tracing::warn!("{} calls failed, the first: {e}", r.errors);
    }
    Some(r.errors as f64)
}

fn conns(n: u64) -> String {
    format!("{n} conn{}", if n == 1 { "" } else { "s" })
}

/// Warms every server up: 2,000 GetQuotes, 50 at a time on 2 connections.
pub async fn warm_up(all: &[Contender]) -> Result<(), Error> {
    for c in all {
        bench::measure_load(&c.server, Load::GetQuote, 2_000, 50, 2, RUN_BOUND).await?;
    }
    Ok(())
}

// ─── Message size ───────────────────────────────────────────────────────

/// The responses compared, with their size on the wire and the calls
/// measured: enough for about 0.3 s of server CPU each, so that `/proc`'s
/// 10 ms ticks count to within a few percent.
pub const MESSAGE_SIZES: [(Load, &str, u64); 4] = [
    (Load::GetQuote, "GetQuote (~100 B)", 10_000),
    (Load::Page { routes: 1 }, "page 1 (0.2 MB)", 1_000),
    (Load::Page { routes: 5 }, "page 5 (1 MB)", 300),
    (Load::Page { routes: 25 }, "page 25 (5 MB)", 80),
];

/// One call at a time on one connection, so the latency is the call's own
/// time and the CPU is what one call of that size costs.
pub async fn message_size(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let mut out = Vec::new();
    for (load, case, calls) in MESSAGE_SIZES {
        tracing::info!(server = c.stack.name(), case, calls, "message size");
        let r = bench::measure_load(&c.server, load, calls, 1, 1, RUN_BOUND).await?;
        out.push(
            Measurement::new(Claim::MessageSize, case, c.stack)
                .with(Metric::CpuPerCallUs, us(r.cpu_per_call))
                .with(Metric::P50Ms, ms(r.p50))
                .with(Metric::P99Ms, ms(r.p99))
                .with(Metric::Errors, errors(&r)),
        );
    }
    Ok(out)
}

// ─── One connection or several ──────────────────────────────────────────

/// grpc-go's benchmark: 80 concurrent callers.
pub const CALLERS: u64 = 80;
/// GetQuotes per run of [`connections`].
const CONNECTIONS_CALLS: u64 = 40_000;

/// 80 callers over 1 and over 4 connections: throughput and CPU per call.
pub async fn connections(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let mut out = Vec::new();
    for channels in [1, 4] {
        let case = format!("{CALLERS} callers on {}", conns(channels));
        tracing::info!(server = c.stack.name(), case, "connections");
        let r = bench::measure_load(
            &c.server,
            Load::GetQuote,
            CONNECTIONS_CALLS,
            CALLERS,
            channels,
            RUN_BOUND,
        )
        .await?;
        out.push(
            Measurement::new(Claim::Connections, case, c.stack)
                .with(Metric::CallsPerSec, per_sec(&r))
                .with(Metric::CpuPerCallUs, us(r.cpu_per_call))
                .with(Metric::P99Ms, ms(r.p99))
                .with(Metric::Errors, errors(&r)),
        );
    }
    Ok(out)
}

/// Callers in the stream-cap runs: three times the cap of 100.
pub const CAP_CALLERS: usize = 300;
/// GetQuotes per fast run of [`stream_cap`].
const CAP_FAST_CALLS: u64 = 40_000;
/// How long a held call keeps its stream open before its body ends: 20 ms,
/// a handler that waits on a database or a client that uploads slowly.
pub const HOLD: Duration = Duration::from_millis(20);
/// How long each held run lasts: 2 s, about 100 holds per caller.
const HELD_RUN: Duration = Duration::from_secs(2);
/// Connections tried for the held calls: 3 × 100 streams fit 300 callers.
pub const HELD_CONNECTIONS: [usize; 4] = [1, 2, 3, 4];

/// 300 callers against a cap of 100 streams per connection. Fast GetQuotes
/// first (the server's CPU is the queue, wherever the calls wait), then
/// calls that hold their stream for [`HOLD`] (the cap is the queue).
pub async fn stream_cap(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let mut out = Vec::new();
    for channels in [1, 3] {
        let case = format!("GetQuote, {}", conns(channels));
        tracing::info!(server = c.stack.name(), case, "stream cap");
        let r = bench::measure_load(
            &c.server,
            Load::GetQuote,
            CAP_FAST_CALLS,
            CAP_CALLERS as u64,
            channels,
            RUN_BOUND,
        )
        .await?;
        out.push(
            Measurement::new(Claim::StreamCap, case, c.stack)
                .with(Metric::CallsPerSec, per_sec(&r))
                .with(Metric::P50Ms, ms(r.p50))
                .with(Metric::P99Ms, ms(r.p99))
                .with(Metric::Errors, errors(&r)),
        );
    }
    for channels in HELD_CONNECTIONS {
        let case = format!("held {} ms, {}", HOLD.as_millis(), conns(channels as u64));
        tracing::info!(server = c.stack.name(), case, "stream cap");
        let r = held_calls(&c.server, channels, CAP_CALLERS, HOLD, HELD_RUN).await?;
        out.push(
            Measurement::new(Claim::StreamCap, case, c.stack)
                .with(Metric::CallsPerSec, per_sec(&r))
                .with(Metric::P50Ms, ms(r.p50))
                .with(Metric::P99Ms, ms(r.p99))
                .with(Metric::Errors, errors(&r)),
        );
    }
    Ok(out)
}

/// The receive windows of the held calls' connections: tonic's (2 MiB a
/// stream, 5 MiB the connection), not the protocol's 64 KiB. h2's client
/// allows unread small DATA frames up to half the connection window: with
/// 64 KiB, about 170 GetQuote answers waiting for their callers closed the
/// connection to grpc-go, which lets all 300 streams run at once (GOAWAY
/// `too_many_data_frames`, h2 0.4.20).
const TONIC_WINDOWS: ReceiveWindows = ReceiveWindows {
    stream: routing_clients::windows::HYPER_STREAM_WINDOW,
    connection: routing_clients::windows::HYPER_CONNECTION_WINDOW,
};

/// `callers` callers over `connections` h2 connections, each calling
/// GetQuote in a loop for `run`: headers, then `hold`, then the body. The
/// latency counts from the moment the caller asks for a stream, so a call
/// that waits for one of the connection's streams (h2 holds it back while
/// the server's SETTINGS_MAX_CONCURRENT_STREAMS are in use) shows it.
pub async fn held_calls(
    server: &Server,
    connections: usize,
    callers: usize,
    hold: Duration,
    run: Duration,
) -> Result<RunResult, Error> {
    let addr = server.target.addr();
    let mut pool = Vec::new();
    for _ in 0..connections.max(1) {
        let conn = H2Conn::connect(addr, TONIC_WINDOWS).await?;
        // One call first, so the server's SETTINGS (its cap) are in.
        held_call(conn.sender(), conn.authority(), Duration::ZERO).await?;
        pool.push(conn);
    }
    let started = Instant::now();
    let mut callers_set = JoinSet::new();
    for i in 0..callers {
        let conn = &pool[i % pool.len()];
        let (send, authority) = (conn.sender(), conn.authority().to_string());
        // Callers start spread over one hold, as independent clients would,
        // not in lock-step.
        let stagger = hold.mul_f64(i as f64 / callers as f64);
        callers_set.spawn(async move {
            let mut latencies = Latencies::new();
            let (mut errors, mut first_error) = (0u64, None);
            tokio::time::sleep(stagger).await;
            while started.elapsed() < run {
                match held_call(send.clone(), &authority, hold).await {
                    Ok(latency) => latencies.push(latency),
                    Err(e) => {
                        errors += 1;
                        first_error.get_or_insert(e.to_string());
                        // A closed connection fails every call at once: pace them.
                        tokio::time::sleep(hold.max(Duration::from_millis(1))).await;
                    }
                }
            }
            (latencies, errors, first_error)
        });
    }
    let mut result = RunResult::default();
    let mut latencies = Latencies::new();
    while let Some(joined) = callers_set.join_next().await {
        let (l, errors, first_error) = joined?;
        latencies.extend(l);
        result.errors += errors;
        result.first_error = result.first_error.or(first_error);
    }
    result.secs = started.elapsed().as_secs_f64();
    result.calls = latencies.len() as u64;
    result.p50 = latencies.percentile(50.0);
    result.p99 = latencies.percentile(99.0);
    Ok(result)
}

/// One GetQuote whose body follows its headers after `hold`; its latency,
/// from asking for the stream to the OK trailers.
async fn held_call(
    mut send: SendRequest<Bytes>,
    authority: &str,
    hold: Duration,
) -> Result<Duration, Error> {
    let started = Instant::now();
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    let request = grpc::h2_request(authority, grpc::GET_QUOTE, grpc::CONTENT_TYPE)?;
    let (response, mut body) = send.send_request(request, false)?;
    // Ready again only once this stream is open: until then h2 queues it.
    std::future::poll_fn(|cx| send.poll_ready(cx)).await?;
    tokio::time::sleep(hold).await;
    body.send_data(grpc::framed_quote(), true)?;
    match await_end(response, CALL_DEADLINE, true, started).await {
        (CallEnd::Grpc(tonic::Code::Ok), latency) => Ok(latency),
        (end, _) => Err(format!("held GetQuote ended {}", end.label()).into()),
    }
}

/// Callers in the saturation runs: 100, enough to keep both cores busy.
pub const SATURATION_CALLERS: u64 = 100;
/// How long each saturation run lasts: 3 s.
const SATURATION_RUN: Duration = Duration::from_secs(3);

/// GetQuote as fast as 100 callers go, on 1 and on 2 connections: how
/// many cores the server used, and how much of it was one thread.
pub async fn one_connection_cpu(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let mut out = Vec::new();
    for channels in [1, 2] {
        let case = format!("{SATURATION_CALLERS} callers on {}", conns(channels));
        tracing::info!(server = c.stack.name(), case, "one connection's CPU");
        let r = bench::measure_load(
            &c.server,
            Load::GetQuote,
            u64::MAX,
            SATURATION_CALLERS,
            channels,
            SATURATION_RUN,
        )
        .await?;
        if !r.thread_shares.is_empty() {
            tracing::info!(
                server = c.stack.name(),
                case,
                threads = r.describe_threads()
            );
        }
        out.push(
            Measurement::new(Claim::OneConnectionCpu, case, c.stack)
                .with(Metric::CallsPerSec, per_sec(&r))
                .with(Metric::ServerCores, cores(&r))
                .with(Metric::BusiestThreadPct, r.busiest_thread_pct())
                .with(Metric::CpuPerCallUs, us(r.cpu_per_call))
                .with(Metric::Errors, errors(&r)),
        );
    }
    Ok(out)
}

// ─── Head-of-line across connections ────────────────────────────────────

/// GetQuotes per second, spread over [`QUOTE_CONNECTIONS`].
pub const QUOTE_RATE: u32 = 400;
pub const QUOTE_CONNECTIONS: usize = 10;
/// Full pages (5.0 MB, gzip accepted) per second, on [`PAGE_CONNECTIONS`]
/// other connections.
pub const PAGE_RATE: u32 = 40;
pub const PAGE_CONNECTIONS: usize = 4;
/// Pages in flight at most: a server slower than 40 pages/s gets fewer,
/// never a growing queue (the pages/s row shows what it got).
const PAGES_IN_FLIGHT: u64 = 8;
/// How long the GetQuotes run alone, and beside the pages.
const QUOTES_ALONE: Duration = Duration::from_secs(3);
const QUOTES_BESIDE_PAGES: Duration = Duration::from_secs(5);

/// GetQuote's latency at a steady 400 calls/s on 10 connections, alone and
/// while 40 gzip full pages a second are served on 4 other connections.
pub async fn head_of_line(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let target = c.server.target;
    tracing::info!(server = c.stack.name(), "head-of-line: GetQuote alone");
    let probe = Probe::start(&target, None, QUOTE_RATE, PROBE_DEADLINE, QUOTE_CONNECTIONS).await?;
    tokio::time::sleep(QUOTES_ALONE).await;
    let alone = probe.stop().await;

    tracing::info!(
        server = c.stack.name(),
        "head-of-line: GetQuote beside the pages"
    );
    let pages = PageLoad::start(&c.server, PAGE_RATE, PAGE_CONNECTIONS).await?;
    // Let the page load reach its pace before the GetQuotes are counted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let probe = Probe::start(&target, None, QUOTE_RATE, PROBE_DEADLINE, QUOTE_CONNECTIONS).await?;
    tokio::time::sleep(QUOTES_BESIDE_PAGES).await;
    let beside = probe.stop().await;
    let (served, page_errors, secs) = pages.stop().await;

    let quote = |case: &str, s: &probe::ProbeSummary| {
        if let Some(e) = &s.first_error {
            tracing::warn!(
                server = c.stack.name(),
                case,
                "{} GetQuotes failed: {e}",
                s.errors
            );
        }
        Measurement::new(Claim::HeadOfLine, case, c.stack)
            .with(Metric::P50Ms, s.p50_ms)
            .with(Metric::P99Ms, s.p99_ms)
            .with(Metric::Errors, Some(s.errors as f64))
    };
    Ok(vec![
        quote("GetQuote alone", &alone),
        quote("GetQuote beside pages", &beside)
            .with(Metric::PagesPerSec, Some(served as f64 / secs))
            .with(Metric::PageErrors, Some(page_errors as f64)),
    ])
}

/// Gzip full pages at a steady rate on connections of their own, in the
/// background, until stopped.
struct PageLoad {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<(u64, u64, f64)>,
}

impl PageLoad {
    async fn start(server: &Server, rate: u32, connections: usize) -> Result<Self, Error> {
        let mut channels: Vec<Channel> = Vec::new();
        for _ in 0..connections {
            let channel =
                probe::connect(&server.target, CALL_DEADLINE, Duration::from_secs(5)).await?;
            bench::list_page(channel.clone(), grpc::FULL_PAGE, true).await?;
            channels.push(channel);
        }
        let (stop, mut stopped) = watch::channel(false);
        let task = tokio::spawn(async move {
            let (served, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
            let in_flight = Arc::new(AtomicU64::new(0));
            let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(rate)));
            ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            let mut calls = JoinSet::new();
            let started = Instant::now();
            for channel in channels.iter().cycle() {
                tokio::select! {
                    _ = ticker.tick() => {}
                    _ = stopped.changed() => break,
                }
                if in_flight.load(Ordering::Relaxed) >= PAGES_IN_FLIGHT {
                    continue;
                }
                in_flight.fetch_add(1, Ordering::Relaxed);
                let (channel, served, failed, in_flight) = (
                    channel.clone(),
                    served.clone(),
                    failed.clone(),
                    in_flight.clone(),
                );
                calls.spawn(async move {
                    match bench::list_page(channel, grpc::FULL_PAGE, true).await {
                        Ok(()) => served.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                    in_flight.fetch_sub(1, Ordering::Relaxed);
                });
                while calls.try_join_next().is_some() {}
            }
            let secs = started.elapsed().as_secs_f64();
            calls.abort_all();
            (
                served.load(Ordering::Relaxed),
                failed.load(Ordering::Relaxed),
                secs,
            )
        });
        Ok(Self { stop, task })
    }

    /// Stops issuing pages; returns pages served, failed, and seconds run.
    async fn stop(self) -> (u64, u64, f64) {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or((0, 0, 1.0))
    }
}

// ─── Calls in flight ────────────────────────────────────────────────────

/// Connections the held calls are spread over: 100, so 5,000 calls are 50
/// per connection, half the 100-stream cap of routing-server and tonic.
pub const IN_FLIGHT_CONNECTIONS: usize = 100;
/// Calls held at each RSS sample.
pub const IN_FLIGHT_CALLS: [usize; 2] = [1_000, 5_000];
/// What each held GetQuote's prefix announces, and sends: 100 bytes
/// announced, 10 sent, so the server holds the call, not a body.
const DECLARED: u32 = 100;
const SENT: usize = 10;
/// How long the server settles before its RSS is read: 1 s.
const SETTLE: Duration = Duration::from_secs(1);
/// How long one stream may wait to be opened.
const OPEN_WAIT: Duration = Duration::from_secs(2);

/// Server RSS per call held open (a request whose body never ends), at
/// 1,000 and 5,000 calls over 100 connections, net of the connections'
/// own RSS. routing-server ends such calls after 10 s (its request
/// deadline); the whole run takes about 4 s.
pub async fn in_flight(c: &Contender) -> Result<Vec<Measurement>, Error> {
    let Some(process) = c.server.process.process() else {
        return Ok(Vec::new());
    };
    let rss = || process.sample().map(|s| s.rss as f64);
    let addr = c.server.target.addr();
    tracing::info!(
        server = c.stack.name(),
        connections = IN_FLIGHT_CONNECTIONS,
        "calls in flight"
    );
    let rss_rest = rss();
    let mut set = JoinSet::new();
    for _ in 0..IN_FLIGHT_CONNECTIONS {
        set.spawn(H2Conn::connect(addr, ReceiveWindows::default()));
    }
    let mut conns = Vec::new();
    while let Some(joined) = set.join_next().await {
        conns.push(joined??);
    }
    tokio::time::sleep(SETTLE).await;
    let rss_conns = rss();
    let kib_each = |now: Option<f64>, base: Option<f64>, n: usize| match (now, base) {
        (Some(now), Some(base)) if n > 0 => Some((now - base) / n as f64 / 1024.0),
        _ => None,
    };
    let mut out = vec![
        Measurement::new(
            Claim::InFlight,
            format!("{IN_FLIGHT_CONNECTIONS} connections, no call"),
            c.stack,
        )
        .with(
            Metric::RssPerConnKib,
            kib_each(rss_conns, rss_rest, conns.len()),
        ),
    ];
    let body = unfinished_message(DECLARED, SENT);
    let mut held = Vec::new();
    for calls in IN_FLIGHT_CALLS {
        let more = (calls - held.len()).div_ceil(conns.len());
        let mut set = JoinSet::new();
        for mut conn in conns.drain(..) {
            let body = body.clone();
            set.spawn(async move {
                let mut opened = Vec::new();
                for _ in 0..more {
                    match conn
                        .open_call(
                            grpc::GET_QUOTE,
                            grpc::CONTENT_TYPE,
                            body.clone(),
                            false,
                            OPEN_WAIT,
                        )
                        .await?
                    {
                        Some(call) => opened.push(call),
                        None => break,
                    }
                }
                Ok::<_, Error>((conn, opened))
            });
        }
        while let Some(joined) = set.join_next().await {
            let (conn, opened) = joined??;
            conns.push(conn);
            held.extend(opened);
        }
        tokio::time::sleep(SETTLE).await;
        out.push(
            Measurement::new(Claim::InFlight, format!("{calls} calls held"), c.stack)
                .with(
                    Metric::RssPerCallKib,
                    kib_each(rss(), rss_conns, held.len()),
                )
                .with(Metric::Calls, Some(held.len() as f64)),
        );
    }
    // Which calls the server had already ended (a zero timeout polls once).
    let mut still_open = 0;
    for (response, _body) in held {
        if tokio::time::timeout(Duration::ZERO, response)
            .await
            .is_err()
        {
            still_open += 1;
        }
    }
    if let Some(last) = out.last_mut() {
        last.values.push((Metric::CallsHeld, still_open as f64));
    }
    drop(conns);
    tokio::time::sleep(SETTLE).await;
    Ok(out)
}
