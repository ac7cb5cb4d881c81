//! gRFC A6's retry throttling: a token bucket per server that switches
//! retries off while too many calls fail.
//!
//! ```json
//! "retryThrottling": { "maxTokens": 10, "tokenRatio": 0.1 }
//! ```
//!
//! The bucket starts full, at `maxTokens`. A call that fails with a
//! retryable status takes 1 token, any other outcome gives back
//! `tokenRatio`, and the count stays within 0 and `maxTokens`. A retry is
//! allowed only while the count is above `maxTokens / 2`. So with 10 and
//! 0.1, an outage stops retries after 5 failures, and they come back once
//! about 10 calls have succeeded for each failure: retries cost the server
//! at most about 10 % more than the calls themselves.
//!
//! A6 allows `tokenRatio` three decimals, so the bucket counts thousandths
//! of a token in an integer, as grpc-core does: the arithmetic is exact
//! (ten 0.1s make exactly 1) and the count is one atomic, shared by every
//! call to the server without a lock.

use std::sync::atomic::{AtomicU32, Ordering};

/// Thousandths in a token.
const MILLI: u32 = 1000;

/// The token bucket of one server (A6 `retryThrottling`).
#[derive(Debug)]
pub struct Throttle {
    /// `maxTokens`, in thousandths.
    max: u32,
    /// `tokenRatio`, in thousandths (rounded to A6's three decimals).
    ratio: u32,
    /// The count, in thousandths: starts at `max`.
    tokens: AtomicU32,
}

impl Throttle {
    /// A full bucket of `max_tokens` (A6: greater than 0, at most 1,000 here)
    /// that gives back `token_ratio` per success (rounded to thousandths).
    pub fn new(max_tokens: u32, token_ratio: f64) -> Self {
        let max = max_tokens.clamp(1, 1000) * MILLI;
        // Rounded to A6's three decimals; a ratio that does not fit (NaN,
        // negative, huge) saturates, never panics.
        let ratio = (token_ratio * f64::from(MILLI))
            .round()
            .clamp(0.0, f64::from(max)) as u32;
        Self {
            max,
            ratio,
            tokens: AtomicU32::new(max),
        }
    }

    /// A retryable failure: one token less, down to 0.
    pub fn record_failure(&self) {
        self.update(|tokens| tokens.saturating_sub(MILLI));
    }

    /// Any other outcome: `tokenRatio` more, up to `maxTokens`.
    pub fn record_success(&self) {
        let (max, ratio) = (self.max, self.ratio);
        self.update(|tokens| tokens.saturating_add(ratio).min(max));
    }

    /// True while a retry may be sent: more than `maxTokens / 2` left.
    pub fn allows_retry(&self) -> bool {
        self.milli_tokens() > self.max / 2
    }

    /// The count now, in thousandths of a token.
    pub fn milli_tokens(&self) -> u32 {
        self.tokens.load(Ordering::Relaxed)
    }

    fn update(&self, change: impl Fn(u32) -> u32) {
        // fetch_update retries on a race with another call; the closure
        // always returns Some, so it cannot fail.
        let _ = self
            .tokens
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |t| Some(change(t)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// It starts full: retries allowed.
    #[test]
    fn a_new_bucket_is_full() {
        let bucket = Throttle::new(10, 0.1);
        assert_eq!(bucket.milli_tokens(), 10_000);
        assert!(bucket.allows_retry());
    }

    /// Each failure takes exactly one token; at 5 of 10 (not above half)
    /// retries stop; the count never goes below 0.
    #[test]
    fn failures_take_a_token_each_and_stop_retries_at_half() {
        let bucket = Throttle::new(10, 0.1);
        for left in (5..10).rev() {
            bucket.record_failure();
            assert_eq!(bucket.milli_tokens(), left * 1000);
        }
        assert!(!bucket.allows_retry(), "5 is not above 10 / 2");
        for _ in 0..20 {
            bucket.record_failure();
        }
        assert_eq!(bucket.milli_tokens(), 0);
    }

    /// From 5 tokens, ten successes at 0.1 make exactly 6: no float drift,
    /// and a single success already lifts it above half.
    #[test]
    fn successes_give_back_the_ratio_exactly() {
        let bucket = Throttle::new(10, 0.1);
        for _ in 0..5 {
            bucket.record_failure();
        }
        bucket.record_success();
        assert_eq!(bucket.milli_tokens(), 5_100);
        assert!(bucket.allows_retry());
        for _ in 0..9 {
            bucket.record_success();
        }
        assert_eq!(bucket.milli_tokens(), 6_000);
    }

    /// Successes never fill it above maxTokens.
    #[test]
    fn the_count_never_exceeds_max_tokens() {
        let bucket = Throttle::new(10, 0.1);
        for _ in 0..100 {
            bucket.record_success();
        }
        assert_eq!(bucket.milli_tokens(), 10_000);
    }

    /// The ratio keeps three decimals (A6's limit); nonsense saturates.
    #[test]
    fn the_ratio_is_kept_in_thousandths() {
        assert_eq!(Throttle::new(10, 0.0016).ratio, 2);
        assert_eq!(Throttle::new(10, f64::NAN).ratio, 0);
        assert_eq!(Throttle::new(10, -1.0).ratio, 0);
        assert_eq!(Throttle::new(10, 1e12).ratio, 10_000);
    }
}
