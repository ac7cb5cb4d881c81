//! The connection metrics: what happens below the calls, counted where the
//! server already decides, under the project's own prefix `routing_server_`
//! (gRFC A79 keeps `grpc.` for gRPC itself). The one exception is the TLS
//! handshake counter, which gRFC A118 names.
//!
//! Every label has a fixed set of values, listed here. Gauges whose value
//! another part of the server already keeps (connections open, budget
//! bytes held) are read at scrape time ([`crate::metrics::Metrics::render`])
//! rather than kept twice.

use metrics::Counter;

use crate::metrics::registry::Registry;

/// Why the server sent a GOAWAY: the `reason` label, named as the GOAWAY's
/// debug data names it when it has any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GoawayReason {
    /// The ping floor (ENHANCE_YOUR_CALM).
    TooManyPings,
    /// The control-frame budget (ENHANCE_YOUR_CALM).
    TooManyControlFrames,
    /// The window-update budget (ENHANCE_YOUR_CALM).
    TooManyWindowUpdates,
    /// A response missed its send deadline (ENHANCE_YOUR_CALM).
    SendDeadline,
    /// The response budget evicted a stalled holder (ENHANCE_YOUR_CALM).
    StalledHolder,
    /// gRFC A9's connection age (graceful, NO_ERROR).
    MaxConnectionAge,
    /// Idle too long (graceful, NO_ERROR).
    MaxConnectionIdle,
    /// Idle after a burst of streams (graceful, NO_ERROR).
    IdleAfterBurst,
    /// The server is draining (graceful, NO_ERROR).
    ServerShutdown,
}

impl GoawayReason {
    pub const ALL: [Self; 9] = [
        Self::TooManyPings,
        Self::TooManyControlFrames,
        Self::TooManyWindowUpdates,
        Self::SendDeadline,
        Self::StalledHolder,
        Self::MaxConnectionAge,
        Self::MaxConnectionIdle,
        Self::IdleAfterBurst,
        Self::ServerShutdown,
    ];

    /// The label value: the debug data's words where the GOAWAY has them.
    pub fn name(self) -> &'static str {
        match self {
            Self::TooManyPings => "too_many_pings",
            Self::TooManyControlFrames => "too_many_control_frames",
            Self::TooManyWindowUpdates => "too_many_window_updates",
            Self::SendDeadline => "send_deadline",
            Self::StalledHolder => "stalled_holder",
            Self::MaxConnectionAge => "max_connection_age",
            Self::MaxConnectionIdle => "max_connection_idle",
            Self::IdleAfterBurst => "idle_after_burst",
            Self::ServerShutdown => "server_shutdown",
        }
    }
}

/// How a connection ended: the `how` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// HTTP/2 ended without an error: the client closed, or a graceful
    /// GOAWAY ran its course.
    Clean,
    /// An I/O or protocol error, or a GOAWAY ENHANCE_YOUR_CALM (whose
    /// socket the server shuts).
    Error,
    /// Never served: no preface or TLS handshake within the handshake
    /// timeout, or a failed handshake.
    NotServed,
}

/// The counters of a server without metrics.
pub static OFF: ConnectionMetrics = ConnectionMetrics::off();

/// The connection counters, registered once at start-up; each is an atomic.
#[derive(Debug)]
pub struct ConnectionMetrics {
    pub accepted: Counter,
    pub cap_refusals: Counter,
    closed: [Counter; 3],
    goaways: [Counter; GoawayReason::ALL.len()],
    pub pings_received: Counter,
    /// gRFC A118's `grpc.server.tls.handshakes`, by result.
    tls_ok: Counter,
    tls_failed: Counter,
}

impl ConnectionMetrics {
    pub fn new(registry: &Registry) -> Self {
        let closed = |how| {
            registry.counter(
                "routing_server_connections_closed_total",
                &[("how", how)],
                "Connections ended: clean (HTTP/2 ended without error), error, or not_served (no handshake)",
            )
        };
        let tls = |result| {
            registry.counter(
                "grpc_server_tls_handshakes_total",
                &[("grpc_tls_handshake_result", result)],
                "gRFC A118 grpc.server.tls.handshakes: TLS handshakes, by result",
            )
        };
        Self {
            accepted: registry.counter(
                "routing_server_connections_accepted_total",
                &[],
                "Connections accepted under the connection cap",
            ),
            cap_refusals: registry.counter(
                "routing_server_connection_cap_refusals_total",
                &[],
                "Connections closed at once because --max-connections were open",
            ),
            closed: [closed("clean"), closed("error"), closed("not_served")],
            goaways: GoawayReason::ALL.map(|reason| {
                registry.counter(
                    "routing_server_goaways_sent_total",
                    &[("reason", reason.name())],
                    "GOAWAYs the server sent, by the rule that sent them (the debug data's words)",
                )
            }),
            pings_received: registry.counter(
                "routing_server_pings_received_total",
                &[],
                "PING frames received (not ACKs): what the ping floor watches",
            ),
            tls_ok: tls("success"),
            tls_failed: tls("failure"),
        }
    }

    /// Counters that count nothing: the server without --metrics-listen.
    pub const fn off() -> Self {
        Self {
            accepted: Counter::noop(),
            cap_refusals: Counter::noop(),
            closed: [const { Counter::noop() }; 3],
            goaways: [const { Counter::noop() }; GoawayReason::ALL.len()],
            pings_received: Counter::noop(),
            tls_ok: Counter::noop(),
            tls_failed: Counter::noop(),
        }
    }

    /// Counters for the connections of one server run, kept for the
    /// process's life: every connection's policy holds a plain reference to
    /// them, so [`crate::connection::policy::ConnectionPolicy`] stays `Copy`
    /// and a connection pays no reference count. One per server start.
    pub fn leaked(registry: &Registry) -> &'static Self {
        Box::leak(Box::new(Self::new(registry)))
    }

    pub fn goaway(&self, reason: GoawayReason) {
        self.goaways[reason as usize].increment(1);
    }

    pub fn closed(&self, how: Closed) {
        self.closed[how as usize].increment(1);
    }

    pub fn tls_handshake(&self, ok: bool) {
        if ok { &self.tls_ok } else { &self.tls_failed }.increment(1);
    }
}
