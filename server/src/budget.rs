//! Server-wide byte budgets: how much memory calls in flight may hold at once.
//!
//! A budget never waits: a call that does not fit is refused at once, so a
//! flood of calls cannot queue without bound behind a slow one. The server
//! keeps two, one for responses being sent ([`crate::knobs::RESPONSE_BUDGET_BYTES`])
//! and one for requests being received ([`crate::knobs::REQUEST_BUDGET_BYTES`]);
//! [`crate::edge`] charges them.

use std::sync::{
    Arc,
    atomic::{AtomicUsize, Ordering},
};

/// A number of bytes shared by every call that takes from it.
#[derive(Debug)]
pub struct ByteBudget {
    /// What the budget is for, as messages name it ("response budget").
    name: &'static str,
    limit: usize,
    /// An atomic, not a semaphore: taking never waits, and the hot path is
    /// one compare-and-swap.
    in_use: AtomicUsize,
}

impl ByteBudget {
    pub fn new(name: &'static str, limit: usize) -> Arc<Self> {
        Arc::new(Self {
            name,
            limit,
            in_use: AtomicUsize::new(0),
        })
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
        })
    }

    pub fn in_use(&self) -> usize {
        self.in_use.load(Ordering::Acquire)
    }

    /// "response budget (128 MiB)": for status messages and logs.
    pub fn describe(&self) -> String {
        format!("{} ({})", self.name, mib(self.limit))
    }
}

/// Bytes taken from a [`ByteBudget`], given back when this is dropped.
#[derive(Debug)]
pub struct Reservation {
    budget: Arc<ByteBudget>,
    bytes: usize,
}

impl Reservation {
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.budget.give_back(self.bytes);
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
