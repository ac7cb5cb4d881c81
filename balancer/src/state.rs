//! An endpoint's state, as grpc-go's subchannel has it, and the balancer's
//! state that follows from all of them.
//!
//! ```text
//!   Connecting ──SETTINGS arrived──▶ Ready ──GOAWAY, closed, keepalive──▶ Connecting
//!       │                              │
//!   refused, timed out          health NOT_SERVING (A17)
//!       ▼                              ▼
//!    Failing ──backoff──▶ Connecting  NotServing ──SERVING──▶ Ready
//! ```
//!
//! Only `Ready` is picked. The balancer as a whole ([`Aggregate`]) is
//! ready when one endpoint is, connecting when none is but one is trying,
//! and failing when every endpoint is failing or not serving: "the
//! aggregated connectivity state" of grpc-go's base balancer.

use std::{
    collections::{BTreeMap, VecDeque},
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::{SystemTime, UNIX_EPOCH},
};

use serde::Serialize;
use tokio::sync::watch;

/// One endpoint's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    /// Dialling, or waiting for the server's SETTINGS. Not picked.
    Connecting,
    /// The HTTP/2 handshake completed and no GOAWAY has come: picked.
    Ready,
    /// The last attempt failed; waiting out the backoff. Not picked.
    Failing,
    /// Connected, but its health service says NOT_SERVING (A17). Not picked.
    NotServing,
}

impl State {
    /// As in the JSON: `connecting`, `ready`, `failing`, `not_serving`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Connecting => "connecting",
            Self::Ready => "ready",
            Self::Failing => "failing",
            Self::NotServing => "not_serving",
        }
    }
}

/// The balancer's state, from all of its endpoints'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// At least one endpoint is ready: calls are sent.
    Ready,
    /// None is ready, one at least is connecting: calls wait.
    Connecting,
    /// Every endpoint is failing or not serving: calls fail with
    /// UNAVAILABLE, unless they asked to wait for ready.
    Failing,
}

/// "If any subchannel is READY, the channel is READY; else if any is
/// CONNECTING (or IDLE), CONNECTING; else TRANSIENT_FAILURE." grpc-go's
/// `balancer/base` (ConnectivityStateEvaluator).
pub fn aggregate<'a>(states: impl IntoIterator<Item = &'a State>) -> Aggregate {
    let mut connecting = false;
    for state in states {
        match state {
            State::Ready => return Aggregate::Ready,
            State::Connecting => connecting = true,
            State::Failing | State::NotServing => {}
        }
    }
    if connecting {
        Aggregate::Connecting
    } else {
        Aggregate::Failing
    }
}

/// Transitions kept for [`crate::Stats::events`]: the last 256, a few
/// rollouts' worth at three pods, a few KiB.
pub const EVENTS_KEPT: usize = 256;

/// One endpoint's change of state, when it happened.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Seconds since the Unix epoch, to the microsecond.
    pub at_unix_s: f64,
    pub addr: SocketAddr,
    /// The new state, or `removed` when the address left the answer.
    pub to: &'static str,
}

/// Every endpoint's state in one place, the aggregate published to whoever
/// waits on it (the call queue), and the last transitions.
#[derive(Debug, Clone)]
pub struct Registry {
    /// A std mutex: held only to update or copy a small map, never across
    /// an await.
    states: Arc<Mutex<BTreeMap<SocketAddr, State>>>,
    aggregate: watch::Sender<Aggregate>,
    events: Arc<Mutex<VecDeque<Event>>>,
}

impl Default for Registry {
    fn default() -> Self {
        Self {
            states: Arc::default(),
            events: Arc::default(),
            // No endpoint yet: the first ones are connecting.
            aggregate: watch::Sender::new(Aggregate::Connecting),
        }
    }
}

impl Registry {
    /// Registers a new endpoint.
    pub fn insert(&self, addr: SocketAddr, state: State) {
        self.update(addr, state.name(), |states| {
            states.insert(addr, state) != Some(state)
        });
    }

    /// A registered endpoint's new state. An address no longer registered
    /// is left out: its task, ended when the address left the answer, may
    /// still publish once before it stops.
    pub fn set(&self, addr: SocketAddr, state: State) {
        self.update(addr, state.name(), |states| match states.get_mut(&addr) {
            Some(now) if *now != state => {
                *now = state;
                true
            }
            _ => false,
        });
    }

    pub fn remove(&self, addr: SocketAddr) {
        self.update(addr, "removed", |states| states.remove(&addr).is_some());
    }

    /// Applies `change`, which says whether it changed anything; a change
    /// is logged as an [`Event`] and may change the aggregate.
    fn update(
        &self,
        addr: SocketAddr,
        to: &'static str,
        change: impl FnOnce(&mut BTreeMap<SocketAddr, State>) -> bool,
    ) {
        let Ok(mut states) = self.states.lock() else {
            return;
        };
        if !change(&mut states) {
            return;
        }
        if let Ok(mut events) = self.events.lock() {
            if events.len() == EVENTS_KEPT {
                events.pop_front();
            }
            let at_unix_s = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| (d.as_secs_f64() * 1e6).round() / 1e6);
            events.push_back(Event {
                at_unix_s,
                addr,
                to,
            });
        }
        // An empty set keeps the last aggregate: the resolver never applies
        // an empty answer, so this happens only while endpoints are swapped.
        if !states.is_empty() {
            let next = aggregate(states.values());
            self.aggregate.send_if_modified(|now| {
                let changed = *now != next;
                *now = next;
                changed
            });
        }
    }

    /// The last [`EVENTS_KEPT`] transitions, oldest first.
    pub fn events(&self) -> Vec<Event> {
        self.events
            .lock()
            .map(|e| e.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Each endpoint's state now.
    pub fn snapshot(&self) -> BTreeMap<SocketAddr, State> {
        self.states.lock().map(|s| s.clone()).unwrap_or_default()
    }

    pub fn watch(&self) -> watch::Receiver<Aggregate> {
        self.aggregate.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_ready_endpoint_makes_the_balancer_ready() {
        use State::*;
        assert_eq!(aggregate(&[Failing, Ready, Connecting]), Aggregate::Ready);
        assert_eq!(aggregate(&[Failing, Connecting]), Aggregate::Connecting);
        assert_eq!(aggregate(&[Failing, NotServing]), Aggregate::Failing);
    }

    #[test]
    fn the_registry_publishes_each_change_of_the_aggregate() {
        let registry = Registry::default();
        let seen = registry.watch();
        let (a, b) = (
            SocketAddr::from(([127, 0, 0, 1], 1)),
            SocketAddr::from(([127, 0, 0, 1], 2)),
        );
        registry.insert(a, State::Failing);
        registry.insert(b, State::Failing);
        assert_eq!(*seen.borrow(), Aggregate::Failing);
        registry.set(b, State::Ready);
        assert_eq!(*seen.borrow(), Aggregate::Ready);
        registry.remove(b);
        assert_eq!(*seen.borrow(), Aggregate::Failing);
        // The same state twice is one transition; a removed address's
        // late news is left out.
        registry.set(a, State::Failing);
        registry.set(b, State::Ready);
        let log: Vec<_> = registry.events().iter().map(|e| (e.addr, e.to)).collect();
        assert_eq!(
            log,
            [(a, "failing"), (b, "failing"), (b, "ready"), (b, "removed")]
        );
    }
}
