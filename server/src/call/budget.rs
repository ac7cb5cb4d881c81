//! Server-wide byte budgets: how much memory calls in flight may hold at once.
//!
//! A budget never queues: a call that does not fit is refused at once, so a
//! flood of calls cannot queue without bound behind a slow one. The server
//! keeps two, one for responses being sent ([`crate::knobs::RESPONSE_BUDGET_BYTES`])
//! and one for requests being received ([`crate::knobs::REQUEST_BUDGET_BYTES`]);
//! [`crate::call::response_hold`] charges them.
//!
//! The response budget is also shared fairly between connections
//! ([`ByteBudget::with_connection_share`]):
//! - **a share per connection**: one connection ([`Holder`]) may hold at most
//!   its share ([`crate::knobs::RESPONSE_SHARE_PERCENT`]); past it, its new
//!   calls are refused, however much budget is free;
//! - **room that is draining is waited for**: a response the client has
//!   received keeps its reservation until the server sees the client's
//!   acknowledgement ([`crate::kernel_queue`], at most
//!   [`crate::knobs::KERNEL_QUEUE_POLL`] later), so a call that would fit
//!   once such responses are given back waits up to [`DRAIN_WAIT`] for
//!   them, rather than being refused: a client that asks for its next page
//!   as soon as it has read one is not refused for the one it has read;
//! - **a stalled holder makes room**: when the budget is full and a call
//!   arrives, the connection that holds the most and has made no send
//!   progress for [`crate::knobs::STALLED_HOLDER_AFTER`] is closed (its
//!   [`Closer`]), and the call waits up to [`EVICTION_WAIT`] for the room to
//!   come free. Only if no holder is stalled is the newcomer refused.
//!
//! grpc-go has no budget: it serves everyone and spends the memory (309 MiB
//! under the lock-out attack of issue 14). This server bounds the memory and
//! shares it instead.

use std::{
    sync::{
        Arc, Mutex, OnceLock, Weak,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use crate::call::close::{CloseRule, Closer};

/// How long a call that made a stalled holder close waits for its room: 1 s.
/// Closing takes the connection's task one wake-up to drop its streams, so
/// the room is normally free within milliseconds; past this, the call is
/// refused as if no one had been closed.
pub const EVICTION_WAIT: Duration = Duration::from_secs(1);

/// How often a call waiting for room after an eviction looks again: 5 ms.
const EVICTION_POLL: Duration = Duration::from_millis(5);

/// How long a call waits for room held by responses that are draining
/// (sent, their acknowledgement not seen yet): 250 ms, time for three
/// questions to the kernel about a socket (20, 60 and 140 ms after it
/// starts being waited on: [`crate::knobs::KERNEL_QUEUE_POLL`], doubling
/// while nothing is acknowledged) and the wake-up of the task that gives
/// the room back. A response stuck in a
/// stalled reader's kernel drains no faster by waiting: past this, the
/// call is refused, or a stalled holder is closed, as without it.
pub const DRAIN_WAIT: Duration = Duration::from_millis(250);

/// A number of bytes shared by every call that takes from it.
#[derive(Debug)]
pub struct ByteBudget {
    /// What the budget is for, as messages name it ("response budget").
    name: &'static str,
    limit: usize,
    /// An atomic, not a semaphore: taking never waits, and the hot path is
    /// one compare-and-swap.
    in_use: AtomicUsize,
    /// Of `in_use`, what responses that are draining hold
    /// ([`Reservation::draining`]).
    draining: AtomicUsize,
    /// Most one [`Holder`] may hold at once (`limit` when not shared).
    share: usize,
    /// A holder with no send progress for this long may be closed to make
    /// room (`None`: never).
    stalled_after: Option<Duration>,
    /// Every holder that has reserved, for the (rare) search for a stalled
    /// one; dead entries are pruned as the list grows.
    holders: Mutex<Holders>,
    /// Calls refused because this budget (or a holder's share) was full,
    /// for the metrics: touched only on a refusal.
    refusals: AtomicU64,
}

#[derive(Debug, Default)]
struct Holders {
    list: Vec<Weak<Holder>>,
    /// Prune dead entries when the list reaches this length.
    prune_at: usize,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The holder already has its share.
    Share,
    /// The budget is full (and no stalled holder could make room).
    Full,
}

impl ByteBudget {
    pub fn new(name: &'static str, limit: usize) -> Arc<Self> {
        Self::with_connection_share(name, limit, limit, None)
    }

    /// A budget of which one connection may hold at most `share` bytes, and
    /// where a connection stalled for `stalled_after` is closed when a call
    /// finds the budget full (see the module docs).
    pub fn with_connection_share(
        name: &'static str,
        limit: usize,
        share: usize,
        stalled_after: Option<Duration>,
    ) -> Arc<Self> {
        Arc::new(Self {
            name,
            limit,
            in_use: AtomicUsize::new(0),
            draining: AtomicUsize::new(0),
            share: share.min(limit),
            stalled_after,
            holders: Mutex::new(Holders::default()),
            refusals: AtomicU64::new(0),
        })
    }

    /// Counts a call refused for this budget (the status is the caller's).
    pub fn note_refusal(&self) {
        self.refusals.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls refused so far ([`Self::note_refusal`]).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    /// Takes `bytes` if they fit under the limit. Never waits.
    pub fn try_take(&self, bytes: usize) -> bool {
        self.in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back bytes taken with [`Self::try_take`].
    pub fn give_back(&self, bytes: usize) {
        self.in_use.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Takes `bytes` for as long as the returned [`Reservation`] lives.
    pub fn try_reserve(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        self.try_take(bytes).then(|| Reservation {
            budget: Arc::clone(self),
            bytes,
            holder: None,
            draining: AtomicBool::new(false),
        })
    }

    /// Takes `bytes` for `holder`, within its share. Never waits.
    pub fn try_reserve_for(
        self: &Arc<Self>,
        holder: &Arc<Holder>,
        bytes: usize,
    ) -> Result<Reservation, Refusal> {
        let before = holder
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                held.checked_add(bytes).filter(|total| *total <= self.share)
            })
            // A share as large as the budget is no share: the budget is full.
            .map_err(|_| {
                if self.share < self.limit {
                    Refusal::Share
                } else {
                    Refusal::Full
                }
            })?;
        if !self.try_take(bytes) {
            holder.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Refusal::Full);
        }
        if before == 0 {
            // A holder's stall clock starts when it starts holding.
            holder.progressed();
        }
        if !holder.registered.swap(true, Ordering::AcqRel) {
            self.register(holder);
        }
        Ok(Reservation {
            budget: Arc::clone(self),
            bytes,
            holder: Some(Arc::clone(holder)),
            draining: AtomicBool::new(false),
        })
    }

    /// [`Self::try_reserve_for`], but when the call would fit once the
    /// responses that are draining are given back, waits up to
    /// [`DRAIN_WAIT`] for them; and when the budget is still full, closes
    /// the stalled holder that holds the most (if any, other than `holder`)
    /// and waits up to [`EVICTION_WAIT`] for its room.
    pub async fn reserve_for(
        self: &Arc<Self>,
        holder: &Arc<Holder>,
        bytes: usize,
    ) -> Result<Reservation, Refusal> {
        let mut refused = match self.try_reserve_for(holder, bytes) {
            Err(refusal) => refusal,
            done => return done,
        };
        let give_up = tokio::time::Instant::now() + DRAIN_WAIT;
        while self.fits_once_drained(holder, bytes, refused)
            && tokio::time::Instant::now() < give_up
        {
            tokio::time::sleep(EVICTION_POLL).await;
            refused = match self.try_reserve_for(holder, bytes) {
                Err(refusal) => refusal,
                done => return done,
            };
        }
        if refused == Refusal::Share {
            return Err(refused);
        }
        if !self.close_stalled_holder(holder) {
            return Err(Refusal::Full);
        }
        let give_up = tokio::time::Instant::now() + EVICTION_WAIT;
        loop {
            tokio::time::sleep(EVICTION_POLL).await;
            match self.try_reserve_for(holder, bytes) {
                Err(Refusal::Full) if tokio::time::Instant::now() < give_up => {}
                done => return done,
            }
        }
    }

    /// Closes the holder, other than `except`, that holds the most of this
    /// budget among those with no send progress for `stalled_after`.
    /// Returns false if there is none.
    fn close_stalled_holder(&self, except: &Arc<Holder>) -> bool {
        let Some(stalled_after) = self.stalled_after else {
            return false;
        };
        let now = now_ms();
        let stalled_ms = u64::try_from(stalled_after.as_millis()).unwrap_or(u64::MAX);
        let holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        let victim = holders
            .list
            .iter()
            .filter_map(Weak::upgrade)
            .filter(|h| !Arc::ptr_eq(h, except) && !h.closed.load(Ordering::Acquire))
            .filter(|h| {
                now.saturating_sub(h.last_progress_ms.load(Ordering::Acquire)) >= stalled_ms
            })
            .filter(|h| h.held() > 0)
            .max_by_key(|h| h.held());
        drop(holders);
        let Some(victim) = victim else {
            return false;
        };
        tracing::warn!(
            held = %mib(victim.held()),
            stalled_secs = stalled_after.as_secs(),
            "{} full: closing the connection that holds the most and has sent nothing for the stall time",
            self.describe()
        );
        victim.closed.store(true, Ordering::Release);
        victim.closer.close(CloseRule::StalledHolder);
        true
    }

    /// Whether a call refused for `refusal` would fit once every response
    /// that is draining has been given back.
    fn fits_once_drained(&self, holder: &Holder, bytes: usize, refusal: Refusal) -> bool {
        let (held, draining, limit) = match refusal {
            Refusal::Share => (holder.held(), holder.draining(), self.share),
            Refusal::Full => (
                self.in_use(),
                self.draining.load(Ordering::Acquire),
                self.limit,
            ),
        };
        draining > 0 && held.saturating_sub(draining).saturating_add(bytes) <= limit
    }

    fn register(&self, holder: &Arc<Holder>) {
        let mut holders = self.holders.lock().unwrap_or_else(|e| e.into_inner());
        if holders.list.len() >= holders.prune_at {
            holders.list.retain(|h| h.strong_count() > 0);
            holders.prune_at = (2 * holders.list.len()).max(64);
        }
        holders.list.push(Arc::downgrade(holder));
    }

    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// "response budget (128 MiB)": for status messages and logs.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, mib(self.limit))
    }

    /// "per-connection share of the response budget (32 MiB)".
    pub fn describe_share(&self) -> String {
        format!(
            "per-connection share of the {} ({})",
            self.name,
            mib(self.share)
        )
    }
}

/// One connection's account with the response budget: how much its
/// responses hold, when they last made send progress, and how to close it.
#[derive(Debug)]
pub struct Holder {
    held: AtomicUsize,
    /// Of `held`, what responses that are draining hold.
    draining: AtomicUsize,
    /// [`now_ms`] when a response of this connection last sent a slice
    /// ([`Reservation::progressed`]), or when it started holding.
    last_progress_ms: AtomicU64,
    /// In its budget's list of holders.
    registered: AtomicBool,
    /// Already closed to make room: not chosen twice.
    closed: AtomicBool,
    closer: Closer,
}

impl Holder {
    pub fn new(closer: Closer) -> Arc<Self> {
        Arc::new(Self {
            held: AtomicUsize::new(0),
            draining: AtomicUsize::new(0),
            last_progress_ms: AtomicU64::new(now_ms()),
            registered: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            closer,
        })
    }

    /// Bytes this connection holds now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    fn draining(&self) -> usize {
        self.draining.load(Ordering::Acquire)
    }

    fn progressed(&self) {
        self.last_progress_ms.store(now_ms(), Ordering::Release);
    }
}

/// Milliseconds since the first call: a cheap monotonic clock for
/// [`Holder`]s, which an atomic can hold.
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    let elapsed = EPOCH.get_or_init(Instant::now).elapsed();
    u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX)
}

/// Bytes taken from a [`ByteBudget`], given back when this is dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ByteBudget>,
    bytes: usize,
    holder: Option<Arc<Holder>>,
    /// Marked by [`Self::draining`].
    draining: AtomicBool,
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The response this pays for sent a slice: its holder is not stalled.
    pub fn progressed(&self) {
        if let Some(holder) = &self.holder {
            holder.progressed();
        }
    }

    /// The response this pays for has been handed to the kernel, and waits
    /// only for the client's acknowledgement: a call that would fit
    /// without it may wait for it ([`ByteBudget::reserve_for`]).
    pub fn draining(&self) {
        if self.draining.swap(true, Ordering::AcqRel) {
            return;
        }
        self.budget.draining.fetch_add(self.bytes, Ordering::AcqRel);
        if let Some(holder) = &self.holder {
            holder.draining.fetch_add(self.bytes, Ordering::AcqRel);
        }
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if *self.draining.get_mut() {
            self.budget.draining.fetch_sub(self.bytes, Ordering::AcqRel);
            if let Some(holder) = &self.holder {
                holder.draining.fetch_sub(self.bytes, Ordering::AcqRel);
            }
        }
        self.budget.give_back(self.bytes);
        if let Some(holder) = &self.holder {
            holder.held.fetch_sub(self.bytes, Ordering::AcqRel);
        }
    }
}

/// `134217728` → "128 MiB"; other sizes to one decimal.
pub fn mib(bytes: usize) -> String {
    let mib = bytes as f64 / (1024.0 * 1024.0);
    if mib.fract() == 0.0 {
        format!("{mib:.0} MiB")
    } else {
        format!("{mib:.1} MiB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a 100-byte budget, reservations fit until the next would not;
    /// that one is refused at once, and dropping one makes room again.
    #[test]
    fn reservations_fit_until_full_and_free_on_drop() {
        let budget = ByteBudget::new("test budget", 100);
        let a = budget.try_reserve(60).expect("60 of 100 fit");
        let b = budget.try_reserve(40).expect("100 of 100 fit");
        assert_eq!(budget.in_use(), 100);
        assert!(budget.try_reserve(1).is_none(), "101 of 100 must not fit");
        drop(a);
        assert_eq!(budget.in_use(), 40);
        let c = budget.try_reserve(60).expect("room again");
        assert_eq!(c.bytes(), 60);
        drop((b, c));
        assert_eq!(budget.in_use(), 0);
    }

    #[test]
    fn take_and_give_back_balance() {
        let budget = ByteBudget::new("test budget", 10);
        assert!(budget.try_take(10));
        assert!(!budget.try_take(1));
        budget.give_back(4);
        assert!(budget.try_take(4));
        assert!(!budget.try_take(usize::MAX), "no overflow past the limit");
    }

    fn holder() -> (Arc<Holder>, Arc<tokio::sync::Notify>) {
        let notify = Arc::new(tokio::sync::Notify::new());
        (Holder::new(Closer::new(Arc::clone(&notify))), notify)
    }

    /// Given a 100-byte budget with a 40-byte share per connection, one
    /// connection is refused past its share although 60 bytes are free,
    /// while another connection still gets its own share.
    #[test]
    fn a_connection_is_held_to_its_share() {
        let budget = ByteBudget::with_connection_share("test budget", 100, 40, None);
        let ((greedy, _), (other, _)) = (holder(), holder());
        let a = budget.try_reserve_for(&greedy, 30).expect("30 of 40");
        assert_eq!(
            budget.try_reserve_for(&greedy, 11).err(),
            Some(Refusal::Share)
        );
        let b = budget.try_reserve_for(&other, 40).expect("its own share");
        assert_eq!((greedy.held(), other.held(), budget.in_use()), (30, 40, 70));
        drop((a, b));
        assert_eq!((greedy.held(), other.held(), budget.in_use()), (0, 0, 0));
        assert_eq!(
            budget.describe_share(),
            "per-connection share of the test budget (0.0 MiB)"
        );
    }

    /// Given a full budget held by a stalled connection and by a larger one
    /// that makes progress, when a third connection asks, then the stalled
    /// one is closed (not the larger one, which is sending, nor the asker),
    /// and the asker gets its room once the stalled one's reservation is
    /// dropped.
    #[tokio::test]
    async fn a_stalled_holder_is_closed_to_make_room() {
        let stall = Duration::from_millis(50);
        let budget = ByteBudget::with_connection_share("test budget", 100, 60, Some(stall));
        let ((stalled, stalled_closed), (busy, busy_closed), (newcomer, _)) =
            (holder(), holder(), holder());
        let held_by_stalled = budget.try_reserve_for(&stalled, 40).expect("fits");
        let held_by_busy = budget.try_reserve_for(&busy, 60).expect("fits");
        tokio::time::sleep(stall * 2).await;
        // `busy` sends all the time: its last progress is always recent.
        held_by_busy.progressed();
        let done = Arc::new(AtomicBool::new(false));
        let busy_until = Arc::clone(&done);
        let keep_busy = tokio::spawn(async move {
            while !busy_until.load(Ordering::Acquire) {
                held_by_busy.progressed();
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            held_by_busy
        });
        // The closed connection drops its streams, and so its reservation.
        let dropper = tokio::spawn(async move {
            stalled_closed.notified().await;
            drop(held_by_stalled);
        });
        let got = budget.reserve_for(&newcomer, 40).await.expect("room made");
        assert_eq!((got.bytes(), budget.in_use()), (40, 100));
        done.store(true, Ordering::Release);
        dropper.await.expect("the stalled holder was closed");
        let _busy = keep_busy.await.expect("busy kept its reservation");
        let busy_was_closed =
            tokio::time::timeout(Duration::from_millis(50), busy_closed.notified()).await;
        assert!(busy_was_closed.is_err(), "the busy holder was closed");
    }

    /// Given a connection whose 60-byte response is draining (sent, its
    /// acknowledgement not seen yet), when it asks for 60 more with a
    /// 100-byte share, then it waits, and gets them once that response is
    /// given back; the same request while the first is not draining (still
    /// in h2) is refused at once.
    #[tokio::test]
    async fn a_call_waits_for_room_that_is_draining() {
        let budget = ByteBudget::with_connection_share("test budget", 1000, 100, None);
        let (reader, _) = holder();
        let sent = budget.try_reserve_for(&reader, 60).expect("fits");
        assert_eq!(
            budget.reserve_for(&reader, 60).await.err(),
            Some(Refusal::Share),
            "nothing is draining: refused at once"
        );

        sent.draining();
        let given_back = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            drop(sent);
        });
        let next = budget.reserve_for(&reader, 60).await.expect("room drained");
        given_back.await.expect("given back");
        assert_eq!(
            (next.bytes(), reader.held(), reader.draining()),
            (60, 60, 0)
        );
        assert_eq!(budget.draining.load(Ordering::Acquire), 0);
    }

    /// With no holder stalled long enough, a full budget refuses at once.
    #[tokio::test]
    async fn no_stalled_holder_means_refused() {
        let budget = ByteBudget::with_connection_share(
            "test budget",
            100,
            100,
            Some(Duration::from_secs(3600)),
        );
        let ((a, _), (b, _)) = (holder(), holder());
        let _held = budget.try_reserve_for(&a, 100).expect("fits");
        assert_eq!(budget.reserve_for(&b, 1).await.err(), Some(Refusal::Full));
        assert_eq!(b.held(), 0, "a refused call holds nothing");
    }

    #[test]
    fn sizes_read_in_mib() {
        assert_eq!(mib(128 * 1024 * 1024), "128 MiB");
        assert_eq!(mib(1024 * 1024 + 512 * 1024), "1.5 MiB");
        assert_eq!(
            ByteBudget::new("response budget", 64 * 1024 * 1024).describe(),
            "response budget (64 MiB)"
        );
    }
}
