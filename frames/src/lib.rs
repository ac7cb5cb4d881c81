//! HTTP/2 framing as this workspace speaks it (RFC 9113 §3.4, §4 and §6):
//! the 24-byte client preface, then frames that each start with a 9-byte
//! header (length, type, flags, stream id). One vocabulary for every crate
//! that looks at frames: the server's connection policies, the clients'
//! counting connector, and the harness's raw HTTP/2 client.
//!
//! Error codes are h2's [`Reason`] (re-exported here), so a GOAWAY read off
//! the wire and an error h2 reports name their code the same way
//! ([`reason_name`]).
//!
//! # Layout
//! - this file: the preface, the frame types, flags and SETTINGS
//!   identifiers, the 9-byte [`FrameHeader`], and error-code names.
//! - [`tracker`]: [`FrameTracker`], which follows one direction of a
//!   connection across reads split anywhere, reports each frame as it
//!   completes and skips payloads by arithmetic, so watching costs nothing
//!   per byte (the server's policies, the clients' connector).
//! - [`decode`]: [`FrameDecoder`], which reassembles whole frames from reads
//!   split anywhere and keeps their payloads ([`DecodedFrame`]), for a
//!   client that must read what it is sent (the harness).
//! - [`payload`]: the payloads both read: SETTINGS entries and a
//!   WINDOW_UPDATE increment.
//! - [`goaway`]: [`GoAway`], parsed and encoded, with the debug data this
//!   server sends (`too_many_pings`, ...).
//! - [`encode`]: one encoder family, every frame type, into any buffer.
//!
//! Pure code with no I/O, so every rule is unit-tested on split reads.

pub mod decode;
pub mod encode;
pub mod goaway;
pub mod payload;
pub mod tracker;

pub use decode::{DecodedFrame, FrameDecoder, MalformedFrame};
pub use encode::{
    encode_data, encode_frame, encode_goaway, encode_headers, encode_into, encode_ping,
    encode_rst_stream, encode_settings, encode_settings_ack, encode_window_update,
};
pub use goaway::GoAway;
/// HTTP/2 error codes (RFC 9113 §7), as h2 names them: the workspace's one
/// table of error codes.
pub use h2::Reason;
pub use payload::{settings, window_increment};
pub use tracker::{Frame, FrameTracker};

/// What every HTTP/2 client sends first.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Every frame starts with a header of this many bytes.
pub const HEADER_LEN: usize = 9;
/// Every flow-control window, of the connection and of each stream, starts
/// at this many bytes until SETTINGS or WINDOW_UPDATE frames change it
/// (RFC 9113 §6.9.2).
pub const DEFAULT_WINDOW: u32 = 65_535;
/// The largest payload the 24-bit length field can announce. The decoder
/// accepts up to this, so a peer that ignores our SETTINGS_MAX_FRAME_SIZE is
/// reported rather than mis-parsed.
pub const MAX_PAYLOAD_LEN: usize = (1 << 24) - 1;
/// Largest flow-control window (§6.9.1): a WINDOW_UPDATE past it is an
/// error. Also the mask of a 31-bit stream id or increment (the top bit is
/// reserved).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// Frame types (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;

    /// The type's name, for logs and reports.
    pub fn name(kind: u8) -> &'static str {
        match kind {
            DATA => "DATA",
            HEADERS => "HEADERS",
            PRIORITY => "PRIORITY",
            RST_STREAM => "RST_STREAM",
            SETTINGS => "SETTINGS",
            PUSH_PROMISE => "PUSH_PROMISE",
            PING => "PING",
            GOAWAY => "GOAWAY",
            WINDOW_UPDATE => "WINDOW_UPDATE",
            CONTINUATION => "CONTINUATION",
            _ => "UNKNOWN",
        }
    }
}

/// Flag bits, which mean different things for different frame types.
pub mod flag {
    /// DATA and HEADERS: the sender's last frame on this stream.
    pub const END_STREAM: u8 = 0x1;
    /// PING and SETTINGS: this frame answers the peer's.
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS identifiers (RFC 9113 §6.5.2).
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// The RFC's name for an error code, e.g. `ENHANCE_YOUR_CALM`, as h2's
/// `Debug` spells it; hex (`0x42`) for a code the RFC does not name. Not
/// `Reason`'s `Display`, which is a sentence ("detected excessive load
/// generating behavior"): reports and JSON carry the name.
pub fn reason_name(reason: Reason) -> String {
    let code = u32::from(reason);
    if code > u32::from(Reason::HTTP_1_1_REQUIRED) {
        format!("0x{code:x}")
    } else {
        format!("{reason:?}")
    }
}

/// One frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length in bytes (24 bits).
    pub len: u32,
    pub kind: u8,
    pub flags: u8,
    /// Stream identifier (31 bits; 0 for the connection itself).
    pub stream_id: u32,
}

impl FrameHeader {
    /// Reads the 9 header bytes; the reserved bit of the stream id is dropped.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Self {
        Self {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream_id: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & MAX_WINDOW,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_error_codes() {
        assert_eq!(reason_name(Reason::from(0xb)), "ENHANCE_YOUR_CALM");
        assert_eq!(reason_name(Reason::from(0)), "NO_ERROR");
        assert_eq!(reason_name(Reason::HTTP_1_1_REQUIRED), "HTTP_1_1_REQUIRED");
        assert_eq!(reason_name(Reason::from(0x42)), "0x42");
        assert_eq!(reason_name(Reason::from(0x1234)), "0x1234");
        assert_eq!(reason_name(Reason::CANCEL), "CANCEL");
    }

    #[test]
    fn the_reserved_bit_never_leaks_into_a_stream_id() {
        let header = FrameHeader::parse(&[0, 0, 4, kind::WINDOW_UPDATE, 0, 0x80, 0, 0, 1]);
        assert_eq!(header.stream_id, 1);
        assert_eq!(header.len, 4);
    }
}
