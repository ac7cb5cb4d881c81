//! Every setting of the balancer, with its unit, its effect and its reason.
//! [`Knobs::default`] holds the constants below; [`Knobs::check`] refuses a
//! set that would spin, hold nothing or wait forever.

use std::time::Duration;

/// How often the name is resolved when nothing fails: 10 s, give or take
/// [`RESOLVE_JITTER`]. A new pod is in CoreDNS's answer about a second
/// after it turns Ready (the `kubernetes` plugin watches the API; `ttl` is
/// only what CoreDNS tells caches, and this resolver keeps none). With
/// cluster names cached (`cache 30`, kubeadm before kubernetes#128359) an
/// answer can be up to 30 s old. So a new pod gets calls within
/// 10 × 1.2 + 1 = 13 s, or 13 + 30 = 43 s behind a 30 s cache.
/// grpc-go's `dns` resolver never polls: it learns of a new pod only when a
/// connection fails. The price here is one small query per 10 s per client
/// (one per search domain, unless the name ends with a dot).
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

/// Each interval is drawn within ±20 % of [`RESOLVE_INTERVAL`], so that the
/// clients of one Deployment, started together, do not query together.
pub const RESOLVE_JITTER: f64 = 0.2;

/// The least time between two resolves when failures ask for more: 2 s.
/// A failed connection or a GOAWAY asks for a resolve at once (grpc-go's
/// `ResolveNow`); a burst of them costs one query. grpc-go's floor is 30 s,
/// to spare a shared DNS server: on a cached CoreDNS that floor, not the
/// DNS, is what keeps a gone pod's address in its set (issue 51's 433
/// failures). 2 s is still at most 30 queries a minute per client.
pub const MIN_RESOLVE_GAP: Duration = Duration::from_secs(2);

/// The most one resolve may take before it counts as a timeout: 5 s,
/// hickory's own per-query timeout. A stuck DNS server delays the next
/// resolve, never a call: calls go to the endpoints already held.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most endpoints (and so connections) held: 64. A headless Service of
/// a Deployment rarely has more; each idle connection costs memory on both
/// sides (docs/costs.md). A longer answer is cut to 64, held ones first.
pub const MAX_ENDPOINTS: usize = 64;

/// The most calls waiting for an endpoint to turn ready: 1,024, about 10 s
/// of calls at 100 calls/s. Past it a call fails at once with UNAVAILABLE
/// ("queue full") rather than holding memory without bound.
pub const MAX_QUEUED_CALLS: usize = 1024;

/// How long one connection attempt may take, TCP and TLS and the server's
/// SETTINGS included: 20 s, gRPC's `MIN_CONNECT_TIMEOUT` (connection
/// backoff spec). A frozen process's kernel still accepts the TCP
/// connection, so only the missing SETTINGS tell it apart; the endpoint
/// stays "connecting", and is not picked, meanwhile.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);

/// gRPC's connection backoff (doc/connection-backoff.md): the first wait
/// after a failed attempt, 1 s ...
pub const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
/// ... multiplied by 1.6 after each further failure ...
pub const BACKOFF_MULTIPLIER: f64 = 1.6;
/// ... each wait drawn within ±20 % ...
pub const BACKOFF_JITTER: f64 = 0.2;
/// ... and never above 120 s.
pub const BACKOFF_MAX: Duration = Duration::from_secs(120);

/// The chapter's keepalive (lever 4): a PING after 5 s without a frame, ...
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// ... and the connection is dead, so its endpoint not ready, if no ACK
/// comes within 20 s (grpc-go's default). A frozen pod's calls stop being
/// picked after at most 5 + 20 = 25 s, unless its readiness probe takes it
/// out of DNS first.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Peak EWMA's guess of a new endpoint's latency before it has answered:
/// 1 ms, below a call inside a cluster, so that a new pod is tried at once
/// and its first answers teach the balancer its real latency. Linkerd's
/// 30 ms kept a new pod without calls here for about 30 s (row k5): its
/// guess had to decay below the others' learned 1–2 ms first. The price of
/// a low guess: a slow new pod takes a few calls before its first answer.
pub const EWMA_DEFAULT_RTT: Duration = Duration::from_millis(1);
/// How fast Peak EWMA forgets: 2 s. A pod that answered late (a peak)
/// is picked again once its learned latency has decayed below the others',
/// so the decay is how long one late answer costs a pod its share. Linkerd's
/// 10 s left one of three equal pods at 10.9 % of the calls over 15 s (row
/// k4; one late answer under a CPU quota is enough), where 2 s gives it
/// back in a few seconds. A pod that stays slow (100 ms) is still tried
/// only about once every 2 × ln(100 / 1.5) ≈ 8 s.
pub const EWMA_DECAY: Duration = Duration::from_secs(2);

/// How the picker compares two ready endpoints (power of two choices).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pick {
    /// gRFC A48 `least_request`: the one with fewer calls in flight. Ties,
    /// common at low load, are broken at random.
    LeastRequest,
    /// Linkerd's peak EWMA: latency, learned from answers and peaking at
    /// once on a slow one, times calls in flight plus one. The default:
    /// row k12 measured both with one slow pod (docs/kubernetes.md).
    #[default]
    PeakEwma,
    /// No load at all, a uniform random pick: what tonic's own
    /// `balance_channel` does, since its endpoints report a load of 0.
    /// For comparisons.
    Random,
}

/// The balancer's settings.
#[derive(Debug, Clone)]
pub struct Knobs {
    /// See [`RESOLVE_INTERVAL`].
    pub resolve_interval: Duration,
    /// See [`MIN_RESOLVE_GAP`].
    pub min_resolve_gap: Duration,
    /// See [`RESOLVE_TIMEOUT`].
    pub resolve_timeout: Duration,
    /// See [`MAX_ENDPOINTS`].
    pub max_endpoints: usize,
    /// See [`MAX_QUEUED_CALLS`].
    pub max_queued_calls: usize,
    /// See [`CONNECT_TIMEOUT`].
    pub connect_timeout: Duration,
    /// See [`BACKOFF_INITIAL`].
    pub backoff_initial: Duration,
    /// See [`BACKOFF_MAX`].
    pub backoff_max: Duration,
    /// See [`KEEPALIVE_INTERVAL`]; `None` sends no PING.
    pub keepalive_interval: Option<Duration>,
    /// See [`KEEPALIVE_TIMEOUT`].
    pub keepalive_timeout: Duration,
    /// See [`Pick`].
    pub pick: Pick,
    /// gRFC A17: watch each endpoint's `grpc.health.v1.Health` and pick
    /// none that is not SERVING. `Some(service)` names the service to
    /// watch (`""` for the server as a whole); `None`, the default, watches
    /// nothing, as gRPC does without a `healthCheckConfig`.
    pub health_service: Option<String>,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            resolve_interval: RESOLVE_INTERVAL,
            min_resolve_gap: MIN_RESOLVE_GAP,
            resolve_timeout: RESOLVE_TIMEOUT,
            max_endpoints: MAX_ENDPOINTS,
            max_queued_calls: MAX_QUEUED_CALLS,
            connect_timeout: CONNECT_TIMEOUT,
            backoff_initial: BACKOFF_INITIAL,
            backoff_max: BACKOFF_MAX,
            keepalive_interval: Some(KEEPALIVE_INTERVAL),
            keepalive_timeout: KEEPALIVE_TIMEOUT,
            pick: Pick::default(),
            health_service: None,
        }
    }
}

impl Knobs {
    /// Refuses settings that would spin (a zero gap or backoff), hold
    /// nothing (no endpoint, no queue) or wait without end.
    pub fn check(&self) -> Result<(), String> {
        let zero = [
            ("min_resolve_gap", self.min_resolve_gap),
            ("resolve_timeout", self.resolve_timeout),
            ("connect_timeout", self.connect_timeout),
            ("backoff_initial", self.backoff_initial),
            ("keepalive_timeout", self.keepalive_timeout),
        ];
        if let Some((name, _)) = zero.iter().find(|(_, d)| d.is_zero()) {
            return Err(format!("{name} must not be 0"));
        }
        if self.resolve_interval < self.min_resolve_gap {
            return Err(format!(
                "resolve_interval ({:?}) must be at least min_resolve_gap ({:?})",
                self.resolve_interval, self.min_resolve_gap
            ));
        }
        if self.backoff_max < self.backoff_initial {
            return Err("backoff_max must be at least backoff_initial".into());
        }
        if self.max_endpoints == 0 || self.max_queued_calls == 0 {
            return Err("max_endpoints and max_queued_calls must not be 0".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_knobs_that_would_spin_or_hold_nothing() {
        let bad = [
            Knobs {
                min_resolve_gap: Duration::ZERO,
                ..Knobs::default()
            },
            Knobs {
                resolve_interval: Duration::from_secs(1),
                min_resolve_gap: Duration::from_secs(2),
                ..Knobs::default()
            },
            Knobs {
                backoff_initial: Duration::ZERO,
                ..Knobs::default()
            },
            Knobs {
                max_endpoints: 0,
                ..Knobs::default()
            },
            Knobs {
                max_queued_calls: 0,
                ..Knobs::default()
            },
        ];
        for knobs in bad {
            assert!(knobs.check().is_err(), "{knobs:?} was accepted");
        }
        assert!(Knobs::default().check().is_ok());
    }
}
