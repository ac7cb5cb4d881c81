//! HTTP/2 framing, just enough to watch a connection go by (RFC 9113 §3.4
//! and §4.1): the 24-byte client preface, then frames that each start with a
//! 9-byte header (length, type, flags, stream id).
//!
//! [`FrameTracker`] follows one direction of a connection across reads split
//! anywhere, reports each frame header, and skips payloads by arithmetic, so
//! watching costs nothing per byte. [`crate::connection`] uses one tracker
//! per direction to police pings and to write a GOAWAY only between frames.

/// What every HTTP/2 client sends first.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Every frame starts with a header of this many bytes.
pub const HEADER_LEN: usize = 9;

/// Frame types this server looks at (RFC 9113 §6).
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
}

/// Flag bits, which mean different things for different frame types.
pub mod flag {
    /// DATA and HEADERS: the sender's last frame on this stream.
    pub const END_STREAM: u8 = 0x1;
    /// PING and SETTINGS: this frame answers the peer's.
    pub const ACK: u8 = 0x1;
}

/// GOAWAY and RST_STREAM error codes (RFC 9113 §7).
pub mod error_code {
    /// "The endpoint detected that its peer is exhibiting a behavior that
    /// might be generating excessive load."
    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
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
    fn parse(b: &[u8; HEADER_LEN]) -> Self {
        Self {
            len: u32::from_be_bytes([0, b[0], b[1], b[2]]),
            kind: b[3],
            flags: b[4],
            stream_id: u32::from_be_bytes([b[5], b[6], b[7], b[8]]) & 0x7fff_ffff,
        }
    }

    pub fn has(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }
}

/// Follows one direction of an HTTP/2 connection byte by byte.
#[derive(Debug, Clone, Default)]
pub struct FrameTracker {
    /// Preface bytes still expected (client-to-server direction only).
    preface_left: usize,
    /// The frame header being collected, possibly across several reads.
    header: [u8; HEADER_LEN],
    header_filled: usize,
    /// Payload bytes of the current frame not seen yet.
    payload_left: usize,
    /// Frames seen in full, header and payload.
    frames_done: u64,
}

impl FrameTracker {
    /// The client-to-server direction, which starts with [`PREFACE`].
    pub fn client_to_server() -> Self {
        Self {
            preface_left: PREFACE.len(),
            ..Self::default()
        }
    }

    /// The server-to-client direction, which starts with a frame.
    pub fn server_to_client() -> Self {
        Self::default()
    }

    /// Frames seen in full so far. After the preface the first frame must be
    /// SETTINGS, so 1 means the peer's handshake has arrived.
    pub fn frames_done(&self) -> u64 {
        self.frames_done
    }

    /// True between two frames: the next byte starts a frame header.
    pub fn at_boundary(&self) -> bool {
        self.preface_left == 0 && self.header_filled == 0 && self.payload_left == 0
    }

    /// Follows `bytes` and calls `on_header` for every frame header completed.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_header: impl FnMut(FrameHeader)) {
        while !bytes.is_empty() {
            let (used, header) = self.step(bytes);
            bytes = &bytes[used..];
            if let Some(header) = header {
                on_header(header);
            }
        }
    }

    /// How many leading bytes of `bytes` finish the current frame: 0 at a
    /// boundary, all of them if the frame goes on past their end.
    pub fn until_boundary(&self, bytes: &[u8]) -> usize {
        let mut ahead = self.clone();
        let mut used = 0;
        while !ahead.at_boundary() && used < bytes.len() {
            used += ahead.step(&bytes[used..]).0;
        }
        used
    }

    /// Consumes one piece: part of the preface, of a header, or of a payload.
    fn step(&mut self, bytes: &[u8]) -> (usize, Option<FrameHeader>) {
        if self.preface_left > 0 {
            let used = self.preface_left.min(bytes.len());
            self.preface_left -= used;
            return (used, None);
        }
        if self.payload_left > 0 {
            let used = self.payload_left.min(bytes.len());
            self.payload_left -= used;
            if self.payload_left == 0 {
                self.frames_done += 1;
            }
            return (used, None);
        }
        let used = (HEADER_LEN - self.header_filled).min(bytes.len());
        self.header[self.header_filled..self.header_filled + used].copy_from_slice(&bytes[..used]);
        self.header_filled += used;
        if self.header_filled < HEADER_LEN {
            return (used, None);
        }
        self.header_filled = 0;
        let header = FrameHeader::parse(&self.header);
        self.payload_left = header.len as usize;
        if self.payload_left == 0 {
            self.frames_done += 1;
        }
        (used, Some(header))
    }
}

/// A GOAWAY frame: no new streams above `last_stream_id`, `code` says why,
/// and `debug` says it in words other stacks understand (`too_many_pings`).
pub fn goaway(last_stream_id: u32, code: u32, debug: &[u8]) -> Vec<u8> {
    let len = u32::try_from(8 + debug.len()).expect("debug data is a short literal");
    let mut frame = Vec::with_capacity(HEADER_LEN + 8 + debug.len());
    frame.extend_from_slice(&len.to_be_bytes()[1..]);
    frame.extend_from_slice(&[kind::GOAWAY, 0, 0, 0, 0, 0]);
    frame.extend_from_slice(&(last_stream_id & 0x7fff_ffff).to_be_bytes());
    frame.extend_from_slice(&code.to_be_bytes());
    frame.extend_from_slice(debug);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len()).expect("small payload");
        let mut f = len.to_be_bytes()[1..].to_vec();
        f.extend_from_slice(&[kind, flags]);
        f.extend_from_slice(&stream_id.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    /// A client's opening: preface, SETTINGS, HEADERS on stream 1, a PING.
    fn client_opening() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
        bytes.extend(frame(kind::HEADERS, 0x4, 1, &[0x82; 20]));
        bytes.extend(frame(kind::PING, 0, 0, &[7; 8]));
        bytes.extend(frame(kind::PING, flag::ACK, 0, &[9; 8]));
        bytes
    }

    fn headers_seen(tracker: &mut FrameTracker, pieces: &[&[u8]]) -> Vec<FrameHeader> {
        let mut seen = Vec::new();
        for piece in pieces {
            tracker.feed(piece, |h| seen.push(h));
        }
        seen
    }

    #[test]
    fn reads_preface_then_frame_headers() {
        let bytes = client_opening();
        let mut tracker = FrameTracker::client_to_server();
        let seen = headers_seen(&mut tracker, &[&bytes]);
        let kinds: Vec<(u8, u8, u32)> = seen
            .iter()
            .map(|h| (h.kind, h.flags, h.stream_id))
            .collect();
        assert_eq!(
            kinds,
            [
                (kind::SETTINGS, 0, 0),
                (kind::HEADERS, 0x4, 1),
                (kind::PING, 0, 0),
                (kind::PING, flag::ACK, 0)
            ]
        );
        assert_eq!(seen[1].len, 20);
        assert!(seen[3].has(flag::ACK) && !seen[2].has(flag::ACK));
        assert_eq!(tracker.frames_done(), 4);
        assert!(tracker.at_boundary());
    }

    /// Given the same bytes cut at every possible place, and cut into single
    /// bytes, then the tracker reports exactly the same headers.
    #[test]
    fn splits_anywhere_give_the_same_headers() {
        let bytes = client_opening();
        let whole = headers_seen(&mut FrameTracker::client_to_server(), &[&bytes]);
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let split = headers_seen(&mut FrameTracker::client_to_server(), &[a, b]);
            assert_eq!(split, whole, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(
            headers_seen(&mut FrameTracker::client_to_server(), &singles),
            whole
        );
    }

    #[test]
    fn handshake_counts_once_settings_is_complete() {
        let bytes = client_opening();
        let settings_end = PREFACE.len() + HEADER_LEN + 6;
        let mut tracker = FrameTracker::client_to_server();
        tracker.feed(&bytes[..settings_end - 1], |_| {});
        assert_eq!(
            tracker.frames_done(),
            0,
            "SETTINGS payload is one byte short"
        );
        tracker.feed(&bytes[settings_end - 1..settings_end], |_| {});
        assert_eq!(tracker.frames_done(), 1);
    }

    /// Given a writer stopped in the middle of a frame, the distance to the
    /// next boundary is exactly what is left of that frame, wherever the
    /// stop was, header or payload.
    #[test]
    fn until_boundary_finishes_the_current_frame_only() {
        let data = frame(kind::DATA, 0, 1, &[1; 100]);
        let mut next = frame(kind::HEADERS, flag::END_STREAM, 1, &[2; 10]);
        let mut bytes = data.clone();
        bytes.append(&mut next);

        let fresh = FrameTracker::server_to_client();
        assert!(fresh.at_boundary());
        assert_eq!(fresh.until_boundary(&bytes), 0);
        for written in 1..data.len() {
            let mut tracker = FrameTracker::server_to_client();
            tracker.feed(&bytes[..written], |_| {});
            assert!(!tracker.at_boundary(), "{written}");
            let rest = &bytes[written..];
            assert_eq!(
                tracker.until_boundary(rest),
                data.len() - written,
                "{written}"
            );
            // A shorter buffer than the frame's rest is used in full.
            assert_eq!(tracker.until_boundary(&rest[..1]), 1);
        }
    }

    #[test]
    fn goaway_frame_reads_back() {
        let bytes = goaway(7, error_code::ENHANCE_YOUR_CALM, b"too_many_pings");
        let mut seen = Vec::new();
        FrameTracker::server_to_client().feed(&bytes, |h| seen.push(h));
        assert_eq!(
            seen,
            [FrameHeader {
                len: 8 + 14,
                kind: kind::GOAWAY,
                flags: 0,
                stream_id: 0
            }]
        );
        assert_eq!(&bytes[9..13], &7u32.to_be_bytes());
        assert_eq!(&bytes[13..17], &0xbu32.to_be_bytes());
        assert_eq!(&bytes[17..], b"too_many_pings");
    }
}
