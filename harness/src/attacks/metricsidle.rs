//! `metricsidle`: sockets that send half a request line to the metrics
//! port (`--metrics-target`) and then nothing, each reopened at once when
//! the server closes it, while a fresh scrape is tried every 250 ms. Does
//! each scrape get its answer within 1 s? Plain TCP and HTTP/1.x: the
//! metrics port is Prometheus's, not gRPC's.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::Serialize;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    task::JoinSet,
    time::Instant,
};

use super::{Context, Findings};
use crate::Error;

/// What each idle socket sends: half a request line, never finished.
const HALF_REQUEST: &[u8] = b"GET /metr";

/// A scrape must be answered within this: 1 s.
const SCRAPE_LIMIT: Duration = Duration::from_secs(1);

/// One scrape every 250 ms.
const SCRAPE_EVERY: Duration = Duration::from_millis(250);

#[derive(Debug, Serialize)]
struct Details {
    idle_sockets: u32,
    secs: u64,
    opened: u64,
    closed_by_server: u64,
    #[serde(flatten)]
    scraped: Scrapes,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let Some(metrics) = knobs.metrics_target else {
        return Ok(Findings::new(
            "skipped: no --metrics-target (the server's metrics host:port)".into(),
            serde_json::Value::Null,
        ));
    };
    let addr = metrics.addr();
    let hold = Duration::from_secs(knobs.metricsidle_secs);
    let deadline = Instant::now() + hold;
    let opened = Arc::new(AtomicU64::new(0));
    let closed = Arc::new(AtomicU64::new(0));
    let max_opens = knobs.metricsidle_max_opens;
    let mut holders = JoinSet::new();
    for _ in 0..knobs.metricsidle_conns {
        let (opened, closed) = (Arc::clone(&opened), Arc::clone(&closed));
        holders.spawn(async move {
            // Reopen each socket the server closes, until the time or the
            // opens run out.
            while Instant::now() < deadline && opened.fetch_add(1, Ordering::Relaxed) < max_opens {
                let Ok(mut socket) = TcpStream::connect(addr).await else {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                };
                if socket.write_all(HALF_REQUEST).await.is_err() {
                    closed.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let mut byte = [0u8; 1];
                match tokio::time::timeout_at(deadline, socket.read(&mut byte)).await {
                    Err(_) => break, // still held at the end
                    Ok(_) => {
                        closed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
    }
    // Let the idle sockets take every slot before the first scrape.
    tokio::time::sleep(SCRAPE_EVERY).await;
    let mut scraped = scrape_until(addr, deadline.into_std()).await?;
    holders.shutdown().await;
    scraped.scrape_max_ms = (scraped.scrape_max_ms * 10.0).round() / 10.0;
    let details = Details {
        idle_sockets: knobs.metricsidle_conns,
        secs: hold.as_secs(),
        opened: opened.load(Ordering::Relaxed).min(max_opens),
        closed_by_server: closed.load(Ordering::Relaxed),
        scraped,
    };
    let outcome = format!(
        "{} of {} scrapes answered within 1 s (max {:.0} ms) while {} half-requests were held ({} opened, {} closed by the server)",
        details.scraped.answered_within_1s,
        details.scraped.scrapes,
        details.scraped.scrape_max_ms,
        details.idle_sockets,
        details.opened,
        details.closed_by_server
    );
    Ok(Findings::new(outcome, details))
}

/// What the scraper saw; flattened into [`Details`].
#[derive(Debug, Default, Serialize)]
struct Scrapes {
    scrapes: u32,
    answered_within_1s: u32,
    scrape_max_ms: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_failure: Option<String>,
}

/// A scrape every [`SCRAPE_EVERY`] until `deadline`, on a thread and a
/// runtime of its own, as the probe's calls are
/// ([`crate::measure::probe::Probe`]): on the attack's runtime, busy with
/// thousands of reconnecting sockets, a scrape's request left the harness
/// late, and the server closed it as idle for want of it.
async fn scrape_until(addr: SocketAddr, deadline: std::time::Instant) -> Result<Scrapes, Error> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (done, scraped) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("scraper".into())
        .spawn(move || {
            let scrapes = runtime.block_on(async move {
                let mut seen = Scrapes::default();
                while Instant::now().into_std() < deadline {
                    let started = Instant::now();
                    let answer = scrape(addr, started).await;
                    let took = started.elapsed();
                    seen.scrapes += 1;
                    seen.scrape_max_ms = seen.scrape_max_ms.max(took.as_secs_f64() * 1e3);
                    match answer {
                        Ok(()) => seen.answered_within_1s += 1,
                        Err(e) => {
                            seen.first_failure.get_or_insert(e);
                        }
                    }
                    tokio::time::sleep(SCRAPE_EVERY.saturating_sub(took)).await;
                }
                seen
            });
            let _ = done.send(scrapes);
        })?;
    scraped
        .await
        .map_err(|_| "the scraper's thread ended without a result".into())
}

/// One scrape over HTTP/1.0, within [`SCRAPE_LIMIT`] of `started`: `Ok`
/// for a 200 with a body. The error says in which phase the time ran out:
/// a connect still pending is the listen backlog, not the server's slots.
async fn scrape(addr: SocketAddr, started: Instant) -> Result<(), String> {
    let limit = started + SCRAPE_LIMIT;
    let mut socket = tokio::time::timeout_at(limit, TcpStream::connect(addr))
        .await
        .map_err(|_| "not connected within 1 s (the listen backlog was full)".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let request = format!("GET /metrics HTTP/1.0\r\nhost: {addr}\r\n\r\n");
    let mut answer = Vec::new();
    let exchange = async {
        socket.write_all(request.as_bytes()).await?;
        socket.read_to_end(&mut answer).await
    };
    tokio::time::timeout_at(limit, exchange)
        .await
        .map_err(|_| "no answer within 1 s (connected, request sent)".to_string())?
        .map_err(|e| format!("write or read: {e}"))?;
    let ok = answer.starts_with(b"HTTP/1.1 200") || answer.starts_with(b"HTTP/1.0 200");
    match (ok, answer.is_empty()) {
        (true, _) => Ok(()),
        (false, true) => Err("empty reply".into()),
        (false, false) => Err(format!(
            "answered {:?}",
            String::from_utf8_lossy(&answer[..answer.len().min(12)])
        )),
    }
}
