//! `contenttype`: a valid GetQuote body sent with `content-type:
//! application/json` and with `text/plain`. The gRPC-over-HTTP/2 spec says
//! such a request gets HTTP 415 Unsupported Media Type; a server that serves
//! it anyway treats any POST as gRPC. `application/grpc` is sent too, as the
//! control that must still work.

use std::time::Duration;

use h2_peer::{
    grpc,
    h2client::{ReceiveWindows, await_end},
};
use serde::Serialize;
use tokio::time::Instant;

use super::{Context, Findings};
use crate::Error;

/// The content-types tried, the control last.
pub const CONTENT_TYPES: [&str; 3] = ["application/json", "text/plain", grpc::CONTENT_TYPE];

/// Each call must end within 5 s.
const CALL_LIMIT: Duration = Duration::from_secs(5);

#[derive(Debug, Serialize)]
struct Answer {
    content_type: &'static str,
    /// e.g. `http_415`, `OK`, `INTERNAL`.
    answer: String,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let mut conn = ctx.dial().h2(ReceiveWindows::default()).await?;
    let mut answers = Vec::new();
    for content_type in CONTENT_TYPES {
        let opened = conn
            .open_call(
                grpc::GET_QUOTE,
                content_type,
                grpc::framed_quote(),
                true,
                CALL_LIMIT,
            )
            .await?;
        let answer = match opened {
            Some((response, _request)) => await_end(response, CALL_LIMIT, true, Instant::now())
                .await
                .0
                .label(),
            None => "not_opened".into(),
        };
        answers.push(Answer {
            content_type,
            answer,
        });
    }
    let outcome = answers
        .iter()
        .map(|a| format!("{} -> {}", a.content_type, a.answer))
        .collect::<Vec<_>>()
        .join(", ");
    Ok(Findings::new(outcome, answers))
}
