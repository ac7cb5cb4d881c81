//! The attacks of issues 6, 14, 23 and 43, each bounded in count and time, each against the
//! one loopback target only, and the one-line report every attack prints.
//!
//! Every attack runs between a [`Monitor`] (server RSS and CPU from `/proc`,
//! with a memory guard that ends the attack early) and a [`Probe`] (a
//! separate, well-behaved GetQuote client), so each line says both what the
//! attacker achieved and what other clients suffered meanwhile.

pub mod bigframes;
pub mod conn_flood;
pub mod contenttype;
pub mod deadlines;
pub mod lockout;
pub mod madeyoureset;
pub mod metricsidle;
pub mod pingflood;
pub mod reconnect;
pub mod slowbody;
pub mod stall;
pub mod tcpstall;
pub mod tlsflood;
pub mod wuflood;

use std::{
    collections::BTreeMap,
    future::Future,
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use h2_frames::{Reason, kind, reason_name};
use h2_peer::{
    h2client::{H2Conn, ReceiveWindows},
    raw::{FrameReader, RawConn, RawError, RawRead},
    tls::HarnessTls,
};
use serde::Serialize;
use tokio::{sync::mpsc, task::JoinSet, time::Instant};

use crate::{
    Error,
    measure::{
        monitor::{Monitor, ServerProcess, Usage},
        probe::{Probe, ProbeCall, ProbeSummary},
    },
    target::LoopbackTarget,
};

/// The attacks, in the order of issue 6's table and of `abuse all`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Zero-window connections that never read 5 MB ListRoutes pages.
    Stall,
    /// CVE-2025-8671: make the server reset streams itself.
    Madeyoureset,
    /// Hold many idle TCP connections; is a fresh client served?
    Fdflood,
    /// Connections that send nothing, or half the preface.
    Nopreface,
    /// ~4 MiB request bodies that never finish.
    Slowbody,
    /// Non-gRPC content-types.
    Contenttype,
    /// PING frames as fast as possible.
    Pingflood,
    /// Idle connections after two pages in 16 MiB frames (issue 14, A).
    Bigframes,
    /// WINDOW_UPDATEs on a closed stream (issue 14, D), or on open ones (issue 23).
    Wuflood,
    /// Tiny TCP receive buffers, huge HTTP/2 windows, never read (issue 14 B).
    Tcpstall,
    /// One client refills the response budget with window-0 streams (issue 14 C).
    Lockout,
    /// Many clients opening and closing connections as fast as they can (issue 23).
    Reconnect,
    /// Many clients completing TLS handshakes as fast as they can (issue 22; TLS only).
    Tlsflood,
    /// Malformed `grpc-timeout` values (issue 43).
    Badtimeout,
    /// Calls that bring no deadline, held against a slow server (issue 43).
    Nodeadline,
    /// Half-requests holding the metrics port while scrapes are tried (issue 43).
    Metricsidle,
}

impl Attack {
    pub const ALL: [Attack; 16] = [
        Attack::Stall,
        Attack::Madeyoureset,
        Attack::Fdflood,
        Attack::Nopreface,
        Attack::Slowbody,
        Attack::Contenttype,
        Attack::Pingflood,
        Attack::Bigframes,
        Attack::Wuflood,
        Attack::Tcpstall,
        Attack::Lockout,
        Attack::Reconnect,
        Attack::Tlsflood,
        Attack::Badtimeout,
        Attack::Nodeadline,
        Attack::Metricsidle,
    ];

    /// What the probe calls during this attack: GetQuote, except against
    /// `nodeadline`'s server, whose every GetQuote waits on purpose.
    fn probe_call(self) -> ProbeCall {
        match self {
            Attack::Nodeadline => ProbeCall::Health,
            _ => ProbeCall::GetQuote,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Attack::Stall => "stall",
            Attack::Madeyoureset => "madeyoureset",
            Attack::Fdflood => "fdflood",
            Attack::Nopreface => "nopreface",
            Attack::Slowbody => "slowbody",
            Attack::Contenttype => "contenttype",
            Attack::Pingflood => "pingflood",
            Attack::Bigframes => "bigframes",
            Attack::Wuflood => "wuflood",
            Attack::Tcpstall => "tcpstall",
            Attack::Lockout => "lockout",
            Attack::Reconnect => "reconnect",
            Attack::Tlsflood => "tlsflood",
            Attack::Badtimeout => "badtimeout",
            Attack::Nodeadline => "nodeadline",
            Attack::Metricsidle => "metricsidle",
        }
    }

    /// Whether the attack only means something against a TLS server
    /// (`abuse all` leaves it out in plaintext).
    pub fn needs_tls(self) -> bool {
        matches!(self, Attack::Tlsflood)
    }
}

/// How big and how long each attack is. Every value is a bound: no attack
/// opens more, sends more or lasts longer than these say.
#[derive(Debug, Clone, clap::Args)]
pub struct Knobs {
    /// Override every hold time below (stall, fdflood, nopreface, slowbody, bigframes), in seconds.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub hold_secs: Option<u64>,

    /// stall: streams on the single connection.
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub stall_streams_one: u32,
    /// stall: number of further connections...
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(0..=100))]
    pub stall_conns: u32,
    /// stall: ...with this many streams each.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub stall_streams_each: u32,
    /// stall: seconds the streams are held unread (the server's default send deadline is 30 s).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub stall_hold_secs: u64,

    /// madeyoureset: connections.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reset_conns: u32,
    /// madeyoureset: streams per connection (h2's own guard, when on, stops at 1024).
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub reset_streams: u32,
    /// madeyoureset: requests awaiting their answer per connection (the server's stream limit, if any, caps it).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub reset_inflight: u32,
    /// madeyoureset: send the WINDOW_UPDATE right behind the request, or after the response HEADERS.
    #[arg(long, value_enum, default_value_t = madeyoureset::ResetAfter::Request)]
    pub reset_after: madeyoureset::ResetAfter,
    /// madeyoureset: seconds at most.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub reset_secs: u64,

    /// fdflood: idle TCP connections held (run the server under `ulimit -n 256` to see EMFILE).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub fd_conns: u32,
    /// fdflood: seconds they are held (the server's default handshake timeout is 10 s).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub fd_hold_secs: u64,

    /// nopreface: connections that send nothing.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub silent_conns: u32,
    /// nopreface: connections that send half the 24-byte preface, then nothing.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub half_preface_conns: u32,
    /// nopreface: seconds they are held.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub nopreface_hold_secs: u64,

    /// slowbody: unfinished requests.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub slowbody_calls: u32,
    /// slowbody: connections they are spread over.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub slowbody_conns: u32,
    /// slowbody: seconds to wait for the server to end them (its default request deadline is 10 s).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub slowbody_hold_secs: u64,

    /// pingflood: seconds of flooding at most.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub ping_secs: u64,
    /// pingflood: PINGs at most.
    #[arg(long, default_value_t = 20_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    pub ping_max: u64,

    /// bigframes: connections that read a 1-route and a 2-route page in 16 MiB frames, then idle.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub bigframes_conns: u32,
    /// bigframes: seconds they idle before the server's RSS is read (its keepalive pings every 5 s).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub bigframes_hold_secs: u64,
    /// bigframes: 1-route pages each connection asks for at once besides its two (up to 98: 100 streams in all).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=98))]
    pub bigframes_extra_pages: u32,

    /// wuflood: connections flooding WINDOW_UPDATEs on a closed stream.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub wuflood_conns: u32,
    /// wuflood: seconds of flooding at most.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub wuflood_secs: u64,
    /// wuflood: WINDOW_UPDATEs written at most, over all connections (13 bytes each).
    #[arg(long, default_value_t = 1_000_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    pub wuflood_max: u64,
    /// wuflood: replace a connection the server closes, at once, until the time is up.
    #[arg(long)]
    pub wuflood_reconnect: bool,
    /// wuflood: flood a closed stream (issue 14) or full-page streams held open by a 1-byte window (issue 23).
    #[arg(long, value_enum, default_value_t = wuflood::FloodOn::Closed)]
    pub wuflood_on: wuflood::FloodOn,
    /// wuflood --wuflood-on open: full-page streams each connection holds open and floods.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub wuflood_streams: u32,

    /// tcpstall: connections.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub tcpstall_conns: u32,
    /// tcpstall: each connection's socket receive buffer (SO_RCVBUF), bytes.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(1..=1_048_576))]
    pub tcpstall_rcvbuf: u32,
    /// tcpstall: routes in the page each connection asks for (10: about 2 MB).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(i32).range(1..=25))]
    pub tcpstall_page_size: i32,
    /// tcpstall: seconds between a connection's GetQuote requests.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub tcpstall_poke_secs: u64,
    /// tcpstall: seconds the attack lasts.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub tcpstall_secs: u64,
    /// tcpstall: seconds between two reports of what is still open.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub tcpstall_sample_secs: u64,

    /// lockout: window-0 full-page streams the attacker opens per connection.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub lockout_streams: u32,
    /// lockout: seconds each attacker connection is held before it is replaced.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub lockout_hold_secs: u64,
    /// lockout: seconds the attack lasts.
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub lockout_secs: u64,
    /// lockout: milliseconds between the normal client's full-page calls.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub lockout_every_ms: u64,

    /// reconnect: clients that each open and close connections as fast as they can.
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub reconnect_clients: u32,
    /// reconnect: seconds the storm lasts.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub reconnect_secs: u64,
    /// reconnect: send the HTTP/2 preface and SETTINGS, and close once the server's SETTINGS arrive.
    #[arg(long)]
    pub reconnect_preface: bool,

    /// tlsflood: clients that each complete TLS handshakes as fast as they can.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1_024))]
    pub tlsflood_clients: u32,
    /// tlsflood: seconds the flood lasts.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub tlsflood_secs: u64,
    /// tlsflood: let the flooders resume sessions (off: every handshake is full).
    #[arg(long)]
    pub tlsflood_resume: bool,

    /// nodeadline: GetQuote calls without a deadline, 100 per connection (start the
    /// server with --fault-delay-ms 60000 so that they wait).
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub nodeadline_calls: u32,
    /// nodeadline: seconds they are held (the server's default deadline is 30 s).
    #[arg(long, default_value_t = 35, value_parser = clap::value_parser!(u64).range(1..=120))]
    pub nodeadline_hold_secs: u64,

    /// metricsidle: the server's metrics host:port (loopback only); without it the attack is skipped.
    #[arg(long)]
    pub metrics_target: Option<LoopbackTarget>,
    /// metricsidle: sockets that each send half a request line, reopened when closed.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=2_000))]
    pub metricsidle_conns: u32,
    /// metricsidle: seconds the attack lasts.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    pub metricsidle_secs: u64,
    /// metricsidle: sockets opened at most, over all of them.
    #[arg(long, default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub metricsidle_max_opens: u64,

    /// End an attack early once the server's RSS has grown by this many MiB (local servers only).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(64..=65_536))]
    pub rss_guard_mib: u64,

    /// Seconds to wait for the server to serve a GetQuote before each attack
    /// (after an earlier attack it may be busy finishing abandoned work).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub recovery_secs: u64,

    /// Probe GetQuote calls per second during each attack.
    #[arg(long, default_value_t = crate::measure::probe::PROBE_RATE, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub probe_rate: u32,
    /// Deadline of each probe call, in milliseconds.
    #[arg(long, default_value_t = crate::measure::probe::PROBE_DEADLINE.as_millis() as u64,
          value_parser = clap::value_parser!(u64).range(10..=60_000))]
    pub probe_deadline_ms: u64,
}

impl Knobs {
    fn hold(&self, default_secs: u64) -> Duration {
        Duration::from_secs(self.hold_secs.unwrap_or(default_secs))
    }

    pub fn stall_hold(&self) -> Duration {
        self.hold(self.stall_hold_secs)
    }

    pub fn fd_hold(&self) -> Duration {
        self.hold(self.fd_hold_secs)
    }

    pub fn nopreface_hold(&self) -> Duration {
        self.hold(self.nopreface_hold_secs)
    }

    pub fn slowbody_hold(&self) -> Duration {
        self.hold(self.slowbody_hold_secs)
    }

    pub fn bigframes_hold(&self) -> Duration {
        self.hold(self.bigframes_hold_secs)
    }

    pub fn probe_deadline(&self) -> Duration {
        Duration::from_millis(self.probe_deadline_ms)
    }
}

/// What an attack found: a one-sentence outcome and the counts behind it.
#[derive(Debug)]
pub struct Findings {
    pub outcome: String,
    pub details: serde_json::Value,
}

impl Findings {
    pub fn new(outcome: String, details: impl Serialize) -> Self {
        Self {
            outcome,
            details: serde_json::to_value(details).unwrap_or(serde_json::Value::Null),
        }
    }
}

/// Everything an attack needs.
#[derive(Debug, Clone)]
pub struct Context {
    pub target: LoopbackTarget,
    pub knobs: Knobs,
    /// The server's process when it is local, for RSS, CPU and open files.
    pub server: ServerProcess,
    /// TLS, if the target speaks it (`--tls-ca`): every connection of the
    /// attack, and the probe's, then runs the TLS handshake first.
    pub tls: Option<HarnessTls>,
}

impl Context {
    /// Where the attack's connections go.
    pub fn dial(&self) -> Dial {
        Dial {
            addr: self.target.addr(),
            tls: self.tls.clone(),
        }
    }
}

/// The target's address and its TLS, if any: what every attacking
/// connection is opened with, so each attack runs over TLS unchanged.
#[derive(Debug, Clone)]
pub struct Dial {
    pub addr: SocketAddr,
    pub tls: Option<HarnessTls>,
}

impl Dial {
    /// A raw HTTP/2 connection (nothing sent yet but the TLS handshake).
    pub async fn raw(&self) -> Result<RawConn, RawError> {
        RawConn::dial(self.addr, self.tls.as_ref()).await
    }

    /// An `h2` connection with these receive windows.
    pub async fn h2(&self, windows: ReceiveWindows) -> Result<H2Conn, Error> {
        H2Conn::dial(self.addr, windows, None, self.tls.as_ref()).await
    }

    /// [`Self::h2`], also advertising SETTINGS_MAX_FRAME_SIZE `max_frame`.
    pub async fn h2_with(&self, windows: ReceiveWindows, max_frame: u32) -> Result<H2Conn, Error> {
        H2Conn::dial(self.addr, windows, Some(max_frame), self.tls.as_ref()).await
    }
}

/// The one line an attack prints.
#[derive(Debug, Serialize)]
pub struct Report {
    pub attack: &'static str,
    pub outcome: String,
    /// Peak server RSS during the attack (null if the server is not local).
    pub rss_peak_mib: Option<f64>,
    /// p99 of the probe's GetQuote latency during the attack.
    pub probe_p99_ms: Option<f64>,
    /// Its median.
    pub probe_p50_ms: Option<f64>,
    pub probe_errors: usize,
    pub probe_calls: usize,
    /// Server CPU during the attack, % of one core.
    pub server_cpu_pct: Option<f64>,
    pub rss_start_mib: Option<f64>,
    pub rss_end_mib: Option<f64>,
    pub secs: f64,
    pub target: String,
    pub server_pid: Option<u32>,
    pub details: serde_json::Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Runs one attack between a monitor and a probe, and builds its line.
pub async fn run(attack: Attack, ctx: &Context) -> Result<Report, Error> {
    let (knobs, server) = (&ctx.knobs, &ctx.server);
    let probe = start_probe(ctx, attack.probe_call()).await?;
    let monitor = Monitor::start(server, knobs.rss_guard_mib * 1024 * 1024);
    let started = Instant::now();
    tracing::info!(attack = attack.name(), target = %ctx.target, "attack starts");
    let tripped = monitor.tripped();
    let findings = match attack {
        Attack::Stall => stall::run(ctx, tripped).await,
        Attack::Madeyoureset => madeyoureset::run(ctx, tripped).await,
        Attack::Fdflood => conn_flood::fdflood(ctx).await,
        Attack::Nopreface => conn_flood::nopreface(ctx).await,
        Attack::Slowbody => slowbody::run(ctx).await,
        Attack::Contenttype => contenttype::run(ctx).await,
        Attack::Pingflood => pingflood::run(ctx).await,
        Attack::Bigframes => bigframes::run(ctx).await,
        Attack::Wuflood => wuflood::run(ctx).await,
        Attack::Tcpstall => tcpstall::run(ctx).await,
        Attack::Lockout => lockout::run(ctx).await,
        Attack::Reconnect => reconnect::run(ctx).await,
        Attack::Tlsflood => tlsflood::run(ctx).await,
        Attack::Badtimeout => deadlines::badtimeout(ctx).await,
        Attack::Nodeadline => deadlines::nodeadline(ctx).await,
        Attack::Metricsidle => metricsidle::run(ctx).await,
    };
    let secs = started.elapsed().as_secs_f64();
    let probe = probe.stop().await;
    let usage = monitor.stop().await;
    let findings = findings?;
    Ok(report(attack, ctx, server, findings, usage, probe, secs))
}

async fn start_probe(ctx: &Context, call: ProbeCall) -> Result<Probe, Error> {
    let limit = Duration::from_secs(ctx.knobs.recovery_secs);
    let started = Instant::now();
    loop {
        match Probe::start_calling(
            call,
            &ctx.target,
            ctx.tls.as_ref(),
            ctx.knobs.probe_rate,
            ctx.knobs.probe_deadline(),
            1,
        )
        .await
        {
            Ok(probe) => {
                if started.elapsed() > Duration::from_secs(1) {
                    tracing::info!(
                        waited_s = started.elapsed().as_secs_f64(),
                        "server serves GetQuote again"
                    );
                }
                return Ok(probe);
            }
            Err(e) if started.elapsed() < limit => {
                tracing::info!("waiting for the server to serve {call:?}: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => {
                return Err(
                    format!("the server did not serve {call:?} within {limit:?}: {e}").into(),
                );
            }
        }
    }
}

fn report(
    attack: Attack,
    ctx: &Context,
    server: &ServerProcess,
    findings: Findings,
    usage: Option<Usage>,
    probe: ProbeSummary,
    secs: f64,
) -> Report {
    let mut notes = Vec::new();
    if let ServerProcess::Unknown(why) = server {
        notes.push(format!("no server RSS/CPU: {why}"));
    }
    if usage.is_some_and(|u| u.guard_tripped) {
        notes.push(format!(
            "ended early: server RSS grew by more than the {} MiB guard (--rss-guard-mib)",
            ctx.knobs.rss_guard_mib
        ));
    }
    if let Some(first) = &probe.first_error {
        notes.push(format!("first probe error: {first}"));
    }
    Report {
        attack: attack.name(),
        outcome: findings.outcome,
        rss_peak_mib: usage.map(|u| u.rss_peak_mib),
        probe_p99_ms: probe.p99_ms,
        probe_p50_ms: probe.p50_ms,
        probe_errors: probe.errors,
        probe_calls: probe.calls,
        server_cpu_pct: usage.map(|u| u.cpu_pct),
        rss_start_mib: usage.map(|u| u.rss_start_mib),
        rss_end_mib: usage.map(|u| u.rss_end_mib),
        secs: (secs * 100.0).round() / 100.0,
        target: ctx.target.to_string(),
        server_pid: server.pid(),
        details: findings.details,
        note: (!notes.is_empty()).then(|| notes.join("; ")),
    }
}

/// Counts of outcome labels, sorted by label for stable output.
pub type Tally = BTreeMap<String, usize>;

/// What the reading side of a raw connection saw.
#[derive(Debug, Default, Clone, Serialize)]
pub struct FramesSeen {
    /// Response HEADERS that opened a response (no END_STREAM).
    pub response_headers: u64,
    /// Response HEADERS that ended the stream at once (a trailers-only
    /// response: an error status, or a refusal).
    pub trailers_only: u64,
    pub rst_stream: Tally,
    pub ping_acks: u64,
    pub goaway: Option<GoawaySeen>,
    /// Seconds after the connection started that the server closed it.
    pub closed_after_s: Option<f64>,
}

/// A GOAWAY as reported.
#[derive(Debug, Clone, Serialize)]
pub struct GoawaySeen {
    pub error_code: String,
    pub debug_data: String,
    pub last_stream_id: u32,
    pub after_s: f64,
}

impl GoawaySeen {
    /// The code and debug data, e.g. `ENHANCE_YOUR_CALM "too_many_pings"`,
    /// for tallies.
    pub fn label(&self) -> String {
        match self.debug_data.as_str() {
            "" => self.error_code.clone(),
            debug => format!("{} {debug:?}", self.error_code),
        }
    }
}

/// What the server did to one stream, for a writer that paces on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEvent {
    /// Response HEADERS arrived; `end_stream` for a trailers-only answer.
    Headers { stream_id: u32, end_stream: bool },
    /// The server reset the stream.
    Reset { stream_id: u32 },
}

/// Reads every frame of a raw connection until it closes: tallies
/// RST_STREAMs, PING acks and the first GOAWAY into `seen`, forwards the
/// server's own PINGs to `pings` so the writer can acknowledge them, and
/// response HEADERS and resets to `events`, if given.
pub async fn watch_frames(
    mut reader: FrameReader<RawRead>,
    seen: Arc<Mutex<FramesSeen>>,
    pings: mpsc::Sender<[u8; 8]>,
    events: Option<mpsc::UnboundedSender<StreamEvent>>,
    started: Instant,
) {
    loop {
        let frame = match reader.next().await {
            Ok(Some(frame)) => frame,
            Ok(None) | Err(_) => break,
        };
        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        match frame.kind {
            kind::RST_STREAM => {
                let code = frame
                    .rst_stream()
                    .ok()
                    .flatten()
                    .unwrap_or(Reason::from(u32::MAX));
                *seen.rst_stream.entry(reason_name(code)).or_default() += 1;
                if let Some(events) = &events {
                    let _ = events.send(StreamEvent::Reset {
                        stream_id: frame.stream_id,
                    });
                }
            }
            kind::HEADERS => {
                if frame.ends_stream() {
                    seen.trailers_only += 1;
                } else {
                    seen.response_headers += 1;
                }
                if let Some(events) = &events {
                    let _ = events.send(StreamEvent::Headers {
                        stream_id: frame.stream_id,
                        end_stream: frame.ends_stream(),
                    });
                }
            }
            kind::PING if frame.is_ack() => seen.ping_acks += 1,
            kind::PING => {
                if let Ok(Some(payload)) = frame.ping() {
                    // Dropped if the writer is busy: the next PING is acked.
                    let _ = pings.try_send(payload);
                }
            }
            kind::GOAWAY => {
                if let (None, Ok(Some(goaway))) = (&seen.goaway, frame.goaway()) {
                    seen.goaway = Some(GoawaySeen {
                        error_code: reason_name(goaway.error_code),
                        debug_data: goaway.debug_text(),
                        last_stream_id: goaway.last_stream_id,
                        after_s: secs(started.elapsed()),
                    });
                }
            }
            _ => {}
        }
    }
    seen.lock()
        .unwrap_or_else(|e| e.into_inner())
        .closed_after_s = Some(secs(started.elapsed()));
}

/// Waits for every task in `set`, unless `tripped` (the memory guard)
/// resolves first; then aborts what is left, which drops its connections.
/// Returns true if the guard ended the wait.
pub async fn join_unless_tripped<T: 'static>(
    set: &mut JoinSet<T>,
    tripped: impl Future<Output = ()>,
) -> bool {
    let all_done = async { while set.join_next().await.is_some() {} };
    let guard_tripped = tokio::select! {
        () = all_done => false,
        () = tripped => true,
    };
    set.abort_all();
    while set.join_next().await.is_some() {}
    guard_tripped
}

/// How the calls of a held-calls attack (`slowbody`, `nodeadline`) ended:
/// each call's end, when the calls that did end ended, the calls a
/// connection could not open and the first error. Flattened into each
/// attack's details.
#[derive(Debug, Default, Serialize)]
pub struct HeldEnds {
    pub ends: Tally,
    /// Median seconds from opening to the server ending the call.
    pub end_median_s: Option<f64>,
    pub end_last_s: Option<f64>,
    pub not_opened: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

impl HeldEnds {
    /// Calls the server had not ended when the attack let go.
    pub fn pending(&self) -> usize {
        self.ends.get("pending").copied().unwrap_or(0)
    }

    /// How the calls the server did end ended (every end but `pending`).
    pub fn ended(&self) -> Tally {
        self.ends
            .iter()
            .filter(|(label, _)| label.as_str() != "pending")
            .map(|(label, n)| (label.clone(), *n))
            .collect()
    }
}

/// What one connection task of a held-calls attack returns: its calls'
/// ends, with how long each took, and how many calls it could not open.
pub type ConnectionEnds<E> = Result<(Vec<(h2_peer::h2client::CallEnd, Duration)>, u32), E>;

/// Joins every connection task of a held-calls attack; each returns its
/// calls' ends (with how long each took) and how many it could not open.
pub async fn gather_ends<E: std::fmt::Display + 'static>(
    connections: &mut JoinSet<ConnectionEnds<E>>,
) -> HeldEnds {
    let mut held = HeldEnds::default();
    let mut end_times = Vec::new();
    while let Some(joined) = connections.join_next().await {
        match joined {
            Ok(Ok((results, not_opened))) => {
                held.not_opened += not_opened;
                for (end, after) in results {
                    *held.ends.entry(end.label()).or_default() += 1;
                    if !matches!(end, h2_peer::h2client::CallEnd::Pending) {
                        end_times.push(after);
                    }
                }
            }
            Ok(Err(e)) => {
                held.first_error.get_or_insert_with(|| e.to_string());
            }
            Err(e) => {
                held.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    held.end_last_s = end_times.iter().max().copied().map(secs);
    held.end_median_s = median_secs(end_times);
    held
}

/// After a raw attack's last frame, how long to keep reading for the
/// server's last answers (acks, resets, a GOAWAY): 2 s.
pub const LINGER: Duration = Duration::from_secs(2);

impl FramesSeen {
    /// The server has sent a GOAWAY or closed the connection.
    pub fn ended(&self) -> bool {
        self.goaway.is_some() || self.closed_after_s.is_some()
    }
}

/// Waits up to [`LINGER`] for the server to end the connection.
pub async fn linger(seen: &Mutex<FramesSeen>) {
    let until = Instant::now() + LINGER;
    while Instant::now() < until && !seen.lock().unwrap_or_else(|e| e.into_inner()).ended() {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Locks an attack's tallies; a panicked holder's counts are still counts.
pub fn lock<T>(tallies: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    tallies.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seconds, rounded to the millisecond, for reports.
pub fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// The median of some durations, in seconds; `None` if there are none.
pub fn median_secs(mut times: Vec<Duration>) -> Option<f64> {
    if times.is_empty() {
        return None;
    }
    times.sort_unstable();
    Some(secs(times[(times.len() - 1) / 2]))
}

/// `{"a": 3, "b": 1}` as `3 a, 1 b`, largest first.
pub fn describe_tally(tally: &Tally) -> String {
    let mut items: Vec<(&String, &usize)> = tally.iter().collect();
    items.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    items
        .iter()
        .map(|(label, n)| format!("{n} {label}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_read_largest_first() {
        let mut tally = Tally::new();
        tally.insert("RESOURCE_EXHAUSTED".into(), 3);
        tally.insert("headers_then_stalled".into(), 7);
        tally.insert("OK".into(), 3);
        assert_eq!(
            describe_tally(&tally),
            "7 headers_then_stalled, 3 OK, 3 RESOURCE_EXHAUSTED"
        );
        assert_eq!(describe_tally(&Tally::new()), "");
    }

    #[test]
    fn median_is_the_lower_middle() {
        let d = Duration::from_millis;
        assert_eq!(median_secs(vec![d(30), d(10), d(20)]), Some(0.02));
        assert_eq!(median_secs(vec![d(10), d(20)]), Some(0.01));
        assert_eq!(median_secs(Vec::new()), None);
    }

    #[test]
    fn every_attack_has_a_distinct_name() {
        let mut names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), Attack::ALL.len());
    }
}
