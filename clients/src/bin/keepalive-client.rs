//! `keepalive-client`: HTTP/2 keepalive, the whole lesson, in three phases
//! that run at the same time on channels of their own, and a fourth that
//! needs an emulated NAT:
//!
//! 1. **idle**: a channel with the chapter's keepalive calls GetQuote, stays
//!    idle longer than the keepalive interval, and calls again. The
//!    connection survives the gap, and the PINGs that crossed it are counted.
//! 2. **dead peer**: two channels reach the server through relays inside this
//!    process. After a first call, both relays silently stop forwarding, as a
//!    peer behind a dead NAT or load balancer would. The channel with
//!    keepalive fails its next call with UNAVAILABLE after about interval +
//!    timeout; the control channel, without keepalive, is still waiting at
//!    three times that, and is abandoned.
//! 3. **ping floor**: a channel that pings every second while idle, faster
//!    than the server permits (5 s), is told to back off with GOAWAY
//!    `ENHANCE_YOUR_CALM` and debug data `too_many_pings`. tonic does not
//!    report the GOAWAY; the client reads it off the wire.
//! 4. **nat** (only when asked for, with `--phases nat`): the idle gap again,
//!    through an emulated link whose NAT forgets a flow after
//!    `--nat-idle-secs` without a byte. A channel with the chapter's 5 s
//!    keepalive keeps its flow; a channel with no keepalive at either end
//!    loses it, and its next call goes unanswered until it is abandoned.
//!    Either end's PINGs keep a NAT entry alive, and this server PINGs every
//!    5 s, so that control needs a server that does not: `--quiet-target`,
//!    e.g. a second `routing-server --keepalive-secs 3600`. Against the
//!    default server, a channel without keepalive survives too, on the
//!    server's PINGs: the third channel shows that.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin keepalive-client
//! {"client":"keepalive","result":"SURVIVED","connections":1,"idle_s":8,"idle_bytes_sent":34,"idle_bytes_received":34,"idle_pings_sent":1,"idle_pings_received":1,"dead_peer":"DETECTED","dead_peer_detect_s":2.001838,"no_keepalive":"STILL_HANGING","no_keepalive_waited_s":6.006421,"ping_floor":"TOO_MANY_PINGS","ping_floor_pings_sent":4,"ping_floor_waited_s":4.010772}
//! ```
//!
//! The NAT phase, with a quiet server on port 9182:
//!
//! ```console
//! $ cargo run --release -p routing-server -- --listen 127.0.0.1:9182 --keepalive-secs 3600 &
//! $ cargo run --release -p routing-clients --bin keepalive-client -- --phases nat --link wan --nat-idle-secs 6 --quiet-target 127.0.0.1:9182
//! {"client":"keepalive","link":{"preset":"wan","rtt_ms":60.0,"mbit":20.0,"queue_kib":64,"nat_idle_s":6},"nat_idle_timeout_s":6,"nat_gap_s":8,"nat_quiet_target":"127.0.0.1:9182","nat_keepalive":"SURVIVED","nat_keepalive_pings_sent":1,"nat_no_keepalive":"ABANDONED","nat_no_keepalive_pings":0,"nat_no_keepalive_waited_s":3.001081,"nat_server_keepalive":"SURVIVED","nat_server_keepalive_pings_received":1}
//! ```
//!
//! SURVIVED means both answers are identical and both calls used the same,
//! single connection. The idle bytes are PING frames (17 bytes each) and
//! their acks: the client's own PING and the server's, each acked.
//! `--phases idle,dead-peer,ping-floor,nat` picks phases; `--help` lists the
//! intervals to try. Each phase reports what it saw; the client exits 1 only
//! when a phase cannot run (no connection, a first call fails) or the idle
//! connection does not survive.

use std::{future::Future, process::ExitCode, time::Duration};

use clap::Parser;
use h2_frames::reason_name;
use routing_clients::{
    Baseline, Error, LinkReport, SilentRelay, TlsReport, WireSnapshot, finish, init_tracing,
    rpc_error, sample_quote_request, seconds, target::Target,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;
use tokio::time::Instant;
use tonic::transport::{Channel, Endpoint};

/// Send a PING after 5 s without traffic: the chapter's client keepalive,
/// and the chapter's servers' floor (grpc-java and grpc-go servers with
/// their defaults permit only one PING every 5 min).
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Declare the connection dead if a PING is not acked within 20 s.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);
/// Dead peer: PING after 1 s, give up 1 s later. Scaled down from 5 s and
/// 20 s so that the demonstration takes seconds; detection takes interval +
/// timeout either way.
const DEAD_PEER_PING_AFTER: Duration = Duration::from_secs(1);
const DEAD_PEER_ACK_WITHIN: Duration = Duration::from_secs(1);
/// The control channel is abandoned at 3x the time keepalive needed: long
/// enough that nobody mistakes the hang for a slow answer.
const HANG_FACTOR: u32 = 3;
/// Ping floor: PING every 1000 ms while idle, five times faster than the
/// 5 s the server permits.
const FAST_PING: Duration = Duration::from_millis(1000);
/// Ping floor: wait at most 10 s for the GOAWAY. Three strikes at 1 s take
/// about 3 s; the rest is room for a busy machine.
const PING_FLOOR_WAIT: Duration = Duration::from_secs(10);
/// NAT: the call after the gap is abandoned after 3 s without an answer, 50
/// round trips of the `wan` link: no answer is merely slow by then.
const NAT_ABANDON: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Phase {
    /// Survive an idle gap, PINGs counted.
    Idle,
    /// Catch a silent peer; a channel without keepalive hangs.
    DeadPeer,
    /// Ping below the server's floor and get too_many_pings.
    PingFloor,
    /// Stay idle past a NAT's idle timeout (needs --nat-idle-secs):
    /// keepalive keeps the flow, silence loses it.
    Nat,
}

#[derive(Debug, Parser)]
#[command(
    version,
    about = "HTTP/2 keepalive in three phases: an idle gap survived, a dead peer caught, a ping floor enforced"
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
    /// Phases to run, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "idle,dead-peer,ping-floor"
    )]
    phases: Vec<Phase>,
    /// Idle: seconds to stay idle between the two calls.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=3600))]
    idle_secs: u64,
    /// Idle: send a keepalive PING after this many seconds without traffic.
    #[arg(long, default_value_t = KEEPALIVE_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    keepalive_secs: u64,
    /// Idle: close the connection as dead if a PING is not acked within this many seconds.
    #[arg(long, default_value_t = KEEPALIVE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    keepalive_timeout_secs: u64,
    /// Dead peer: PING after this many seconds of silence while a call waits.
    #[arg(long, default_value_t = DEAD_PEER_PING_AFTER.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    dead_peer_keepalive_secs: u64,
    /// Dead peer: fail the connection if a PING is not acked within this many seconds.
    #[arg(long, default_value_t = DEAD_PEER_ACK_WITHIN.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    dead_peer_timeout_secs: u64,
    /// Ping floor: PING this often while idle, in milliseconds.
    #[arg(long, default_value_t = FAST_PING.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    fast_ping_ms: u64,
    /// Ping floor: seconds to wait for the server's GOAWAY.
    #[arg(long, default_value_t = PING_FLOOR_WAIT.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    ping_floor_wait_secs: u64,
    /// NAT: a server that sends no keepalive PINGs of its own (such as
    /// `routing-server --keepalive-secs 3600`). Either end's PINGs keep a NAT
    /// entry alive, so only against such a server does a channel without
    /// keepalive lose its flow. Without it, the NAT phase uses --target.
    #[arg(long, env = "ROUTING_QUIET_TARGET")]
    quiet_target: Option<Target>,
    /// NAT: abandon the call after the gap when it has no answer within this many seconds.
    #[arg(long, default_value_t = NAT_ABANDON.as_secs(), value_parser = clap::value_parser!(u64).range(1..=600))]
    nat_abandon_secs: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    #[serde(flatten)]
    idle: Option<IdleReport>,
    #[serde(flatten)]
    dead_peer: Option<DeadPeerReport>,
    #[serde(flatten)]
    ping_floor: Option<PingFloorReport>,
    #[serde(flatten)]
    nat: Option<NatReport>,
}

#[derive(Debug, Serialize)]
struct IdleReport {
    result: &'static str,
    connections: u64,
    idle_s: u64,
    idle_bytes_sent: u64,
    idle_bytes_received: u64,
    idle_pings_sent: u64,
    idle_pings_received: u64,
}

#[derive(Debug, Serialize)]
struct DeadPeerReport {
    dead_peer: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_peer_detect_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dead_peer_waited_s: Option<f64>,
    no_keepalive: &'static str,
    no_keepalive_waited_s: f64,
}

#[derive(Debug, Serialize)]
struct NatReport {
    nat_idle_timeout_s: u64,
    nat_gap_s: u64,
    /// The server without PINGs of its own; absent when none was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    nat_quiet_target: Option<String>,
    /// Client keepalive every 5 s, to the quiet server.
    nat_keepalive: &'static str,
    nat_keepalive_pings_sent: u64,
    /// No keepalive at either end (when the quiet server was given).
    nat_no_keepalive: &'static str,
    nat_no_keepalive_pings: u64,
    nat_no_keepalive_waited_s: f64,
    /// No client keepalive, to --target, whose server PINGs every 5 s; only
    /// with a quiet server to compare.
    #[serde(skip_serializing_if = "Option::is_none")]
    nat_server_keepalive: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nat_server_keepalive_pings_received: Option<u64>,
}

#[derive(Debug, Serialize)]
struct PingFloorReport {
    ping_floor: String,
    ping_floor_pings_sent: u64,
    ping_floor_waited_s: f64,
}

// One thread: the phases mostly wait, and timings are steadier without
// wake-ups crossing threads.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    finish(run(Args::parse()).await)
}

async fn run(args: Args) -> Result<Report, Error> {
    let wanted = |phase| args.phases.contains(&phase);
    let (idle, dead_peer, ping_floor, nat) = tokio::try_join!(
        optional(wanted(Phase::Idle), idle_phase(&args)),
        optional(wanted(Phase::DeadPeer), dead_peer_phase(&args)),
        optional(wanted(Phase::PingFloor), ping_floor_phase(&args)),
        optional(wanted(Phase::Nat), nat_phase(&args)),
    )?;
    Ok(Report {
        client: "keepalive",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        idle,
        dead_peer,
        ping_floor,
        nat,
    })
}

async fn optional<T>(
    wanted: bool,
    phase: impl Future<Output = Result<T, Error>>,
) -> Result<Option<T>, Error> {
    if wanted {
        phase.await.map(Some)
    } else {
        Ok(None)
    }
}

/// Idle: GetQuote, stay idle past the keepalive interval, GetQuote again.
async fn idle_phase(args: &Args) -> Result<IdleReport, Error> {
    let endpoint = args
        .baseline
        .endpoint()?
        // The lesson: PING after this long without traffic (5 s by default)...
        .http2_keep_alive_interval(Duration::from_secs(args.keepalive_secs))
        // ...declare the connection dead if the ack takes longer (20 s)...
        .keep_alive_timeout(Duration::from_secs(args.keepalive_timeout_secs))
        // ...and keep pinging when no call is in flight, so idle gaps are covered.
        .keep_alive_while_idle(true);
    let wire = args.baseline.wire();
    let request = sample_quote_request();

    let channel = args.baseline.connect(&endpoint, wire.clone()).await?;
    let mut client = RoutingServiceClient::new(channel);
    let first = client
        .get_quote(request.clone())
        .await
        .map_err(rpc_error("GetQuote"))?;

    let before_idle = wire.snapshot();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let idle = wire.snapshot().since(before_idle);

    let second = client
        .get_quote(request)
        .await
        .map_err(rpc_error("GetQuote after the idle gap"))?;
    let connections = wire.snapshot().connections;

    if first.get_ref() != second.get_ref() || connections != 1 {
        return Err(format!(
            "did not survive the idle gap: {connections} connections, answers identical: {}",
            first.get_ref() == second.get_ref()
        )
        .into());
    }
    Ok(IdleReport {
        result: "SURVIVED",
        connections,
        idle_s: args.idle_secs,
        idle_bytes_sent: idle.bytes_written,
        idle_bytes_received: idle.bytes_read,
        idle_pings_sent: idle.pings_sent,
        idle_pings_received: idle.pings_received,
    })
}

/// Dead peer: a keepalive channel and a control without keepalive, each
/// through a relay that goes silent after a first call.
async fn dead_peer_phase(args: &Args) -> Result<DeadPeerReport, Error> {
    let ping_after = Duration::from_secs(args.dead_peer_keepalive_secs);
    let ack_within = Duration::from_secs(args.dead_peer_timeout_secs);
    // No wait in this phase lasts longer than this.
    let bound = HANG_FACTOR * (ping_after + ack_within);
    let (watched, control) = tokio::try_join!(
        RelayedClient::open(args, Some((ping_after, ack_within)), bound),
        RelayedClient::open(args, None, bound),
    )?;

    // The peer vanishes for both channels at once: no FIN, no RST, silence.
    watched.relay.go_silent();
    control.relay.go_silent();
    let started = Instant::now();
    let mut control_call = {
        let mut client = control.client.clone();
        tokio::spawn(async move { client.get_quote(sample_quote_request()).await })
    };
    let mut client = watched.client.clone();
    let watched_call = tokio::time::timeout(bound, client.get_quote(sample_quote_request())).await;
    let elapsed = started.elapsed();

    let (dead_peer, detect_s, waited_s, give_up_at) = match watched_call {
        Ok(Err(status)) if status.code() == tonic::Code::Unavailable => {
            tracing::info!(?elapsed, message = status.message(), "dead peer detected");
            let give_up_at = started + HANG_FACTOR * elapsed;
            ("DETECTED", Some(seconds(elapsed)), None, give_up_at)
        }
        Err(_) => (
            "NOT_DETECTED",
            None,
            Some(seconds(elapsed)),
            started + bound,
        ),
        Ok(Err(status)) => {
            return Err(format!(
                "dead peer: expected UNAVAILABLE, got {:?}: {}",
                status.code(),
                status.message()
            )
            .into());
        }
        Ok(Ok(_)) => return Err("dead peer: a call through the silent relay succeeded".into()),
    };

    let control_outcome = tokio::time::timeout_at(give_up_at, &mut control_call).await;
    let no_keepalive_waited = started.elapsed();
    // Abandon the control call: nothing else would ever end it.
    control_call.abort();
    let no_keepalive = match control_outcome {
        Err(_) => "STILL_HANGING",
        Ok(ended) => {
            tracing::warn!(?ended, "the call without keepalive ended on its own");
            "ENDED"
        }
    };
    Ok(DeadPeerReport {
        dead_peer,
        dead_peer_detect_s: detect_s,
        dead_peer_waited_s: waited_s,
        no_keepalive,
        no_keepalive_waited_s: seconds(no_keepalive_waited),
    })
}

/// A channel through its own [`SilentRelay`], after one successful call.
struct RelayedClient {
    relay: SilentRelay,
    client: RoutingServiceClient<Channel>,
}

impl RelayedClient {
    /// `keepalive` is (PING after, ack within); `None` is the control.
    async fn open(
        args: &Args,
        keepalive: Option<(Duration, Duration)>,
        bound: Duration,
    ) -> Result<Self, Error> {
        let connect_timeout = Duration::from_secs(args.baseline.connect_timeout_secs);
        let relay = SilentRelay::start(args.baseline.target.to_string(), connect_timeout).await?;
        // The call deadline is raised past this phase's own bounds: here only
        // keepalive, or the phase giving up, may end a call.
        let mut endpoint = args
            .baseline
            .endpoint_at(relay.url())?
            .timeout(HANG_FACTOR * bound + Duration::from_secs(1));
        if let Some((ping_after, ack_within)) = keepalive {
            // PING only while a call waits for its answer: that is when a
            // dead peer costs something.
            endpoint = endpoint
                .http2_keep_alive_interval(ping_after)
                .keep_alive_timeout(ack_within);
        }
        let channel = args
            .baseline
            .connect(&endpoint, args.baseline.wire())
            .await?;
        let mut client = RoutingServiceClient::new(channel);
        client
            .get_quote(sample_quote_request())
            .await
            .map_err(rpc_error("GetQuote through the relay"))?;
        Ok(Self { relay, client })
    }
}

/// NAT: channels through a link whose NAT forgets idle flows, each idle for
/// longer than the NAT's timeout between two calls. With the chapter's
/// keepalive, the client's PINGs keep the flow; without keepalive at either
/// end, the flow is forgotten and the next call goes unanswered; a server
/// that PINGs keeps the flow for a client that does not.
async fn nat_phase(args: &Args) -> Result<NatReport, Error> {
    let Some(timeout) = args.baseline.link().nat_idle else {
        return Err(
            "the nat phase needs a NAT: add --nat-idle-secs (e.g. 6, below --idle-secs)".into(),
        );
    };
    if args.quiet_target.is_none() {
        // Not an error: the phase still shows keepalive keeping the flow. But
        // the control cannot fail against a server that PINGs, so say so
        // before a reader takes its SURVIVED for a verdict on keepalive.
        tracing::warn!(
            target = %args.baseline.target,
            "no --quiet-target: the channel without keepalive talks to --target, whose \
             server PINGs (every 5 s by default) and so keeps the NAT entry alive; \
             nat_no_keepalive will say SURVIVED. For the control, start \
             `routing-server --listen 127.0.0.1:9182 --keepalive-secs 3600` and pass \
             --quiet-target 127.0.0.1:9182"
        );
    }
    let quiet = args.quiet_target.as_ref().unwrap_or(&args.baseline.target);
    let keepalive = args
        .baseline
        .endpoint_at(quiet.uri())?
        // The lesson: PING after 5 s without traffic, even with no call in flight.
        .http2_keep_alive_interval(Duration::from_secs(args.keepalive_secs))
        .keep_alive_timeout(Duration::from_secs(args.keepalive_timeout_secs))
        .keep_alive_while_idle(true);
    let silent = args.baseline.endpoint_at(quiet.uri())?;
    let pinged = args.baseline.endpoint()?;
    let compare = args.quiet_target.is_some();
    let (kept, lost, pinged) = tokio::try_join!(
        idle_past_the_nat(args, &keepalive),
        idle_past_the_nat(args, &silent),
        optional(compare, idle_past_the_nat(args, &pinged)),
    )?;
    Ok(NatReport {
        nat_idle_timeout_s: timeout.as_secs(),
        nat_gap_s: args.idle_secs,
        nat_quiet_target: args.quiet_target.as_ref().map(ToString::to_string),
        nat_keepalive: kept.outcome,
        nat_keepalive_pings_sent: kept.gap.pings_sent,
        nat_no_keepalive: lost.outcome,
        nat_no_keepalive_pings: lost.gap.pings_sent + lost.gap.pings_received,
        nat_no_keepalive_waited_s: seconds(lost.waited),
        nat_server_keepalive: pinged.as_ref().map(|p| p.outcome),
        nat_server_keepalive_pings_received: pinged.map(|p| p.gap.pings_received),
    })
}

/// One channel's NAT run: what happened to the call after the gap.
struct NatOutcome {
    /// SURVIVED (answered on the same connection), ABANDONED (no answer in
    /// time) or FAILED (an error status).
    outcome: &'static str,
    /// What crossed the wire during the gap.
    gap: WireSnapshot,
    /// How long the call after the gap was waited for.
    waited: Duration,
}

/// GetQuote through a fresh link (its own NAT entry), the idle gap, and
/// GetQuote again, abandoned after `--nat-abandon-secs`.
async fn idle_past_the_nat(args: &Args, endpoint: &Endpoint) -> Result<NatOutcome, Error> {
    let wire = args.baseline.wire();
    let channel = args.baseline.connect(endpoint, wire.clone()).await?;
    let mut client = RoutingServiceClient::new(channel);
    client
        .get_quote(sample_quote_request())
        .await
        .map_err(rpc_error("GetQuote before the NAT gap"))?;

    let before_gap = wire.snapshot();
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    let gap = wire.snapshot().since(before_gap);

    let started = Instant::now();
    let abandon = Duration::from_secs(args.nat_abandon_secs);
    let answer = tokio::time::timeout(abandon, client.get_quote(sample_quote_request())).await;
    let waited = started.elapsed();
    let outcome = match answer {
        Ok(Ok(_)) if wire.snapshot().connections == 1 => "SURVIVED",
        Ok(Ok(_)) => "RECONNECTED",
        Ok(Err(status)) => {
            tracing::info!(code = ?status.code(), message = status.message(), "call after the NAT gap failed");
            "FAILED"
        }
        Err(_) => "ABANDONED",
    };
    Ok(NatOutcome {
        outcome,
        gap,
        waited,
    })
}

/// Ping floor: ping faster than the server permits, and wait for its GOAWAY.
async fn ping_floor_phase(args: &Args) -> Result<PingFloorReport, Error> {
    let endpoint = args
        .baseline
        .endpoint()?
        // Too eager: a PING every second, even with no call in flight.
        .http2_keep_alive_interval(Duration::from_millis(args.fast_ping_ms))
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    let wire = args.baseline.wire();
    let channel = args.baseline.connect(&endpoint, wire.clone()).await?;
    let mut client = RoutingServiceClient::new(channel);
    client
        .get_quote(sample_quote_request())
        .await
        .map_err(rpc_error("GetQuote"))?;

    let started = Instant::now();
    let wait = Duration::from_secs(args.ping_floor_wait_secs);
    let goaway = tokio::time::timeout(wait, wire.goaway_received()).await;
    let waited = seconds(started.elapsed());
    drop(client);

    Ok(match goaway {
        Ok(goaway) => {
            let debug_data = String::from_utf8_lossy(&goaway.frame.debug_data);
            tracing::info!(code = reason_name(goaway.frame.error_code), %debug_data, "GOAWAY");
            let outcome = if goaway.frame.is_too_many_pings() {
                "TOO_MANY_PINGS".to_string()
            } else {
                format!("GOAWAY_{}", reason_name(goaway.frame.error_code))
            };
            PingFloorReport {
                ping_floor: outcome,
                ping_floor_pings_sent: goaway.pings_sent_before,
                ping_floor_waited_s: waited,
            }
        }
        Err(_) => PingFloorReport {
            ping_floor: "NO_GOAWAY".to_string(),
            ping_floor_pings_sent: wire.snapshot().pings_sent,
            ping_floor_waited_s: waited,
        },
    })
}
