//! GOAWAY (RFC 9113 §6.8): the one type for the frame, whoever sends or
//! reads it, and the debug data this server puts in it.

use crate::{HEADER_LEN, MAX_WINDOW, Reason, encode_goaway};

/// A GOAWAY: no new streams above `last_stream_id`, `error_code` says why,
/// and `debug_data` says it in words other stacks understand (`too_many_pings`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// The highest stream the sender may have processed.
    pub last_stream_id: u32,
    pub error_code: Reason,
    /// Free-form bytes; gRPC stacks put a reason here, e.g. `too_many_pings`.
    pub debug_data: Vec<u8>,
}

impl GoAway {
    /// The debug data gRPC clients look for (gRFC A8).
    pub const TOO_MANY_PINGS: &'static [u8] = b"too_many_pings";

    /// What this server sends a client whose control frames make no
    /// progress (WINDOW_UPDATEs on closed streams, SETTINGS floods).
    pub const TOO_MANY_CONTROL_FRAMES: &'static [u8] = b"too_many_control_frames";

    /// What this server sends a client whose WINDOW_UPDATEs on open
    /// streams and on the connection outnumber what the DATA it was sent
    /// could call for.
    pub const TOO_MANY_WINDOW_UPDATES: &'static [u8] = b"too_many_window_updates";

    /// What gRPC servers send a client that pings too often.
    pub fn too_many_pings(last_stream_id: u32) -> Self {
        Self::enhance_your_calm(last_stream_id, Self::TOO_MANY_PINGS)
    }

    /// What this server sends past its control-frame budget.
    pub fn too_many_control_frames(last_stream_id: u32) -> Self {
        Self::enhance_your_calm(last_stream_id, Self::TOO_MANY_CONTROL_FRAMES)
    }

    /// What this server sends a connection it closes because a response
    /// on it missed its send deadline.
    pub const SEND_DEADLINE: &'static [u8] = b"send_deadline";

    /// What this server sends a stalled connection it closes to make room
    /// in a full response budget.
    pub const STALLED_HOLDER: &'static [u8] = b"stalled_holder";

    /// What this server sends past its window-update budget.
    pub fn too_many_window_updates(last_stream_id: u32) -> Self {
        Self::enhance_your_calm(last_stream_id, Self::TOO_MANY_WINDOW_UPDATES)
    }

    /// `ENHANCE_YOUR_CALM`, with `debug_data` naming the rule broken.
    pub fn enhance_your_calm(last_stream_id: u32, debug_data: &[u8]) -> Self {
        Self {
            last_stream_id,
            error_code: Reason::ENHANCE_YOUR_CALM,
            debug_data: debug_data.to_vec(),
        }
    }

    pub fn is_too_many_pings(&self) -> bool {
        self.error_code == Reason::ENHANCE_YOUR_CALM && self.debug_data == Self::TOO_MANY_PINGS
    }

    /// Reads a GOAWAY payload (header excluded); `None` if it is too short.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_be_bytes(
                payload.get(at..at + 4)?.try_into().ok()?,
            ))
        };
        Some(Self {
            last_stream_id: word(0)? & MAX_WINDOW,
            error_code: Reason::from(word(4)?),
            debug_data: payload[8..].to_vec(),
        })
    }

    /// The whole frame, header included, ready to write.
    pub fn encode(&self) -> Vec<u8> {
        let mut frame = Vec::with_capacity(HEADER_LEN + 8 + self.debug_data.len());
        encode_goaway(
            &mut frame,
            self.last_stream_id,
            self.error_code,
            &self.debug_data,
        );
        frame
    }

    /// The debug data as text (lossy), for reports.
    pub fn debug_text(&self) -> String {
        String::from_utf8_lossy(&self.debug_data).into_owned()
    }
}
