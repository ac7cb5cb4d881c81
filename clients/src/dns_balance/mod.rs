//! A client-side balancer that re-resolves DNS: what tonic lacks to follow
//! a Kubernetes headless Service as pods come and go.
//!
//! tonic's `Channel::balance_channel` balances over whatever endpoints it
//! is told about, through a channel of `Change::Insert` / `Change::Remove`.
//! This module tells it: it resolves a name, and sends the differences
//! between one answer and the next, keyed by address.
//!
//! - **When**: every [`Knobs::interval`], and soon after a call fails to
//!   reach a server (transport error or UNAVAILABLE), but never sooner than
//!   [`Knobs::min_gap`] after the last resolve.
//! - **An empty answer or an error changes nothing**: the last good set
//!   stays and a warning goes to stderr, as grpc-go does. A DNS hiccup must
//!   not leave the client with no endpoint at all.
//! - **Bounded**: at most [`Knobs::max_endpoints`] endpoints (one connection
//!   each), each resolve within [`Knobs::resolve_timeout`].
//! - **Stops** when the [`DnsBalance`] handle is dropped; the channel keeps
//!   the endpoints it last had.
//!
//! ```no_run
//! # async fn demo() -> Result<(), routing_clients::Error> {
//! use routing_clients::dns_balance::{DnsBalance, DnsName, Knobs};
//! use tonic::transport::Endpoint;
//!
//! let name = DnsName::from_system_conf("dns:///routing-headless.routing.svc.cluster.local:9180")?;
//! let (channel, _balance) = DnsBalance::start(
//!     name,
//!     |addr| Ok(Endpoint::from_shared(format!("http://{addr}"))?),
//!     Knobs::default(),
//! )
//! .await?;
//! // RoutingServiceClient::new(channel) ... keep `_balance` alive as long as the channel.
//! # Ok(()) }
//! ```
//!
//! # Layout
//! - [`resolver`]: the [`Resolve`] trait, and [`DnsName`] over hickory-resolver.
//! - [`changes`]: the next set from an answer, and its inserts and removes.
//! - [`on_failure`]: the channel wrapper that asks for an early re-resolve.

pub mod changes;
pub mod on_failure;
pub mod resolver;

use std::{
    collections::BTreeSet,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use serde::Serialize;
use tokio::{
    sync::{Notify, mpsc::Sender},
    task::JoinHandle,
    time::{Instant, sleep_until, timeout},
};
use tonic::transport::{Channel, Endpoint, channel::Change};

pub use on_failure::ReResolveOnFailure;
pub use resolver::{DnsName, Resolve};

use crate::Error;

/// How often the name is resolved when nothing fails: 10 s. A pod that
/// turns Ready is in the headless Service's DNS answer within about a
/// second, plus CoreDNS's cache (the record's TTL, 5 s by default), so it
/// gets calls within about 16 s at worst, well inside the 35 s the chapter
/// asks. grpc-go's `dns` resolver never polls: it learns of a new pod only
/// when a connection fails (at most every 30 s), so a scale-up without a
/// failure is never seen. The price here is one small DNS query per client
/// per 10 s (one per search domain, unless the name ends with a dot).
pub const RESOLVE_INTERVAL: Duration = Duration::from_secs(10);

/// The least time between two resolves, when failures ask for more: 2 s.
/// A dead pod's calls fail for about this long before its address is
/// checked again; a burst of failing calls costs one query, not one each.
/// grpc-go's floor is 30 s, chosen to spare a shared DNS server; 2 s is
/// still at most 30 queries a minute per client.
pub const MIN_RESOLVE_GAP: Duration = Duration::from_secs(2);

/// The most one resolve may take before it counts as failed: 5 s, the
/// same as hickory's own per-query timeout. A stuck DNS server then
/// delays the next resolve, never the calls.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most endpoints (and so connections) the balancer holds: 64. A
/// headless Service of a Deployment rarely has more; each idle connection
/// costs memory on both sides (docs/costs.md), so a name that answers with
/// hundreds of addresses is cut to 64, the held ones first.
pub const MAX_ENDPOINTS: usize = 64;

/// The balancer's settings. [`Knobs::default`] has the constants above.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    /// Time between resolves when nothing fails. See [`RESOLVE_INTERVAL`].
    pub interval: Duration,
    /// Least time between two resolves. See [`MIN_RESOLVE_GAP`].
    pub min_gap: Duration,
    /// Bound on one resolve. See [`RESOLVE_TIMEOUT`].
    pub resolve_timeout: Duration,
    /// Bound on the endpoints held. See [`MAX_ENDPOINTS`]. The change
    /// channel into tonic holds twice this many changes (a full turnover),
    /// so a resolve's changes are sent without waiting.
    pub max_endpoints: usize,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            interval: RESOLVE_INTERVAL,
            min_gap: MIN_RESOLVE_GAP,
            resolve_timeout: RESOLVE_TIMEOUT,
            max_endpoints: MAX_ENDPOINTS,
        }
    }
}

impl Knobs {
    fn check(&self) -> Result<(), Error> {
        if self.min_gap.is_zero() || self.interval < self.min_gap {
            return Err(format!(
                "the resolve interval ({:?}) must be at least the minimum gap ({:?}), which must not be 0",
                self.interval, self.min_gap
            )
            .into());
        }
        if self.max_endpoints == 0 || self.resolve_timeout.is_zero() {
            return Err("max_endpoints and resolve_timeout must not be 0".into());
        }
        Ok(())
    }
}

/// What the balancer has done so far.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Resolves made, the first included.
    pub resolves: u64,
    /// Of those, the ones a failed call asked for.
    pub early: u64,
    /// Resolves that failed or answered nothing, so changed nothing.
    pub kept: u64,
    /// Endpoints inserted into tonic's balancer, the first set included.
    pub inserted: u64,
    /// Endpoints removed from it.
    pub removed: u64,
    /// The addresses held now.
    pub endpoints: Vec<SocketAddr>,
}

#[derive(Debug, Default)]
struct Counters {
    resolves: AtomicU64,
    early: AtomicU64,
    kept: AtomicU64,
    inserted: AtomicU64,
    removed: AtomicU64,
    /// A std mutex: held only to copy a small set, never across an await.
    held: Mutex<Vec<SocketAddr>>,
}

/// The running balancer. Dropping it stops the resolving task; the channel
/// keeps its endpoints and goes on working with them.
#[derive(Debug)]
pub struct DnsBalance {
    task: JoinHandle<()>,
    wake: Arc<Notify>,
    counters: Arc<Counters>,
}

impl Drop for DnsBalance {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl DnsBalance {
    /// Resolves once (an error or an empty answer is returned: a name that
    /// resolves to nothing at start is a mistake, not a hiccup), then
    /// starts re-resolving in the background. `endpoint_for` makes each
    /// address's endpoint, with the caller's timeouts and settings.
    pub async fn start<R, F>(
        resolver: R,
        endpoint_for: F,
        knobs: Knobs,
    ) -> Result<(ReResolveOnFailure<Channel>, Self), Error>
    where
        R: Resolve,
        F: Fn(SocketAddr) -> Result<Endpoint, Error> + Send + Sync + 'static,
    {
        knobs.check()?;
        let first = match timeout(knobs.resolve_timeout, resolver.resolve()).await {
            Ok(Ok(answer)) if !answer.is_empty() => answer,
            Ok(Ok(_)) => return Err("the name resolved to no address".into()),
            Ok(Err(e)) => return Err(format!("cannot resolve: {e}").into()),
            Err(_) => return Err(format!("no answer within {:?}", knobs.resolve_timeout).into()),
        };
        let (channel, changes) = Channel::balance_channel(knobs.max_endpoints * 2);
        let wake = Arc::new(Notify::new());
        let counters = Arc::new(Counters::default());
        counters.resolves.fetch_add(1, Ordering::Relaxed);
        let mut feed = Feed {
            held: BTreeSet::new(),
            changes,
            endpoint_for,
            counters: Arc::clone(&counters),
            max: knobs.max_endpoints,
        };
        feed.apply(&first).await?;
        let task = tokio::spawn(re_resolve(resolver, feed, Arc::clone(&wake), knobs));
        let channel = ReResolveOnFailure::new(channel, Arc::clone(&wake));
        Ok((
            channel,
            Self {
                task,
                wake,
                counters,
            },
        ))
    }

    /// Asks for a resolve now (grpc-go's `ResolveNow`), still no sooner
    /// than the minimum gap after the last one. The channel does this
    /// itself when a call fails to reach a server.
    pub fn resolve_now(&self) {
        self.wake.notify_one();
    }

    /// The counts so far and the addresses held now.
    pub fn stats(&self) -> Stats {
        let c = &self.counters;
        Stats {
            resolves: c.resolves.load(Ordering::Relaxed),
            early: c.early.load(Ordering::Relaxed),
            kept: c.kept.load(Ordering::Relaxed),
            inserted: c.inserted.load(Ordering::Relaxed),
            removed: c.removed.load(Ordering::Relaxed),
            endpoints: c.held.lock().map(|held| held.clone()).unwrap_or_default(),
        }
    }
}

/// The set tonic's balancer holds, and the way to change it.
struct Feed<F> {
    held: BTreeSet<SocketAddr>,
    changes: Sender<Change<SocketAddr, Endpoint>>,
    endpoint_for: F,
    counters: Arc<Counters>,
    max: usize,
}

impl<F> Feed<F>
where
    F: Fn(SocketAddr) -> Result<Endpoint, Error>,
{
    /// Sends the changes from the held set to `answer`'s. An empty answer
    /// was filtered out before.
    async fn apply(&mut self, answer: &[SocketAddr]) -> Result<(), Error> {
        if answer.len() > self.max {
            tracing::warn!(
                addresses = answer.len(),
                max = self.max,
                "the name has more addresses than max_endpoints; using {}",
                self.max
            );
        }
        let next = changes::next_set(&self.held, answer, self.max);
        let (inserted, removed) = changes::diff(&self.held, &next);
        for addr in &removed {
            self.send(Change::Remove(*addr)).await?;
        }
        for addr in &inserted {
            let endpoint = (self.endpoint_for)(*addr)?;
            self.send(Change::Insert(*addr, endpoint)).await?;
        }
        if !inserted.is_empty() || !removed.is_empty() {
            tracing::info!(?inserted, ?removed, held = next.len(), "endpoints changed");
        }
        let c = &self.counters;
        c.inserted
            .fetch_add(inserted.len() as u64, Ordering::Relaxed);
        c.removed.fetch_add(removed.len() as u64, Ordering::Relaxed);
        if let Ok(mut held) = c.held.lock() {
            *held = next.iter().copied().collect();
        }
        self.held = next;
        Ok(())
    }

    async fn send(&self, change: Change<SocketAddr, Endpoint>) -> Result<(), Error> {
        self.changes
            .send(change)
            .await
            .map_err(|_| "the balanced channel is gone".into())
    }
}

/// The background task: wait for the interval or a failure, resolve, apply.
async fn re_resolve<R, F>(resolver: R, mut feed: Feed<F>, wake: Arc<Notify>, knobs: Knobs)
where
    R: Resolve,
    F: Fn(SocketAddr) -> Result<Endpoint, Error>,
{
    let mut last = Instant::now();
    loop {
        let early = tokio::select! {
            () = sleep_until(last + knobs.interval) => false,
            () = wake.notified() => {
                sleep_until(last + knobs.min_gap).await;
                true
            }
        };
        last = Instant::now();
        let c = &feed.counters;
        c.resolves.fetch_add(1, Ordering::Relaxed);
        if early {
            c.early.fetch_add(1, Ordering::Relaxed);
        }
        let answer = match timeout(knobs.resolve_timeout, resolver.resolve()).await {
            Ok(Ok(answer)) if !answer.is_empty() => answer,
            outcome => {
                let why = match outcome {
                    Ok(Ok(_)) => "no address".to_owned(),
                    Ok(Err(e)) => e.to_string(),
                    Err(_) => format!("no answer within {:?}", knobs.resolve_timeout),
                };
                c.kept.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    held = feed.held.len(),
                    "resolve failed ({why}); keeping the endpoints held"
                );
                continue;
            }
        };
        if let Err(e) = feed.apply(&answer).await {
            // Only when the channel is gone: nothing left to feed.
            tracing::debug!("stopping: {e}");
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_knobs_that_would_spin_or_hold_nothing() {
        let bad = [
            Knobs {
                min_gap: Duration::ZERO,
                ..Knobs::default()
            },
            Knobs {
                interval: Duration::from_secs(1),
                min_gap: Duration::from_secs(2),
                ..Knobs::default()
            },
            Knobs {
                max_endpoints: 0,
                ..Knobs::default()
            },
        ];
        for knobs in bad {
            assert!(knobs.check().is_err(), "{knobs:?} was accepted");
        }
        assert!(Knobs::default().check().is_ok());
    }
}
