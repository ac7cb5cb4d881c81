//! The deadlines a client sends, or does not (issue 43):
//!
//! - `badtimeout`: GetQuote with each malformed `grpc-timeout` the spec
//!   does not allow (9 digits, a sign, no unit, no digits, an unknown
//!   unit, a space, nothing, 1 KiB). grpc-go answers each with `INTERNAL`
//!   before the handler runs; a server that ignores the header serves the
//!   call as if it had no deadline.
//! - `nodeadline`: many GetQuote calls that bring no deadline, held open
//!   against a server made slow (`--fault-delay-ms 60000`): are they still
//!   open when the attack ends, or did the server end them?

use std::{sync::LazyLock, time::Duration};

use h2_peer::{
    grpc,
    h2client::{ReceiveWindows, await_end},
};
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

use super::{Context, Findings, HeldEnds, describe_tally};
use crate::Error;

/// 1 KiB of digits and a unit: far past the 8 digits the spec allows.
static KIB_TIMEOUT: LazyLock<String> = LazyLock::new(|| "1".repeat(1023) + "S");

/// The malformed values `badtimeout` sends, and a well-formed control last.
fn timeouts() -> [&'static str; 9] {
    [
        "100000000H",
        "-5S",
        "5",
        "S",
        "5X",
        " 5S",
        "",
        KIB_TIMEOUT.as_str(),
        "10S",
    ]
}

/// Each `badtimeout` call must end within 5 s.
const CALL_LIMIT: Duration = Duration::from_secs(5);

/// How long a connection waits to open each `nodeadline` stream: 2 s.
const OPEN_WAIT: Duration = Duration::from_secs(2);

/// Streams per `nodeadline` connection: the server's default limit.
const STREAMS_PER_CONNECTION: u32 = 100;

#[derive(Debug, Serialize)]
struct Answer {
    /// The value, or its length when long.
    grpc_timeout: String,
    /// e.g. `INTERNAL`, `OK`, `pending`.
    answer: String,
    ms: f64,
}

pub async fn badtimeout(ctx: &Context) -> Result<Findings, Error> {
    let mut conn = ctx.dial().h2(ReceiveWindows::default()).await?;
    let mut answers = Vec::new();
    for value in timeouts() {
        let started = Instant::now();
        let opened = conn
            .open_call_with(
                grpc::GET_QUOTE,
                grpc::CONTENT_TYPE,
                &[("grpc-timeout", value)],
                grpc::framed_quote(),
                true,
                CALL_LIMIT,
            )
            .await?;
        let (answer, took) = match opened {
            Some((response, _request)) => {
                let (end, took) = await_end(response, CALL_LIMIT, true, started).await;
                (end.label(), took)
            }
            None => ("not_opened".into(), started.elapsed()),
        };
        let shown = if value.len() > 16 {
            format!("({} bytes)", value.len())
        } else {
            format!("{value:?}")
        };
        answers.push(Answer {
            grpc_timeout: shown,
            answer,
            ms: (took.as_secs_f64() * 1e4).round() / 10.0,
        });
    }
    let outcome = answers
        .iter()
        .map(|a| format!("{} -> {}", a.grpc_timeout, a.answer))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Findings::new(outcome, answers))
}

#[derive(Debug, Serialize)]
struct Held {
    calls: u32,
    connections: u32,
    hold_s: u64,
    #[serde(flatten)]
    held: HeldEnds,
}

pub async fn nodeadline(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let hold = Duration::from_secs(knobs.nodeadline_hold_secs);
    let deadline = Instant::now() + hold;
    let mut connections = JoinSet::new();
    let mut left = knobs.nodeadline_calls;
    while left > 0 {
        let calls = STREAMS_PER_CONNECTION.min(left);
        left -= calls;
        let dial = ctx.dial();
        connections.spawn(async move {
            let mut conn = dial.h2(ReceiveWindows::default()).await?;
            let mut ends = JoinSet::new();
            let mut not_opened = 0;
            for i in 0..calls {
                let wait = OPEN_WAIT.min(deadline.saturating_duration_since(Instant::now()));
                let opened = conn
                    .open_call(
                        grpc::GET_QUOTE,
                        grpc::CONTENT_TYPE,
                        grpc::framed_quote(),
                        true,
                        wait,
                    )
                    .await?;
                let Some((response, _request)) = opened else {
                    not_opened = calls - i;
                    break;
                };
                let started = Instant::now();
                let limit = deadline.saturating_duration_since(started);
                ends.spawn(await_end(response, limit, true, started));
            }
            let mut results = Vec::new();
            while let Some(Ok(end)) = ends.join_next().await {
                results.push(end);
            }
            // The connection is dropped here: what is still open is reset.
            Ok::<_, Error>((results, not_opened))
        });
    }
    let details = Held {
        calls: knobs.nodeadline_calls,
        connections: u32::try_from(connections.len()).unwrap_or(u32::MAX),
        hold_s: hold.as_secs(),
        held: super::gather_ends(&mut connections).await,
    };
    let held = &details.held;
    let mut outcome = format!(
        "{} calls without a deadline: {} still open after {}s",
        details.calls,
        held.pending(),
        details.hold_s
    );
    let ended = held.ended();
    if !ended.is_empty() {
        outcome.push_str(&format!(
            ", ended: {} (median {:.1}s)",
            describe_tally(&ended),
            held.end_median_s.unwrap_or_default()
        ));
    }
    // Calls answered OK within a second were never held: the attack says
    // nothing about a bound until the server is made slow.
    let answered = held.ends.get("OK").copied().unwrap_or(0);
    if answered > 0 && held.end_last_s.is_some_and(|s| s < 1.0) {
        outcome.push_str(
            "; the server answered at once, so nothing was held: start it with --fault-delay-ms 60000",
        );
    }
    Ok(Findings::new(outcome, details))
}
