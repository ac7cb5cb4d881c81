//! The rules every connection is held to, as one value the runtime builds
//! from the knobs ([`crate::knobs::Config`]) and hands to each connection.

use std::time::Duration;

use crate::metrics::connection::ConnectionMetrics;

/// The rules every connection is held to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionPolicy {
    /// Preface, SETTINGS and the ack of the server's SETTINGS must arrive
    /// within this.
    pub handshake_timeout: Duration,
    /// Least time between two client PINGs (`None`: no floor).
    pub min_ping_interval: Option<Duration>,
    /// Whether PINGs are allowed while no call is in flight.
    pub permit_pings_without_calls: bool,
    /// Control frames that make no progress a connection may send
    /// ([`crate::connection::control_frames::ControlFrameBudget`]; `None`: no guard).
    pub control_frame_budget: Option<u32>,
    /// The kernel closes the connection when its sent bytes stay
    /// unacknowledged this long, zero-window probes included
    /// (`TCP_USER_TIMEOUT`, see [`crate::knobs::KEEPALIVE_TIMEOUT`]).
    /// `None`: the kernel's default (about 15 minutes of retransmissions).
    pub tcp_user_timeout: Option<Duration>,
    /// Unsent bytes the kernel may queue for the connection
    /// (`TCP_NOTSENT_LOWAT`, see [`crate::knobs::TCP_NOTSENT_LOWAT`]).
    /// `None`: as many as the send buffer holds.
    pub tcp_notsent_lowat: Option<u32>,
    /// WINDOW_UPDATEs on open streams and the connection beyond what the
    /// DATA sent calls for ([`crate::connection::window_updates::WindowUpdateBudget`]; `None`: no guard).
    pub window_update_budget: Option<u32>,
    /// Where the connection counts what its rules decide (no-ops with
    /// metrics off).
    pub metrics: &'static ConnectionMetrics,
}
