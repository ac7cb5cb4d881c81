//! What a connection's budget rules decide about one frame, shared by the
//! control-frame budget ([`crate::connection::control_frames`]) and the
//! window-update budget ([`crate::connection::window_updates`]). The ping
//! floor's verdict adds its strike count ([`crate::connection::ping_floor`]).

/// What to do about one frame a budget counts: go on, or GOAWAY
/// `ENHANCE_YOUR_CALM` with the rule's debug data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlVerdict {
    Fine,
    /// The budget is spent: the rule's GOAWAY (`too_many_control_frames`,
    /// `too_many_window_updates`).
    TooMany,
}
