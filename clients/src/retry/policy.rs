//! A retry policy as gRFC A6 writes it in a service config, with its
//! jittered exponential backoff.
//!
//! ```json
//! "retryPolicy": {
//!   "maxAttempts": 5,
//!   "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
//!   "retryableStatusCodes": ["UNAVAILABLE"]
//! }
//! ```
//!
//! The wait before retry `n` (1 for the first) is drawn uniformly from
//! `[0, min(initialBackoff × multiplier^(n−1), maxBackoff))`: "full jitter",
//! so clients that failed together do not come back together.

use std::time::Duration;

use tonic::Code;

/// A6's client-side cap on `maxAttempts`: 5. A service config may ask for
/// more, and gets 5, so a config pushed through DNS cannot turn every call
/// into a storm.
pub const MAX_ATTEMPTS_CAP: u32 = 5;

/// `retryPolicy`, one field per A6 setting.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Sends in all, the first included (A6: at least 2; capped at
    /// [`MAX_ATTEMPTS_CAP`] by [`RetryPolicy::new`]).
    pub max_attempts: u32,
    /// The ceiling of the first retry's wait.
    pub initial_backoff: Duration,
    /// The ceiling no wait exceeds, however many retries.
    pub max_backoff: Duration,
    /// How much the ceiling grows per retry (A6: greater than 0).
    pub multiplier: f64,
    /// The statuses worth retrying: only those that say the server did not
    /// do the work. `UNAVAILABLE` is the usual one; `INVALID_ARGUMENT` never.
    pub retryable: Vec<Code>,
}

impl Default for RetryPolicy {
    /// The issue's policy: 5 attempts, 10 ms doubling to 100 ms, on
    /// `UNAVAILABLE`. Short waits on purpose: `retry-client` shows how many
    /// sends reach the server, and long waits would only slow it down.
    fn default() -> Self {
        Self {
            max_attempts: MAX_ATTEMPTS_CAP,
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(100),
            multiplier: 2.0,
            retryable: vec![Code::Unavailable],
        }
    }
}

impl RetryPolicy {
    /// A policy with `max_attempts` held to 1..=[`MAX_ATTEMPTS_CAP`] (1: no
    /// retries) and the default backoff and codes.
    pub fn new(max_attempts: u32) -> Self {
        Self {
            max_attempts: max_attempts.clamp(1, MAX_ATTEMPTS_CAP),
            ..Self::default()
        }
    }

    /// True when a call that ended with `code` may be sent again.
    pub fn retries(&self, code: Code) -> bool {
        self.retryable.contains(&code)
    }

    /// The ceiling of the wait before retry `n` (1 for the first):
    /// `min(initial × multiplier^(n−1), max)`.
    pub fn backoff_ceiling(&self, retry: u32) -> Duration {
        let exponent = i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX);
        let grown = self.initial_backoff.as_secs_f64() * self.multiplier.powi(exponent);
        // An overflow (a huge exponent) or a NaN is the maximum, never a panic.
        Duration::try_from_secs_f64(grown)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }

    /// The wait before retry `n`: uniform in `[0, ceiling)`.
    pub fn backoff(&self, retry: u32) -> Duration {
        self.backoff_ceiling(retry).mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The ceilings double from 10 ms and stop at 100 ms.
    #[test]
    fn the_ceiling_grows_by_the_multiplier_up_to_the_maximum() {
        let policy = RetryPolicy::default();
        let ceilings: Vec<_> = (1..=6).map(|n| policy.backoff_ceiling(n)).collect();
        assert_eq!(ceilings, [ms(10), ms(20), ms(40), ms(80), ms(100), ms(100)]);
    }

    /// Every wait lies in [0, ceiling): full jitter, never above.
    #[test]
    fn a_wait_is_never_above_its_ceiling() {
        let policy = RetryPolicy::default();
        for retry in 1..=6 {
            for _ in 0..1000 {
                assert!(policy.backoff(retry) <= policy.backoff_ceiling(retry));
            }
        }
    }

    /// Absurd settings give the maximum, never a panic.
    #[test]
    fn an_overflowing_ceiling_is_the_maximum() {
        let policy = RetryPolicy {
            multiplier: 1e300,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.backoff_ceiling(u32::MAX), ms(100));
    }

    /// maxAttempts is held to 1..=5, as A6's client-side cap says.
    #[test]
    fn max_attempts_is_capped_at_five() {
        assert_eq!(RetryPolicy::new(9).max_attempts, 5);
        assert_eq!(RetryPolicy::new(0).max_attempts, 1);
        assert_eq!(RetryPolicy::new(3).max_attempts, 3);
    }
}
