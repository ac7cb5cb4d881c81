//! gRPC's connection backoff (grpc/grpc doc/connection-backoff.md): after a
//! failed attempt, wait 1 s; after each further failure, 1.6 times longer,
//! up to 120 s; each wait drawn within ±20 %. A connection that became
//! ready resets it.

use std::time::Duration;

use crate::knobs::{BACKOFF_JITTER, BACKOFF_MULTIPLIER};

/// The waits between one endpoint's failed connection attempts.
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    /// The wait before jitter that the next failure gets.
    current: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self {
            initial,
            max,
            current: initial,
        }
    }

    /// The wait after this failure, and the next one's grows.
    /// "current_backoff = Min(current_backoff * MULTIPLIER, MAX_BACKOFF)"
    pub fn next_wait(&mut self) -> Duration {
        let wait = jittered(self.current, BACKOFF_JITTER);
        self.current = self.current.mul_f64(BACKOFF_MULTIPLIER).min(self.max);
        wait
    }

    /// "When the connection succeeds, the backoff is reset."
    pub fn reset(&mut self) {
        self.current = self.initial;
    }
}

/// `base` moved by a uniform random fraction within ±`jitter`.
pub fn jittered(base: Duration, jitter: f64) -> Duration {
    base.mul_f64(1.0 + jitter * (2.0 * fastrand::f64() - 1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ceilings grow 1, 1.6, 2.56, ... and stop at the cap, each wait
    /// within 20 % of its ceiling.
    #[test]
    fn grows_by_the_multiplier_within_the_jitter_up_to_the_cap() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(120));
        let mut ceiling = 1.0_f64;
        for _ in 0..20 {
            let wait = backoff.next_wait().as_secs_f64();
            assert!(
                wait >= ceiling * 0.8 - 1e-9 && wait <= ceiling * 1.2 + 1e-9,
                "{wait} s is not within 20 % of {ceiling} s"
            );
            ceiling = (ceiling * 1.6).min(120.0);
        }
        assert!((ceiling - 120.0).abs() < 1e-9, "20 failures reach the cap");
    }

    #[test]
    fn a_ready_connection_starts_it_over() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(120));
        for _ in 0..5 {
            backoff.next_wait();
        }
        backoff.reset();
        assert!(backoff.next_wait() <= Duration::from_millis(1200));
    }
}
