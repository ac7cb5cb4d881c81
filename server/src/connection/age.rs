//! How long a connection lives: a maximum age and a maximum idle time, as
//! gRFC A9 ("server-side connection management") specifies them and
//! grpc-go's `keepalive.ServerParameters` implements them
//! (`MaxConnectionAge`, `MaxConnectionAgeGrace`, `MaxConnectionIdle`).
//! [`Tracked`] also adds the `routing-replica` response header
//! ([`crate::routing::replica`]), so the two cost one wrapper per call.
//!
//! Why a server ends healthy connections: behind an L4 load balancer (a
//! Kubernetes Service, a cloud TCP balancer, HAProxy in `mode tcp`) one
//! long-lived HTTP/2 connection pins every call of a client to one replica,
//! and a replica started later gets none of them. Ending each connection
//! after an age makes the client reconnect, and the balancer picks again
//! (see `docs/balancing.md`).
//!
//! - **Age** ([`Lifetime::max_age`]): after the age, ±10 % jitter as grpc-go
//!   applies it ([`jittered`]), the server starts hyper's graceful shutdown
//!   of the connection. h2 sends GOAWAY with last-stream-id 2^31-1 and
//!   `NO_ERROR`, and a PING; when the PING's ACK comes back, a second GOAWAY
//!   with the id of the last stream it accepted (RFC 9113 §6.8), the same
//!   sequence as grpc-go's. Calls in flight then have the grace
//!   ([`Lifetime::age_grace`]) to finish, after which the connection is
//!   closed with whatever is still on it.
//! - **A call started between the two GOAWAYs** (a client that sent it
//!   before it read the first) is accepted and served in full: the first
//!   GOAWAY promises every stream id, and the second names the last one the
//!   server accepted, which includes it. Only a stream opened after the
//!   second GOAWAY is ignored; its id is above the last-stream-id, so the
//!   client knows it was never processed and may retry it anywhere
//!   (`server/tests/lifetime.rs` sends one between the two).
//! - **Idle** ([`Lifetime::max_idle`]): a connection with no stream open for
//!   that long gets the same graceful GOAWAY. With no stream on it, it
//!   closes as soon as the PING is answered. [`Activity`] counts the streams
//!   open on a connection, and any other rule that wants "no call for so
//!   long" can read it ([`idle_for`]).
//! - **Idle after a burst** ([`Lifetime::idle_after_burst`]): the same
//!   GOAWAY, sooner, for a connection that once had
//!   [`Lifetime::burst_streams`] streams open at once. h2 keeps its frame
//!   queue and stream store at the size of the connection's busiest moment
//!   for as long as the connection lives (about 2 KiB per stream once open
//!   at once, `docs/hardening.md`); this gives that memory back once the
//!   burst is over, and the client's next call opens a connection that
//!   never had it.
//!
//! Age and idle are off by default, as in grpc-go (see
//! [`crate::knobs::MAX_CONNECTION_AGE`]); idle after a burst is on (see
//! [`crate::knobs::MAX_IDLE_AFTER_BURST`]). The server's own drain on
//! SIGTERM ([`crate::connection::drain::ServerDrain`]) sends the same graceful GOAWAY, and waits for every
//! connection, aged or not.

use std::{
    convert::Infallible,
    future::Future,
    hash::{BuildHasher, Hasher},
    pin::{Pin, pin},
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    task::{Context, Poll, ready},
    time::Duration,
};

use bytes::Bytes;
use http::HeaderValue;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper_util::server::graceful::GracefulConnection;
use tokio::{sync::Notify, time::Instant};
use tower::Service;

use crate::connection::drain::DrainWatcher;
use crate::knobs::{Config, MAX_CONNECTION_AGE_JITTER};
use crate::metrics::connection::{ConnectionMetrics, GoawayReason};
use crate::routing::replica::REPLICA_HEADER;

/// The lifetime rules of every connection, and the replica's name.
#[derive(Debug, Clone, Default)]
pub struct Lifetime {
    /// GOAWAY after this (±10 %); `None`: connections live forever.
    pub max_age: Option<Duration>,
    /// After the age's GOAWAY, calls in flight have this long to finish;
    /// `None`: as long as they take (grpc-go's default, infinity).
    pub age_grace: Option<Duration>,
    /// GOAWAY after this long with no stream open; `None`: never.
    pub max_idle: Option<Duration>,
    /// GOAWAY after this long with no stream open, once the connection has
    /// had `burst_streams` streams open at once; `None`: never.
    pub idle_after_burst: Option<Duration>,
    /// Streams open at once that make a connection a burst's.
    pub burst_streams: usize,
    /// Sent as `routing-replica` on every response; `None`: no header.
    pub replica: Option<HeaderValue>,
    /// Where each GOAWAY these rules send is counted (`None`: nowhere).
    pub metrics: Option<&'static ConnectionMetrics>,
}

impl Lifetime {
    /// The rules `config` sets.
    pub fn from_config(config: &Config) -> Self {
        Self {
            max_age: config.max_connection_age(),
            age_grace: config.max_connection_age_grace(),
            max_idle: config.max_connection_idle(),
            idle_after_burst: config.max_idle_after_burst(),
            burst_streams: usize::try_from(config.burst_streams).unwrap_or(usize::MAX),
            // knobs::replica_name has checked that it is a valid value.
            replica: config
                .replica
                .as_deref()
                .and_then(|name| HeaderValue::from_str(name).ok()),
            metrics: None,
        }
    }

    /// Wraps one connection's service: counts its streams when an idle
    /// rule needs them, and names the replica on every response. Without
    /// either, calls pass through untouched. `peak_streams` is the
    /// connection's own count of streams open at once, on the wire
    /// ([`crate::call::info::ConnectionInfo::peak_streams`]).
    pub fn track<S>(
        &self,
        service: S,
        peak_streams: Arc<AtomicUsize>,
    ) -> (Tracked<S>, Option<Arc<Activity>>) {
        let counted = self.max_idle.is_some() || self.idle_after_burst.is_some();
        let activity = counted.then(|| Arc::new(Activity::new(peak_streams)));
        let tracked = Tracked {
            inner: service,
            replica: self.replica.clone(),
            activity: activity.clone(),
        };
        (tracked, activity)
    }
}

/// `age` moved by a random amount within ±[`MAX_CONNECTION_AGE_JITTER`]
/// (10 %), as grpc-go's `getJitter`: connections opened together (after a
/// deploy, or a balancer's restart) do not all reconnect at the same moment.
/// `unit` is the random draw, in `[0, 1)`.
pub fn jittered(age: Duration, unit: f64) -> Duration {
    let unit = unit.clamp(0.0, 1.0);
    let spread = MAX_CONNECTION_AGE_JITTER * (2.0 * unit - 1.0);
    age.mul_f64(1.0 + spread)
}

/// A random number in `[0, 1)`. std's `RandomState` is seeded from the OS
/// and gives every instance new keys; a jitter needs nothing stronger, and
/// no dependency is added for it.
fn random_unit() -> f64 {
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // The top 53 bits, as a fraction: exactly representable in an f64.
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// The calls open on one connection, the most streams it had open at
/// once, and since when it has had no call open.
#[derive(Debug)]
pub struct Activity {
    /// Calls whose response has not ended (or been dropped).
    open: AtomicUsize,
    /// Shared with the connection, which counts streams on the wire: a call
    /// whose body hyper has taken may still be frames queued in h2.
    peak: Arc<AtomicUsize>,
    /// When the last stream ended (at first: when the connection started).
    idle_since: Mutex<Instant>,
    /// Woken when the last open stream ends.
    became_idle: Notify,
}

impl Activity {
    fn new(peak: Arc<AtomicUsize>) -> Self {
        Self {
            open: AtomicUsize::new(0),
            peak,
            idle_since: Mutex::new(Instant::now()),
            became_idle: Notify::new(),
        }
    }

    /// Streams open now.
    pub fn open_streams(&self) -> usize {
        self.open.load(Ordering::Acquire)
    }

    /// The most streams this connection has had open at once.
    pub fn peak_streams(&self) -> usize {
        self.peak.load(Ordering::Acquire)
    }

    fn idle_since(&self) -> Instant {
        *self
            .idle_since
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        let open = self.open.fetch_add(1, Ordering::AcqRel) + 1;
        self.peak.fetch_max(open, Ordering::AcqRel);
        StreamGuard(Arc::clone(self))
    }
}

/// Held while a stream is open: from its request to the end (or drop) of
/// its response body.
#[derive(Debug)]
struct StreamGuard(Arc<Activity>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        let activity = &self.0;
        if activity.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            *activity
                .idle_since
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Instant::now();
            activity.became_idle.notify_one();
        }
    }
}

/// Completes once the connection has had no stream open for `max_idle`.
pub async fn idle_for(activity: &Activity, max_idle: Duration) {
    idle_by_rules(activity, Some(max_idle), None, usize::MAX).await;
}

/// Completes once the connection has had no stream open for the shorter of
/// the idle times that apply to it: `max_idle` always, `after_burst` once
/// it has had `burst_streams` streams open at once. Says which applied.
async fn idle_by_rules(
    activity: &Activity,
    max_idle: Option<Duration>,
    after_burst: Option<Duration>,
    burst_streams: usize,
) -> GoingAway {
    loop {
        if activity.open_streams() > 0 {
            // A permit is stored if the last stream ends before we wait.
            activity.became_idle.notified().await;
            continue;
        }
        let burst = after_burst.filter(|_| activity.peak_streams() >= burst_streams);
        let (limit, reason) = match (max_idle, burst) {
            (Some(idle), Some(burst)) if burst < idle => (burst, GoingAway::IdleAfterBurst),
            (Some(idle), _) => (idle, GoingAway::Idle),
            (None, Some(burst)) => (burst, GoingAway::IdleAfterBurst),
            // No rule applies yet: only streams can change that.
            (None, None) => {
                activity.became_idle.notified().await;
                continue;
            }
        };
        let deadline = activity.idle_since() + limit;
        if Instant::now() >= deadline {
            return reason;
        }
        tokio::time::sleep_until(deadline).await;
        // Streams may have come and gone meanwhile: look again.
    }
}

/// A connection's service with the lifetime rules' per-call part.
#[derive(Debug, Clone)]
pub struct Tracked<S> {
    inner: S,
    replica: Option<HeaderValue>,
    activity: Option<Arc<Activity>>,
}

impl<S, B, RB> Service<http::Request<B>> for Tracked<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>, Error = Infallible>,
    S::Future: Unpin,
{
    type Response = http::Response<GuardedBody<RB>>;
    type Error = Infallible;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        TrackedFuture {
            guard: self.activity.as_ref().map(Activity::stream_opened),
            replica: self.replica.clone(),
            inner: self.inner.call(request),
        }
    }
}

/// The inner service's future; its response gets the replica header, and
/// its body the stream's guard.
#[derive(Debug)]
pub struct TrackedFuture<F> {
    inner: F,
    replica: Option<HeaderValue>,
    guard: Option<StreamGuard>,
}

impl<F, RB> Future for TrackedFuture<F>
where
    F: Future<Output = Result<http::Response<RB>, Infallible>> + Unpin,
{
    type Output = Result<http::Response<GuardedBody<RB>>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let Ok(mut response) = ready!(Pin::new(&mut this.inner).poll(cx));
        if let Some(replica) = this.replica.take() {
            response.headers_mut().insert(REPLICA_HEADER, replica);
        }
        let guard = this.guard.take();
        Poll::Ready(Ok(response.map(|inner| GuardedBody {
            inner,
            _guard: guard,
        })))
    }
}

/// A response body that keeps its stream counted as open until it ends
/// (with no idle rule, it keeps nothing and passes every frame through).
#[derive(Debug)]
pub struct GuardedBody<B> {
    inner: B,
    _guard: Option<StreamGuard>,
}

impl<B> HttpBody for GuardedBody<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Why a connection was sent away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GoingAway {
    Drain,
    Age,
    Idle,
    IdleAfterBurst,
}

/// Serves `connection` (hyper's) until it ends, sending it the graceful
/// GOAWAY when the server drains, when it reaches its age, or when it has
/// been idle too long; after the age's GOAWAY, closes it once the grace
/// has passed.
///
/// `connection` is pinned by the caller and borrowed here: an argument
/// taken by value and then pinned is stored twice in this future, as the
/// argument and as the pinned local (2,312 bytes of hyper's connection per
/// connection's task, measured with `-Zprint-type-sizes`; docs/costs.md).
pub async fn serve<C>(
    mut connection: Pin<&mut C>,
    drain: DrainWatcher,
    rules: &Lifetime,
    activity: Option<Arc<Activity>>,
) -> Result<(), C::Error>
where
    C: GracefulConnection,
{
    let DrainWatcher { mut rx } = drain;
    let mut drained = pin!(async move {
        let _ = rx.changed().await;
        // Kept until the connection ends: the drain waits for it.
        rx
    });
    let mut drain_guard = None;
    let age = rules.max_age.map(|age| jittered(age, random_unit()));
    let mut aged = pin!(async {
        match age {
            Some(age) => tokio::time::sleep(age).await,
            None => std::future::pending().await,
        }
    });
    let mut idle = pin!(async {
        match &activity {
            Some(activity) => {
                idle_by_rules(
                    activity,
                    rules.max_idle,
                    rules.idle_after_burst,
                    rules.burst_streams,
                )
                .await
            }
            None => std::future::pending().await,
        }
    });
    let mut going_away: Option<GoingAway> = None;
    let mut grace = pin!(tokio::time::sleep(Duration::MAX / 4));
    let mut grace_armed = false;
    loop {
        let reason = tokio::select! {
            ended = connection.as_mut() => return ended,
            rx = &mut drained, if drain_guard.is_none() => {
                drain_guard = Some(rx);
                GoingAway::Drain
            }
            () = &mut aged, if going_away.is_none() => GoingAway::Age,
            why = &mut idle, if going_away.is_none() => why,
            () = &mut grace, if grace_armed => {
                tracing::debug!(grace = ?rules.age_grace, "connection age grace passed: closing it with its calls");
                return Ok(());
            }
        };
        if going_away.is_none() {
            connection.as_mut().graceful_shutdown();
            going_away = Some(reason);
            if let Some(metrics) = rules.metrics {
                metrics.goaway(match reason {
                    GoingAway::Drain => GoawayReason::ServerShutdown,
                    GoingAway::Age => GoawayReason::MaxConnectionAge,
                    GoingAway::Idle => GoawayReason::MaxConnectionIdle,
                    GoingAway::IdleAfterBurst => GoawayReason::IdleAfterBurst,
                });
            }
        }
        match reason {
            GoingAway::Age => {
                tracing::debug!(?age, "connection reached its age: GOAWAY");
                if let Some(after) = rules.age_grace {
                    grace.as_mut().reset(Instant::now() + after);
                    grace_armed = true;
                }
            }
            GoingAway::Idle => {
                let peak = activity.as_ref().map(|a| a.peak_streams());
                tracing::debug!(max_idle = ?rules.max_idle, ?peak, "connection idle too long: GOAWAY");
            }
            GoingAway::IdleAfterBurst => {
                let peak = activity.as_ref().map(|a| a.peak_streams());
                tracing::debug!(after = ?rules.idle_after_burst, ?peak, "connection idle after a burst of streams: GOAWAY, so its client reconnects small");
            }
            GoingAway::Drain => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given the ends of the random draw and a thousand draws in between,
    /// then a 3 s age always becomes between 2.7 s and 3.3 s, and the
    /// draws do not all land on one value.
    #[test]
    fn jitter_stays_within_ten_percent() {
        let age = Duration::from_secs(3);
        let (low, high) = (age.mul_f64(0.9), age.mul_f64(1.1));
        assert_eq!(jittered(age, 0.0), low);
        assert!(jittered(age, 1.0) <= high);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            let unit = random_unit();
            assert!((0.0..1.0).contains(&unit), "{unit}");
            let j = jittered(age, unit);
            assert!(low <= j && j <= high, "{j:?}");
            seen.insert(j);
        }
        assert!(seen.len() > 900, "{} distinct ages", seen.len());
    }

    /// Given a burst threshold of 3 and an after-burst idle time far below
    /// the plain idle time, a connection that never had 3 streams at once
    /// waits out the plain idle time, and one that had 3 goes sooner, for
    /// the after-burst reason.
    #[tokio::test]
    async fn a_burst_shortens_the_idle_time() {
        let (idle, after_burst) = (Duration::from_millis(300), Duration::from_millis(10));
        let calm = Arc::new(Activity::new(Arc::default()));
        drop((calm.stream_opened(), calm.stream_opened()));
        assert_eq!(calm.peak_streams(), 2);
        let started = Instant::now();
        let why = idle_by_rules(&calm, Some(idle), Some(after_burst), 3).await;
        assert_eq!((why, started.elapsed() >= idle), (GoingAway::Idle, true));

        let busy = Arc::new(Activity::new(Arc::default()));
        let streams: Vec<_> = (0..3).map(|_| busy.stream_opened()).collect();
        drop(streams);
        assert_eq!(busy.peak_streams(), 3);
        let why = idle_by_rules(&busy, Some(idle), Some(after_burst), 3).await;
        assert_eq!(why, GoingAway::IdleAfterBurst);

        // With no plain idle time at all, only the burst's applies.
        let why = idle_by_rules(&busy, None, Some(after_burst), 3).await;
        assert_eq!(why, GoingAway::IdleAfterBurst);
    }

    /// Given an activity with one stream open, when the stream ends, then
    /// the count is back to 0, the idle time starts from that moment (not
    /// from the connection's start), and the idle wait completes.
    #[tokio::test]
    async fn idle_time_starts_when_the_last_stream_ends() {
        let activity = Arc::new(Activity::new(Arc::default()));
        let started = activity.idle_since();
        let guard = activity.stream_opened();
        let second = activity.stream_opened();
        assert_eq!(activity.open_streams(), 2);
        drop(second);
        assert_eq!(activity.idle_since(), started, "one stream is still open");
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(guard);
        assert_eq!(activity.open_streams(), 0);
        assert!(activity.idle_since() > started);

        let waited = tokio::time::timeout(
            Duration::from_secs(5),
            idle_for(&activity, Duration::from_millis(10)),
        );
        waited.await.expect("idle for 10 ms, seen within 5 s");
    }
}
