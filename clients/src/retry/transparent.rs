//! Transparent retry: a call that never left this client is sent again, on
//! the channel's next connection, whatever the retry policy (gRFC A6).
//!
//! Why a client needs it: when a server ends a connection gracefully (a
//! connection age, `--max-connection-age-secs`; an idle rule, such as
//! routing-server's GOAWAY to a connection idle after a burst; a drain),
//! the client reads its GOAWAY some time before the connection closes: a
//! round trip for the server's PING, more while a call is still open on
//! it. hyper's HTTP/2 client, which tonic's channel drives, is not woken by
//! the GOAWAY. Until the connection has closed, the channel still takes it
//! for ready and hands it the next call; hyper then finds the GOAWAY and
//! drops that call before writing a byte of it. tonic reports it as
//! `CANCELLED: operation was canceled`, and the channel's next call
//! reconnects. (anthropics/connect-rust#285 describes the same race on the
//! same hyper client; hyper-util's pooled client retries such requests
//! itself, `retry_canceled_requests`, but tonic does not use that client.)
//!
//! gRPC's answer is the transparent retry (gRFC A6): a call that never left
//! the client is sent again, whatever its method, because the server cannot
//! have seen it. grpc-go and grpc-java do it; tonic does not, so
//! `balance-client` does it here, and a reader's tonic client behind a
//! server with a connection age should too. [`never_sent`] is the test: the
//! status is `CANCELLED` and hyper's own cancellation is in its source
//! chain. hyper's HTTP/2 client cancels a request only before sending it
//! ("connection closed" when the connection ended with the request queued,
//! "connection was not ready" when it had ended before); a `CANCELLED` sent
//! by a server, or a client-side deadline (tonic's `Timeout expired`), is
//! not retried.
//!
//! The same race has a second outcome when hyper hands the call to h2 just
//! after h2 read the GOAWAY: h2 refuses the stream, or the server's final
//! GOAWAY names a last stream below it. Either way the server did not
//! process it (RFC 9113, 6.8), and h2 reports `GoAway(NO_ERROR, Remote)`,
//! which tonic turns into `INTERNAL: h2 protocol error`. h2 gives that
//! error to no stream the server processed: a graceful GOAWAY ends those
//! normally, and a connection that fails later reports another error. So
//! [`never_sent`] is true for it too, whatever the code.
//!
//! `server/tests/lifetime.rs` and `clients/tests/retry.rs` show the race
//! and this retry. A6 counts such a resend neither as an attempt of the
//! policy ([`super::policy`]) nor as a failure for its throttle
//! ([`super::throttle`]): the server never saw it.

use std::{error::Error as StdError, future::Future};

use routing_contracts::routing::{GetQuoteResponse, routing_service_client::RoutingServiceClient};
use tonic::{Code, Response, Status, transport::Channel};

use crate::sample_quote_request;

/// How many times [`call`] sends a call again that never left the client:
/// once. The retry goes out on a new connection, which a GOAWAY can reach
/// only after the server's age (seconds, not the microseconds of a
/// redial), so a second retry would wait on a second age in a row; and a
/// bound is what keeps a broken server from turning one call into a loop.
pub const UNSENT_RETRIES: u32 = 1;

/// True when `status` is a call no server processed: hyper cancelled it
/// before sending it (code `CANCELLED`, hyper's cancellation in the source
/// chain), or h2 refused it for a graceful GOAWAY (`refused_by_goaway`).
pub fn never_sent(status: &Status) -> bool {
    let mut source: Option<&(dyn StdError + 'static)> = status.source();
    while let Some(err) = source {
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return status.code() == Code::Cancelled;
        }
        if err
            .downcast_ref::<h2::Error>()
            .is_some_and(refused_by_goaway)
        {
            return true;
        }
        source = err.source();
    }
    false
}

/// An h2 stream error caused by the server's graceful GOAWAY (NO_ERROR):
/// h2 gives it to a stream above the GOAWAY's last stream ID and to one
/// opened after the GOAWAY was read, and to no other.
fn refused_by_goaway(err: &h2::Error) -> bool {
    err.is_go_away() && err.is_remote() && err.reason() == Some(h2::Reason::NO_ERROR)
}

/// A call's outcome and how many times it was sent again.
#[derive(Debug)]
pub struct Retried<T> {
    pub result: Result<T, Status>,
    /// Sends after the first: 0 unless the first [`never_sent`].
    pub retried: u32,
}

/// Runs `attempt`, and again (up to [`UNSENT_RETRIES`] times) while its
/// outcome [`never_sent`]. `attempt` builds the call anew each time, as a
/// request is consumed by sending it.
pub async fn call<T, F, Fut>(mut attempt: F) -> Retried<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut retried = 0;
    loop {
        let result = attempt().await;
        match &result {
            Err(status) if retried < UNSENT_RETRIES && never_sent(status) => {
                tracing::debug!(%status, "the call never left the client: sending it again");
                retried += 1;
            }
            _ => return Retried { result, retried },
        }
    }
}

/// The clients' sample GetQuote through [`call`].
pub async fn sample_quote(
    client: &RoutingServiceClient<Channel>,
) -> Retried<Response<GetQuoteResponse>> {
    call(|| {
        let mut client = client.clone();
        async move { client.get_quote(sample_quote_request()).await }
    })
    .await
}
