//! Timing a run of calls: the wall time of the whole run, and the median of
//! the individual calls.
//!
//! The total is what a reader feels; the median is what one call costs. A
//! single scheduler hiccup on a busy machine can stretch the total of a short
//! run by half, while the median of 50 calls barely moves. That makes the
//! median the steadier number to compare two clients by.
//!
//! Over an emulated link the median is also given in round trips, the unit
//! the physics speaks: a call on an open channel costs one, a call that
//! opens its own connection costs more.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::output::seconds;

/// Records the duration of each call of a run, from the moment it is started.
#[derive(Debug)]
pub struct CallTimer {
    started: Instant,
    calls: Vec<Duration>,
}

/// What a [`CallTimer`] measured, in seconds, as the clients report it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Timings {
    /// Wall time of the whole run, set-up included.
    pub total_s: f64,
    /// The median duration of one call; 0 when no call was recorded.
    pub median_call_s: f64,
    /// The median call in round trips of the link (to two decimals);
    /// absent without a link delay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub median_call_rtts: Option<f64>,
}

impl CallTimer {
    /// Starts the clock of the whole run.
    pub fn start() -> Self {
        Self {
            started: Instant::now(),
            calls: Vec::new(),
        }
    }

    /// Records one call that began at `call_started` and has just ended.
    pub fn record(&mut self, call_started: Instant) {
        self.calls.push(call_started.elapsed());
    }

    /// Stops the clock and reports the total and the median call, the latter
    /// also in round trips of `rtt` unless it is zero.
    pub fn finish(self, rtt: Duration) -> Timings {
        let median = median(self.calls);
        Timings {
            total_s: seconds(self.started.elapsed()),
            median_call_s: seconds(median),
            median_call_rtts: (!rtt.is_zero())
                .then(|| (median.as_secs_f64() / rtt.as_secs_f64() * 100.0).round() / 100.0),
        }
    }
}

/// The middle duration, or the mean of the two middle ones for an even count.
fn median(mut calls: Vec<Duration>) -> Duration {
    calls.sort_unstable();
    let middle = calls.len() / 2;
    match calls.len() {
        0 => Duration::ZERO,
        n if n % 2 == 1 => calls[middle],
        _ => (calls[middle - 1] + calls[middle]) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn millis(values: &[u64]) -> Vec<Duration> {
        values.iter().copied().map(Duration::from_millis).collect()
    }

    /// An odd count: the middle value, whatever the order and the outlier.
    #[test]
    fn median_of_an_odd_count_ignores_one_outlier() {
        assert_eq!(median(millis(&[3, 900, 1, 2, 4])), Duration::from_millis(3));
    }

    /// An even count: the mean of the two middle values.
    #[test]
    fn median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(millis(&[4, 1, 2, 3])), Duration::from_micros(2_500));
    }

    /// No call recorded: zero, not a panic.
    #[test]
    fn median_of_no_calls_is_zero() {
        assert_eq!(median(Vec::new()), Duration::ZERO);
    }

    /// The report's median is one of the recorded calls, and never exceeds
    /// the total, which covers every call.
    #[test]
    fn finish_reports_a_median_within_the_total() {
        let mut timer = CallTimer::start();
        for _ in 0..3 {
            let call = Instant::now();
            std::thread::sleep(Duration::from_millis(2));
            timer.record(call);
        }

        let timings = timer.finish(Duration::ZERO);

        assert!(timings.median_call_s >= 0.002, "{timings:?}");
        assert_eq!(timings.median_call_rtts, None);
        assert!(timings.total_s >= 3.0 * 0.002, "{timings:?}");
        assert!(timings.median_call_s <= timings.total_s, "{timings:?}");
    }

    /// In round trips: the median divided by the round trip, to two decimals.
    #[test]
    fn the_median_in_round_trips() {
        let mut timer = CallTimer::start();
        timer.calls = millis(&[130, 120, 500]);

        let timings = timer.finish(Duration::from_millis(60));

        assert_eq!(timings.median_call_rtts, Some(2.17));
    }
}
