//! The receive windows a client grants its server, read from the client's
//! own frames on the wire.
//!
//! An HTTP/2 receiver decides how much its peer may send before it hears
//! back (RFC 9113 §5.2): the server may have at most one window of response
//! bytes in flight, so a download can never go faster than window ÷ RTT.
//! tonic never reports the windows it uses, and with
//! `http2_adaptive_window(true)` hyper changes them while data flows, so the
//! counting connector reads them from what the client sends:
//!
//! - the **stream window**: `SETTINGS_INITIAL_WINDOW_SIZE` in each SETTINGS
//!   frame the client sends (65,535 until one says otherwise);
//! - the **connection window**: 65,535, plus the increment of every
//!   connection-level WINDOW_UPDATE the client sends, minus every DATA
//!   payload it receives. Its largest value is the most the server was ever
//!   allowed to have in flight on the connection.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use h2_frames::{DEFAULT_WINDOW, Frame, flag, kind, setting};
use serde::Serialize;
use tonic::transport::Endpoint;

/// hyper's client defaults, which tonic keeps unless told otherwise: a
/// 2 MiB stream window and a 5 MiB connection window (tonic's own docs say
/// 65,535; the wire says otherwise, see `window-client`).
pub const HYPER_STREAM_WINDOW: u32 = 2 * 1024 * 1024;
/// hyper's default connection window: 5 MiB.
pub const HYPER_CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;

/// The receive windows a client asks for: what `Endpoint` is told.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReceiveWindow {
    /// Both windows fixed at this many bytes: `initial_stream_window_size`
    /// and `initial_connection_window_size`. 65,535 is the RFC's default,
    /// where grpc-go and grpc-core start.
    Fixed(u32),
    /// Nothing set: hyper's 2 MiB stream and 5 MiB connection windows.
    TonicDefault,
    /// `http2_adaptive_window(true)`: hyper resets both windows to 65,535
    /// and grows them by BDP estimation, up to 16 MiB.
    Adaptive,
}

impl ReceiveWindow {
    /// `endpoint` with these windows.
    pub fn apply(self, endpoint: Endpoint) -> Endpoint {
        match self {
            Self::Fixed(window) => endpoint
                .initial_stream_window_size(window)
                .initial_connection_window_size(window),
            Self::TonicDefault => endpoint,
            Self::Adaptive => endpoint.http2_adaptive_window(true),
        }
    }

    /// A short name for reports and charts: `64KiB`, `tonic-default`, `adaptive`.
    pub fn label(self) -> String {
        match self {
            Self::Fixed(window) if window >= 1 << 20 && window % (1 << 20) == 0 => {
                format!("{}MiB", window >> 20)
            }
            Self::Fixed(window) => format!("{}KiB", window.div_ceil(1024)),
            Self::TonicDefault => "tonic-default".into(),
            Self::Adaptive => "adaptive".into(),
        }
    }
}

/// SETTINGS payload bytes kept: room for 16 settings of 6 bytes, more than
/// the 3 to 6 that hyper sends.
pub(crate) const SETTINGS_KEPT_BYTES: usize = 16 * 6;
/// A WINDOW_UPDATE payload is exactly 4 bytes.
pub(crate) const WINDOW_UPDATE_KEPT_BYTES: usize = 4;

/// What every connection of one connector granted, gathered as it happens.
#[derive(Debug, Default)]
pub(crate) struct SharedWindows {
    /// The stream window of the first SETTINGS frame; 0 until one is sent.
    first_stream_window: AtomicU32,
    largest_stream_window: AtomicU32,
    /// The connection window before the first DATA frame arrived; 0 until then.
    first_connection_window: AtomicU64,
    largest_connection_window: AtomicU64,
    settings_sent: AtomicU64,
    window_updates_sent: AtomicU64,
    data_bytes_received: AtomicU64,
}

/// The receive windows a connector's connections granted, and the DATA
/// they received, at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WindowsGranted {
    /// The stream window the first SETTINGS frame announced: what every
    /// stream starts with. 65,535 if it announced none.
    pub first_stream_window: u32,
    /// The largest stream window any SETTINGS frame announced.
    pub largest_stream_window: u32,
    /// The connection window when the first response DATA arrived: 65,535
    /// plus the WINDOW_UPDATEs sent at the handshake.
    pub first_connection_window: u64,
    /// The largest connection window granted at any moment.
    pub largest_connection_window: u64,
    /// SETTINGS frames sent, acks not counted.
    pub settings_sent: u64,
    /// WINDOW_UPDATE frames sent, for the connection and for streams.
    pub window_updates_sent: u64,
    /// DATA payload bytes received (padding included, as flow control counts them).
    pub data_bytes_received: u64,
}

impl WindowsGranted {
    /// The most a server may have in flight, in bytes, to `streams` streams
    /// at once on one such connection: each stream is held to its window,
    /// and all of them together to the connection's (at their largest).
    pub fn in_flight_limit(&self, streams: u32) -> u64 {
        (u64::from(streams) * u64::from(self.largest_stream_window))
            .min(self.largest_connection_window)
    }

    /// What happened between `earlier` and `self`: the DATA received in
    /// between; the windows are those of `self`.
    pub fn since(self, earlier: Self) -> Self {
        Self {
            settings_sent: self.settings_sent - earlier.settings_sent,
            window_updates_sent: self.window_updates_sent - earlier.window_updates_sent,
            data_bytes_received: self.data_bytes_received - earlier.data_bytes_received,
            ..self
        }
    }
}

/// The window ÷ RTT ceiling, in bit/s: with at most `window` bytes in flight
/// per round trip, no transfer can go faster. `None` without a round trip
/// (loopback: no ceiling from the window).
pub fn window_ceiling_bit_s(window: u64, rtt: std::time::Duration) -> Option<f64> {
    (!rtt.is_zero()).then(|| window as f64 * 8.0 / rtt.as_secs_f64())
}

impl SharedWindows {
    pub(crate) fn snapshot(&self) -> WindowsGranted {
        let or_default = |value: u64| {
            if value == 0 {
                DEFAULT_WINDOW.into()
            } else {
                value
            }
        };
        let first_stream_window = match self.first_stream_window.load(Ordering::Relaxed) {
            0 => DEFAULT_WINDOW,
            window => window,
        };
        WindowsGranted {
            first_stream_window,
            largest_stream_window: self
                .largest_stream_window
                .load(Ordering::Relaxed)
                .max(first_stream_window),
            first_connection_window: or_default(
                self.first_connection_window.load(Ordering::Relaxed),
            ),
            largest_connection_window: or_default(
                self.largest_connection_window.load(Ordering::Relaxed),
            ),
            settings_sent: self.settings_sent.load(Ordering::Relaxed),
            window_updates_sent: self.window_updates_sent.load(Ordering::Relaxed),
            data_bytes_received: self.data_bytes_received.load(Ordering::Relaxed),
        }
    }
}

/// One connection's flow-control arithmetic.
#[derive(Debug)]
pub(crate) struct WindowTracker {
    /// What the server may still send on the connection, in bytes. Signed:
    /// a server that overran the window would show here as negative.
    connection_window: i64,
    data_seen: bool,
    settings_seen: bool,
}

impl Default for WindowTracker {
    fn default() -> Self {
        Self {
            connection_window: DEFAULT_WINDOW.into(),
            data_seen: false,
            settings_seen: false,
        }
    }
}

impl WindowTracker {
    /// A frame this connection sent, with its SETTINGS or WINDOW_UPDATE
    /// payload kept.
    pub(crate) fn sent(&mut self, frame: Frame<'_>, shared: &SharedWindows) {
        match frame.header.kind {
            kind::SETTINGS if !frame.header.has(flag::ACK) => {
                shared.settings_sent.fetch_add(1, Ordering::Relaxed);
                let announced = h2_frames::settings(frame.kept)
                    .filter(|&(id, _)| id == setting::INITIAL_WINDOW_SIZE)
                    .map(|(_, value)| value)
                    .last();
                let first = !self.settings_seen;
                self.settings_seen = true;
                let window = match (announced, first) {
                    (Some(window), _) => window,
                    // The first SETTINGS leaves the window at its default.
                    (None, true) => DEFAULT_WINDOW,
                    (None, false) => return,
                };
                if first {
                    let _ = shared.first_stream_window.compare_exchange(
                        0,
                        window,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                }
                shared
                    .largest_stream_window
                    .fetch_max(window, Ordering::Relaxed);
            }
            kind::WINDOW_UPDATE => {
                shared.window_updates_sent.fetch_add(1, Ordering::Relaxed);
                let Some(increment) = h2_frames::window_increment(frame.kept) else {
                    return;
                };
                if frame.header.stream_id == 0 {
                    self.connection_window += i64::from(increment);
                    let window = u64::try_from(self.connection_window).unwrap_or(0);
                    shared
                        .largest_connection_window
                        .fetch_max(window, Ordering::Relaxed);
                }
            }
            _ => {}
        }
    }

    /// A frame this connection received (only DATA matters here).
    pub(crate) fn received(&mut self, frame: Frame<'_>, shared: &SharedWindows) {
        if frame.header.kind != kind::DATA {
            return;
        }
        if !self.data_seen {
            self.data_seen = true;
            let window = u64::try_from(self.connection_window).unwrap_or(0);
            let _ = shared.first_connection_window.compare_exchange(
                0,
                window,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            shared
                .largest_connection_window
                .fetch_max(window, Ordering::Relaxed);
        }
        self.connection_window -= i64::from(frame.header.len);
        shared
            .data_bytes_received
            .fetch_add(frame.header.len.into(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use h2_frames::{FrameTracker, encode_frame};

    use super::*;

    /// Feeds `bytes` through a tracker of one direction, into `windows`.
    fn feed(tracker: &mut FrameTracker, bytes: &[u8], mut each: impl FnMut(Frame<'_>)) {
        for byte in bytes.chunks(1) {
            tracker.feed(byte, &mut each);
        }
    }

    fn outbound() -> FrameTracker {
        FrameTracker::client_to_server()
            .keeping(kind::SETTINGS, SETTINGS_KEPT_BYTES)
            .keeping(kind::WINDOW_UPDATE, WINDOW_UPDATE_KEPT_BYTES)
    }

    fn setting_frame(window: u32) -> Vec<u8> {
        let mut payload = setting::ENABLE_PUSH.to_be_bytes().to_vec();
        payload.extend(0u32.to_be_bytes());
        payload.extend(setting::INITIAL_WINDOW_SIZE.to_be_bytes());
        payload.extend(window.to_be_bytes());
        encode_frame(kind::SETTINGS, 0, 0, &payload)
    }

    fn window_update(stream_id: u32, increment: u32) -> Vec<u8> {
        encode_frame(kind::WINDOW_UPDATE, 0, stream_id, &increment.to_be_bytes())
    }

    /// Given hyper's default client opening (a 2 MiB stream window in
    /// SETTINGS, then a connection WINDOW_UPDATE up to 5 MiB), when 3 MiB of
    /// DATA arrive and the client returns 1 MiB of it, then the windows read
    /// 2 MiB and 5 MiB, from the first frames and at most.
    #[test]
    fn reads_hyper_default_windows_from_the_handshake() {
        // Given
        let (stream, connection) = (2 << 20, 5 << 20);
        let mut opening = h2_frames::PREFACE.to_vec();
        opening.extend(setting_frame(stream));
        opening.extend(window_update(0, connection - DEFAULT_WINDOW));
        opening.extend(encode_frame(kind::SETTINGS, flag::ACK, 0, &[]));
        let shared = SharedWindows::default();
        let mut windows = WindowTracker::default();
        let (mut out, mut inbound) = (outbound(), FrameTracker::server_to_client());

        // When
        feed(&mut out, &opening, |f| windows.sent(f, &shared));
        let data = encode_frame(kind::DATA, 0, 1, &[0; 1 << 20]);
        for _ in 0..3 {
            inbound.feed(&data, |f| windows.received(f, &shared));
        }
        feed(&mut out, &window_update(0, 1 << 20), |f| {
            windows.sent(f, &shared)
        });

        // Then
        let seen = shared.snapshot();
        assert_eq!(
            seen,
            WindowsGranted {
                first_stream_window: stream,
                largest_stream_window: stream,
                first_connection_window: connection.into(),
                largest_connection_window: connection.into(),
                settings_sent: 1,
                window_updates_sent: 2,
                data_bytes_received: 3 << 20,
            }
        );
    }

    /// Given an adaptive client (first SETTINGS announces 65,535 and no
    /// connection WINDOW_UPDATE), when it later announces 1 MiB and raises
    /// the connection window to 1 MiB while 100 KiB are in flight, then the
    /// first windows read 65,535 and the largest 1 MiB.
    #[test]
    fn follows_an_adaptive_window_as_it_grows() {
        // Given
        let shared = SharedWindows::default();
        let mut windows = WindowTracker::default();
        let (mut out, mut inbound) = (outbound(), FrameTracker::server_to_client());
        let mut opening = h2_frames::PREFACE.to_vec();
        opening.extend(setting_frame(DEFAULT_WINDOW));
        feed(&mut out, &opening, |f| windows.sent(f, &shared));
        let data = encode_frame(kind::DATA, 0, 1, &[0; 100 << 10]);
        inbound.feed(&data, |f| windows.received(f, &shared));

        // When: the window grows to 1 MiB, counting the 100 KiB received.
        let grown: u32 = 1 << 20;
        let mut growth = setting_frame(grown);
        let unused = i64::from(DEFAULT_WINDOW) - (100 << 10);
        let increment = u32::try_from(i64::from(grown) - unused).expect("positive");
        growth.extend(window_update(0, increment));
        feed(&mut out, &growth, |f| windows.sent(f, &shared));

        // Then
        let seen = shared.snapshot();
        assert_eq!(seen.first_stream_window, DEFAULT_WINDOW);
        assert_eq!(seen.first_connection_window, u64::from(DEFAULT_WINDOW));
        assert_eq!(seen.largest_stream_window, grown);
        assert_eq!(seen.largest_connection_window, u64::from(grown));
        assert_eq!((seen.settings_sent, seen.window_updates_sent), (2, 1));
    }

    /// Given a connector that has opened nothing, its windows read the
    /// RFC's defaults, not zero.
    #[test]
    fn nothing_sent_reads_as_the_defaults() {
        let seen = SharedWindows::default().snapshot();
        assert_eq!(seen.first_stream_window, DEFAULT_WINDOW);
        assert_eq!(seen.largest_connection_window, u64::from(DEFAULT_WINDOW));
        assert_eq!(seen.data_bytes_received, 0);
    }
}
