//! `stall`: the stalled reader. Connections advertise
//! SETTINGS_INITIAL_WINDOW_SIZE 0, open many `ListRoutes(page_size 25)`
//! streams (about 5 MB each), answer PINGs, and never read. The server may
//! send each stream's headers but no DATA, so every page it has encoded sits
//! in its memory until something gives up: without a bound, nothing does.
//!
//! Shapes: one connection with `--stall-streams-one` streams, and
//! `--stall-conns` connections with `--stall-streams-each` streams, all at
//! once, held for `--stall-hold-secs`.

use std::{
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use h2_peer::{
    grpc,
    h2client::{CallEnd, ReceiveWindows, await_end},
};
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

use super::{Context, Findings, Tally, describe_tally};

/// A status within this long of opening the stream counts as "fast": the
/// server refused at once rather than after holding the page.
pub const FAST: Duration = Duration::from_secs(1);

/// How long one connection waits for the server to accept another stream
/// (past its SETTINGS_MAX_CONCURRENT_STREAMS) before it stops opening: 2 s.
pub const OPEN_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Default, Serialize)]
struct Tallies {
    streams: u32,
    opened: u32,
    /// Never sent: the server's concurrency limit held them back.
    not_opened: u32,
    /// How each opened stream ended (or did not).
    ends: Tally,
    /// gRPC statuses that came within [`FAST`] of opening the stream.
    fast_statuses: Tally,
    /// Seconds from opening to a reset or status, for streams that got one after FAST.
    slow_end_median_s: Option<f64>,
    connections: u32,
    connect_errors: u32,
    /// Connections the server closed during the hold.
    connections_closed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
    #[serde(skip)]
    slow_ends: Vec<Duration>,
}

pub async fn run(
    ctx: &Context,
    tripped: impl Future<Output = ()>,
) -> Result<Findings, crate::Error> {
    let knobs = &ctx.knobs;
    let hold = knobs.stall_hold();
    let started = Instant::now();
    let deadline = started + hold;
    let mut shapes = vec![knobs.stall_streams_one];
    shapes.extend(std::iter::repeat_n(
        knobs.stall_streams_each,
        knobs.stall_conns as usize,
    ));
    let tallies = Arc::new(Mutex::new(Tallies {
        streams: shapes.iter().sum(),
        connections: u32::try_from(shapes.len()).unwrap_or(u32::MAX),
        ..Default::default()
    }));

    let mut connections = JoinSet::new();
    for streams in shapes.into_iter().filter(|&n| n > 0) {
        connections.spawn(one_connection(
            ctx.dial(),
            streams,
            deadline,
            tallies.clone(),
        ));
    }
    // Dropping the tasks drops their connections: nothing outlives the attack.
    let guard_tripped = super::join_unless_tripped(&mut connections, tripped).await;
    let held = started.elapsed();

    let mut t = std::mem::take(&mut *tallies.lock().unwrap_or_else(|e| e.into_inner()));
    let recorded: usize = t.ends.values().sum();
    let unrecorded = (t.opened as usize).saturating_sub(recorded);
    if unrecorded > 0 {
        *t.ends.entry("pending".into()).or_default() += unrecorded;
    }
    t.slow_end_median_s = super::median_secs(std::mem::take(&mut t.slow_ends));
    let stalled = t.ends.get("headers_then_stalled").copied().unwrap_or(0)
        + t.ends.get("pending").copied().unwrap_or(0);
    let fast: usize = t.fast_statuses.values().sum();
    let mut outcome = format!(
        "{} streams on {} connections: {} got a status within {}s ({}), {} still held unread after {:.1}s",
        t.streams,
        t.connections,
        fast,
        FAST.as_secs(),
        if fast == 0 {
            "none".into()
        } else {
            describe_tally(&t.fast_statuses)
        },
        stalled,
        held.as_secs_f64(),
    );
    if t.not_opened > 0 {
        outcome.push_str(&format!(
            ", {} never opened (server stream limit)",
            t.not_opened
        ));
    }
    let others: Tally = t
        .ends
        .iter()
        .filter(|(label, _)| !matches!(label.as_str(), "headers_then_stalled" | "pending"))
        .map(|(l, n)| (l.clone(), *n))
        .collect();
    if !others.is_empty() {
        outcome.push_str(&format!("; all ends: {}", describe_tally(&others)));
    }
    if guard_tripped {
        outcome.push_str("; ENDED EARLY by the memory guard");
    }
    Ok(Findings::new(outcome, t))
}

async fn one_connection(
    dial: super::Dial,
    streams: u32,
    deadline: Instant,
    tallies: Arc<Mutex<Tallies>>,
) {
    let record =
        |f: &mut dyn FnMut(&mut Tallies)| f(&mut tallies.lock().unwrap_or_else(|e| e.into_inner()));
    let windows = ReceiveWindows {
        stream: 0,
        ..ReceiveWindows::default()
    };
    let mut conn = match dial.h2(windows).await {
        Ok(conn) => conn,
        Err(e) => {
            record(&mut |t| {
                t.connect_errors += 1;
                t.not_opened += streams;
                t.first_error.get_or_insert_with(|| e.to_string());
            });
            return;
        }
    };
    let body = grpc::framed(&grpc::full_page_request());
    let mut calls = JoinSet::new();
    for sent in 0..streams {
        let left = deadline.saturating_duration_since(Instant::now());
        let opened = conn
            .open_call(
                grpc::LIST_ROUTES,
                grpc::CONTENT_TYPE,
                body.clone(),
                true,
                OPEN_WAIT.min(left),
            )
            .await;
        match opened {
            Ok(Some((response, _request_done))) => {
                record(&mut |t| t.opened += 1);
                let started = Instant::now();
                let left = deadline.saturating_duration_since(started);
                let tallies = tallies.clone();
                calls.spawn(async move {
                    let (end, after) = await_end(response, left, false, started).await;
                    let mut t = tallies.lock().unwrap_or_else(|e| e.into_inner());
                    *t.ends.entry(end.label()).or_default() += 1;
                    match end {
                        CallEnd::Grpc(_) | CallEnd::Http(_) | CallEnd::HttpGrpc { .. }
                            if after <= FAST =>
                        {
                            *t.fast_statuses.entry(end.label()).or_default() += 1;
                        }
                        CallEnd::HeadersOnly | CallEnd::Pending => {}
                        _ => t.slow_ends.push(after),
                    }
                });
            }
            Ok(None) => {
                record(&mut |t| t.not_opened += streams - sent);
                break;
            }
            Err(e) => {
                record(&mut |t| {
                    t.not_opened += streams - sent;
                    t.first_error.get_or_insert_with(|| e.to_string());
                });
                break;
            }
        }
    }
    while calls.join_next().await.is_some() {}
    // Keep the connection (and its zero window) until the hold ends.
    tokio::time::sleep_until(deadline).await;
    if !conn.is_open() {
        record(&mut |t| t.connections_closed += 1);
    }
}
