//! The chapter's tuning knobs, in one place.
//!
//! Every value here is a default that `routing-server --help` lets a reader
//! override by flag or environment variable (see [`crate::Config`]).

use std::time::Duration;

/// Where the server listens unless `--listen` / `ROUTING_LISTEN` says otherwise.
/// Loopback only: the chapter's commands all use `localhost:9180`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9180";

/// Largest response message the server will encode: 16 MiB.
///
/// tonic's default *encode* limit is unlimited, so without this a bug could
/// stream any size at a client. 16 MiB leaves room for the full 25-route
/// catalog (about 5.0 MB) while still being a cap. A larger response is
/// never sent: the call fails with `OUT_OF_RANGE` ("encoded message length
/// too large").
pub const MAX_SEND_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// Largest request message the server will decode: 4 MiB, tonic's default.
///
/// Requests are small (1000 cargo items with short descriptions are ~25 kB), so
/// we keep the default on purpose: the chapter's rule is to raise a cap only
/// where a message really needs it. Larger requests get `OUT_OF_RANGE`.
pub const MAX_RECV_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

/// HTTP/2 keepalive: the server sends a PING on a connection after it has
/// been idle this long (5 s), to find dead peers and keep NAT/LB state warm.
///
/// Unlike grpc-go and grpc-java, tonic (hyper/h2) has no "permit keepalive
/// time": it does not police how often *clients* ping. Nothing here stops a
/// client pinging every second, and nothing sends `too_many_pings`.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// How long the server waits for the PING ack before it closes the
/// connection as dead: 20 s (grpc-go's default keepalive timeout).
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Graceful shutdown: after SIGTERM or Ctrl+C the server stops accepting,
/// lets calls in flight finish, and gives up waiting after 10 s.
/// compose.yaml allows 15 s before SIGKILL, so the drain can finish.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Responses are gzip-compressed when the client accepts gzip, except for
/// these methods. GetQuote answers are ~100 bytes: compressing them costs CPU
/// and can even make them larger. The level is fixed by tonic at 6.
pub const UNCOMPRESSED_METHODS: &[&str] = &["/shipping.routing.v1.RoutingService/GetQuote"];

/// The server's settings: the knobs above, each overridable by a flag or an
/// environment variable so readers can experiment without recompiling.
#[derive(Debug, Clone, clap::Args)]
pub struct Config {
    /// Address to listen on.
    #[arg(long, env = "ROUTING_LISTEN", default_value = DEFAULT_LISTEN)]
    pub listen: std::net::SocketAddr,

    /// Largest response message the server encodes, in bytes (send cap).
    #[arg(long, env = "ROUTING_MAX_SEND_BYTES", default_value_t = MAX_SEND_MESSAGE_BYTES)]
    pub max_send_bytes: usize,

    /// Largest request message the server decodes, in bytes (receive cap).
    #[arg(long, env = "ROUTING_MAX_RECV_BYTES", default_value_t = MAX_RECV_MESSAGE_BYTES)]
    pub max_recv_bytes: usize,

    /// Seconds a connection may sit idle before the server sends a keepalive PING.
    #[arg(long, env = "ROUTING_KEEPALIVE_SECS", default_value_t = KEEPALIVE_INTERVAL.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keepalive_secs: u64,

    /// Seconds to wait for a PING ack before closing the connection as dead.
    #[arg(long, env = "ROUTING_KEEPALIVE_TIMEOUT_SECS", default_value_t = KEEPALIVE_TIMEOUT.as_secs(),
          value_parser = clap::value_parser!(u64).range(1..))]
    pub keepalive_timeout_secs: u64,

    /// Seconds to let calls in flight finish after SIGTERM or Ctrl+C.
    #[arg(long, env = "ROUTING_DRAIN_SECS", default_value_t = DRAIN_TIMEOUT.as_secs())]
    pub drain_secs: u64,

    /// Never compress responses and refuse gzip requests (compare with and without).
    #[arg(long, env = "ROUTING_NO_GZIP")]
    pub no_gzip: bool,
}

impl Config {
    pub fn keepalive_interval(&self) -> Duration {
        Duration::from_secs(self.keepalive_secs)
    }

    pub fn keepalive_timeout(&self) -> Duration {
        Duration::from_secs(self.keepalive_timeout_secs)
    }

    pub fn drain_timeout(&self) -> Duration {
        Duration::from_secs(self.drain_secs)
    }
}

impl Default for Config {
    /// The chapter's settings, as `routing-server` runs with no flags.
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN
                .parse()
                .expect("DEFAULT_LISTEN is a valid socket address"),
            max_send_bytes: MAX_SEND_MESSAGE_BYTES,
            max_recv_bytes: MAX_RECV_MESSAGE_BYTES,
            keepalive_secs: KEEPALIVE_INTERVAL.as_secs(),
            keepalive_timeout_secs: KEEPALIVE_TIMEOUT.as_secs(),
            drain_secs: DRAIN_TIMEOUT.as_secs(),
            no_gzip: false,
        }
    }
}
