//! `reconnect`: a reconnect storm (issue 23, attack 2). `--reconnect-clients`
//! clients each open a TCP connection, and close it, as fast as they can,
//! for `--reconnect-secs`, as a fleet of clients does after a load
//! balancer restarts or a deploy. With `--reconnect-preface`, each sends the
//! HTTP/2 preface and an empty SETTINGS, and closes once the server's own
//! SETTINGS arrive: the server has accepted, handed over and started to
//! serve it. Without it, each closes as soon as it is connected.
//!
//! A connect completes when the kernel has room for it in the listening
//! socket's accept queue; when the acceptor is slower than the storm, the
//! queue (the listen backlog) overflows, the kernel drops the SYN, and the
//! client's connect takes a retransmission, a second or more. So the line
//! reports connects per second (the acceptor's rate, once the queue is
//! full), the share of connects that took 500 ms or more, the connect
//! time's median and p99, and, with the preface, how many got the server's
//! SETTINGS and how fast. The server's CPU is in the report's
//! `server_cpu_pct`.
//!
//! Over TLS (`--tls-ca`) the connects stay TCP only, below TLS, where the
//! accept queue is; with `--reconnect-preface` each client first completes
//! a TLS handshake, then sends the preface: that is the handshake flood,
//! which `tlsflood` ([`super::tlsflood`]) runs with its own bounds.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use serde::Serialize;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
    task::JoinSet,
    time::Instant,
};

use super::{Context, Findings, lock, secs};
use crate::Error;
use h2_frames::{PREFACE, encode_frame, kind};
use h2_peer::tls::{self, HarnessTls};
use tokio_util::either::Either;

/// Time allowed for each TCP connect: 5 s, more than the kernel's first
/// two SYN retransmissions (1 s, then 3 s after the first SYN), so a
/// connect the queue made slow is counted as slow, not lost.
const CONNECT_LIMIT: Duration = Duration::from_secs(5);

/// Time allowed for the server's SETTINGS after the preface: 5 s.
const SETTINGS_LIMIT: Duration = Duration::from_secs(5);

/// Time allowed for a TLS handshake after the connect: 5 s, half the
/// server's default handshake timeout.
const TLS_LIMIT: Duration = Duration::from_secs(5);

/// A connect this slow, or slower, counts as slow: 500 ms, far above a
/// loopback connect (tens of microseconds) and below the kernel's first
/// SYN retransmission (1 s), so it counts exactly the connects whose SYN the
/// kernel dropped.
pub const SLOW_CONNECT: Duration = Duration::from_millis(500);

/// Connect times kept per client for the percentiles, at most: 200,000
/// (1.6 MB per client), far more than a client makes in 60 s.
const KEPT_PER_CLIENT: usize = 200_000;

#[derive(Debug, Default, Serialize)]
pub(super) struct Details {
    pub(super) clients: u32,
    pub(super) preface: bool,
    /// Over TLS: each connect was followed by a TLS handshake.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub(super) tls: bool,
    pub(super) storm_s: f64,
    pub(super) connects: u64,
    pub(super) connects_per_s: f64,
    /// Connects that took [`SLOW_CONNECT`] or more.
    pub(super) slow_connects: u64,
    /// Their share of all connects, in percent.
    pub(super) slow_connect_pct: f64,
    pub(super) connect_p50_ms: Option<f64>,
    pub(super) connect_p99_ms: Option<f64>,
    pub(super) connect_max_ms: Option<f64>,
    pub(super) connect_errors: u64,
    /// Over TLS: handshakes that failed or took longer than 5 s.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) tls_errors: Option<u64>,
    /// With the preface: connections that got the server's SETTINGS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) served: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) served_per_s: Option<f64>,
    /// With the preface: from the start of the connect to the SETTINGS, p50.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) settings_p50_ms: Option<f64>,
    /// With the preface: from the start of the connect to the SETTINGS, p99.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) settings_p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) first_error: Option<String>,
}

/// What every client adds to.
#[derive(Debug, Default)]
struct Tallies {
    connect_times: Vec<Duration>,
    settings_times: Vec<Duration>,
    connect_errors: u64,
    tls_errors: u64,
    served: u64,
    first_error: Option<String>,
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let (clients, preface) = (knobs.reconnect_clients, knobs.reconnect_preface);
    let storm = Duration::from_secs(knobs.reconnect_secs);
    // Over TLS the preface goes inside a TLS session, as a client's would.
    let tls = match (&ctx.tls, preface) {
        (Some(tls), true) => Some(tls.flooder(true)?),
        _ => None,
    };
    let d = storm_of(ctx.target.addr(), clients, storm, preface, tls).await;
    let mut outcome = format!(
        "{} clients reconnecting for {:.1}s{}: {} connects, {:.0}/s, {:.2} % took {} ms or more (p99 {} ms)",
        d.clients,
        d.storm_s,
        if preface {
            " with the HTTP/2 preface"
        } else {
            ""
        },
        d.connects,
        d.connects_per_s,
        d.slow_connect_pct,
        SLOW_CONNECT.as_millis(),
        d.connect_p99_ms.map_or("-".into(), |p| format!("{p:.2}")),
    );
    if let (Some(served), Some(per_s)) = (d.served, d.served_per_s) {
        outcome.push_str(&format!(
            "; {served} got the server's SETTINGS, {per_s:.0}/s"
        ));
    }
    if d.connect_errors > 0 {
        outcome.push_str(&format!("; {} connects failed", d.connect_errors));
    }
    Ok(Findings::new(outcome, d))
}

/// `clients` clients connecting and closing for `storm`; with `tls`, each
/// connect is followed by a TLS handshake, with `preface` by the HTTP/2
/// preface and the wait for the server's SETTINGS.
pub(super) async fn storm_of(
    addr: SocketAddr,
    clients: u32,
    storm: Duration,
    preface: bool,
    tls: Option<HarnessTls>,
) -> Details {
    super::conn_flood::check_own_fd_limit(clients);
    let tallies = Arc::new(Mutex::new(Tallies::default()));
    let started = Instant::now();
    let until = started + storm;
    let mut set = JoinSet::new();
    for _ in 0..clients {
        let (tls, tallies) = (tls.clone(), tallies.clone());
        set.spawn(async move { one_client(addr, preface, tls.as_ref(), until, &tallies).await });
    }
    while set.join_next().await.is_some() {}
    let storm_s = secs(started.elapsed());
    let tallies = std::mem::take(&mut *lock(&tallies));
    let tls_errors = tallies.tls_errors;
    let mut d = summarise(tallies, clients, preface, storm_s);
    d.tls = tls.is_some();
    d.tls_errors = d.tls.then_some(tls_errors);
    d
}

/// Connects and closes until `until`, recording each connect's time.
async fn one_client(
    addr: SocketAddr,
    preface: bool,
    tls: Option<&HarnessTls>,
    until: Instant,
    tallies: &Mutex<Tallies>,
) {
    let mut connects = Vec::new();
    let mut settings = Vec::new();
    let (mut errors, mut tls_errors, mut served, mut first_error) = (0u64, 0u64, 0u64, None);
    let opening = {
        let mut bytes = PREFACE.to_vec();
        bytes.extend(encode_frame(kind::SETTINGS, 0, 0, &[]));
        bytes
    };
    while Instant::now() < until {
        let started = Instant::now();
        let tcp = match tokio::time::timeout(CONNECT_LIMIT, TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("connect: {e}"));
                // A refusing server must not be spun against.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
            Err(_) => {
                errors += 1;
                first_error.get_or_insert_with(|| format!("no connect within {CONNECT_LIMIT:?}"));
                continue;
            }
        };
        if connects.len() < KEPT_PER_CLIENT {
            connects.push(started.elapsed());
        }
        let mut stream = match tls {
            None => Either::Left(tcp),
            Some(_) => match tokio::time::timeout(TLS_LIMIT, tls::over(tcp, tls)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => {
                    tls_errors += 1;
                    first_error.get_or_insert_with(|| format!("TLS handshake: {e}"));
                    continue;
                }
                Err(_) => {
                    tls_errors += 1;
                    first_error
                        .get_or_insert_with(|| format!("no TLS handshake within {TLS_LIMIT:?}"));
                    continue;
                }
            },
        };
        if preface {
            match read_settings(&mut stream, &opening).await {
                Ok(()) => {
                    served += 1;
                    if settings.len() < KEPT_PER_CLIENT {
                        settings.push(started.elapsed());
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        drop(stream);
    }
    let mut t = lock(tallies);
    t.connect_times.extend(connects);
    t.settings_times.extend(settings);
    t.connect_errors += errors;
    t.tls_errors += tls_errors;
    t.served += served;
    if t.first_error.is_none() {
        t.first_error = first_error;
    }
}

/// Sends the client's opening and reads until the server's first frame
/// header, which is its SETTINGS (RFC 9113 §3.4).
async fn read_settings(
    tcp: &mut (impl AsyncRead + AsyncWrite + Unpin),
    opening: &[u8],
) -> Result<(), String> {
    tcp.write_all(opening)
        .await
        .map_err(|e| format!("preface: {e}"))?;
    let mut header = [0u8; 9];
    match tokio::time::timeout(SETTINGS_LIMIT, tcp.read_exact(&mut header)).await {
        Ok(Ok(_)) if header[3] == kind::SETTINGS => Ok(()),
        Ok(Ok(_)) => Err(format!(
            "first frame is {}, not SETTINGS",
            kind::name(header[3])
        )),
        Ok(Err(e)) => Err(format!("reading SETTINGS: {e}")),
        Err(_) => Err(format!("no SETTINGS within {SETTINGS_LIMIT:?}")),
    }
}

/// The `q` quantile (0 to 1) of sorted `times`, in milliseconds.
fn quantile_ms(sorted: &[Duration], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let at = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some((sorted[at].as_secs_f64() * 1e6).round() / 1e3)
}

fn summarise(mut t: Tallies, clients: u32, preface: bool, storm_s: f64) -> Details {
    t.connect_times.sort_unstable();
    t.settings_times.sort_unstable();
    let connects = t.connect_times.len() as u64;
    let slow = t
        .connect_times
        .iter()
        .filter(|&&d| d >= SLOW_CONNECT)
        .count() as u64;
    let per_s = |n: u64| {
        if storm_s > 0.0 {
            (n as f64 / storm_s).round()
        } else {
            0.0
        }
    };
    Details {
        clients,
        preface,
        tls: false,
        tls_errors: None,
        storm_s,
        connects,
        connects_per_s: per_s(connects),
        slow_connects: slow,
        slow_connect_pct: if connects == 0 {
            0.0
        } else {
            (slow as f64 / connects as f64 * 1e4).round() / 100.0
        },
        connect_p50_ms: quantile_ms(&t.connect_times, 0.5),
        connect_p99_ms: quantile_ms(&t.connect_times, 0.99),
        connect_max_ms: t.connect_times.last().map(|d| secs(*d) * 1e3),
        connect_errors: t.connect_errors,
        served: preface.then_some(t.served),
        served_per_s: preface.then(|| per_s(t.served)),
        settings_p50_ms: preface
            .then(|| quantile_ms(&t.settings_times, 0.5))
            .flatten(),
        settings_p99_ms: preface
            .then(|| quantile_ms(&t.settings_times, 0.99))
            .flatten(),
        first_error: t.first_error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given 1,000 connects of which 5 took a second, the share is 0.5 %,
    /// the median is the fast one and the p99 too; the rate is per second.
    #[test]
    fn slow_connects_are_counted_and_shared_out() {
        let mut times = vec![Duration::from_micros(50); 995];
        times.extend([Duration::from_secs(1); 5]);
        let t = Tallies {
            connect_times: times,
            ..Default::default()
        };
        let d = summarise(t, 32, false, 2.0);
        assert_eq!((d.connects, d.slow_connects), (1000, 5));
        assert_eq!(d.slow_connect_pct, 0.5);
        assert_eq!(d.connects_per_s, 500.0);
        assert_eq!(d.connect_p50_ms, Some(0.05));
        assert_eq!(d.connect_p99_ms, Some(0.05));
        assert_eq!(d.served, None);
    }

    /// A connect of exactly 500 ms is slow; one just under is not.
    #[test]
    fn the_slow_bound_is_inclusive() {
        let t = Tallies {
            connect_times: vec![SLOW_CONNECT, SLOW_CONNECT - Duration::from_micros(1)],
            ..Default::default()
        };
        assert_eq!(summarise(t, 1, true, 1.0).slow_connects, 1);
    }
}
