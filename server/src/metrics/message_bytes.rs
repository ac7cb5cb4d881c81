//! [`MessageBytes`]: the bytes of a call's gRPC messages as they go on the
//! wire (after compression), without their framing.
//!
//! gRFC A66's size metrics count "compressed message bytes, metadata
//! excluded": each message's payload, not the 5-byte prefix gRPC puts
//! before it (1 byte compressed-flag, 4 bytes length). A body arrives in
//! chunks that need not line up with messages, so this follows the prefixes
//! across chunks. Hand-written because it is eleven lines of state and no
//! maintained crate exposes gRPC's framing on its own (tonic's decoder is
//! private to it).

/// Follows gRPC's length-prefixed messages through a body, chunk by chunk.
#[derive(Debug, Default, Clone)]
pub struct MessageBytes {
    /// Payload bytes seen so far, over every message.
    payload: u64,
    /// Payload bytes of the current message still to come.
    remaining: u64,
    /// The prefix being read, and how much of it has arrived.
    prefix: [u8; 5],
    prefix_len: u8,
}

impl MessageBytes {
    /// Feeds the next chunk of the body.
    pub fn feed(&mut self, mut chunk: &[u8]) {
        while !chunk.is_empty() {
            if self.remaining > 0 {
                let n = chunk
                    .len()
                    .min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.payload += n as u64;
                self.remaining -= n as u64;
                chunk = &chunk[n..];
                continue;
            }
            let need = 5 - usize::from(self.prefix_len);
            let n = need.min(chunk.len());
            let at = usize::from(self.prefix_len);
            self.prefix[at..at + n].copy_from_slice(&chunk[..n]);
            self.prefix_len += n as u8;
            chunk = &chunk[n..];
            if self.prefix_len == 5 {
                let [_, a, b, c, d] = self.prefix;
                self.remaining = u64::from(u32::from_be_bytes([a, b, c, d]));
                self.prefix_len = 0;
            }
        }
    }

    /// Payload bytes so far: every message's, none of their prefixes.
    pub fn payload(&self) -> u64 {
        self.payload
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(payload: &[u8]) -> Vec<u8> {
        let mut m = vec![0];
        m.extend((payload.len() as u32).to_be_bytes());
        m.extend(payload);
        m
    }

    #[test]
    fn counts_payloads_not_prefixes() {
        let mut body = message(b"hello");
        body.extend(message(b""));
        body.extend(message(&[7; 300]));
        let mut bytes = MessageBytes::default();
        bytes.feed(&body);
        assert_eq!(bytes.payload(), 305);
    }

    #[test]
    fn a_prefix_split_across_chunks_is_followed() {
        let mut body = message(&[1; 70_000]);
        body.extend(message(b"abc"));
        for size in [1, 2, 3, 4, 5, 6, 7, 4096] {
            let mut bytes = MessageBytes::default();
            for chunk in body.chunks(size) {
                bytes.feed(chunk);
            }
            assert_eq!(bytes.payload(), 70_003, "chunks of {size} bytes");
        }
    }
}
