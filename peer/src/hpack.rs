//! The smallest HPACK encoder that a server must accept (RFC 7541): every
//! header as a "literal header field without indexing, new name", with plain
//! (not Huffman) strings. No dynamic table, so blocks can be sent in any
//! order, on any connection, and even be malformed on purpose.
//!
//! Decoding a server's headers needs Huffman and the dynamic table; the
//! peer leaves that to the `h2` crate ([`crate::h2client`]).

use bytes::{BufMut, BytesMut};

/// First byte of a "literal header field without indexing" whose name is a
/// literal too (§6.2.2, index 0).
const LITERAL_NEW_NAME: u8 = 0x00;

/// Appends `value` as an HPACK integer with an `prefix_bits`-bit prefix
/// (§5.1). `first` holds the bits above the prefix in the first byte.
pub fn encode_integer(dst: &mut BytesMut, first: u8, prefix_bits: u8, value: usize) {
    debug_assert!((1..=8).contains(&prefix_bits));
    let max_prefix = (1usize << prefix_bits) - 1;
    if value < max_prefix {
        // Fits in the prefix.
        dst.put_u8(first | u8::try_from(value).expect("less than the prefix maximum"));
        return;
    }
    dst.put_u8(first | u8::try_from(max_prefix).expect("prefix is at most 8 bits"));
    let mut rest = value - max_prefix;
    while rest >= 0x80 {
        // Seven bits at a time, least significant first, high bit = "more".
        dst.put_u8(u8::try_from(rest & 0x7f).expect("7 bits") | 0x80);
        rest >>= 7;
    }
    dst.put_u8(u8::try_from(rest).expect("less than 0x80"));
}

/// Appends a string literal without Huffman coding (§5.2, H bit 0).
pub fn encode_string(dst: &mut BytesMut, bytes: &[u8]) {
    encode_integer(dst, 0x00, 7, bytes.len());
    dst.put_slice(bytes);
}

/// A header block: each `(name, value)` as a literal without indexing.
/// Names go out as given; HTTP/2 requires them in lower case, which callers
/// can break on purpose to test a peer.
pub fn encode_block(headers: &[(&str, &str)]) -> BytesMut {
    let mut block = BytesMut::new();
    for (name, value) in headers {
        block.put_u8(LITERAL_NEW_NAME);
        encode_string(&mut block, name.as_bytes());
        encode_string(&mut block, value.as_bytes());
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;

    fn integer(first: u8, prefix_bits: u8, value: usize) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_integer(&mut out, first, prefix_bits, value);
        out.to_vec()
    }

    /// RFC 7541 Appendix C.1 gives these three encodings.
    #[test]
    fn integers_match_the_rfc_examples() {
        assert_eq!(integer(0, 5, 10), [0x0a]);
        assert_eq!(integer(0, 5, 1337), [0x1f, 0x9a, 0x0a]);
        assert_eq!(integer(0, 8, 42), [0x2a]);
    }

    #[test]
    fn a_value_equal_to_the_prefix_maximum_needs_a_second_byte() {
        assert_eq!(integer(0, 7, 127), [0x7f, 0x00]);
        assert_eq!(integer(0x80, 7, 126), [0xfe]);
    }

    /// RFC 7541 Appendix C.2.2 encodes `:path: /sample/path` as a literal
    /// without indexing with an *indexed* name; with a literal name the same
    /// header is the name string followed by the value string.
    #[test]
    fn a_block_is_name_then_value_per_header() {
        let block = encode_block(&[(":path", "/sample/path"), ("te", "trailers")]);
        let mut expected = vec![0x00, 0x05];
        expected.extend_from_slice(b":path");
        expected.push(0x0c);
        expected.extend_from_slice(b"/sample/path");
        expected.extend_from_slice(&[0x00, 0x02]);
        expected.extend_from_slice(b"te");
        expected.push(0x08);
        expected.extend_from_slice(b"trailers");
        assert_eq!(block.to_vec(), expected);
    }

    #[test]
    fn long_strings_get_a_multi_byte_length() {
        let value = "x".repeat(300);
        let mut out = BytesMut::new();
        encode_string(&mut out, value.as_bytes());
        // 300 = 127 + 173; 173 = 0xad -> 0x2d | 0x80, then 0x01.
        assert_eq!(&out[..3], &[0x7f, 0xad, 0x01]);
        assert_eq!(out.len(), 3 + 300);
    }
}
