//! Retries, as gRFC A6 specifies them, in one module a tonic client can copy.
//!
//! tonic retries nothing by itself. grpc-go and grpc-java do three things,
//! configured through the service config; this module does the same three:
//!
//! 1. **The transparent retry** ([`transparent`]): a call that never left the
//!    client (hyper dropped it on a connection that had just read a GOAWAY)
//!    is sent again, whatever the policy. The server never saw it.
//! 2. **The retry policy** ([`policy`]): a call that failed with a status the
//!    policy lists (`retryableStatusCodes`, e.g. `UNAVAILABLE`) is sent again,
//!    up to `maxAttempts` sends in all, after a random wait below an
//!    exponential ceiling (`initialBackoff`, `backoffMultiplier`,
//!    `maxBackoff`).
//! 3. **Retry throttling** ([`throttle`]): a token bucket per server. Each
//!    failure costs a token, each success gives back `tokenRatio`; while the
//!    bucket holds half its tokens or fewer, nothing is retried. This is what
//!    keeps retries from multiplying an outage: without it, 5 attempts turn a
//!    server that is down into a server under 5 times its load.
//!
//! [`call`] puts the three together around one call: a small wrapper
//! function, not a tower layer, so the whole logic reads top to bottom in
//! one place. A reader's client keeps one [`Throttle`] per server (in an
//! `Arc`, shared by every task that calls it) and passes it to every call.
//!
//! What A6 has and this module leaves out: server pushback
//! (`grpc-retry-pushback-ms`), hedging, the `grpc-previous-rpc-attempts`
//! header, and the call's own deadline across attempts (wrap [`call`] in
//! `tokio::time::timeout` for that).
//!
//! # Layout
//! - [`transparent`]: the resend of a call that never left the client.
//! - [`policy`]: [`RetryPolicy`], the attempts, the retryable codes and the
//!   jittered exponential backoff.
//! - [`throttle`]: [`Throttle`], A6's token bucket, in thousandths of a token.

pub mod policy;
pub mod throttle;
pub mod transparent;

use std::future::Future;

use tonic::Status;

pub use policy::RetryPolicy;
pub use throttle::Throttle;
pub use transparent::{Retried, UNSENT_RETRIES, never_sent, sample_quote};

/// A call's outcome under a retry policy, and what it cost the server.
#[derive(Debug)]
pub struct Attempted<T> {
    pub result: Result<T, Status>,
    /// Sends the server saw: 1 plus the policy's retries.
    pub attempts: u32,
    /// Transparent resends on top of them (the server saw none of these).
    pub unsent_retries: u32,
}

/// Runs `attempt` under `policy` and, when given, `throttle` (gRFC A6):
///
/// - each send goes through the transparent retry ([`transparent::call`]);
/// - a status `policy` lists as retryable costs `throttle` a token, any
///   other outcome gives back its ratio (A6 counts only retryable failures,
///   so an `INVALID_ARGUMENT` never throttles anyone);
/// - a retryable failure is sent again after [`RetryPolicy::backoff`],
///   while sends stay within `max_attempts` and `throttle` allows a retry.
///
/// `attempt` builds the call anew each time: a request is consumed by
/// sending it.
pub async fn call<T, F, Fut>(
    policy: &RetryPolicy,
    throttle: Option<&Throttle>,
    mut attempt: F,
) -> Attempted<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, Status>>,
{
    let mut attempts = 0;
    let mut unsent_retries = 0;
    loop {
        let sent = transparent::call(&mut attempt).await;
        attempts += 1;
        unsent_retries += sent.retried;
        let retryable = matches!(&sent.result, Err(status) if policy.retries(status.code()));
        if let Some(throttle) = throttle {
            if retryable {
                throttle.record_failure();
            } else {
                throttle.record_success();
            }
        }
        let may_retry =
            attempts < policy.max_attempts && throttle.is_none_or(Throttle::allows_retry);
        if !(retryable && may_retry) {
            return Attempted {
                result: sent.result,
                attempts,
                unsent_retries,
            };
        }
        let wait = policy.backoff(attempts);
        tracing::debug!(
            attempts,
            ?wait,
            "retryable failure: sending again after a backoff"
        );
        tokio::time::sleep(wait).await;
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, time::Duration};

    use tonic::Code;

    use super::*;

    /// A policy with no wait, so that the tests time nothing.
    fn five_attempts() -> RetryPolicy {
        RetryPolicy {
            initial_backoff: Duration::ZERO,
            max_backoff: Duration::ZERO,
            ..RetryPolicy::default()
        }
    }

    /// A call that fails with `code` every time, counting its sends.
    async fn always(
        code: Code,
        policy: &RetryPolicy,
        throttle: Option<&Throttle>,
    ) -> Attempted<()> {
        let sends = Cell::new(0);
        let outcome = call(policy, throttle, || {
            sends.set(sends.get() + 1);
            async move { Err(Status::new(code, "test")) }
        })
        .await;
        assert_eq!(outcome.attempts, sends.get());
        outcome
    }

    /// An outage without throttling: every call is sent max_attempts times.
    #[tokio::test]
    async fn naive_retries_multiply_an_outage_by_max_attempts() {
        let policy = five_attempts();
        for _ in 0..10 {
            assert_eq!(always(Code::Unavailable, &policy, None).await.attempts, 5);
        }
    }

    /// The same outage with A6's throttle (10 tokens, 0.1): the first call
    /// spends the bucket down to half (5 sends: 10 → 5), then every call is
    /// sent once.
    #[tokio::test]
    async fn throttling_brings_an_outage_back_to_one_send_per_call() {
        let policy = five_attempts();
        let throttle = Throttle::new(10, 0.1);
        assert_eq!(
            always(Code::Unavailable, &policy, Some(&throttle))
                .await
                .attempts,
            5
        );
        for _ in 0..10 {
            assert_eq!(
                always(Code::Unavailable, &policy, Some(&throttle))
                    .await
                    .attempts,
                1
            );
        }
    }

    /// A status the policy does not list is never retried, and does not
    /// cost a token.
    #[tokio::test]
    async fn a_fatal_status_is_not_retried_and_costs_no_token() {
        let throttle = Throttle::new(10, 0.1);
        let outcome = always(Code::InvalidArgument, &five_attempts(), Some(&throttle)).await;
        assert_eq!(outcome.attempts, 1);
        assert_eq!(throttle.milli_tokens(), 10_000);
    }

    /// A success after two failures: three sends, the answer returned.
    #[tokio::test]
    async fn a_retry_that_succeeds_returns_the_answer() {
        let sends = Cell::new(0);
        let outcome = call(&five_attempts(), None, || {
            sends.set(sends.get() + 1);
            let n = sends.get();
            async move {
                if n < 3 {
                    Err(Status::unavailable("down"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!((outcome.result.ok(), outcome.attempts), (Some(3), 3));
    }
}
