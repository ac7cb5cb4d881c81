//! How a per-call guard closes the connection its call is on: [`Closer`],
//! and [`CloseRule`], the rule its GOAWAY names.
//!
//! A leaf: the response budget ([`crate::call::budget`]) and the send
//! deadline ([`crate::call::response_hold`]) close a connection with it, and
//! the connection ([`crate::connection::watched::Connection`]) reads why, so it lives
//! below all three.

use std::sync::{Arc, OnceLock};

use h2_frames::GoAway;

use crate::metrics::connection::GoawayReason;
use tokio::sync::Notify;

/// Closes one connection from outside its task, e.g. when a response on it
/// missed its send deadline.
#[derive(Debug, Clone)]
pub struct Closer {
    notify: Arc<Notify>,
    /// Why, set by the first [`Closer::close`].
    rule: Arc<OnceLock<CloseRule>>,
}

/// Why a connection is closed from outside its task: the rule its GOAWAY
/// names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseRule {
    /// A response on it was not acknowledged within the send deadline.
    SendDeadline,
    /// The response budget is full, and this connection held the most of
    /// it with no send progress for the stall time.
    StalledHolder,
}

impl CloseRule {
    /// The GOAWAY's debug data.
    pub fn debug_data(self) -> &'static [u8] {
        match self {
            Self::SendDeadline => GoAway::SEND_DEADLINE,
            Self::StalledHolder => GoAway::STALLED_HOLDER,
        }
    }
}

impl From<CloseRule> for GoawayReason {
    fn from(rule: CloseRule) -> Self {
        match rule {
            CloseRule::SendDeadline => Self::SendDeadline,
            CloseRule::StalledHolder => Self::StalledHolder,
        }
    }
}

impl Closer {
    /// A closer that wakes `notify` (the connection's own, or a test's).
    pub(crate) fn new(notify: Arc<Notify>) -> Self {
        Self {
            notify,
            rule: Arc::new(OnceLock::new()),
        }
    }

    /// The connection sends GOAWAY `ENHANCE_YOUR_CALM` naming `rule` at its
    /// next frame boundary, then ends, and hyper drops it with every stream
    /// on it; if the GOAWAY cannot be written within
    /// [`crate::knobs::GOAWAY_WRITE_GRACE`], it fails its next read or write without
    /// one. It is woken if it is waiting. Only the first call's rule counts.
    pub fn close(&self, rule: CloseRule) {
        let _ = self.rule.set(rule);
        self.notify.notify_one();
    }

    /// Why the connection was closed ([`CloseRule::SendDeadline`] if no
    /// rule was set).
    pub(crate) fn rule(&self) -> CloseRule {
        self.rule.get().copied().unwrap_or(CloseRule::SendDeadline)
    }
}
