//! The payloads both the tracker's users and the decoder's read: the
//! entries of a SETTINGS frame and the increment of a WINDOW_UPDATE. The
//! one parser of each.

use crate::MAX_WINDOW;

/// One setting in a SETTINGS payload: a 2-byte identifier, a 4-byte value.
pub const SETTING_LEN: usize = 6;

/// The settings of a SETTINGS payload (header excluded), in order: each
/// identifier and its value (RFC 9113 §6.5.1). A partial entry at the end
/// (a payload kept only in part) is left out.
pub fn settings(payload: &[u8]) -> impl Iterator<Item = (u16, u32)> + '_ {
    payload.chunks_exact(SETTING_LEN).map(|entry| {
        (
            u16::from_be_bytes([entry[0], entry[1]]),
            u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]),
        )
    })
}

/// The increment of a WINDOW_UPDATE payload (RFC 9113 §6.9: 31 bits, the
/// top bit reserved); `None` if it is shorter than 4 bytes.
pub fn window_increment(payload: &[u8]) -> Option<u32> {
    let word: [u8; 4] = payload.get(..4)?.try_into().ok()?;
    Some(u32::from_be_bytes(word) & MAX_WINDOW)
}
