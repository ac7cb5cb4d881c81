//! The connection's HTTP/2 rules, one short handler per frame type, named
//! as grpc-go's `http2_server.go` names them (`handlePing`, ...): each
//! handler applies the rules that look at its frame and returns the GOAWAY
//! it wants written, if any. [`FrameRules`] holds the few fields they need.
//!
//! - [`FrameRules::on_settings`], [`FrameRules::on_priority`]: the
//!   control-frame budget ([`crate::connection::control_frames`]);
//! - [`FrameRules::on_window_update`]: the control-frame budget on a stream
//!   that is not open, the window-update budget
//!   ([`crate::connection::window_updates`]) on an open one or the
//!   connection;
//! - [`FrameRules::on_ping`]: the ping floor
//!   ([`crate::connection::ping_floor`]);
//! - [`FrameRules::on_headers`], [`FrameRules::on_rst_stream`]: the stream
//!   bookkeeping the other rules read;
//! - [`FrameRules::on_frame_sent`]: what the server's own frames change
//!   (DATA earns window updates, HEADERS and DATA forgive ping strikes,
//!   END_STREAM closes a stream).

use std::{collections::HashSet, sync::atomic::Ordering, time::Instant};

use h2_frames::{Frame, FrameHeader, GoAway, flag, kind};

use crate::call::info::ConnectionInfo;
use crate::connection::control_frames::{ControlFrameBudget, makes_no_progress};
use crate::connection::ping_floor::{PingPolicy, PingVerdict, ack_then};
use crate::connection::policy::ConnectionPolicy;
use crate::connection::verdict::ControlVerdict;
use crate::connection::window_updates::WindowUpdateBudget;
use crate::metrics::connection::{ConnectionMetrics, GoawayReason};

/// The bytes a rule wants written before the connection closes: its
/// GOAWAY, after the ACK of the PING that earned it for the ping floor.
type GoawayBytes = Vec<u8>;

/// The state the connection's rules keep, one named field per rule.
#[derive(Debug)]
pub struct FrameRules {
    /// The ping floor: the last PING's time and the strikes.
    pings: PingPolicy,
    /// Control frames that make no progress still allowed (`None`: the
    /// guard is off).
    control_frames: Option<ControlFrameBudget>,
    /// WINDOW_UPDATEs the DATA sent still calls for (`None`: the guard is
    /// off).
    window_updates: Option<WindowUpdateBudget>,
    /// Streams the client opened that the server has not ended yet.
    open_streams: HashSet<u32>,
    /// Highest stream id the client opened, for GOAWAY's last-stream-id.
    last_stream_id: u32,
    /// Where PINGs and each rule's GOAWAY are counted.
    metrics: &'static ConnectionMetrics,
}

impl FrameRules {
    pub fn new(policy: &ConnectionPolicy) -> Self {
        Self {
            pings: PingPolicy::new(policy.min_ping_interval, policy.permit_pings_without_calls),
            control_frames: policy.control_frame_budget.map(ControlFrameBudget::new),
            window_updates: policy.window_update_budget.map(WindowUpdateBudget::new),
            open_streams: HashSet::new(),
            last_stream_id: 0,
            metrics: policy.metrics,
        }
    }

    /// Counts a GOAWAY the connection sends for a rule outside this file
    /// (a per-call guard's, see [`crate::call::close`]).
    pub fn count_goaway(&self, reason: GoawayReason) {
        self.metrics.goaway(reason);
    }

    /// Highest stream id the client opened, for GOAWAY's last-stream-id.
    pub fn last_stream_id(&self) -> u32 {
        self.last_stream_id
    }

    /// A frame from the client: the GOAWAY its handler wants, if any.
    /// `going_away`: a GOAWAY is already on its way, so no rule asks for
    /// another (their budgets are still spent).
    pub fn on_frame_received(
        &mut self,
        frame: &Frame<'_>,
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        let h = frame.header;
        match h.kind {
            kind::SETTINGS => self.on_settings(&h, going_away, info),
            kind::PRIORITY => self.on_priority(&h, going_away, info),
            kind::WINDOW_UPDATE => self.on_window_update(&h, going_away, info),
            kind::HEADERS => {
                self.on_headers(&h, info);
                None
            }
            kind::RST_STREAM => {
                self.on_rst_stream(&h);
                None
            }
            kind::PING if !h.has(flag::ACK) => self.on_ping(frame.kept, going_away, info),
            _ => None,
        }
    }

    /// SETTINGS: an ack is the handshake's end (the connection's business);
    /// any other counts against the control-frame budget.
    pub fn on_settings(
        &mut self,
        h: &FrameHeader,
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        self.on_control_frame(h, going_away, info)
    }

    /// PRIORITY: h2 ignores them, so each counts against the control-frame
    /// budget.
    pub fn on_priority(
        &mut self,
        h: &FrameHeader,
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        self.on_control_frame(h, going_away, info)
    }

    /// WINDOW_UPDATE: on a stream that is not open it makes no progress
    /// (control-frame budget); on an open stream or the connection it
    /// must be one the DATA sent calls for (window-update budget).
    pub fn on_window_update(
        &mut self,
        h: &FrameHeader,
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        if let Some(goaway) = self.on_control_frame(h, going_away, info) {
            return Some(goaway);
        }
        let on_open = h.stream_id == 0 || self.open_streams.contains(&h.stream_id);
        // Rule: window-update budget.
        if let Some(updates) = self.window_updates.as_mut()
            && on_open
            && updates.on_window_update() == ControlVerdict::TooMany
            && !going_away
        {
            tracing::warn!(peer = %info.remote_addr, stream = h.stream_id, "too many window updates: GOAWAY ENHANCE_YOUR_CALM too_many_window_updates");
            self.metrics.goaway(GoawayReason::TooManyWindowUpdates);
            return Some(GoAway::too_many_window_updates(self.last_stream_id).encode());
        }
        None
    }

    /// HEADERS opening a new stream: real work, which earns control frames
    /// and window updates back, and may set the connection's peak.
    pub fn on_headers(&mut self, h: &FrameHeader, info: &ConnectionInfo) {
        if h.stream_id <= self.last_stream_id {
            return;
        }
        self.last_stream_id = h.stream_id;
        self.open_streams.insert(h.stream_id);
        info.peak_streams
            .fetch_max(self.open_streams.len(), Ordering::Relaxed);
        if let Some(budget) = self.control_frames.as_mut() {
            budget.on_stream_opened();
        }
        if let Some(updates) = self.window_updates.as_mut() {
            updates.on_stream_opened();
        }
    }

    /// RST_STREAM (either way): the stream is over.
    pub fn on_rst_stream(&mut self, h: &FrameHeader) {
        self.open_streams.remove(&h.stream_id);
    }

    /// PING (not an ack), with its payload: the ping floor. The strike past
    /// the limit wants the PING's ACK, then GOAWAY `too_many_pings`.
    pub fn on_ping(
        &mut self,
        payload: &[u8],
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        self.metrics.pings_received.increment(1);
        match self
            .pings
            .on_ping(Instant::now(), !self.open_streams.is_empty())
        {
            PingVerdict::Fine => None,
            PingVerdict::Strike(n) => {
                tracing::debug!(peer = %info.remote_addr, strikes = n, "ping strike");
                None
            }
            PingVerdict::TooMany if !going_away => {
                tracing::warn!(peer = %info.remote_addr, "too many pings: PING ACK, then GOAWAY ENHANCE_YOUR_CALM too_many_pings");
                self.metrics.goaway(GoawayReason::TooManyPings);
                Some(ack_then(
                    payload,
                    GoAway::too_many_pings(self.last_stream_id),
                ))
            }
            PingVerdict::TooMany => None,
        }
    }

    /// Rule: the control-frame budget, for a frame that makes no progress.
    fn on_control_frame(
        &mut self,
        h: &FrameHeader,
        going_away: bool,
        info: &ConnectionInfo,
    ) -> Option<GoawayBytes> {
        if let Some(budget) = self.control_frames.as_mut()
            && makes_no_progress(h, &self.open_streams)
            && budget.on_no_progress_frame() == ControlVerdict::TooMany
            && !going_away
        {
            tracing::warn!(peer = %info.remote_addr, frame = kind::name(h.kind), "too many control frames: GOAWAY ENHANCE_YOUR_CALM too_many_control_frames");
            self.metrics.goaway(GoawayReason::TooManyControlFrames);
            return Some(GoAway::too_many_control_frames(self.last_stream_id).encode());
        }
        None
    }

    /// A frame the server sent.
    pub fn on_frame_sent(&mut self, h: &FrameHeader) {
        if let (kind::DATA, Some(updates)) = (h.kind, self.window_updates.as_mut()) {
            updates.on_data_sent(h.len);
        }
        match h.kind {
            kind::HEADERS | kind::DATA => {
                self.pings.on_headers_or_data_sent();
                if h.has(flag::END_STREAM) {
                    self.open_streams.remove(&h.stream_id);
                }
            }
            kind::RST_STREAM => self.on_rst_stream(h),
            _ => {}
        }
    }
}
