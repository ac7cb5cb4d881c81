//! One encoder family: every frame type as bytes, appended to any buffer
//! (`Vec<u8>`, `BytesMut`, ...). The server writes GOAWAYs with it, the
//! harness's raw client writes every frame it sends with it.

use bytes::BufMut;

use crate::{HEADER_LEN, MAX_PAYLOAD_LEN, MAX_WINDOW, Reason, flag, kind};

/// Appends one frame: the 9-byte header, then `payload`. Panics only if
/// `payload` is longer than the 24-bit length field can say, which no
/// caller in this workspace can produce.
pub fn encode_into(dst: &mut impl BufMut, kind: u8, flags: u8, stream_id: u32, payload: &[u8]) {
    assert!(
        payload.len() <= MAX_PAYLOAD_LEN,
        "frame payload of {} bytes does not fit 24 bits",
        payload.len()
    );
    let len = u32::try_from(payload.len()).expect("checked above");
    dst.put_slice(&len.to_be_bytes()[1..]);
    dst.put_u8(kind);
    dst.put_u8(flags);
    dst.put_u32(stream_id & MAX_WINDOW);
    dst.put_slice(payload);
}

/// One whole frame as bytes: header, then `payload`.
pub fn encode_frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    encode_into(&mut frame, kind, flags, stream_id, payload);
    frame
}

/// SETTINGS with the given pairs (empty for "all defaults").
pub fn encode_settings(dst: &mut impl BufMut, pairs: &[(u16, u32)]) {
    let mut payload = Vec::with_capacity(pairs.len() * 6);
    for &(id, value) in pairs {
        payload.put_u16(id);
        payload.put_u32(value);
    }
    encode_into(dst, kind::SETTINGS, 0, 0, &payload);
}

pub fn encode_settings_ack(dst: &mut impl BufMut) {
    encode_into(dst, kind::SETTINGS, flag::ACK, 0, &[]);
}

pub fn encode_ping(dst: &mut impl BufMut, payload: [u8; 8], ack: bool) {
    let flags = if ack { flag::ACK } else { 0 };
    encode_into(dst, kind::PING, flags, 0, &payload);
}

/// WINDOW_UPDATE on `stream_id` (0 for the connection). The reserved bit is
/// cleared, but the increment is otherwise sent as given, so 0 or an
/// overflowing increment can be sent on purpose.
pub fn encode_window_update(dst: &mut impl BufMut, stream_id: u32, increment: u32) {
    encode_into(
        dst,
        kind::WINDOW_UPDATE,
        0,
        stream_id,
        &(increment & MAX_WINDOW).to_be_bytes(),
    );
}

pub fn encode_rst_stream(dst: &mut impl BufMut, stream_id: u32, code: Reason) {
    encode_into(
        dst,
        kind::RST_STREAM,
        0,
        stream_id,
        &u32::from(code).to_be_bytes(),
    );
}

/// GOAWAY (§6.8): no new streams above `last_stream_id`, `code` says why,
/// `debug` says it in words.
pub fn encode_goaway(dst: &mut impl BufMut, last_stream_id: u32, code: Reason, debug: &[u8]) {
    let mut payload = Vec::with_capacity(8 + debug.len());
    payload.put_u32(last_stream_id & MAX_WINDOW);
    payload.put_u32(code.into());
    payload.put_slice(debug);
    encode_into(dst, kind::GOAWAY, 0, 0, &payload);
}

/// DATA frames carrying `data`, split at `max_frame` bytes. Only the last
/// carries END_STREAM when `end_stream` is set. Empty data gives one empty frame.
pub fn encode_data(
    dst: &mut impl BufMut,
    stream_id: u32,
    data: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let max_frame = max_frame.clamp(1, MAX_PAYLOAD_LEN);
    let mut chunks = data.chunks(max_frame).peekable();
    if chunks.peek().is_none() {
        let flags = if end_stream { flag::END_STREAM } else { 0 };
        encode_into(dst, kind::DATA, flags, stream_id, &[]);
        return;
    }
    while let Some(chunk) = chunks.next() {
        let last = chunks.peek().is_none();
        let flags = if end_stream && last {
            flag::END_STREAM
        } else {
            0
        };
        encode_into(dst, kind::DATA, flags, stream_id, chunk);
    }
}

/// HEADERS carrying a complete header block (END_HEADERS set). Blocks larger
/// than `max_frame` continue in CONTINUATION frames, as §6.10 requires.
pub fn encode_headers(
    dst: &mut impl BufMut,
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
    encode_into(dst, kind::HEADERS, flags, stream_id, first);
    while !rest.is_empty() {
        let (chunk, tail) = rest.split_at(rest.len().min(max_frame));
        let flags = if tail.is_empty() {
            flag::END_HEADERS
        } else {
            0
        };
        encode_into(dst, kind::CONTINUATION, flags, stream_id, chunk);
        rest = tail;
    }
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;

    use super::*;

    #[test]
    fn a_ping_is_encoded_as_rfc_9113_lays_it_out() {
        let mut out = BytesMut::new();
        encode_ping(&mut out, *b"12345678", true);
        assert_eq!(
            out.as_ref(),
            b"\x00\x00\x08\x06\x01\x00\x00\x00\x0012345678".as_ref()
        );
    }

    #[test]
    fn a_frame_is_the_same_bytes_in_any_buffer() {
        let mut out = BytesMut::new();
        encode_into(&mut out, kind::DATA, flag::END_STREAM, 3, b"abc");
        assert_eq!(
            encode_frame(kind::DATA, flag::END_STREAM, 3, b"abc"),
            out.as_ref()
        );
    }
}
