//! A view of the HTTP/2 frames on a connection, from the frame headers alone.
//!
//! tonic does not tell a client why a connection ended: a GOAWAY's error code
//! and debug data (`ENHANCE_YOUR_CALM`, `too_many_pings`) never reach the
//! caller. [`FrameTracker`] reads them off the bytes the counting connector
//! already sees. It follows the 9-byte frame headers and skips payloads
//! without looking at them, so its cost is per frame, not per byte; only a
//! GOAWAY payload is kept, up to [`MAX_DEBUG_DATA`] bytes of debug data.
//!
//! It is exact however the bytes are split across reads: a header or a
//! GOAWAY payload may arrive one byte at a time.

/// The fixed-size part of every HTTP/2 frame (RFC 9113, section 4.1).
pub const FRAME_HEADER_LEN: usize = 9;
/// What a client sends before its first frame (RFC 9113, section 3.4).
pub const CLIENT_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
/// Frame type of PING.
pub const PING: u8 = 0x6;
/// Frame type of GOAWAY.
pub const GOAWAY: u8 = 0x7;
/// The flag that marks a PING as an answer to the peer's PING.
pub const FLAG_ACK: u8 = 0x1;
/// A GOAWAY's fixed payload: last stream id (4 bytes), error code (4 bytes).
const GOAWAY_FIXED_LEN: usize = 8;
/// Debug data kept from a GOAWAY. `too_many_pings` is 14 bytes; the rest of a
/// longer payload is skipped, so a peer cannot make the tracker hold much.
pub const MAX_DEBUG_DATA: usize = 256;

/// A frame the tracker reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// A PING, reported as soon as its header is complete.
    Ping {
        /// An answer to the other side's PING, not a PING of its own.
        ack: bool,
    },
    /// A GOAWAY, reported once its payload is complete.
    GoAway(GoAway),
}

/// A GOAWAY frame: why the peer is closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoAway {
    /// The highest stream the sender may still process.
    pub last_stream_id: u32,
    /// An HTTP/2 error code; see [`error_code_name`].
    pub error_code: u32,
    /// Opaque debug data, e.g. `too_many_pings` (at most [`MAX_DEBUG_DATA`] bytes).
    pub debug_data: Vec<u8>,
}

impl GoAway {
    /// `ENHANCE_YOUR_CALM` with debug data `too_many_pings`: the peer says
    /// this side pings more often than it permits (gRFC A8).
    pub fn is_too_many_pings(&self) -> bool {
        self.error_code == ENHANCE_YOUR_CALM && self.debug_data == b"too_many_pings"
    }

    fn parse(payload: &[u8]) -> Option<Self> {
        let fixed = payload.get(..GOAWAY_FIXED_LEN)?;
        let word = |at: usize| {
            u32::from_be_bytes([fixed[at], fixed[at + 1], fixed[at + 2], fixed[at + 3]])
        };
        Some(Self {
            last_stream_id: word(0) & 0x7fff_ffff,
            error_code: word(4),
            debug_data: payload[GOAWAY_FIXED_LEN..].to_vec(),
        })
    }
}

/// The error code a peer sends when it wants this side to slow down.
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// The name of an HTTP/2 error code (RFC 9113, section 7), e.g. `ENHANCE_YOUR_CALM`.
pub fn error_code_name(code: u32) -> String {
    const NAMES: [&str; 14] = [
        "NO_ERROR",
        "PROTOCOL_ERROR",
        "INTERNAL_ERROR",
        "FLOW_CONTROL_ERROR",
        "SETTINGS_TIMEOUT",
        "STREAM_CLOSED",
        "FRAME_SIZE_ERROR",
        "REFUSED_STREAM",
        "CANCEL",
        "COMPRESSION_ERROR",
        "CONNECT_ERROR",
        "ENHANCE_YOUR_CALM",
        "INADEQUATE_SECURITY",
        "HTTP_1_1_REQUIRED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("0x{code:x}"), |name| (*name).to_string())
}

/// Follows one direction of an HTTP/2 connection, frame by frame.
#[derive(Debug)]
pub struct FrameTracker {
    /// Bytes of the client preface still to skip (only client-to-server).
    preface_left: usize,
    /// The frame header being assembled, and how much of it has arrived.
    header: [u8; FRAME_HEADER_LEN],
    header_len: usize,
    /// Payload bytes of the current frame still to come.
    payload_left: usize,
    /// Set while inside a GOAWAY: the payload kept so far.
    goaway: Option<Vec<u8>>,
}

impl FrameTracker {
    /// For the bytes a client writes: the 24-byte preface, then frames.
    pub fn client_to_server() -> Self {
        Self::after_preface(CLIENT_PREFACE.len())
    }

    /// For the bytes a client reads: frames from the first byte.
    pub fn server_to_client() -> Self {
        Self::after_preface(0)
    }

    fn after_preface(preface_left: usize) -> Self {
        Self {
            preface_left,
            header: [0; FRAME_HEADER_LEN],
            header_len: 0,
            payload_left: 0,
            goaway: None,
        }
    }

    /// Feeds the next bytes of the stream, in order, and calls `seen` for
    /// every PING and GOAWAY they complete.
    pub fn observe(&mut self, mut bytes: &[u8], mut seen: impl FnMut(Frame)) {
        while !bytes.is_empty() {
            if self.preface_left > 0 {
                let n = self.preface_left.min(bytes.len());
                self.preface_left -= n;
                bytes = &bytes[n..];
            } else if self.payload_left > 0 {
                let n = self.payload_left.min(bytes.len());
                if let Some(kept) = &mut self.goaway {
                    let room = (GOAWAY_FIXED_LEN + MAX_DEBUG_DATA).saturating_sub(kept.len());
                    kept.extend_from_slice(&bytes[..n.min(room)]);
                }
                self.payload_left -= n;
                bytes = &bytes[n..];
                if self.payload_left == 0 {
                    self.end_frame(&mut seen);
                }
            } else {
                let n = (FRAME_HEADER_LEN - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + n].copy_from_slice(&bytes[..n]);
                self.header_len += n;
                bytes = &bytes[n..];
                if self.header_len == FRAME_HEADER_LEN {
                    self.start_frame(&mut seen);
                }
            }
        }
    }

    /// A complete header: note the frame, then expect its payload.
    fn start_frame(&mut self, seen: &mut impl FnMut(Frame)) {
        let [l0, l1, l2, kind, flags, ..] = self.header;
        self.header_len = 0;
        self.payload_left = usize::from(l0) << 16 | usize::from(l1) << 8 | usize::from(l2);
        match kind {
            PING => seen(Frame::Ping {
                ack: flags & FLAG_ACK != 0,
            }),
            GOAWAY => self.goaway = Some(Vec::with_capacity(GOAWAY_FIXED_LEN + 32)),
            _ => {}
        }
        if self.payload_left == 0 {
            self.end_frame(seen);
        }
    }

    /// The end of a payload: report a GOAWAY (a malformed one, shorter than
    /// its fixed part, is a protocol error the HTTP/2 stack deals with).
    fn end_frame(&mut self, seen: &mut impl FnMut(Frame)) {
        if let Some(goaway) = self.goaway.take().as_deref().and_then(GoAway::parse) {
            seen(Frame::GoAway(goaway));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let len = u32::try_from(payload.len())
            .expect("small payload")
            .to_be_bytes();
        let mut bytes = vec![len[1], len[2], len[3], kind, flags];
        bytes.extend_from_slice(&stream.to_be_bytes());
        bytes.extend_from_slice(payload);
        bytes
    }

    fn goaway_payload(last_stream: u32, code: u32, debug: &[u8]) -> Vec<u8> {
        let mut payload = last_stream.to_be_bytes().to_vec();
        payload.extend_from_slice(&code.to_be_bytes());
        payload.extend_from_slice(debug);
        payload
    }

    /// What a server might send: SETTINGS, an empty SETTINGS ack, HEADERS,
    /// DATA, a PING, a PING ack, then GOAWAY ENHANCE_YOUR_CALM too_many_pings.
    fn server_stream() -> Vec<u8> {
        [
            frame(0x4, 0, 0, &[0, 3, 0, 0, 0, 100]),
            frame(0x4, FLAG_ACK, 0, &[]),
            frame(0x1, 0x4, 1, &[0x88]),
            frame(0x0, 0x1, 1, &[0; 300]),
            frame(PING, 0, 0, &[1; 8]),
            frame(PING, FLAG_ACK, 0, &[2; 8]),
            frame(
                GOAWAY,
                0,
                0,
                &goaway_payload(1, ENHANCE_YOUR_CALM, b"too_many_pings"),
            ),
        ]
        .concat()
    }

    fn expected_server_frames() -> Vec<Frame> {
        vec![
            Frame::Ping { ack: false },
            Frame::Ping { ack: true },
            Frame::GoAway(GoAway {
                last_stream_id: 1,
                error_code: ENHANCE_YOUR_CALM,
                debug_data: b"too_many_pings".to_vec(),
            }),
        ]
    }

    fn observe_in_chunks(tracker: &mut FrameTracker, bytes: &[u8], chunk: usize) -> Vec<Frame> {
        let mut seen = Vec::new();
        for piece in bytes.chunks(chunk) {
            tracker.observe(piece, |f| seen.push(f));
        }
        seen
    }

    /// Given a server's frames, when they arrive whole, one byte at a time, or
    /// in every chunk size that splits headers and payloads at odd places,
    /// then the same PINGs and the same GOAWAY are reported.
    #[test]
    fn reports_the_same_frames_however_the_bytes_are_split() {
        let bytes = server_stream();
        for chunk in 1..=bytes.len() {
            let mut tracker = FrameTracker::server_to_client();
            let seen = observe_in_chunks(&mut tracker, &bytes, chunk);
            assert_eq!(seen, expected_server_frames(), "chunks of {chunk} bytes");
        }
    }

    /// Given a client's bytes, the preface is skipped rather than read as a
    /// frame header (its bytes would otherwise look like a 5 MB frame).
    #[test]
    fn skips_the_client_preface() {
        let mut bytes = CLIENT_PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[]));
        bytes.extend(frame(PING, 0, 0, &[7; 8]));
        for chunk in [1, 5, 23, 24, 25, bytes.len()] {
            let mut tracker = FrameTracker::client_to_server();
            let seen = observe_in_chunks(&mut tracker, &bytes, chunk);
            assert_eq!(seen, vec![Frame::Ping { ack: false }], "chunks of {chunk}");
        }
    }

    /// A DATA frame whose payload happens to contain a PING header is not a
    /// PING: payloads are skipped, never scanned.
    #[test]
    fn never_mistakes_payload_bytes_for_frames() {
        let fake_ping = frame(PING, 0, 0, &[0; 8]);
        let bytes = frame(0x0, 0, 1, &fake_ping);
        let mut seen = Vec::new();
        FrameTracker::server_to_client().observe(&bytes, |f| seen.push(f));
        assert!(seen.is_empty(), "{seen:?}");
    }

    /// A GOAWAY with a long debug payload keeps only MAX_DEBUG_DATA bytes, and
    /// the frames after it are still found.
    #[test]
    fn bounds_the_debug_data_it_keeps() {
        let long = vec![b'x'; 10_000];
        let mut bytes = frame(GOAWAY, 0, 0, &goaway_payload(0, 0, &long));
        bytes.extend(frame(PING, FLAG_ACK, 0, &[0; 8]));
        let mut seen = Vec::new();
        FrameTracker::server_to_client().observe(&bytes, |f| seen.push(f));
        let [Frame::GoAway(goaway), Frame::Ping { ack: true }] = seen.as_slice() else {
            panic!("unexpected frames: {seen:?}");
        };
        assert_eq!(goaway.debug_data.len(), MAX_DEBUG_DATA);
        assert_eq!(goaway.error_code, 0);
        assert!(!goaway.is_too_many_pings());
    }

    #[test]
    fn names_error_codes() {
        assert_eq!(error_code_name(0), "NO_ERROR");
        assert_eq!(error_code_name(ENHANCE_YOUR_CALM), "ENHANCE_YOUR_CALM");
        assert_eq!(error_code_name(0xd), "HTTP_1_1_REQUIRED");
        assert_eq!(error_code_name(0x42), "0x42");
    }
}
