//! [`FrameDecoder`]: whole frames, payload included, reassembled from reads
//! split anywhere, for a client that must read what it is sent (the
//! harness's raw client). [`DecodedFrame`]'s accessors read the payloads
//! with the same parsers as the tracker's users ([`crate::payload`],
//! [`GoAway::parse`]), and say so when a payload does not fit its type.

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

use crate::{
    FrameHeader, GoAway, HEADER_LEN, Reason, flag, kind, payload::SETTING_LEN, settings,
    window_increment,
};

/// A frame whose payload does not fit its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MalformedFrame(pub String);

impl fmt::Display for MalformedFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "malformed frame: {}", self.0)
    }
}

impl std::error::Error for MalformedFrame {}

/// One frame as it crossed the wire. The payload is kept raw; the accessors
/// below parse the types a client cares about.
#[derive(Clone, PartialEq, Eq)]
pub struct DecodedFrame {
    pub kind: u8,
    pub flags: u8,
    pub stream_id: u32,
    pub payload: Bytes,
}

impl fmt::Debug for DecodedFrame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Payloads can be megabytes: show their length, not their bytes.
        f.debug_struct("DecodedFrame")
            .field("kind", &kind::name(self.kind))
            .field("flags", &format_args!("0x{:02x}", self.flags))
            .field("stream_id", &self.stream_id)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

impl DecodedFrame {
    pub fn has_flag(&self, flag: u8) -> bool {
        self.flags & flag != 0
    }

    /// True for a SETTINGS or PING frame with the ACK flag.
    pub fn is_ack(&self) -> bool {
        matches!(self.kind, kind::SETTINGS | kind::PING) && self.has_flag(flag::ACK)
    }

    /// True for a DATA or HEADERS frame that ends its stream.
    pub fn ends_stream(&self) -> bool {
        matches!(self.kind, kind::DATA | kind::HEADERS) && self.has_flag(flag::END_STREAM)
    }

    /// The GOAWAY, if this is a GOAWAY frame.
    pub fn goaway(&self) -> Result<Option<GoAway>, MalformedFrame> {
        if self.kind != kind::GOAWAY {
            return Ok(None);
        }
        GoAway::parse(&self.payload).map(Some).ok_or_else(|| {
            MalformedFrame(format!(
                "GOAWAY payload is {} bytes, at least 8 expected",
                self.payload.len()
            ))
        })
    }

    /// The error code of a RST_STREAM frame.
    pub fn rst_stream(&self) -> Result<Option<Reason>, MalformedFrame> {
        if self.kind != kind::RST_STREAM {
            return Ok(None);
        }
        self.exact_len("RST_STREAM", 4)?;
        let mut payload = self.payload.clone();
        Ok(Some(Reason::from(payload.get_u32())))
    }

    /// The increment of a WINDOW_UPDATE frame.
    pub fn window_update(&self) -> Result<Option<u32>, MalformedFrame> {
        if self.kind != kind::WINDOW_UPDATE {
            return Ok(None);
        }
        self.exact_len("WINDOW_UPDATE", 4)?;
        Ok(window_increment(&self.payload))
    }

    /// The 8 opaque bytes of a PING frame.
    pub fn ping(&self) -> Result<Option<[u8; 8]>, MalformedFrame> {
        if self.kind != kind::PING {
            return Ok(None);
        }
        self.exact_len("PING", 8)?;
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&self.payload);
        Ok(Some(bytes))
    }

    /// The (identifier, value) pairs of a SETTINGS frame, in order.
    pub fn settings(&self) -> Result<Option<Vec<(u16, u32)>>, MalformedFrame> {
        if self.kind != kind::SETTINGS {
            return Ok(None);
        }
        if !self.payload.len().is_multiple_of(SETTING_LEN) {
            return Err(MalformedFrame(format!(
                "SETTINGS payload is {} bytes, not a multiple of {SETTING_LEN}",
                self.payload.len()
            )));
        }
        Ok(Some(settings(&self.payload).collect()))
    }

    fn exact_len(&self, what: &str, expected: usize) -> Result<(), MalformedFrame> {
        if self.payload.len() == expected {
            return Ok(());
        }
        Err(MalformedFrame(format!(
            "{what} payload is {} bytes, {expected} expected",
            self.payload.len()
        )))
    }
}

/// Reassembles frames from bytes that arrive in arbitrary pieces: feed it
/// whatever a read returned, then take every complete frame.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buffer: BytesMut,
}

impl FrameDecoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends bytes just read from the socket.
    pub fn extend(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// The buffer a read can fill directly, avoiding a copy.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buffer
    }

    /// Bytes held that do not yet make a whole frame.
    pub fn pending(&self) -> usize {
        self.buffer.len()
    }

    /// The next complete frame, or `None` until more bytes arrive.
    pub fn next_frame(&mut self) -> Option<DecodedFrame> {
        let header: &[u8; HEADER_LEN] = self.buffer.get(..HEADER_LEN)?.try_into().ok()?;
        let header = FrameHeader::parse(header);
        let len = header.len as usize;
        if self.buffer.len() < HEADER_LEN + len {
            // Reserve once for the rest of a large frame instead of growing
            // in small steps as it trickles in.
            self.buffer.reserve(HEADER_LEN + len - self.buffer.len());
            return None;
        }
        self.buffer.advance(HEADER_LEN);
        let payload = self.buffer.split_to(len).freeze();
        Some(DecodedFrame {
            kind: header.kind,
            flags: header.flags,
            stream_id: header.stream_id,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        MAX_WINDOW, encode_data, encode_goaway, encode_headers, encode_ping, encode_settings,
        encode_window_update, reason_name, setting,
    };

    fn decode_all(bytes: &[u8], piece: usize) -> Vec<DecodedFrame> {
        let mut decoder = FrameDecoder::new();
        let mut frames = Vec::new();
        for chunk in bytes.chunks(piece) {
            decoder.extend(chunk);
            while let Some(frame) = decoder.next_frame() {
                frames.push(frame);
            }
        }
        assert_eq!(decoder.pending(), 0, "no bytes left over");
        frames
    }

    /// Given a mix of frames, when the bytes arrive one at a time, in 7-byte
    /// pieces or all at once, then the same frames come out every time.
    #[test]
    fn frames_survive_split_reads() {
        let mut out = BytesMut::new();
        encode_settings(&mut out, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
        encode_ping(&mut out, [7; 8], false);
        encode_data(&mut out, 3, &[0xab; 40_000], true, 16_384);
        encode_goaway(&mut out, 5, Reason::ENHANCE_YOUR_CALM, b"too_many_pings");
        let bytes = out.freeze();

        let whole = decode_all(&bytes, bytes.len());
        for piece in [1, 7, 9, 16_393] {
            assert_eq!(decode_all(&bytes, piece), whole, "pieces of {piece} bytes");
        }
        let kinds: Vec<u8> = whole.iter().map(|f| f.kind).collect();
        assert_eq!(
            kinds,
            [
                kind::SETTINGS,
                kind::PING,
                kind::DATA,
                kind::DATA,
                kind::DATA,
                kind::GOAWAY
            ]
        );
        let data: Vec<usize> = whole[2..5].iter().map(|f| f.payload.len()).collect();
        assert_eq!(data, [16_384, 16_384, 40_000 - 2 * 16_384]);
        assert!(!whole[3].ends_stream() && whole[4].ends_stream());
    }

    #[test]
    fn a_partial_frame_waits_for_its_last_byte() {
        let mut out = BytesMut::new();
        encode_window_update(&mut out, 1, 100);
        let mut decoder = FrameDecoder::new();
        decoder.extend(&out[..out.len() - 1]);
        assert_eq!(decoder.next_frame(), None);
        decoder.extend(&out[out.len() - 1..]);
        let frame = decoder.next_frame().expect("complete now");
        assert_eq!(frame.window_update(), Ok(Some(100)));
        assert_eq!(frame.stream_id, 1);
    }

    #[test]
    fn goaway_carries_last_stream_code_and_debug_data() {
        let mut out = BytesMut::new();
        encode_goaway(&mut out, 2047, Reason::from(0xb), b"too_many_pings");
        let frame = decode_all(&out, 3).remove(0);
        let goaway = frame.goaway().expect("well formed").expect("a GOAWAY");
        assert_eq!(goaway.last_stream_id, 2047);
        assert_eq!(goaway.error_code, Reason::ENHANCE_YOUR_CALM);
        assert_eq!(reason_name(goaway.error_code), "ENHANCE_YOUR_CALM");
        assert_eq!(goaway.debug_text(), "too_many_pings");
    }

    #[test]
    fn short_payloads_are_reported_not_misread() {
        let short_goaway = DecodedFrame {
            kind: kind::GOAWAY,
            flags: 0,
            stream_id: 0,
            payload: Bytes::from_static(&[0; 7]),
        };
        assert!(short_goaway.goaway().is_err());
        let long_rst = DecodedFrame {
            kind: kind::RST_STREAM,
            flags: 0,
            stream_id: 1,
            payload: Bytes::from_static(&[0; 5]),
        };
        assert!(long_rst.rst_stream().is_err());
        let odd_settings = DecodedFrame {
            kind: kind::SETTINGS,
            flags: 0,
            stream_id: 0,
            payload: Bytes::from_static(&[0; 5]),
        };
        assert!(odd_settings.settings().is_err());
    }

    #[test]
    fn settings_round_trip_in_order() {
        let mut out = BytesMut::new();
        let pairs = [
            (setting::MAX_CONCURRENT_STREAMS, 100),
            (setting::INITIAL_WINDOW_SIZE, 0),
        ];
        encode_settings(&mut out, &pairs);
        let frame = decode_all(&out, 2).remove(0);
        assert_eq!(frame.settings(), Ok(Some(pairs.to_vec())));
        assert!(!frame.is_ack());
    }

    #[test]
    fn the_reserved_bit_never_leaks_into_ids_or_increments() {
        let mut out = BytesMut::new();
        encode_window_update(&mut out, 0x8000_0001, 0xffff_ffff);
        let frame = decode_all(&out, 4).remove(0);
        assert_eq!(frame.stream_id, 1);
        assert_eq!(frame.window_update(), Ok(Some(MAX_WINDOW)));
    }

    #[test]
    fn a_large_header_block_continues_in_continuation_frames() {
        let mut out = BytesMut::new();
        encode_headers(&mut out, 1, &[1; 10], true, 4);
        let frames = decode_all(&out, 5);
        let kinds: Vec<(u8, u8)> = frames.iter().map(|f| (f.kind, f.flags)).collect();
        assert_eq!(
            kinds,
            [
                (kind::HEADERS, flag::END_STREAM),
                (kind::CONTINUATION, 0),
                (kind::CONTINUATION, flag::END_HEADERS),
            ]
        );
    }
}
