//! [`FrameTracker`]: follows one direction of a connection across reads
//! split anywhere, reports each frame as it completes, and skips payloads by
//! arithmetic, so watching costs nothing per byte. It keeps the payload of
//! the kinds of frame it is asked to (the clients keep GOAWAY's debug data,
//! and the SETTINGS and WINDOW_UPDATE frames they send).
//!
//! Two users share it:
//! - the server's connection policies police PINGs and control frames, and
//!   write a GOAWAY only between two outgoing frames;
//! - the clients' counting connector (`clients/src/wire.rs`) counts PINGs and
//!   reads the GOAWAY tonic never shows its caller.

use crate::{FrameHeader, HEADER_LEN, PREFACE};

/// A frame the tracker has seen in full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    pub header: FrameHeader,
    /// The start of the payload, for the kinds the tracker keeps
    /// ([`FrameTracker::keeping`]); empty for every other kind.
    pub kept: &'a [u8],
}

/// Follows one direction of an HTTP/2 connection byte by byte.
#[derive(Debug, Clone, Default)]
pub struct FrameTracker {
    /// Preface bytes still expected (client-to-server direction only).
    preface_left: usize,
    /// The frame header being collected, possibly across several reads.
    header: [u8; HEADER_LEN],
    header_filled: usize,
    /// The current frame's header, once complete.
    current: Option<FrameHeader>,
    /// Payload bytes of the current frame not seen yet.
    payload_left: usize,
    /// Frames seen in full, header and payload.
    frames_done: u64,
    /// Which kinds of frame to keep the payload of, and at most how much.
    keep: Vec<(u8, usize)>,
    kept: Vec<u8>,
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

    /// Also keeps up to `at_most` payload bytes of every frame of `kind`,
    /// handed over in [`Frame::kept`]. Call it once per kind to keep
    /// several kinds.
    pub fn keeping(mut self, kind: u8, at_most: usize) -> Self {
        self.keep.retain(|&(kept, _)| kept != kind);
        self.keep.push((kind, at_most));
        self
    }

    /// Frames seen in full so far. After the preface the first frame must be
    /// SETTINGS, so 1 means the peer's handshake has arrived.
    pub fn frames_done(&self) -> u64 {
        self.frames_done
    }

    /// True between two frames: the next byte starts a frame header.
    pub fn at_boundary(&self) -> bool {
        self.preface_left == 0 && self.header_filled == 0 && self.current.is_none()
    }

    /// Follows `bytes` and calls `on_frame` for every frame completed.
    pub fn feed(&mut self, mut bytes: &[u8], mut on_frame: impl FnMut(Frame<'_>)) {
        while !bytes.is_empty() {
            let (used, completed) = self.step(bytes);
            bytes = &bytes[used..];
            if let Some(header) = completed {
                on_frame(Frame {
                    header,
                    kept: &self.kept,
                });
                self.kept.clear();
            }
        }
    }

    /// How many leading bytes of `bytes` finish the current frame: 0 at a
    /// boundary, all of them if the frame goes on past their end.
    pub fn until_boundary(&self, bytes: &[u8]) -> usize {
        let mut ahead = Self {
            keep: Vec::new(),
            kept: Vec::new(),
            ..self.clone()
        };
        let mut used = 0;
        while !ahead.at_boundary() && used < bytes.len() {
            used += ahead.step(&bytes[used..]).0;
        }
        used
    }

    /// Consumes one piece: part of the preface, of a header, or of a
    /// payload. Returns the bytes used, and the header of a frame it completed.
    fn step(&mut self, bytes: &[u8]) -> (usize, Option<FrameHeader>) {
        if self.preface_left > 0 {
            let used = self.preface_left.min(bytes.len());
            self.preface_left -= used;
            return (used, None);
        }
        if let Some(header) = self.current {
            let used = self.payload_left.min(bytes.len());
            if let Some(&(_, at_most)) = self.keep.iter().find(|(kind, _)| *kind == header.kind) {
                let room = at_most.saturating_sub(self.kept.len());
                self.kept.extend_from_slice(&bytes[..used.min(room)]);
            }
            self.payload_left -= used;
            return (used, self.finish_if_done());
        }
        let used = (HEADER_LEN - self.header_filled).min(bytes.len());
        self.header[self.header_filled..self.header_filled + used].copy_from_slice(&bytes[..used]);
        self.header_filled += used;
        if self.header_filled < HEADER_LEN {
            return (used, None);
        }
        self.header_filled = 0;
        let header = FrameHeader::parse(&self.header);
        self.current = Some(header);
        self.payload_left = header.len as usize;
        (used, self.finish_if_done())
    }

    fn finish_if_done(&mut self) -> Option<FrameHeader> {
        if self.payload_left > 0 {
            return None;
        }
        self.frames_done += 1;
        self.current.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GoAway, encode_frame as frame, flag, kind, setting, settings, window_increment};

    /// A client's opening: preface, SETTINGS, HEADERS on stream 1, a PING,
    /// a PING ack, and a GOAWAY whose debug data is longer than kept.
    fn client_opening() -> Vec<u8> {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(kind::SETTINGS, 0, 0, &[0, 4, 0, 0, 0, 0]));
        bytes.extend(frame(kind::HEADERS, 0x4, 1, &[0x82; 20]));
        bytes.extend(frame(kind::PING, 0, 0, &[7; 8]));
        bytes.extend(frame(kind::PING, flag::ACK, 0, &[9; 8]));
        bytes.extend(GoAway::too_many_pings(1).encode());
        bytes
    }

    /// (kind, flags, stream, kept payload) of every frame seen.
    type Seen = Vec<(u8, u8, u32, Vec<u8>)>;

    fn frames_seen(tracker: &mut FrameTracker, pieces: &[&[u8]]) -> Seen {
        let mut seen = Vec::new();
        for piece in pieces {
            tracker.feed(piece, |f| {
                let h = f.header;
                seen.push((h.kind, h.flags, h.stream_id, f.kept.to_vec()));
            });
        }
        seen
    }

    fn keeping_goaway() -> FrameTracker {
        FrameTracker::client_to_server().keeping(kind::GOAWAY, 12)
    }

    #[test]
    fn reads_preface_then_frames_keeping_only_what_was_asked() {
        let bytes = client_opening();
        let mut tracker = keeping_goaway();
        let seen = frames_seen(&mut tracker, &[&bytes]);
        let goaway_start = [0, 0, 0, 1, 0, 0, 0, 0xb, b't', b'o', b'o', b'_'].to_vec();
        assert_eq!(
            seen,
            [
                (kind::SETTINGS, 0, 0, vec![]),
                (kind::HEADERS, 0x4, 1, vec![]),
                (kind::PING, 0, 0, vec![]),
                (kind::PING, flag::ACK, 0, vec![]),
                (kind::GOAWAY, 0, 0, goaway_start),
            ]
        );
        assert_eq!(tracker.frames_done(), 5);
        assert!(tracker.at_boundary());
    }

    /// Given the same bytes cut at every possible place, and cut into single
    /// bytes, then the tracker reports exactly the same frames.
    #[test]
    fn splits_anywhere_give_the_same_frames() {
        let bytes = client_opening();
        let whole = frames_seen(&mut keeping_goaway(), &[&bytes]);
        for cut in 0..=bytes.len() {
            let (a, b) = bytes.split_at(cut);
            let split = frames_seen(&mut keeping_goaway(), &[a, b]);
            assert_eq!(split, whole, "cut at {cut}");
        }
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(frames_seen(&mut keeping_goaway(), &singles), whole);
    }

    #[test]
    fn payload_bytes_are_never_taken_for_frames() {
        // A DATA payload that looks exactly like a PING frame.
        let mut bytes = frame(kind::DATA, 0, 1, &frame(kind::PING, 0, 0, &[0; 8]));
        bytes.extend(frame(kind::PING, flag::ACK, 0, &[0; 8]));
        let seen = frames_seen(&mut FrameTracker::server_to_client(), &[&bytes]);
        let kinds: Vec<u8> = seen.iter().map(|s| s.0).collect();
        assert_eq!(kinds, [kind::DATA, kind::PING]);
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
        let mut bytes = data.clone();
        bytes.extend(frame(kind::HEADERS, flag::END_STREAM, 1, &[2; 10]));

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
    fn goaway_encodes_and_parses_back() {
        let goaway = GoAway::too_many_pings(7);
        let bytes = goaway.encode();
        let mut seen = Vec::new();
        FrameTracker::server_to_client()
            .keeping(kind::GOAWAY, 64)
            .feed(&bytes, |f| seen.push((f.header, GoAway::parse(f.kept))));
        let header = FrameHeader {
            len: 8 + 14,
            kind: kind::GOAWAY,
            flags: 0,
            stream_id: 0,
        };
        assert_eq!(seen, [(header, Some(goaway.clone()))]);
        assert!(goaway.is_too_many_pings());
        assert_eq!(GoAway::parse(&bytes[HEADER_LEN..HEADER_LEN + 7]), None);
    }

    /// Given a client that sends SETTINGS (two settings), a connection
    /// WINDOW_UPDATE and a stream WINDOW_UPDATE, cut into single bytes, when
    /// a tracker keeps both kinds, then it hands over both payloads whole and
    /// they parse to the values sent.
    #[test]
    fn keeps_two_kinds_and_parses_settings_and_window_updates() {
        let mut bytes = PREFACE.to_vec();
        let settings_payload = [0, 4, 0, 0x20, 0, 0, 0, 2, 0, 0, 0, 0];
        bytes.extend(frame(kind::SETTINGS, 0, 0, &settings_payload));
        bytes.extend(frame(kind::WINDOW_UPDATE, 0, 0, &[0x80, 0x4f, 0, 1]));
        bytes.extend(frame(kind::HEADERS, 0x4, 1, &[0x82; 5]));
        bytes.extend(frame(kind::WINDOW_UPDATE, 0, 1, &[0, 0, 0x80, 0]));
        let mut tracker = FrameTracker::client_to_server()
            .keeping(kind::SETTINGS, 6 * 4)
            .keeping(kind::WINDOW_UPDATE, 4);
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();

        let seen = frames_seen(&mut tracker, &singles);

        let kept: Vec<(u8, u32, Vec<u8>)> = seen.into_iter().map(|s| (s.0, s.2, s.3)).collect();
        assert_eq!(
            kept,
            [
                (kind::SETTINGS, 0, settings_payload.to_vec()),
                (kind::WINDOW_UPDATE, 0, vec![0x80, 0x4f, 0, 1]),
                (kind::HEADERS, 1, vec![]),
                (kind::WINDOW_UPDATE, 1, vec![0, 0, 0x80, 0]),
            ]
        );
        let parsed: Vec<(u16, u32)> = settings(&settings_payload).collect();
        assert_eq!(
            parsed,
            [
                (setting::INITIAL_WINDOW_SIZE, 2 * 1024 * 1024),
                (setting::ENABLE_PUSH, 0)
            ]
        );
        // The reserved top bit is not part of the increment.
        assert_eq!(window_increment(&[0x80, 0x4f, 0, 1]), Some(0x004f_0001));
        assert_eq!(window_increment(&[0, 0, 0x80]), None);
        // A partial last setting is left out, not misread.
        assert_eq!(settings(&settings_payload[..8]).count(), 1);
    }
}
