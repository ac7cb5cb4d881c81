//! What the balancer has done: counters every part adds to, and the
//! snapshot [`crate::Balancer::stats`] returns (serialisable, for a
//! client's JSON line).

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    sync::atomic::{AtomicU64, Ordering},
};

use serde::Serialize;

use crate::state::{Aggregate, Event, State};

/// Counters, added to with relaxed atomics: each is read alone.
#[derive(Debug, Default)]
pub struct Counters {
    pub resolves: AtomicU64,
    pub early_resolves: AtomicU64,
    pub kept_nxdomain: AtomicU64,
    pub kept_empty: AtomicU64,
    pub kept_timeout: AtomicU64,
    pub kept_error: AtomicU64,
    pub inserted: AtomicU64,
    pub removed: AtomicU64,
    pub connects: AtomicU64,
    pub connect_failures: AtomicU64,
    pub goaways: AtomicU64,
    pub closes: AtomicU64,
    pub not_serving: AtomicU64,
    pub calls_not_ready: AtomicU64,
    pub failed_fast: AtomicU64,
    pub queue_full: AtomicU64,
}

/// Adds one.
pub fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

fn read(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

/// What the balancer has done so far, and its endpoints now.
#[derive(Debug, Clone, Serialize)]
pub struct Stats {
    /// Resolves made, the first included.
    pub resolves: u64,
    /// Of those, the ones a failed connection or a GOAWAY asked for.
    pub early_resolves: u64,
    /// Resolves that kept the last good set, by cause: the name does not
    /// exist (NXDOMAIN), it exists with no address, no answer in time, or
    /// any other error.
    pub kept_nxdomain: u64,
    pub kept_empty: u64,
    pub kept_timeout: u64,
    pub kept_error: u64,
    /// Endpoints added to the picker, the first set included, and removed.
    pub inserted: u64,
    pub removed: u64,
    /// Connection attempts, and those that failed (refused, timed out, no
    /// SETTINGS, TLS).
    pub connects: u64,
    pub connect_failures: u64,
    /// Ready connections that received a GOAWAY, and that ended without one.
    pub goaways: u64,
    pub closes: u64,
    /// Times an endpoint's health service said it was not serving (A17).
    pub not_serving: u64,
    /// Calls handed to an endpoint whose state was not `ready` at that
    /// moment. 0 by design: only ready endpoints are picked, and the state
    /// is checked again as the call is handed over.
    pub calls_not_ready: u64,
    /// Calls failed with UNAVAILABLE because every endpoint was failing.
    pub failed_fast: u64,
    /// Calls failed with UNAVAILABLE because the queue was full.
    pub queue_full: u64,
    pub aggregate: Aggregate,
    pub endpoints: BTreeMap<SocketAddr, State>,
    /// The last transitions of the endpoints' states, oldest first
    /// (`state::EVENTS_KEPT` at most).
    pub events: Vec<Event>,
}

impl Counters {
    pub fn snapshot(
        &self,
        aggregate: Aggregate,
        endpoints: BTreeMap<SocketAddr, State>,
        events: Vec<Event>,
    ) -> Stats {
        Stats {
            resolves: read(&self.resolves),
            early_resolves: read(&self.early_resolves),
            kept_nxdomain: read(&self.kept_nxdomain),
            kept_empty: read(&self.kept_empty),
            kept_timeout: read(&self.kept_timeout),
            kept_error: read(&self.kept_error),
            inserted: read(&self.inserted),
            removed: read(&self.removed),
            connects: read(&self.connects),
            connect_failures: read(&self.connect_failures),
            goaways: read(&self.goaways),
            closes: read(&self.closes),
            not_serving: read(&self.not_serving),
            calls_not_ready: read(&self.calls_not_ready),
            failed_fast: read(&self.failed_fast),
            queue_full: read(&self.queue_full),
            aggregate,
            endpoints,
            events,
        }
    }
}
