//! `pingflood`: PING frames as fast as the socket takes them, on one
//! connection with no call. Each PING obliges the server to write an ACK.
//! grpc-go answers a client that pings more often than its policy allows
//! with GOAWAY ENHANCE_YOUR_CALM "too_many_pings" (gRFC A8); a server with
//! no policy acknowledges every one.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::Serialize;
use tokio::{sync::mpsc, time::Instant};

use super::{Context, Findings, FramesSeen, watch_frames};
use crate::Error;

/// PINGs queued per write: 1,000 PINGs are 17 KB.
const BATCH: u64 = 1_000;

#[derive(Debug, Serialize)]
struct Details {
    pings_sent: u64,
    pings_acked: u64,
    flood_s: f64,
    goaway: Option<super::GoawaySeen>,
    closed_by_server_after_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    write_error: Option<String>,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let mut conn = ctx.dial().raw().await?;
    conn.handshake().await?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(knobs.ping_secs);
    let (reader, mut writer) = conn.into_split();
    let seen = Arc::new(Mutex::new(FramesSeen::default()));
    let (ping_tx, mut ping_rx) = mpsc::channel(16);
    let watcher = tokio::spawn(watch_frames(reader, seen.clone(), ping_tx, None, started));
    let stop = || seen.lock().unwrap_or_else(|e| e.into_inner()).ended();

    let (mut sent, mut write_error) = (0u64, None);
    while sent < knobs.ping_max && Instant::now() < deadline && !stop() {
        while let Ok(payload) = ping_rx.try_recv() {
            writer.queue_ping(payload, true);
        }
        let batch = BATCH.min(knobs.ping_max - sent);
        for i in sent..sent + batch {
            writer.queue_ping(i.to_be_bytes(), false);
        }
        if let Err(e) = writer.flush().await {
            write_error = Some(e.to_string());
            break;
        }
        sent += batch;
        tokio::task::yield_now().await;
    }
    let flood_s = super::secs(started.elapsed());
    super::linger(&seen).await;
    watcher.abort();
    let seen = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let outcome = match &seen.goaway {
        Some(g) => format!(
            "GOAWAY {} {:?} after {:.3}s; {} of {} PINGs acked",
            g.error_code, g.debug_data, g.after_s, seen.ping_acks, sent
        ),
        None => format!(
            "no GOAWAY: {} of {} PINGs acked in {:.1}s{}",
            seen.ping_acks,
            sent,
            flood_s,
            if seen.closed_after_s.is_some() {
                ", then the server closed"
            } else {
                ""
            }
        ),
    };
    let details = Details {
        pings_sent: sent,
        pings_acked: seen.ping_acks,
        flood_s,
        goaway: seen.goaway,
        closed_by_server_after_s: seen.closed_after_s,
        write_error,
    };
    Ok(Findings::new(outcome, details))
}
