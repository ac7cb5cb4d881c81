//! Latency percentiles by the nearest-rank method: p99 of 100 calls is the
//! 99th slowest, an observed value, never an interpolation.

use std::time::Duration;

/// Latencies collected from many calls.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted: Vec<Duration>,
    dirty: bool,
}

impl Latencies {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, latency: Duration) {
        self.sorted.push(latency);
        self.dirty = true;
    }

    pub fn extend(&mut self, other: Latencies) {
        self.sorted.extend(other.sorted);
        self.dirty = true;
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The `p`-th percentile (0 < p <= 100) by nearest rank, or `None`
    /// without samples.
    pub fn percentile(&mut self, p: f64) -> Option<Duration> {
        if self.sorted.is_empty() {
            return None;
        }
        if self.dirty {
            self.sorted.sort_unstable();
            self.dirty = false;
        }
        let n = self.sorted.len();
        // rank = ceil(p/100 * n), clamped to 1..=n.
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        Some(self.sorted[rank.clamp(1, n) - 1])
    }

    /// The `p`-th percentile in milliseconds, rounded to the microsecond.
    pub fn percentile_ms(&mut self, p: f64) -> Option<f64> {
        self.percentile(p).map(millis)
    }
}

/// A duration in milliseconds, rounded to the microsecond for reports.
pub fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn nearest_rank_on_one_to_a_hundred() {
        let mut l = Latencies::new();
        // Pushed out of order on purpose.
        for n in (1..=100).rev() {
            l.push(ms(n));
        }
        assert_eq!(l.percentile(50.0), Some(ms(50)));
        assert_eq!(l.percentile(99.0), Some(ms(99)));
        assert_eq!(l.percentile(100.0), Some(ms(100)));
        assert_eq!(l.percentile(0.1), Some(ms(1)));
    }

    /// Given 10 calls of which one is slow, p99 is that slow call: with few
    /// samples the tail is the maximum, which is what a reader should see.
    #[test]
    fn with_few_samples_p99_is_the_slowest() {
        let mut l = Latencies::new();
        for _ in 0..9 {
            l.push(ms(1));
        }
        l.push(ms(900));
        assert_eq!(l.percentile(99.0), Some(ms(900)));
        assert_eq!(l.percentile(50.0), Some(ms(1)));
    }

    #[test]
    fn no_samples_no_percentile() {
        assert_eq!(Latencies::new().percentile(99.0), None);
    }

    #[test]
    fn millis_keep_microseconds() {
        assert_eq!(millis(Duration::from_micros(1_234_567)), 1234.567);
    }
}
