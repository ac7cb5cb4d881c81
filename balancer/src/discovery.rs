//! The resolve loop: resolve the name on a jittered interval, and soon
//! after a connection fails or a GOAWAY arrives; start an endpoint for each
//! new address and end the endpoint of each address that left; hand both
//! changes to the picker. An error or an empty answer keeps the last good
//! set.

use std::{collections::BTreeMap, convert::Infallible, net::SocketAddr, sync::Arc};

use tokio::{
    sync::mpsc,
    task::AbortHandle,
    time::{Instant, sleep_until, timeout},
};
use tower::discover::Change;

use crate::{
    backoff::jittered,
    changes,
    knobs::RESOLVE_JITTER,
    load::Measured,
    resolve::{Resolve, ResolveError},
    stats::bump,
    subchannel::{self, Shared},
};

/// What the picker reads: tower's discovery changes.
pub type Changes = mpsc::Receiver<Result<Change<SocketAddr, Measured>, Infallible>>;
type ChangeSender = mpsc::Sender<Result<Change<SocketAddr, Measured>, Infallible>>;

/// Ends an endpoint's task when its address leaves the set.
#[derive(Debug)]
struct Held(AbortHandle);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The addresses held, their tasks, and the way to tell the picker.
#[derive(Debug)]
pub struct Discovery<R> {
    resolver: R,
    shared: Shared,
    held: BTreeMap<SocketAddr, Held>,
    picker: ChangeSender,
}

impl<R: Resolve> Discovery<R> {
    /// The first resolve, which must give addresses: a name that resolves
    /// to nothing at start is a mistake, not a hiccup. Returns the loop to
    /// run and what the picker reads.
    pub async fn first(resolver: R, shared: Shared) -> Result<(Self, Changes), ResolveError> {
        let knobs = Arc::clone(&shared.knobs);
        bump(&shared.counters.resolves);
        let answer = match timeout(knobs.resolve_timeout, resolver.resolve()).await {
            Ok(Ok(answer)) if answer.is_empty() => Err(ResolveError::Empty),
            Ok(answer) => answer,
            Err(_) => Err(ResolveError::Timeout),
        }?;
        // A whole turnover (every held address out, as many in) fits, so a
        // resolve's changes are handed over without waiting.
        let (picker, changes) = mpsc::channel(knobs.max_endpoints * 2);
        let mut discovery = Self {
            resolver,
            shared,
            held: BTreeMap::new(),
            picker,
        };
        discovery.apply(&answer).await;
        Ok((discovery, changes))
    }

    /// Resolves again and again until the picker is gone.
    pub async fn run(mut self) {
        let knobs = Arc::clone(&self.shared.knobs);
        let wake = Arc::clone(&self.shared.resolve_now);
        let mut last = Instant::now();
        loop {
            let early = tokio::select! {
                () = sleep_until(last + jittered(knobs.resolve_interval, RESOLVE_JITTER)) => false,
                () = wake.notified() => {
                    sleep_until(last + knobs.min_resolve_gap).await;
                    true
                }
            };
            last = Instant::now();
            let counters = Arc::clone(&self.shared.counters);
            bump(&counters.resolves);
            if early {
                bump(&counters.early_resolves);
            }
            let answer = match timeout(knobs.resolve_timeout, self.resolver.resolve()).await {
                Ok(Ok(answer)) if answer.is_empty() => Err(ResolveError::Empty),
                Ok(answer) => answer,
                Err(_) => Err(ResolveError::Timeout),
            };
            match answer {
                Ok(answer) => {
                    if !self.apply(&answer).await {
                        return;
                    }
                }
                Err(e) => {
                    bump(match e {
                        ResolveError::NxDomain(_) => &counters.kept_nxdomain,
                        ResolveError::Empty => &counters.kept_empty,
                        ResolveError::Timeout => &counters.kept_timeout,
                        ResolveError::Other(_) => &counters.kept_error,
                    });
                    tracing::warn!(
                        held = self.held.len(),
                        "resolve failed ({e}); keeping the endpoints held"
                    );
                }
            }
        }
    }

    /// Moves the held set to `answer`'s (non-empty). False when the picker
    /// is gone.
    async fn apply(&mut self, answer: &[SocketAddr]) -> bool {
        let max = self.shared.knobs.max_endpoints;
        if answer.len() > max {
            tracing::warn!(
                addresses = answer.len(),
                max,
                "the name has more addresses than max_endpoints; using {max}"
            );
        }
        let held: std::collections::BTreeSet<SocketAddr> = self.held.keys().copied().collect();
        let next = changes::next_set(&held, answer, max);
        let (inserted, removed) = changes::diff(&held, &next);
        for addr in &removed {
            if self.picker.send(Ok(Change::Remove(*addr))).await.is_err() {
                return false;
            }
            self.held.remove(addr);
            self.shared.registry.remove(*addr);
            bump(&self.shared.counters.removed);
        }
        for addr in &inserted {
            let (endpoint, task) = subchannel::start(*addr, self.shared.clone());
            self.held.insert(*addr, Held(task.abort_handle()));
            let measured = Measured::new(endpoint, &self.shared.knobs);
            if self
                .picker
                .send(Ok(Change::Insert(*addr, measured)))
                .await
                .is_err()
            {
                return false;
            }
            bump(&self.shared.counters.inserted);
        }
        if !inserted.is_empty() || !removed.is_empty() {
            tracing::info!(?inserted, ?removed, held = next.len(), "endpoints changed");
        }
        true
    }
}
