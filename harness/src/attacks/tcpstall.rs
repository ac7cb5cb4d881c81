//! `tcpstall`: readers that stall at the TCP level, not the HTTP/2 level.
//! Each connection sets a tiny socket receive buffer (`--tcpstall-rcvbuf`),
//! opens a 2 GiB HTTP/2 window, asks for a ListRoutes page of
//! `--tcpstall-page-size` routes (10: about 2 MB), never reads the socket,
//! and sends a GetQuote every `--tcpstall-poke-secs`. HTTP/2 flow control
//! never stops the server: the page goes into the kernel's send buffer, so a
//! server that counts a response as sent once the kernel took it stops
//! charging it, and one whose keepalive counts requests as activity keeps
//! the connection forever.
//!
//! Reported every `--tcpstall-sample-secs`: connections still open as the
//! client sees them (a write has not failed), the server's established
//! sockets and their Send-Q from `/proc/net/tcp`, and the kernel's TCP
//! memory from `/proc/net/sockstat`, until `--tcpstall-secs`.

use std::{net::SocketAddr, time::Duration};

use h2_peer::{
    procfs::{ServerSockets, sockstat_tcp_mem_pages},
    stalled::TcpStalledReader,
};
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

use super::{Context, Findings, median_secs, secs};

/// Bytes per page of the kernel's memory accounting in
/// `/proc/net/sockstat` (4 KiB on x86-64 and most arm64 kernels).
const PAGE_BYTES: u64 = 4096;

/// One look at the connections.
#[derive(Debug, Serialize)]
struct Sample {
    t_s: f64,
    /// Connections whose writes still succeed.
    open: usize,
    /// The server's established sockets on the target (null if unreadable).
    server_established: Option<usize>,
    /// Their Send-Q summed, MiB.
    server_send_q_mib: Option<f64>,
    /// All TCP sockets' kernel memory on this machine, MiB.
    tcp_mem_mib: Option<f64>,
}

#[derive(Debug, Serialize)]
struct Tallies {
    connections: u32,
    connected: u32,
    connect_errors: u32,
    /// Connections whose write failed (the server closed them).
    closed: usize,
    /// Seconds after the pages were asked for at which the first, the
    /// median and the last of them failed.
    closed_first_s: Option<f64>,
    closed_median_s: Option<f64>,
    closed_last_s: Option<f64>,
    #[serde(skip)]
    closed_after: Vec<Duration>,
    samples: Vec<Sample>,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

fn sample(t: Duration, open: usize, server: SocketAddr) -> Sample {
    let sockets = ServerSockets::read(server);
    let tcp_mem = std::fs::read_to_string("/proc/net/sockstat")
        .ok()
        .and_then(|s| sockstat_tcp_mem_pages(&s));
    Sample {
        t_s: secs(t),
        open,
        server_established: sockets.map(|s| s.established),
        server_send_q_mib: sockets.map(|s| mib(s.send_queue_bytes)),
        tcp_mem_mib: tcp_mem.map(|pages| mib(pages * PAGE_BYTES)),
    }
}

pub async fn run(ctx: &Context) -> Result<Findings, crate::Error> {
    let knobs = &ctx.knobs;
    let addr = ctx.target.addr();
    let started = Instant::now();
    let end = started + Duration::from_secs(knobs.tcpstall_secs);
    let poke_every = Duration::from_secs(knobs.tcpstall_poke_secs);

    let mut tallies = Tallies {
        connections: knobs.tcpstall_conns,
        connected: 0,
        connect_errors: 0,
        closed: 0,
        closed_first_s: None,
        closed_median_s: None,
        closed_last_s: None,
        closed_after: Vec::new(),
        samples: Vec::new(),
        first_error: None,
    };
    let mut opening = JoinSet::new();
    for _ in 0..knobs.tcpstall_conns {
        let (rcvbuf, page_size) = (knobs.tcpstall_rcvbuf, knobs.tcpstall_page_size);
        let tls = ctx.tls.clone();
        opening.spawn(async move {
            TcpStalledReader::open_over(addr, rcvbuf, page_size, tls.as_ref()).await
        });
    }
    let mut readers = Vec::new();
    while let Some(opened) = opening.join_next().await {
        match opened {
            Ok(Ok(reader)) => readers.push(reader),
            Ok(Err(e)) => {
                tallies.connect_errors += 1;
                tallies.first_error.get_or_insert_with(|| e.to_string());
            }
            Err(e) => {
                tallies.connect_errors += 1;
                tallies.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    tallies.connected = u32::try_from(readers.len()).unwrap_or(u32::MAX);
    let opened_at = Instant::now();
    tracing::info!(
        connected = readers.len(),
        "TCP-stalled readers asked for their pages"
    );

    // Each reader pokes on its own schedule until its write fails or the
    // attack ends; the report task samples in between.
    let mut poking = JoinSet::new();
    for mut reader in readers {
        poking.spawn(async move {
            let mut next = Instant::now() + poke_every;
            loop {
                if next >= end {
                    tokio::time::sleep_until(end).await;
                    return None;
                }
                tokio::time::sleep_until(next).await;
                if reader.poke().await.is_err() {
                    return Some(opened_at.elapsed());
                }
                next += poke_every;
            }
        });
    }
    let sample_every = Duration::from_secs(knobs.tcpstall_sample_secs);
    let mut open = tallies.connected as usize;
    tallies.samples.push(sample(started.elapsed(), open, addr));
    let mut next_sample = Instant::now() + sample_every;
    loop {
        tokio::select! {
            done = poking.join_next() => match done {
                None => break,
                Some(Ok(Some(closed_after))) => {
                    open -= 1;
                    tallies.closed_after.push(closed_after);
                }
                Some(_) => {}
            },
            () = tokio::time::sleep_until(next_sample) => {
                tallies.samples.push(sample(started.elapsed(), open, addr));
                next_sample += sample_every;
            }
        }
    }
    tallies.samples.push(sample(started.elapsed(), open, addr));
    tallies.closed_after.sort_unstable();
    tallies.closed = tallies.closed_after.len();
    tallies.closed_first_s = tallies.closed_after.first().copied().map(secs);
    tallies.closed_last_s = tallies.closed_after.last().copied().map(secs);
    tallies.closed_median_s = median_secs(std::mem::take(&mut tallies.closed_after));

    let (closed, last) = (tallies.closed, tallies.closed_last_s);
    let outcome = format!(
        "{} of {} TCP-stalled connections closed by the server within {:.0}s{}; {} still open at the end",
        closed,
        tallies.connected,
        secs(end.saturating_duration_since(opened_at)),
        last.map_or(String::new(), |s| format!(" (last at {s:.1}s)")),
        open,
    );
    Ok(Findings::new(outcome, tallies))
}
