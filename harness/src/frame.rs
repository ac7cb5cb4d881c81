//! HTTP/2 frames as bytes (RFC 9113 §4 and §6): the 9-byte header, the frame
//! types and flags this harness sends or reads, encoding, and a decoder that
//! copes with frames split across reads.
//!
//! Pure code with no I/O, so every rule is unit-tested; [`crate::raw`] puts
//! it on a socket.

use std::fmt;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The preface, frame types, flags and SETTINGS identifiers are shared with
/// the server's and the clients' frame tracker.
pub use h2_frames::{HEADER_LEN, PREFACE, flag, kind, setting};

/// The largest payload the 24-bit length field can announce. The decoder
/// accepts up to this, so a peer that ignores our SETTINGS_MAX_FRAME_SIZE is
/// reported rather than mis-parsed.
pub const MAX_PAYLOAD_LEN: usize = (1 << 24) - 1;

/// Largest flow-control window (§6.9.1): a WINDOW_UPDATE past it is an error.
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

/// An HTTP/2 error code (§7), as carried by RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ErrorCode(pub u32);

impl ErrorCode {
    pub const NO_ERROR: Self = Self(0x0);
    pub const PROTOCOL_ERROR: Self = Self(0x1);
    pub const INTERNAL_ERROR: Self = Self(0x2);
    pub const FLOW_CONTROL_ERROR: Self = Self(0x3);
    pub const SETTINGS_TIMEOUT: Self = Self(0x4);
    pub const STREAM_CLOSED: Self = Self(0x5);
    pub const FRAME_SIZE_ERROR: Self = Self(0x6);
    pub const REFUSED_STREAM: Self = Self(0x7);
    pub const CANCEL: Self = Self(0x8);
    pub const COMPRESSION_ERROR: Self = Self(0x9);
    pub const CONNECT_ERROR: Self = Self(0xa);
    /// What h2 and grpc-go send to a peer that misbehaves on purpose, e.g.
    /// `too_many_pings` or `too_many_internal_resets`.
    pub const ENHANCE_YOUR_CALM: Self = Self(0xb);
    pub const INADEQUATE_SECURITY: Self = Self(0xc);
    pub const HTTP_1_1_REQUIRED: Self = Self(0xd);

    /// The RFC's name for the code, or `None` for an unknown one.
    pub fn name(self) -> Option<&'static str> {
        h2_frames::error_code::known_name(self.0)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => f.write_str(name),
            None => write!(f, "0x{:x}", self.0),
        }
    }
}

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
/// below parse the types the harness cares about.
#[derive(Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream_id: u32,
    pub payload: Bytes,
}

impl fmt::Debug for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Payloads can be megabytes: show their length, not their bytes.
        f.debug_struct("Frame")
            .field("kind", &kind::name(self.kind))
            .field("flags", &format_args!("0x{:02x}", self.flags))
            .field("stream_id", &self.stream_id)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

/// A GOAWAY frame's payload (§6.8): the connection is ending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goaway {
    /// The highest stream the sender may have processed.
    pub last_stream_id: u32,
    pub error_code: ErrorCode,
    /// Free-form bytes; gRPC stacks put a reason here, e.g. `too_many_pings`.
    pub debug_data: Bytes,
}

impl Goaway {
    /// The debug data as text (lossy), for reports.
    pub fn debug_text(&self) -> String {
        String::from_utf8_lossy(&self.debug_data).into_owned()
    }
}

impl Frame {
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

    /// The GOAWAY payload, if this is a GOAWAY frame.
    pub fn goaway(&self) -> Result<Option<Goaway>, MalformedFrame> {
        if self.kind != kind::GOAWAY {
            return Ok(None);
        }
        let mut payload = self.payload.clone();
        if payload.len() < 8 {
            return Err(MalformedFrame(format!(
                "GOAWAY payload is {} bytes, at least 8 expected",
                payload.len()
            )));
        }
        let last_stream_id = payload.get_u32() & MAX_WINDOW;
        let error_code = ErrorCode(payload.get_u32());
        Ok(Some(Goaway {
            last_stream_id,
            error_code,
            debug_data: payload,
        }))
    }

    /// The error code of a RST_STREAM frame.
    pub fn rst_stream(&self) -> Result<Option<ErrorCode>, MalformedFrame> {
        if self.kind != kind::RST_STREAM {
            return Ok(None);
        }
        self.exact_u32("RST_STREAM")
            .map(|code| Some(ErrorCode(code)))
    }

    /// The increment of a WINDOW_UPDATE frame.
    pub fn window_update(&self) -> Result<Option<u32>, MalformedFrame> {
        if self.kind != kind::WINDOW_UPDATE {
            return Ok(None);
        }
        self.exact_u32("WINDOW_UPDATE")
            .map(|inc| Some(inc & MAX_WINDOW))
    }

    /// The 8 opaque bytes of a PING frame.
    pub fn ping(&self) -> Result<Option<[u8; 8]>, MalformedFrame> {
        if self.kind != kind::PING {
            return Ok(None);
        }
        let bytes: [u8; 8] = self.payload.as_ref().try_into().map_err(|_| {
            MalformedFrame(format!(
                "PING payload is {} bytes, 8 expected",
                self.payload.len()
            ))
        })?;
        Ok(Some(bytes))
    }

    /// The (identifier, value) pairs of a SETTINGS frame, in order.
    pub fn settings(&self) -> Result<Option<Vec<(u16, u32)>>, MalformedFrame> {
        if self.kind != kind::SETTINGS {
            return Ok(None);
        }
        if !self.payload.len().is_multiple_of(6) {
            return Err(MalformedFrame(format!(
                "SETTINGS payload is {} bytes, not a multiple of 6",
                self.payload.len()
            )));
        }
        let mut payload = self.payload.clone();
        let mut pairs = Vec::with_capacity(payload.len() / 6);
        while payload.has_remaining() {
            pairs.push((payload.get_u16(), payload.get_u32()));
        }
        Ok(Some(pairs))
    }

    fn exact_u32(&self, what: &str) -> Result<u32, MalformedFrame> {
        let bytes: [u8; 4] = self.payload.as_ref().try_into().map_err(|_| {
            MalformedFrame(format!(
                "{what} payload is {} bytes, 4 expected",
                self.payload.len()
            ))
        })?;
        Ok(u32::from_be_bytes(bytes))
    }
}

/// Appends one frame. Panics only if `payload` is longer than the 24-bit
/// length field can say, which no caller in this crate can produce.
pub fn encode(dst: &mut BytesMut, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    assert!(
        payload.len() <= MAX_PAYLOAD_LEN,
        "frame payload of {} bytes does not fit 24 bits",
        payload.len()
    );
    dst.reserve(HEADER_LEN + payload.len());
    let len = u32::try_from(payload.len()).expect("checked above");
    dst.put_slice(&len.to_be_bytes()[1..]);
    dst.put_u8(kind);
    dst.put_u8(flags);
    dst.put_u32(stream_id & MAX_WINDOW);
    dst.put_slice(payload);
}

/// SETTINGS with the given pairs (empty for "all defaults").
pub fn encode_settings(dst: &mut BytesMut, pairs: &[(u16, u32)]) {
    let mut payload = BytesMut::with_capacity(pairs.len() * 6);
    for &(id, value) in pairs {
        payload.put_u16(id);
        payload.put_u32(value);
    }
    encode(dst, kind::SETTINGS, 0, 0, &payload);
}

pub fn encode_settings_ack(dst: &mut BytesMut) {
    encode(dst, kind::SETTINGS, flag::ACK, 0, &[]);
}

pub fn encode_ping(dst: &mut BytesMut, payload: [u8; 8], ack: bool) {
    let flags = if ack { flag::ACK } else { 0 };
    encode(dst, kind::PING, flags, 0, &payload);
}

/// WINDOW_UPDATE on `stream_id` (0 for the connection). The reserved bit is
/// cleared, but the increment is otherwise sent as given, so 0 or an
/// overflowing increment can be sent on purpose.
pub fn encode_window_update(dst: &mut BytesMut, stream_id: u32, increment: u32) {
    encode(
        dst,
        kind::WINDOW_UPDATE,
        0,
        stream_id,
        &(increment & MAX_WINDOW).to_be_bytes(),
    );
}

pub fn encode_rst_stream(dst: &mut BytesMut, stream_id: u32, code: ErrorCode) {
    encode(dst, kind::RST_STREAM, 0, stream_id, &code.0.to_be_bytes());
}

pub fn encode_goaway(dst: &mut BytesMut, last_stream_id: u32, code: ErrorCode, debug: &[u8]) {
    let mut payload = BytesMut::with_capacity(8 + debug.len());
    payload.put_u32(last_stream_id & MAX_WINDOW);
    payload.put_u32(code.0);
    payload.put_slice(debug);
    encode(dst, kind::GOAWAY, 0, 0, &payload);
}

/// DATA frames carrying `data`, split at `max_frame` bytes. Only the last
/// carries END_STREAM when `end_stream` is set. Empty data gives one empty frame.
pub fn encode_data(
    dst: &mut BytesMut,
    stream_id: u32,
    data: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let max_frame = max_frame.clamp(1, MAX_PAYLOAD_LEN);
    let mut chunks = data.chunks(max_frame).peekable();
    if chunks.peek().is_none() {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        encode(dst, kind::DATA, flags, stream_id, &[]);
        return;
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let flags = if end_stream && last {
            flag::END_STREAM
        } else {
            0
        };
        encode(dst, kind::DATA, flags, stream_id, chunk);
    }
}

/// HEADERS carrying a complete header block (END_HEADERS set). Blocks larger
/// than `max_frame` continue in CONTINUATION frames, as §6.10 requires.
pub fn encode_headers(
    dst: &mut BytesMut,
    stream_id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let max_frame = max_frame.clamp(1, MAX_PAYLOAD_LEN);
    let first_len = block.len().min(max_frame);
    let (first, mut rest) = block.split_at(first_len);
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if rest.is_empty() {
        flags |= flag::END_HEADERS;
    }
    encode(dst, kind::HEADERS, flags, stream_id, first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(max_frame));
        let flags = if tail.is_empty() {
            flag::END_HEADERS
        } else {
            0
        };
        encode(dst, kind::CONTINUATION, flags, stream_id, chunk);
        rest = tail;
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
    pub fn next_frame(&mut self) -> Option<Frame> {
        if self.buffer.len() < HEADER_LEN {
            return None;
        }
        let len = usize::from(self.buffer[0]) << 16
            | usize::from(self.buffer[1]) << 8
            | usize::from(self.buffer[2]);
        if self.buffer.len() < HEADER_LEN + len {
            // Reserve once for the rest of a large frame instead of growing
            // in small steps as it trickles in.
            self.buffer.reserve(HEADER_LEN + len - self.buffer.len());
            return None;
        }
        let mut header = self.buffer.split_to(HEADER_LEN);
        let payload = self.buffer.split_to(len).freeze();
        header.advance(3);
        let kind = header.get_u8();
        let flags = header.get_u8();
        let stream_id = header.get_u32() & MAX_WINDOW;
        Some(Frame {
            kind,
            flags,
            stream_id,
            payload,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(bytes: &[u8], piece: usize) -> Vec<Frame> {
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

    #[test]
    fn a_ping_is_encoded_as_rfc_9113_lays_it_out() {
        let mut out = BytesMut::new();
        encode_ping(&mut out, *b"12345678", true);
        assert_eq!(
            out.as_ref(),
            b"\x00\x00\x08\x06\x01\x00\x00\x00\x0012345678".as_ref()
        );
    }

    /// Given a mix of frames, when the bytes arrive one at a time, in 7-byte
    /// pieces or all at once, then the same frames come out every time.
    #[test]
    fn frames_survive_split_reads() {
        let mut out = BytesMut::new();
        encode_settings(&mut out, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
        encode_ping(&mut out, [7; 8], false);
        encode_data(&mut out, 3, &[0xab; 40_000], true, 16_384);
        encode_goaway(&mut out, 5, ErrorCode::ENHANCE_YOUR_CALM, b"too_many_pings");
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
        encode_goaway(&mut out, 2047, ErrorCode(0xb), b"too_many_pings");
        let frame = decode_all(&out, 3).remove(0);
        let goaway = frame.goaway().expect("well formed").expect("a GOAWAY");
        assert_eq!(goaway.last_stream_id, 2047);
        assert_eq!(goaway.error_code, ErrorCode::ENHANCE_YOUR_CALM);
        assert_eq!(goaway.error_code.to_string(), "ENHANCE_YOUR_CALM");
        assert_eq!(goaway.debug_text(), "too_many_pings");
    }

    #[test]
    fn short_payloads_are_reported_not_misread() {
        let short_goaway = Frame {
            kind: kind::GOAWAY,
            flags: 0,
            stream_id: 0,
            payload: Bytes::from_static(&[0; 7]),
        };
        assert!(short_goaway.goaway().is_err());
        let long_rst = Frame {
            kind: kind::RST_STREAM,
            flags: 0,
            stream_id: 1,
            payload: Bytes::from_static(&[0; 5]),
        };
        assert!(long_rst.rst_stream().is_err());
        let odd_settings = Frame {
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

    #[test]
    fn unknown_error_codes_print_in_hex() {
        assert_eq!(ErrorCode(0x1234).to_string(), "0x1234");
        assert_eq!(ErrorCode::CANCEL.to_string(), "CANCEL");
    }
}
