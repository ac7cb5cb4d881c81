//! The ping floor, as grpc-go's `handlePing` enforces it: a client that
//! PINGs sooner than `--min-ping-interval-secs`, or while idle when that is
//! not permitted, earns strikes; the strike after [`MAX_PING_STRIKES`] gets
//! that PING's ACK, then GOAWAY `ENHANCE_YOUR_CALM` `too_many_pings`.

use std::time::{Duration, Instant};

use h2_frames::{GoAway, encode_frame, flag, kind};

use crate::knobs::MAX_PING_STRIKES;

/// A ping this much sooner than the floor is still on time: timers and
/// networks jitter by milliseconds, and a client that pings exactly at the
/// floor must never be punished for it.
const PING_FLOOR_TOLERANCE: Duration = Duration::from_millis(100);

/// A PING's payload is exactly 8 opaque bytes (RFC 9113 §6.7).
pub const PING_PAYLOAD_LEN: usize = 8;

/// The ping floor, as grpc-go's `handlePing` enforces it: a PING is a strike
/// when it comes sooner than the floor after the previous one, or when no
/// call is in flight and such pings are not permitted. Sending HEADERS or
/// DATA forgives everything. The strike after [`MAX_PING_STRIKES`] is one too
/// many.
#[derive(Debug, Clone)]
pub struct PingPolicy {
    min_interval: Option<Duration>,
    permit_without_calls: bool,
    /// When the previous PING arrived; `None` right after data was sent.
    last_ping: Option<Instant>,
    /// Strikes since the server last sent HEADERS or DATA.
    strikes: u32,
}

/// What to do about one PING.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PingVerdict {
    Fine,
    /// A strike, with the count so far.
    Strike(u32),
    /// One strike too many: GOAWAY `too_many_pings`.
    TooMany,
}

impl PingPolicy {
    pub fn new(min_interval: Option<Duration>, permit_without_calls: bool) -> Self {
        Self {
            min_interval,
            permit_without_calls,
            last_ping: None,
            strikes: 0,
        }
    }

    /// A PING (not an ack) arrived at `now`.
    pub fn on_ping(&mut self, now: Instant, calls_in_flight: bool) -> PingVerdict {
        let too_soon = match (self.min_interval, self.last_ping) {
            (Some(floor), Some(last)) => {
                now.saturating_duration_since(last) + PING_FLOOR_TOLERANCE < floor
            }
            _ => false,
        };
        let idle_not_permitted = !calls_in_flight && !self.permit_without_calls;
        self.last_ping = Some(now);
        if !too_soon && !idle_not_permitted {
            return PingVerdict::Fine;
        }
        self.strikes += 1;
        if self.strikes > MAX_PING_STRIKES {
            PingVerdict::TooMany
        } else {
            PingVerdict::Strike(self.strikes)
        }
    }

    /// The server sent HEADERS or DATA: pings that ride along with real
    /// traffic (BDP probes) are never strikes.
    pub fn on_headers_or_data_sent(&mut self) {
        self.strikes = 0;
        self.last_ping = None;
    }
}

/// The ACK of the PING that earned a GOAWAY, then the GOAWAY, as grpc-go's
/// `handlePing` sends them: the client's round-trip sample is not lost,
/// and h2's own ACK never goes out, because nothing follows our GOAWAY.
/// A PING of the wrong size gets no ACK (h2 calls it a FRAME_SIZE_ERROR).
pub fn ack_then(ping_payload: &[u8], goaway: GoAway) -> Vec<u8> {
    let mut frames = Vec::new();
    if ping_payload.len() == PING_PAYLOAD_LEN {
        frames = encode_frame(kind::PING, flag::ACK, 0, ping_payload);
    }
    frames.extend(goaway.encode());
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: Duration = Duration::from_secs(5);

    fn at(start: Instant, millis: u64) -> Instant {
        start + Duration::from_millis(millis)
    }

    /// Given the chapter's 5 s floor, a PING every second is fine once, then
    /// two strikes, then one too many: the third strike.
    #[test]
    fn third_quick_ping_is_one_too_many() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        assert_eq!(policy.on_ping(at(t0, 0), false), PingVerdict::Fine);
        assert_eq!(policy.on_ping(at(t0, 1000), false), PingVerdict::Strike(1));
        assert_eq!(policy.on_ping(at(t0, 2000), false), PingVerdict::Strike(2));
        assert_eq!(policy.on_ping(at(t0, 3000), false), PingVerdict::TooMany);
    }

    /// Pings exactly at the floor, or a hair early, are never strikes.
    #[test]
    fn pings_at_the_floor_are_fine() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        for i in 0..20 {
            // 4.95 s, 9.95 s, ...: 50 ms early every time.
            let when = at(t0, i * 5000).checked_sub(Duration::from_millis(50 * u64::from(i > 0)));
            let when = when.expect("after t0");
            assert_eq!(policy.on_ping(when, false), PingVerdict::Fine, "ping {i}");
        }
    }

    /// Sending HEADERS or DATA resets the strikes and the clock, as grpc-go does.
    #[test]
    fn data_sent_forgives_strikes() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(Some(FLOOR), true);
        policy.on_ping(at(t0, 0), true);
        assert_eq!(policy.on_ping(at(t0, 100), true), PingVerdict::Strike(1));
        assert_eq!(policy.on_ping(at(t0, 200), true), PingVerdict::Strike(2));
        policy.on_headers_or_data_sent();
        assert_eq!(policy.on_ping(at(t0, 300), true), PingVerdict::Fine);
        assert_eq!(policy.on_ping(at(t0, 400), true), PingVerdict::Strike(1));
    }

    /// With pings without calls not permitted, every idle PING is a strike,
    /// however slow; with a call in flight the same pace is fine.
    #[test]
    fn idle_pings_strike_when_not_permitted() {
        let t0 = Instant::now();
        let mut idle = PingPolicy::new(Some(FLOOR), false);
        assert_eq!(idle.on_ping(at(t0, 0), false), PingVerdict::Strike(1));
        assert_eq!(idle.on_ping(at(t0, 60_000), false), PingVerdict::Strike(2));
        assert_eq!(idle.on_ping(at(t0, 120_000), false), PingVerdict::TooMany);

        let mut busy = PingPolicy::new(Some(FLOOR), false);
        for i in 0..5 {
            assert_eq!(busy.on_ping(at(t0, i * 60_000), true), PingVerdict::Fine);
        }
    }

    #[test]
    fn no_floor_means_no_strikes() {
        let t0 = Instant::now();
        let mut policy = PingPolicy::new(None, true);
        for i in 0..1000 {
            assert_eq!(policy.on_ping(at(t0, i), false), PingVerdict::Fine);
        }
    }
}
