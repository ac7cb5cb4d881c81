//! Connection floods: many TCP connections that never become HTTP/2.
//!
//! - `fdflood` holds `--fd-conns` idle connections (no bytes at all) and
//!   asks, once a second, whether a *fresh* client can connect and get a
//!   quote. Run the server under `ulimit -n 256` and the idle connections
//!   use up its file descriptors: a server whose accept loop retries at once
//!   on EMFILE spins a core, and one that closes connections without a
//!   preface after a handshake timeout serves new clients again.
//! - `nopreface` holds `--silent-conns` connections that send nothing and
//!   `--half-preface-conns` that send half the 24-byte preface, and reports
//!   how many the server closed, and when. Over TLS (`--tls-ca`) the half
//!   is of a ClientHello instead (the TLS record announces bytes that never
//!   come), and as many again send a whole ClientHello and then nothing, so
//!   the server computes its part of the handshake and waits for the
//!   client's Finished: each must be closed within the handshake timeout.

use std::{net::SocketAddr, time::Duration};

use bytes::Bytes;

use serde::Serialize;
use tokio::{io::AsyncReadExt, io::AsyncWriteExt, net::TcpStream, task::JoinSet, time::Instant};

use super::{Context, Findings, median_secs, secs};
use h2_frames::PREFACE;
use h2_peer::procfs::Process;

use crate::{Error, measure::probe};

/// Time allowed for each TCP connect: 3 s.
const CONNECT_LIMIT: Duration = Duration::from_secs(3);

/// How often `fdflood` tries a fresh client: every second.
const FRESH_EVERY: Duration = Duration::from_secs(1);

/// A fresh client must connect, and then get its quote, within 1 s each.
const FRESH_LIMIT: Duration = Duration::from_secs(1);

/// Connections are opened 100 at a time, 50 ms apart (1,000 in half a
/// second). All at once, they would overflow the server's listen backlog
/// (128 for a std or tonic listener): the kernel then leaves the excess
/// half-open and completes them only on SYN-ACK retransmits, seconds later,
/// and the attack would measure the kernel instead of the server.
const CONNECT_BATCH: u32 = 100;
const CONNECT_PAUSE: Duration = Duration::from_millis(50);

/// "PRI * HTTP/2": half of the 24-byte client preface.
const HALF_PREFACE: &[u8] = PREFACE.split_at(12).0;

/// What happened to one held connection.
#[derive(Debug)]
enum Held {
    /// Connected; `Some` if the server closed it, after this long.
    Connected(Option<Duration>),
    ConnectFailed(String),
}

/// Connects, sends `bytes`, then reads (and drops) whatever the server sends
/// until it closes the connection or `until` passes. A close is timed from
/// this connection's own connect.
async fn hold_one(addr: SocketAddr, bytes: Bytes, until: Instant) -> Held {
    let mut tcp = match tokio::time::timeout(CONNECT_LIMIT, TcpStream::connect(addr)).await {
        Ok(Ok(tcp)) => tcp,
        Ok(Err(e)) => return Held::ConnectFailed(e.to_string()),
        Err(_) => return Held::ConnectFailed(format!("no TCP connect within {CONNECT_LIMIT:?}")),
    };
    let started = Instant::now();
    if !bytes.is_empty() && tcp.write_all(&bytes).await.is_err() {
        return Held::Connected(Some(started.elapsed()));
    }
    let mut sink = [0u8; 1024];
    loop {
        match tokio::time::timeout_at(until, tcp.read(&mut sink)).await {
            // The hold ended with the connection still open; dropping closes it.
            Err(_) => return Held::Connected(None),
            Ok(Ok(0)) | Ok(Err(_)) => return Held::Connected(Some(started.elapsed())),
            // A server may send its SETTINGS first; that is not a close.
            Ok(Ok(_)) => {}
        }
    }
}

/// A group of held connections, as reported.
#[derive(Debug, Default, Serialize)]
struct Group {
    conns: u32,
    connected: u32,
    connect_errors: u32,
    closed_by_server: u32,
    close_first_s: Option<f64>,
    close_median_s: Option<f64>,
    close_last_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_connect_error: Option<String>,
}

impl Group {
    fn from_results(results: Vec<Held>) -> Self {
        let mut group = Group {
            conns: u32::try_from(results.len()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        let mut closes = Vec::new();
        for held in results {
            match held {
                Held::Connected(closed) => {
                    group.connected += 1;
                    closes.extend(closed);
                }
                Held::ConnectFailed(e) => {
                    group.connect_errors += 1;
                    group.first_connect_error.get_or_insert(e);
                }
            }
        }
        group.closed_by_server = u32::try_from(closes.len()).unwrap_or(u32::MAX);
        group.close_first_s = closes.iter().min().copied().map(secs);
        group.close_last_s = closes.iter().max().copied().map(secs);
        group.close_median_s = median_secs(closes);
        group
    }

    fn describe(&self, what: &str) -> String {
        let mut text = format!("{}/{} {what}", self.closed_by_server, self.connected);
        if let Some(median) = self.close_median_s {
            text.push_str(&format!(" (median {median:.1}s)"));
        }
        if self.connect_errors > 0 {
            text.push_str(&format!(", {} could not connect", self.connect_errors));
        }
        text
    }
}

/// Starts `n` held connections of one group. Connects go out
/// [`CONNECT_BATCH`] at a time, [`CONNECT_PAUSE`] apart, counting from
/// `first` across groups.
fn spawn_group(
    set: &mut JoinSet<(usize, Held)>,
    group: usize,
    first: u32,
    n: u32,
    addr: SocketAddr,
    bytes: &Bytes,
    until: Instant,
) {
    for i in first..first + n {
        let delay = CONNECT_PAUSE * (i / CONNECT_BATCH);
        let bytes = bytes.clone();
        set.spawn(async move {
            tokio::time::sleep(delay).await;
            (group, hold_one(addr, bytes, until).await)
        });
    }
}

async fn collect(mut set: JoinSet<(usize, Held)>, groups: usize) -> Vec<Vec<Held>> {
    let mut out: Vec<Vec<Held>> = (0..groups).map(|_| Vec::new()).collect();
    while let Some(joined) = set.join_next().await {
        if let Ok((group, held)) = joined
            && let Some(list) = out.get_mut(group)
        {
            list.push(held);
        }
    }
    out
}

/// Warns when this process cannot open as many sockets as asked.
pub(super) fn check_own_fd_limit(needed: u32) {
    let soft = Process::new(std::process::id())
        .nofile_limits()
        .and_then(|(soft, _)| soft);
    if let Some(soft) = soft
        && soft < u64::from(needed) + 64
    {
        tracing::warn!(
            soft,
            needed,
            "this process may run out of file descriptors: raise `ulimit -n` for the harness"
        );
    }
}

/// A fresh client: a new connection and one GetQuote, each within 1 s.
async fn fresh_client_served(ctx: &Context) -> Result<(), String> {
    let channel = probe::connect_over(&ctx.target, ctx.tls.as_ref(), FRESH_LIMIT, FRESH_LIMIT)
        .await
        .map_err(|e| e.to_string())?;
    probe::get_quote(channel)
        .await
        .map_err(|s| format!("{}: {}", h2_peer::grpc::code_name(s.code()), s.message()))
}

#[derive(Debug, Serialize)]
struct FdFloodDetails {
    idle: Group,
    hold_s: u64,
    fresh_tries: u32,
    fresh_served: u32,
    fresh_first_served_s: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    fresh_first_error: Option<String>,
    served_after: bool,
    server_nofile_soft: Option<u64>,
    server_fds_peak: Option<usize>,
}

pub async fn fdflood(ctx: &Context) -> Result<Findings, Error> {
    let hold = ctx.knobs.fd_hold();
    let n = ctx.knobs.fd_conns;
    check_own_fd_limit(n);
    let server = ctx.server.process();
    let started = Instant::now();
    let until = started + hold;
    let mut set = JoinSet::new();
    spawn_group(&mut set, 0, 0, n, ctx.target.addr(), &Bytes::new(), until);

    let (mut tries, mut served, mut first_served, mut first_error) = (0u32, 0u32, None, None);
    let mut fds_peak = server.and_then(|p| p.open_fds());
    let mut ticker = tokio::time::interval(FRESH_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick is immediate: give the flood a moment to land first.
    ticker.tick().await;
    while Instant::now() + FRESH_LIMIT * 2 < until {
        ticker.tick().await;
        fds_peak = fds_peak.max(server.and_then(|p| p.open_fds()));
        tries += 1;
        match fresh_client_served(ctx).await {
            Ok(()) => {
                served += 1;
                first_served.get_or_insert(secs(started.elapsed()));
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    let idle = Group::from_results(collect(set, 1).await.remove(0));
    // The flood has let go: is the server serving again within a few tries?
    let mut served_after = false;
    for _ in 0..5 {
        if fresh_client_served(ctx).await.is_ok() {
            served_after = true;
            break;
        }
        tokio::time::sleep(FRESH_EVERY).await;
    }
    let nofile = server
        .and_then(|p| p.nofile_limits())
        .and_then(|(soft, _)| soft);
    let mut outcome = format!(
        "held {}s: server closed {}; fresh clients served {}/{} during",
        hold.as_secs(),
        idle.describe("idle connections"),
        served,
        tries
    );
    if let Some(first) = first_served {
        outcome.push_str(&format!(" (first at {first:.1}s)"));
    }
    outcome.push_str(if served_after {
        ", and after: yes"
    } else {
        ", and after: NO"
    });
    if let Some(soft) = nofile {
        outcome.push_str(&format!("; server open-file limit {soft}"));
    }
    let details = FdFloodDetails {
        idle,
        hold_s: hold.as_secs(),
        fresh_tries: tries,
        fresh_served: served,
        fresh_first_served_s: first_served,
        fresh_first_error: first_error,
        served_after,
        server_nofile_soft: nofile,
        server_fds_peak: fds_peak,
    };
    Ok(Findings::new(outcome, details))
}

#[derive(Debug, Serialize)]
struct NoPrefaceDetails {
    silent: Group,
    /// Plaintext: half the HTTP/2 preface.
    #[serde(skip_serializing_if = "Option::is_none")]
    half_preface: Option<Group>,
    /// TLS: half a ClientHello record.
    #[serde(skip_serializing_if = "Option::is_none")]
    half_client_hello: Option<Group>,
    /// TLS: a whole ClientHello, then nothing (no Finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    client_hello_only: Option<Group>,
    hold_s: u64,
}

pub async fn nopreface(ctx: &Context) -> Result<Findings, Error> {
    let hold = ctx.knobs.nopreface_hold();
    let (silent, half) = (ctx.knobs.silent_conns, ctx.knobs.half_preface_conns);
    // Over TLS: half a ClientHello, and a whole one (as many), instead of half a preface.
    let hello = ctx.tls.as_ref().map(|tls| tls.client_hello()).transpose()?;
    let whole = if hello.is_some() { half } else { 0 };
    check_own_fd_limit(silent + half + whole);
    let started = Instant::now();
    let until = started + hold;
    let addr = ctx.target.addr();
    let halved = match &hello {
        None => Bytes::from_static(HALF_PREFACE),
        Some(hello) => Bytes::copy_from_slice(&hello[..hello.len() / 2]),
    };
    let mut set = JoinSet::new();
    spawn_group(&mut set, 0, 0, silent, addr, &Bytes::new(), until);
    spawn_group(&mut set, 1, silent, half, addr, &halved, until);
    if let Some(hello) = &hello {
        let hello = Bytes::copy_from_slice(hello);
        spawn_group(&mut set, 2, silent + half, whole, addr, &hello, until);
    }
    let mut groups = collect(set, 3).await.into_iter();
    let mut next = || Group::from_results(groups.next().unwrap_or_default());
    let silent = next();
    let halves = next();
    let mut outcome = format!("server closed {}", silent.describe("silent"));
    let details = if hello.is_some() {
        let hello_only = next();
        outcome.push_str(&format!(
            ", {} and {}",
            halves.describe("half-ClientHello"),
            hello_only.describe("ClientHello-then-nothing")
        ));
        NoPrefaceDetails {
            silent,
            half_preface: None,
            half_client_hello: Some(halves),
            client_hello_only: Some(hello_only),
            hold_s: hold.as_secs(),
        }
    } else {
        outcome.push_str(&format!(" and {}", halves.describe("half-preface")));
        NoPrefaceDetails {
            silent,
            half_preface: Some(halves),
            half_client_hello: None,
            client_hello_only: None,
            hold_s: hold.as_secs(),
        }
    };
    outcome.push_str(&format!(" within {}s", hold.as_secs()));
    Ok(Findings::new(outcome, details))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_a_preface_is_the_first_twelve_bytes() {
        assert_eq!(HALF_PREFACE, b"PRI * HTTP/2");
    }

    #[test]
    fn a_group_counts_connects_and_closes() {
        let group = Group::from_results(vec![
            Held::Connected(Some(Duration::from_secs(10))),
            Held::Connected(Some(Duration::from_secs(11))),
            Held::Connected(None),
            Held::ConnectFailed("refused".into()),
        ]);
        assert_eq!(
            (group.conns, group.connected, group.connect_errors),
            (4, 3, 1)
        );
        assert_eq!(group.closed_by_server, 2);
        assert_eq!(group.close_first_s, Some(10.0));
        assert_eq!(group.close_last_s, Some(11.0));
        assert_eq!(
            group.describe("silent"),
            "2/3 silent (median 10.0s), 1 could not connect"
        );
    }
}
