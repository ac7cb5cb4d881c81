//! The metrics listener's connection slots, and which connection gives its
//! slot up when a new one arrives and every slot is taken.
//!
//! The rule is the one small HTTP servers keep when they run out of
//! connections (nginx's `reset_timedout_connection` and its reuse of idle
//! keep-alive connections, Go's `http.Server` closing idle connections
//! first): a connection that is *answering* (its request is complete and
//! its response is being written) keeps its slot; a connection that is
//! *waiting* (half a request, or a keep-alive between two requests) may be
//! closed for a newcomer, the one that has waited longest first. So idle
//! sockets cannot keep a scrape out: each new connection closes one of
//! them. Only when every slot is answering is the newcomer refused. A
//! newcomer whose request is already in its socket counts as answering at
//! once, before its task has run.
//!
//! No socket here: [`Slots`] is a table of at most `capacity` entries, so it
//! is tested on its own.

use std::{
    collections::VecDeque,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
};

use tokio::sync::Notify;

/// The slots, in the order their connections arrived (oldest first).
#[derive(Debug)]
pub struct Slots {
    capacity: usize,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next_id: u64,
    open: VecDeque<Entry>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    answering: Arc<AtomicBool>,
    close: Arc<Notify>,
}

/// What [`Slots::admit`] decided for a new connection.
#[derive(Debug)]
pub enum Admission {
    /// A free slot.
    Admitted(Slot),
    /// Every slot was taken: the connection that had waited longest for a
    /// request was told to close, and its slot is this one's.
    AdmittedByClosingIdle(Slot),
    /// Every slot is answering a request: the new connection is refused.
    Full,
}

/// One connection's slot: given back when dropped.
#[derive(Debug)]
pub struct Slot {
    slots: Arc<Slots>,
    id: u64,
    answering: Arc<AtomicBool>,
    /// Notified when a newcomer takes this slot: the connection must close.
    pub close: Arc<Notify>,
}

impl Slots {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity,
            table: Mutex::new(Table::default()),
        })
    }

    /// A slot for a new connection (see [`Admission`]). With
    /// `request_arrived` (its whole request head is in its socket already),
    /// it counts as answering from the start, so no later newcomer closes it
    /// before its task has read that request: under a flood of reconnecting
    /// idle sockets, a scrape's task may run only after many more accepts.
    pub fn admit(self: &Arc<Self>, request_arrived: bool) -> Admission {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        let mut closed_idle = false;
        if table.open.len() >= self.capacity {
            // Rule: the oldest connection waiting for a request gives way.
            let Some(oldest_waiting) = table
                .open
                .iter()
                .position(|e| !e.answering.load(Ordering::Acquire))
            else {
                return Admission::Full;
            };
            if let Some(entry) = table.open.remove(oldest_waiting) {
                entry.close.notify_one();
            }
            closed_idle = true;
        }
        let id = table.next_id;
        table.next_id += 1;
        let slot = Slot {
            slots: Arc::clone(self),
            id,
            answering: Arc::new(AtomicBool::new(request_arrived)),
            close: Arc::new(Notify::new()),
        };
        table.open.push_back(Entry {
            id,
            answering: Arc::clone(&slot.answering),
            close: Arc::clone(&slot.close),
        });
        if closed_idle {
            Admission::AdmittedByClosingIdle(slot)
        } else {
            Admission::Admitted(slot)
        }
    }

    /// Connections holding a slot.
    pub fn open(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .open
            .len()
    }
}

#[cfg(test)]
impl Slots {
    /// The ids holding a slot, oldest first.
    fn ids(&self) -> Vec<u64> {
        let table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        table.open.iter().map(|e| e.id).collect()
    }
}

impl Slot {
    /// A handle that marks this slot answering, for the connection's service.
    pub fn marker(&self) -> AnsweringMarker {
        AnsweringMarker(Arc::clone(&self.answering))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Already gone if a newcomer took this slot.
        let mut table = self
            .slots
            .table
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        table.open.retain(|e| e.id != self.id);
    }
}

/// Marks a slot answering (see [`Slot::marker`]); cheap to clone.
#[derive(Debug, Clone)]
pub struct AnsweringMarker(Arc<AtomicBool>);

impl AnsweringMarker {
    /// Marks the connection answering until the returned guard is dropped
    /// (hyper drops the response body once it has written it).
    pub fn answering(&self) -> Answering {
        self.0.store(true, Ordering::Release);
        Answering(Arc::clone(&self.0))
    }
}

/// While alive, its connection is answering and keeps its slot.
#[derive(Debug)]
pub struct Answering(Arc<AtomicBool>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(admission: Admission) -> Slot {
        match admission {
            Admission::Admitted(slot) | Admission::AdmittedByClosingIdle(slot) => slot,
            Admission::Full => panic!("refused"),
        }
    }

    /// Given every slot taken by waiting connections, when one more
    /// arrives, then the oldest is told to close and the newcomer is in.
    #[tokio::test]
    async fn a_newcomer_closes_the_oldest_waiting_connection() {
        let slots = Slots::new(2);
        let oldest = slot(slots.admit(false));
        let second = slot(slots.admit(false));
        let third = slots.admit(false);
        assert!(matches!(third, Admission::AdmittedByClosingIdle(_)));
        // The oldest was told (a permit is stored), the second was not.
        tokio::time::timeout(std::time::Duration::from_secs(1), oldest.close.notified())
            .await
            .expect("the oldest is told to close");
        assert_eq!(slots.open(), 2);
        drop(oldest); // its task ends: the table is unchanged
        assert_eq!(slots.open(), 2);
        drop((second, third));
        assert_eq!(slots.open(), 0);
    }

    /// Given a newcomer whose request is already in its socket, then it is
    /// not closed for the next newcomers, which close the waiting ones; once
    /// it has answered (the guard dropped), it may be closed like any other.
    #[test]
    fn a_newcomer_whose_request_arrived_keeps_its_slot() {
        let slots = Slots::new(2);
        let ready = slot(slots.admit(true));
        let _waiting = slot(slots.admit(false));
        let mut newcomers = Vec::new();
        for _ in 0..2 {
            let admission = slots.admit(false);
            assert!(matches!(admission, Admission::AdmittedByClosingIdle(_)));
            newcomers.push(slot(admission));
        }
        assert!(slots.ids().contains(&ready.id), "{:?}", slots.ids());
        drop(ready.marker().answering()); // hyper answered it
        let _next = slots.admit(false);
        assert!(!slots.ids().contains(&ready.id), "{:?}", slots.ids());
    }

    /// Given one slot answering and one waiting, the waiting one gives way
    /// even though it is younger; given both answering, the newcomer is
    /// refused; once an answer is written, its slot may be taken again.
    #[test]
    fn answering_connections_keep_their_slots() {
        let slots = Slots::new(2);
        let answering = slot(slots.admit(false));
        let busy = answering.marker().answering();
        let _waiting = slot(slots.admit(false));
        let newcomer = slot(slots.admit(false));
        let _also_busy = newcomer.marker().answering();
        assert!(matches!(slots.admit(false), Admission::Full));
        drop(busy);
        assert!(matches!(
            slots.admit(false),
            Admission::AdmittedByClosingIdle(_)
        ));
    }
}
