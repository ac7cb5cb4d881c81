//! The benchmark behind `bench`: what each call costs the server, measured
//! from the outside. Load comes from tonic clients in this process (several
//! channels, a fixed number of calls in flight); the server's CPU time is
//! read from `/proc/PID/stat` before and after each run, so the clients'
//! own cost is excluded. With two servers, every phase runs on one, then on
//! the other, before the next phase starts, so both see the same machine.
//! [`tls`] runs the same phases plaintext against TLS (`--tls-target`).

pub mod balancer;
pub mod tls;

use std::{
    fmt::Write as _,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use h2_peer::{
    procfs::{self, USER_HZ},
    raw::RawConn,
    tls::HarnessTls,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use tokio::{task::JoinSet, time::Instant};
use tonic::{codec::CompressionEncoding, transport::Channel};

use crate::{
    Error,
    measure::{latency::Latencies, monitor::ServerProcess, probe},
    target::LoopbackTarget,
};

/// Decode cap of the ListRoutes clients: 16 MiB, as the chapter's
/// `gzip-client`, since a full page (5.0 MB) is over tonic's 4 MiB default.
pub const LIST_DECODE_CAP: usize = 16 * 1024 * 1024;

/// Each call's deadline: 10 s, the clients' call timeout.
pub const CALL_DEADLINE: Duration = Duration::from_secs(10);

/// How long idle connections settle before RSS is read: 1 s.
const IDLE_SETTLE: Duration = Duration::from_secs(1);

/// A thread that did at least this share (10 %) of the server's CPU in a
/// run counts as one that served it: it tells a server that spread its
/// connections over its cores from one that ran them all on one thread.
pub const BUSY_THREAD_SHARE: f64 = 0.10;

/// Idle connections are opened this many at a time, so the server's accept
/// backlog never overflows.
const IDLE_BATCH: usize = 100;

/// Sizes and bounds of the runs.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchKnobs {
    /// GetQuote calls measured per server.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub calls: u64,
    /// GetQuote calls in flight at once.
    #[arg(short = 'c', long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Channels (TCP connections) the GetQuote load is spread over; one run
    /// per value. 1 is what `ghz -c 50` does by default; 10 spreads the same
    /// 50 calls thinner, so each connection batches fewer of them.
    #[arg(long, value_delimiter = ',', default_values_t = [1, 10], value_parser = clap::value_parser!(u64).range(1..=1_000))]
    pub channels: Vec<u64>,
    /// Unmeasured GetQuote calls first, to warm both sides up.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,
    /// ListRoutes(page 25) calls measured per server and encoding.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub list_calls: u64,
    /// ListRoutes calls in flight at once.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub list_concurrency: u64,
    /// Idle HTTP/2 connections held to measure RSS per connection (0: skip).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub idle_conns: u64,
    /// Upper bound on each measured run, in seconds; a run stops issuing calls then.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=3_600))]
    pub max_secs: u64,
}

/// A server under test.
#[derive(Debug, Clone)]
pub struct Server {
    pub target: LoopbackTarget,
    pub process: ServerProcess,
}

/// The calls one run makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Load {
    GetQuote,
    ListRoutes {
        gzip: bool,
    },
    /// A page of `routes` routes (1 to 25), identity: `bench folklore`'s message sizes.
    Page {
        routes: i32,
    },
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    pub calls: u64,
    pub errors: u64,
    pub first_error: Option<String>,
    pub secs: f64,
    /// Server CPU per call, in seconds; `None` if the server is not local.
    pub cpu_per_call: Option<f64>,
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// Each server thread's share of the server's CPU in this run, largest
    /// first (see [`procfs::thread_shares`]); empty if the server is not local.
    pub thread_shares: Vec<(String, f64)>,
}

impl RunResult {
    /// The busiest thread's share of the server's CPU, in percent.
    pub fn busiest_thread_pct(&self) -> Option<f64> {
        self.thread_shares.first().map(|(_, share)| share * 100.0)
    }

    /// Threads that did at least [`BUSY_THREAD_SHARE`] of the work.
    pub fn busy_threads(&self) -> Option<usize> {
        (!self.thread_shares.is_empty()).then(|| {
            self.thread_shares
                .iter()
                .filter(|(_, share)| *share >= BUSY_THREAD_SHARE)
                .count()
        })
    }

    /// `routing-server 51%, routing-worker-1 49%`: who did the work.
    pub fn describe_threads(&self) -> String {
        self.thread_shares
            .iter()
            .map(|(name, share)| format!("{name} {:.0}%", share * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Runs `calls` calls of `load`, `concurrency` at a time over `channels`
/// channels, and measures them and the server's CPU time.
pub async fn measure_load(
    server: &Server,
    load: Load,
    calls: u64,
    concurrency: u64,
    channels: u64,
    max: Duration,
) -> Result<RunResult, Error> {
    measure_load_over(server, None, load, calls, concurrency, channels, max).await
}

/// [`measure_load`] over `tls` if given ([`crate::bench::tls`]).
pub async fn measure_load_over(
    server: &Server,
    tls: Option<&HarnessTls>,
    load: Load,
    calls: u64,
    concurrency: u64,
    channels: u64,
    max: Duration,
) -> Result<RunResult, Error> {
    let mut pool = Vec::new();
    for _ in 0..channels.max(1) {
        let limit = Duration::from_secs(5);
        pool.push(probe::connect_over(&server.target, tls, CALL_DEADLINE, limit).await?);
    }
    let process = server.process.process();
    let cpu_before = process.and_then(|p| p.sample()).map(|s| s.cpu_ticks);
    let threads_before = process.map(|p| p.threads()).unwrap_or_default();
    let started = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut workers = JoinSet::new();
    for worker in 0..concurrency {
        let channel = pool[(worker % channels.max(1)) as usize].clone();
        let issued = issued.clone();
        workers.spawn(async move {
            let mut latencies = Latencies::new();
            let (mut errors, mut first_error) = (0u64, None);
            while issued.fetch_add(1, Ordering::Relaxed) < calls && started.elapsed() < max {
                let call_started = Instant::now();
                let result = one_call(channel.clone(), load).await;
                latencies.push(call_started.elapsed());
                if let Err(status) = result {
                    errors += 1;
                    first_error.get_or_insert_with(|| {
                        format!(
                            "{}: {}",
                            h2_peer::grpc::code_name(status.code()),
                            status.message()
                        )
                    });
                }
            }
            (latencies, errors, first_error)
        });
    }
    let mut result = RunResult::default();
    let mut latencies = Latencies::new();
    while let Some(joined) = workers.join_next().await {
        let (l, errors, first_error) = joined?;
        latencies.extend(l);
        result.errors += errors;
        if result.first_error.is_none() {
            result.first_error = first_error;
        }
    }
    result.secs = started.elapsed().as_secs_f64();
    let cpu_after = process.and_then(|p| p.sample()).map(|s| s.cpu_ticks);
    let threads_after = process.map(|p| p.threads()).unwrap_or_default();
    result.thread_shares = procfs::thread_shares(&threads_before, &threads_after);
    result.calls = latencies.len() as u64;
    if let (Some(before), Some(after)) = (cpu_before, cpu_after)
        && result.calls > 0
    {
        let cpu_secs = after.saturating_sub(before) as f64 / USER_HZ as f64;
        result.cpu_per_call = Some(cpu_secs / result.calls as f64);
    }
    result.p50 = latencies.percentile(50.0);
    result.p99 = latencies.percentile(99.0);
    Ok(result)
}

async fn one_call(channel: Channel, load: Load) -> Result<(), tonic::Status> {
    match load {
        Load::GetQuote => probe::get_quote(channel).await,
        Load::ListRoutes { gzip } => list_page(channel, h2_peer::grpc::FULL_PAGE, gzip).await,
        Load::Page { routes } => list_page(channel, routes, false).await,
    }
}

/// One ListRoutes page of `routes` routes, gzip accepted or not; a page
/// with another number of routes is `DATA_LOSS`.
pub async fn list_page(channel: Channel, routes: i32, gzip: bool) -> Result<(), tonic::Status> {
    let mut client = RoutingServiceClient::new(channel).max_decoding_message_size(LIST_DECODE_CAP);
    if gzip {
        client = client.accept_compressed(CompressionEncoding::Gzip);
    }
    let request = routing_contracts::routing::ListRoutesRequest {
        page_size: routes,
        ..Default::default()
    };
    let page = client.list_routes(request).await?;
    if page.get_ref().routes.len() != routes as usize {
        return Err(tonic::Status::data_loss(format!(
            "expected {routes} routes, got {}",
            page.get_ref().routes.len()
        )));
    }
    Ok(())
}

/// Server memory at rest and per idle HTTP/2 connection.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdleResult {
    pub rss_rest: Option<u64>,
    pub opened: u64,
    /// RSS growth per idle connection, bytes.
    pub per_conn: Option<f64>,
}

/// Opens `n` HTTP/2 connections that complete the handshake and then idle,
/// and reads the server's RSS before and with them.
pub async fn measure_idle(server: &Server, n: u64) -> Result<IdleResult, Error> {
    measure_idle_over(server, None, n).await
}

/// [`measure_idle`] with connections over `tls` if given.
pub async fn measure_idle_over(
    server: &Server,
    tls: Option<&HarnessTls>,
    n: u64,
) -> Result<IdleResult, Error> {
    let process = server.process.process();
    let rss_rest = process.and_then(|p| p.sample()).map(|s| s.rss);
    let mut result = IdleResult {
        rss_rest,
        ..Default::default()
    };
    if n == 0 {
        return Ok(result);
    }
    let mut held = Vec::with_capacity(n as usize);
    let mut first_error = None;
    let mut left = n as usize;
    while left > 0 {
        let batch = left.min(IDLE_BATCH);
        left -= batch;
        let mut set = JoinSet::new();
        for _ in 0..batch {
            let (addr, tls) = (server.target.addr(), tls.cloned());
            set.spawn(async move {
                let mut conn = RawConn::dial(addr, tls.as_ref()).await?;
                conn.handshake().await?;
                Ok::<_, h2_peer::raw::RawError>(conn)
            });
        }
        while let Some(joined) = set.join_next().await {
            match joined? {
                Ok(conn) => held.push(conn),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    if let Some(e) = first_error {
        tracing::warn!(
            opened = held.len(),
            asked = n,
            "some idle connections failed: {e}"
        );
    }
    tokio::time::sleep(IDLE_SETTLE).await;
    let rss_idle = process.and_then(|p| p.sample()).map(|s| s.rss);
    result.opened = held.len() as u64;
    drop(held);
    if let (Some(rest), Some(idle)) = (rss_rest, rss_idle)
        && result.opened > 0
    {
        result.per_conn = Some((idle as f64 - rest as f64) / result.opened as f64);
    }
    // Let the server notice the closes before the next phase.
    tokio::time::sleep(IDLE_SETTLE).await;
    Ok(result)
}

/// Every measurement of one server.
#[derive(Debug, Clone, Default)]
pub struct Measurements {
    pub idle: IdleResult,
    /// One GetQuote run per entry of `BenchKnobs::channels`, in that order.
    pub quote: Vec<RunResult>,
    pub list_identity: RunResult,
    pub list_gzip: RunResult,
}

impl Measurements {
    /// Every load run, GetQuote first.
    pub fn runs(&self) -> impl Iterator<Item = &RunResult> {
        self.quote
            .iter()
            .chain([&self.list_identity, &self.list_gzip])
    }
}

/// Measures every server, phase by phase.
pub async fn run(servers: &[Server], knobs: &BenchKnobs) -> Result<Vec<Measurements>, Error> {
    let max = Duration::from_secs(knobs.max_secs);
    let mut all = vec![Measurements::default(); servers.len()];
    for (server, m) in servers.iter().zip(all.iter_mut()) {
        tracing::info!(target = %server.target, conns = knobs.idle_conns, "idle connections");
        m.idle = measure_idle(server, knobs.idle_conns).await?;
    }
    let widest = knobs.channels.iter().copied().max().unwrap_or(1);
    for server in servers {
        tracing::info!(target = %server.target, calls = knobs.warmup, "warm-up");
        measure_load(
            server,
            Load::GetQuote,
            knobs.warmup,
            knobs.concurrency,
            widest,
            max,
        )
        .await?;
    }
    for &channels in &knobs.channels {
        for (server, m) in servers.iter().zip(all.iter_mut()) {
            tracing::info!(target = %server.target, calls = knobs.calls, channels, "GetQuote");
            m.quote.push(
                measure_load(
                    server,
                    Load::GetQuote,
                    knobs.calls,
                    knobs.concurrency,
                    channels,
                    max,
                )
                .await?,
            );
        }
    }
    for gzip in [false, true] {
        for (server, m) in servers.iter().zip(all.iter_mut()) {
            tracing::info!(target = %server.target, calls = knobs.list_calls, gzip, "ListRoutes page 25");
            let load = Load::ListRoutes { gzip };
            let result = measure_load(
                server,
                load,
                knobs.list_calls,
                knobs.list_concurrency,
                knobs.list_concurrency,
                max,
            )
            .await?;
            if gzip {
                m.list_gzip = result;
            } else {
                m.list_identity = result;
            }
        }
    }
    Ok(all)
}

/// One row of the table: a label and one number per server.
#[derive(Debug)]
pub struct Row {
    pub label: String,
    pub values: Vec<Option<f64>>,
    /// Decimals shown.
    pub precision: usize,
    /// Whether a ratio means anything (not for counts).
    pub ratio: bool,
}

fn ms(d: Option<Duration>) -> Option<f64> {
    d.map(|d| d.as_secs_f64() * 1e3)
}

fn rows(knobs: &BenchKnobs, all: &[Measurements]) -> Vec<Row> {
    let row = |label: String, precision: usize, f: &dyn Fn(&Measurements) -> Option<f64>| Row {
        ratio: !matches!(label.as_str(), "calls measured" | "errors"),
        label,
        values: all.iter().map(f).collect(),
        precision,
    };
    // Rows whose ratio would mean nothing: how the work was spread.
    let spread = |label: String, f: &dyn Fn(&Measurements) -> Option<f64>| Row {
        ratio: false,
        ..row(label, 0, f)
    };
    let list = format!("ListRoutes page 25 -c {}", knobs.list_concurrency);
    let mut rows = vec![
        row("server RSS at rest (MiB)".into(), 1, &|m| {
            m.idle.rss_rest.map(|b| b as f64 / 1048576.0)
        }),
        row(
            format!(
                "server RSS per idle HTTP/2 connection (KiB, {} held)",
                knobs.idle_conns
            ),
            1,
            &|m| m.idle.per_conn.map(|b| b / 1024.0),
        ),
    ];
    for (i, channels) in knobs.channels.iter().enumerate() {
        let quote = format!(
            "GetQuote -c {} on {channels} conn{}",
            knobs.concurrency,
            if *channels == 1 { "" } else { "s" }
        );
        let run = |m: &Measurements| m.quote.get(i).cloned().unwrap_or_default();
        rows.push(row(
            format!("{quote}: server CPU per call (µs)"),
            1,
            &|m| run(m).cpu_per_call.map(|s| s * 1e6),
        ));
        rows.push(row(format!("{quote}: p50 latency (ms)"), 3, &|m| {
            ms(run(m).p50)
        }));
        rows.push(row(format!("{quote}: p99 latency (ms)"), 3, &|m| {
            ms(run(m).p99)
        }));
        rows.push(row(format!("{quote}: calls per second"), 0, &|m| {
            let r = run(m);
            (r.secs > 0.0).then(|| r.calls as f64 / r.secs)
        }));
        rows.push(spread(
            format!("{quote}: busiest server thread's share of its CPU (%)"),
            &|m| run(m).busiest_thread_pct(),
        ));
        rows.push(spread(
            format!(
                "{quote}: server threads with >= {:.0}% of its CPU",
                BUSY_THREAD_SHARE * 100.0
            ),
            &|m| run(m).busy_threads().map(|n| n as f64),
        ));
    }
    rows.extend([
        row(
            format!("{list} identity: server CPU per call (ms)"),
            2,
            &|m| m.list_identity.cpu_per_call.map(|s| s * 1e3),
        ),
        row(format!("{list} identity: p50 latency (ms)"), 2, &|m| {
            ms(m.list_identity.p50)
        }),
        row(format!("{list} identity: p99 latency (ms)"), 2, &|m| {
            ms(m.list_identity.p99)
        }),
        row(format!("{list} gzip: server CPU per call (ms)"), 2, &|m| {
            m.list_gzip.cpu_per_call.map(|s| s * 1e3)
        }),
        row(format!("{list} gzip: p50 latency (ms)"), 2, &|m| {
            ms(m.list_gzip.p50)
        }),
        row(format!("{list} gzip: p99 latency (ms)"), 2, &|m| {
            ms(m.list_gzip.p99)
        }),
        row("calls measured".into(), 0, &|m| {
            Some(m.runs().map(|r| r.calls).sum::<u64>() as f64)
        }),
        row("errors".into(), 0, &|m| {
            Some(m.runs().map(|r| r.errors).sum::<u64>() as f64)
        }),
    ]);
    rows
}

/// The table as text: one column per server, then the first server ÷ each
/// of the others: `ratio` when there are two, `÷ 2`, `÷ 3`, ... when more.
pub fn table(servers: &[Server], knobs: &BenchKnobs, all: &[Measurements]) -> String {
    let names = servers.iter().map(|s| s.target.to_string()).collect();
    table_of("measurement", names, rows(knobs, all))
}

/// `rows` as a table under a header of `first` and one column per name,
/// with the ratio columns of [`table`].
pub fn table_of(first: &str, names: Vec<String>, rows: Vec<Row>) -> String {
    let columns = names.len();
    let mut header = vec![first.to_string()];
    header.extend(names);
    match columns {
        0 | 1 => {}
        2 => header.push("ratio".into()),
        n => header.extend((2..=n).map(|column| format!("÷ {column}"))),
    }
    let mut cells: Vec<Vec<String>> = vec![header];
    for row in rows {
        let mut line = vec![row.label];
        line.extend(row.values.iter().map(|v| match v {
            Some(v) => format!("{v:.*}", row.precision),
            None => "n/a".into(),
        }));
        let first = row.values.first().copied().flatten();
        for other in row.values.iter().skip(1) {
            line.push(match (first, other, row.ratio) {
                (Some(a), Some(b), true) if *b > 0.0 => format!("{:.2}×", a / b),
                _ => "-".into(),
            });
        }
        cells.push(line);
    }
    render(&cells)
}

/// Rows of cells as aligned text: the first column left-aligned, the
/// others right-aligned, a rule under the first row (the header).
fn render(cells: &[Vec<String>]) -> String {
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|col| {
            cells
                .iter()
                .map(|r| r.get(col).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, line) in cells.iter().enumerate() {
        for (col, cell) in line.iter().enumerate() {
            let pad = widths[col] - cell.chars().count();
            if col == 0 {
                let _ = write!(out, "{cell}{}", " ".repeat(pad));
            } else {
                let _ = write!(out, "  {}{cell}", " ".repeat(pad));
            }
        }
        out.push('\n');
        if i == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(addr: &str) -> Server {
        Server {
            target: addr.parse().expect("loopback"),
            process: ServerProcess::Unknown("test".into()),
        }
    }

    fn knobs() -> BenchKnobs {
        BenchKnobs {
            calls: 10,
            concurrency: 50,
            channels: vec![1],
            warmup: 0,
            list_calls: 1,
            list_concurrency: 2,
            idle_conns: 1000,
            max_secs: 1,
        }
    }

    /// Given two servers where the first used half the CPU per call, the
    /// ratio column says 0.50×, and numbers a server lacks read n/a.
    #[test]
    fn the_table_has_a_ratio_column_for_two_servers() {
        let quote = |cpu| RunResult {
            cpu_per_call: Some(cpu),
            ..RunResult::default()
        };
        let a = Measurements {
            quote: vec![quote(8e-6)],
            ..Measurements::default()
        };
        let b = Measurements {
            quote: vec![quote(16e-6)],
            ..Measurements::default()
        };
        let servers = [server("127.0.0.1:1"), server("127.0.0.1:2")];
        let text = table(&servers, &knobs(), &[a, b]);
        let line = text
            .lines()
            .find(|l| l.starts_with("GetQuote -c 50 on 1 conn: server CPU per call"))
            .expect("CPU row");
        assert!(
            line.contains("8.0") && line.contains("16.0") && line.ends_with("0.50×"),
            "{line}"
        );
        let rss = text
            .lines()
            .find(|l| l.starts_with("server RSS at rest"))
            .expect("RSS row");
        assert!(rss.contains("n/a") && rss.ends_with('-'), "{rss}");
        assert!(text.lines().next().is_some_and(|h| h.contains("ratio")));
    }

    /// Given three servers, there is one ratio column per compared server,
    /// each the first server ÷ that one.
    #[test]
    fn three_servers_get_a_ratio_column_each() {
        // Given CPU per call of 8, 16 and 32 µs.
        let quote = |cpu| Measurements {
            quote: vec![RunResult {
                cpu_per_call: Some(cpu),
                ..RunResult::default()
            }],
            ..Measurements::default()
        };
        let servers = [
            server("127.0.0.1:1"),
            server("127.0.0.1:2"),
            server("127.0.0.1:3"),
        ];
        // When the table is drawn.
        let text = table(
            &servers,
            &knobs(),
            &[quote(8e-6), quote(16e-6), quote(32e-6)],
        );
        // Then the header names both ratios and the row holds 0.50× and 0.25×.
        let header = text.lines().next().expect("header");
        assert!(header.contains("÷ 2") && header.contains("÷ 3"), "{header}");
        let line = text
            .lines()
            .find(|l| l.starts_with("GetQuote -c 50 on 1 conn: server CPU per call"))
            .expect("CPU row");
        assert!(line.ends_with("0.50×  0.25×"), "{line}");
        let errors = text
            .lines()
            .find(|l| l.starts_with("errors"))
            .expect("errors row");
        let cells: Vec<&str> = errors.split_whitespace().collect();
        assert!(cells.ends_with(&["-", "-"]), "{errors}");
    }

    #[test]
    fn one_server_has_no_ratio_column() {
        let text = table(
            &[server("127.0.0.1:1")],
            &knobs(),
            &[Measurements::default()],
        );
        assert!(!text.contains("ratio"));
    }
}
