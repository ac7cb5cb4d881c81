//! Faults to learn on: a slow dependency and a replica in trouble, both off
//! by default (`--fault-delay-ms`, `--fault-unavailable-percent`).
//!
//! Lever 6 (deadlines, cancellation, retries) only shows against a server
//! that is slow or failing, so GetQuote can be made either on purpose:
//!
//! - the delay is a `tokio::time::sleep` awaited inside the handler, as a
//!   call to a slow database would be. A client's deadline (`grpc-timeout`,
//!   see [`crate::call::request_guards`]) or a client's cancel (RST_STREAM)
//!   drops the handler's future, and the sleep with it;
//! - the failure answers `UNAVAILABLE` at once, before any work, as a
//!   replica that is restarting or overloaded would. It is the status gRFC
//!   A6's retry policies list as retryable.
//!
//! Whether a call fails is drawn per call from the worker thread's own
//! random generator (`fastrand`'s thread-local one): no lock and no counter
//! shared by the workers, and each call's chance is independent of the
//! others, as for a real flaky replica. (An atomic counter would fail
//! exactly every other call at 50 %, so a retry would always land on a
//! success: the opposite of an outage.)

use std::time::Duration;

use tonic::Status;

use crate::knobs::Config;

/// The faults GetQuote plays, as `--fault-*` set them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// How long every GetQuote waits before it answers; `None`: no wait.
    pub delay: Option<Duration>,
    /// Share of GetQuote calls, in percent (0 to 100), that fail at once
    /// with `UNAVAILABLE`; 0: none.
    pub unavailable_percent: u8,
}

impl Faults {
    /// The faults `config` asks for (none by default).
    pub fn from_config(config: &Config) -> Self {
        Self {
            delay: (config.fault_delay_ms > 0)
                .then(|| Duration::from_millis(config.fault_delay_ms)),
            unavailable_percent: config.fault_unavailable_percent,
        }
    }

    /// True when any fault is on: the start-up log then warns.
    pub fn any(&self) -> bool {
        self.delay.is_some() || self.unavailable_percent > 0
    }

    /// Plays the faults for one call: fails it with `UNAVAILABLE`, or waits
    /// out the delay, or returns at once when both are off. Awaited inside
    /// the handler, so dropping the handler (a deadline, a cancel) stops it.
    pub async fn play(&self) -> Result<(), Status> {
        if self.unavailable_percent > 0 && fastrand::u8(0..100) < self.unavailable_percent {
            return Err(Status::unavailable(format!(
                "fault injected: --fault-unavailable-percent {}",
                self.unavailable_percent
            )));
        }
        if let Some(delay) = self.delay {
            tokio::time::sleep(delay).await;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Off by default: every call goes through at once.
    #[tokio::test]
    async fn no_faults_by_default() {
        let faults = Faults::from_config(&Config::default());
        assert!(!faults.any());
        for _ in 0..1000 {
            assert!(faults.play().await.is_ok());
        }
    }

    /// 100 % fails every call, 0 % none, with UNAVAILABLE.
    #[tokio::test]
    async fn the_percent_bounds_are_exact() {
        let outage = Faults {
            unavailable_percent: 100,
            ..Faults::default()
        };
        for _ in 0..1000 {
            let status = outage.play().await.expect_err("100 % fails every call");
            assert_eq!(status.code(), tonic::Code::Unavailable);
        }
    }

    /// 50 % fails about half of the calls: 10,000 draws land within
    /// 45-55 % (the binomial's standard deviation is 0.5 %).
    #[tokio::test]
    async fn half_fails_about_half() {
        let flaky = Faults {
            unavailable_percent: 50,
            ..Faults::default()
        };
        let mut failed = 0;
        for _ in 0..10_000 {
            failed += u32::from(flaky.play().await.is_err());
        }
        assert!((4_500..=5_500).contains(&failed), "{failed}");
    }

    /// The delay is an awaited sleep, so a deadline around it drops it:
    /// a 60 s wait under a 20 ms timeout ends at the timeout.
    #[tokio::test]
    async fn the_delay_is_an_await_a_deadline_can_drop() {
        let slow = Faults {
            delay: Some(Duration::from_secs(60)),
            ..Faults::default()
        };
        let cut = tokio::time::timeout(Duration::from_millis(20), slow.play()).await;
        assert!(cut.is_err(), "the deadline dropped the wait");
    }
}
