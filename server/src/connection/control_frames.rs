//! The control-frame budget: frames that make no progress (WINDOW_UPDATE on
//! a stream that is not open, SETTINGS, PRIORITY) past the budget get GOAWAY
//! `ENHANCE_YOUR_CALM` `too_many_control_frames`.

use std::collections::HashSet;

use h2_frames::{FrameHeader, flag, kind};

use crate::connection::verdict::ControlVerdict;
use crate::knobs::CONTROL_FRAMES_PER_STREAM;

/// The control-frame budget ([`crate::knobs::CONTROL_FRAME_BUDGET`]). A
/// frame that makes no progress ([`makes_no_progress`]) spends one; each
/// stream the client opens adds [`CONTROL_FRAMES_PER_STREAM`] back, up to
/// the budget and never above it. The frame that finds nothing left is one
/// too many.
///
/// The allowance grows with real work, not with time, as in Envoy's rule
/// for WINDOW_UPDATEs (allowed: 1 + 2 × (streams opened + 10 × DATA frames
/// sent), in `protocol_constraints.cc`): a client that sends nothing but
/// such frames runs out however slowly it sends them. Unlike Envoy's running
/// total, it cannot be saved up: a connection that has opened a million
/// streams still has at most the budget to spend. h2's own limits do not
/// cover this: `max_local_error_reset_streams` and
/// `max_pending_accept_reset_streams` count resets, and h2 drops a
/// WINDOW_UPDATE on a closed stream without resetting anything. grpc-go
/// does not police it either; it only stops reading while more than 50
/// answers to control frames wait to be written
/// (`maxQueuedTransportResponseFrames`), which bounds memory, not CPU.
#[derive(Debug, Clone)]
pub struct ControlFrameBudget {
    budget: u32,
    /// Frames that make no progress this connection may still send.
    no_progress_frames_left: u32,
}

impl ControlFrameBudget {
    pub fn new(budget: u32) -> Self {
        Self {
            budget,
            no_progress_frames_left: budget,
        }
    }

    /// The client opened a stream: real work, which earns a few frames.
    pub fn on_stream_opened(&mut self) {
        self.no_progress_frames_left = self
            .no_progress_frames_left
            .saturating_add(CONTROL_FRAMES_PER_STREAM)
            .min(self.budget);
    }

    /// A frame that makes no progress arrived.
    pub fn on_no_progress_frame(&mut self) -> ControlVerdict {
        match self.no_progress_frames_left.checked_sub(1) {
            Some(left) => {
                self.no_progress_frames_left = left;
                ControlVerdict::Fine
            }
            None => ControlVerdict::TooMany,
        }
    }
}

/// Whether a frame from the client moves no bytes and starts no call:
/// - a WINDOW_UPDATE on a stream that is not open (closed, refused, never
///   opened): there is nothing on it to send. On an open stream, or on the
///   connection (stream 0), it lets data flow, and is never counted;
/// - a SETTINGS frame (not an ack): the first is the handshake, a few more
///   change windows; a stream of them only costs the server ACKs;
/// - a PRIORITY frame: h2 ignores them, and gRPC clients send none.
pub fn makes_no_progress(header: &FrameHeader, open_streams: &HashSet<u32>) -> bool {
    match header.kind {
        kind::WINDOW_UPDATE => header.stream_id != 0 && !open_streams.contains(&header.stream_id),
        kind::SETTINGS => !header.has(flag::ACK),
        kind::PRIORITY => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: u8, flags: u8, stream_id: u32) -> FrameHeader {
        FrameHeader {
            len: 4,
            kind,
            flags,
            stream_id,
        }
    }

    /// WINDOW_UPDATEs count only on streams that are not open; SETTINGS
    /// count unless they are acks; PRIORITY always; real work never.
    #[test]
    fn only_frames_that_move_nothing_make_no_progress() {
        let open: HashSet<u32> = [1, 5].into();
        let counted = |kind, flags, stream| makes_no_progress(&header(kind, flags, stream), &open);
        // A download's updates: on its open stream and on the connection.
        assert!(!counted(kind::WINDOW_UPDATE, 0, 1));
        assert!(!counted(kind::WINDOW_UPDATE, 0, 0));
        // Closed (3) or never opened (7, 2^31 - 1).
        assert!(counted(kind::WINDOW_UPDATE, 0, 3));
        assert!(counted(kind::WINDOW_UPDATE, 0, 7));
        assert!(counted(kind::WINDOW_UPDATE, 0, 0x7fff_ffff));
        assert!(counted(kind::SETTINGS, 0, 0));
        assert!(!counted(kind::SETTINGS, flag::ACK, 0));
        assert!(counted(kind::PRIORITY, 0, 9));
        for kind in [kind::HEADERS, kind::DATA, kind::RST_STREAM, kind::PING] {
            assert!(!counted(kind, 0, 3), "{}", kind::name(kind));
        }
    }

    /// Given a budget of 10, ten frames that make no progress are fine and
    /// the eleventh is one too many, and stays so.
    #[test]
    fn the_frame_past_the_budget_is_one_too_many() {
        let mut budget = ControlFrameBudget::new(10);
        for i in 0..10 {
            assert_eq!(budget.on_no_progress_frame(), ControlVerdict::Fine, "{i}");
        }
        assert_eq!(budget.on_no_progress_frame(), ControlVerdict::TooMany);
        assert_eq!(budget.on_no_progress_frame(), ControlVerdict::TooMany);
    }

    /// A client that opens streams and sends a few late WINDOW_UPDATEs for
    /// each (the most any stack sends, 4) never runs out: each stream pays
    /// for its own, with room to spare.
    #[test]
    fn streams_pay_for_their_late_window_updates() {
        let mut budget = ControlFrameBudget::new(10);
        for stream in 0..100_000 {
            budget.on_stream_opened();
            for _ in 0..4 {
                assert_eq!(
                    budget.on_no_progress_frame(),
                    ControlVerdict::Fine,
                    "stream {stream}"
                );
            }
        }
    }

    /// The allowance cannot be saved up: after a million streams, a flood
    /// still gets exactly the budget, then the GOAWAY.
    #[test]
    fn the_allowance_is_never_above_the_budget() {
        let mut budget = ControlFrameBudget::new(10);
        for _ in 0..1_000_000 {
            budget.on_stream_opened();
        }
        let fine = (0..100)
            .take_while(|_| budget.on_no_progress_frame() == ControlVerdict::Fine)
            .count();
        assert_eq!(fine, 10);
    }
}
