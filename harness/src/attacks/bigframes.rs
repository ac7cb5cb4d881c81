//! `bigframes`: idle after large frames (issue 14, attack A). Each of
//! `--bigframes-conns` connections allows the largest DATA frames HTTP/2
//! has (SETTINGS_MAX_FRAME_SIZE 2^24 - 1) and 16 MiB windows, asks for a
//! 1-route and a 2-route ListRoutes page at once (about 200 kB and 400 kB,
//! each sent as one DATA frame), reads both, and then stays idle, answering
//! the server's PINGs, for `--bigframes-hold-secs`. The order is the point:
//! a server that gathers frames in a write buffer takes the first page into
//! it, then sends the second, too large for it, straight out, and the
//! buffer may be left allocated for as long as the connection lives. The
//! line reports the server's RSS per idle connection at the end of the hold.
//!
//! `--bigframes-extra-pages N` asks for N more 1-route pages at once with
//! the two: whatever a server sizes to the streams in flight, and keeps
//! once they are done, shows in the same number.

use std::time::Duration;

use h2_frames::MAX_PAYLOAD_LEN;
use h2_peer::{
    grpc,
    h2client::{H2Conn, ReceiveWindows, await_end},
};
use serde::Serialize;
use tokio::{sync::Semaphore, task::JoinSet, time::Instant};

use super::{Context, Findings, Tally, describe_tally};
use crate::Error;
use routing_contracts::routing::ListRoutesRequest;

/// Each connection's receive windows: 16 MiB for the connection and each
/// stream, so a whole page fits in one DATA frame.
const WINDOW: u32 = 16 * 1024 * 1024;

/// The two pages, in the order they are asked for: 1 route (about 200 kB,
/// under a 256 KiB write buffer), then 2 routes (about 400 kB, over it).
const PAGE_SIZES: [i32; 2] = [1, 2];

/// Page bytes in flight at once, over all connections, at most: 19.2 MB,
/// 32 connections' two pages (32 × 600 kB). The rest wait their turn, so
/// the calls never fill the server's 128 MiB response budget and only the
/// idle connections are measured.
const IN_FLIGHT_BYTES: u64 = 32 * 600_000;

/// Bytes of one connection's pages, roughly: the two, and `extra` 1-route
/// pages (a route is about 200 kB).
fn pages_bytes(extra: u32) -> u64 {
    let routes = PAGE_SIZES
        .iter()
        .map(|&r| u64::from(r.unsigned_abs()))
        .sum::<u64>();
    (routes + u64::from(extra)) * 200_000
}

/// Connections reading their pages at once: as many as
/// [`IN_FLIGHT_BYTES`] holds, and at least one.
fn calling_at_once(extra: u32) -> usize {
    usize::try_from((IN_FLIGHT_BYTES / pages_bytes(extra)).max(1)).unwrap_or(1)
}

/// Both pages must have arrived within 30 s of the connection's start.
const CALL_LIMIT: Duration = Duration::from_secs(30);

/// All connections must have read their pages within 120 s; those that
/// have not are dropped and counted as `unfinished`, so that the attack
/// ends on time whatever the server does.
const CALLING_LIMIT: Duration = Duration::from_secs(120);

/// How long the connections sit idle before the first RSS reading: 1 s,
/// as the benchmark's idle measurement.
const SETTLE: Duration = Duration::from_secs(1);

#[derive(Debug, Default, Serialize)]
struct Details {
    conns: u32,
    /// 1-route pages each connection asked for besides its two.
    extra_pages: u32,
    /// How the page calls ended (`OK` for each page read in full).
    calls: Tally,
    connect_errors: u32,
    /// Connections still reading their pages after [`CALLING_LIMIT`]: not measured.
    unfinished: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    first_error: Option<String>,
    /// Connections still open at the end of the hold.
    idle_open: u32,
    hold_s: u64,
    rss_before_mib: Option<f64>,
    rss_settled_mib: Option<f64>,
    rss_end_mib: Option<f64>,
    /// (RSS after 1 s idle - RSS before) / connections, KiB.
    per_conn_settled_kib: Option<f64>,
    /// (RSS at the end of the hold - RSS before) / connections, KiB.
    per_conn_kib: Option<f64>,
}

/// One connection's part: both pages, then the connection itself to hold.
async fn one_connection(dial: super::Dial, extra: u32) -> Result<(H2Conn, Vec<String>), Error> {
    // The connection's window holds every page twice over, so that pages
    // read later cannot stall the one being read.
    let windows = ReceiveWindows {
        stream: WINDOW,
        connection: u32::try_from(2 * pages_bytes(extra))
            .unwrap_or(i32::MAX as u32)
            .clamp(WINDOW, i32::MAX as u32),
    };
    let mut conn = dial.h2_with(windows, MAX_PAYLOAD_LEN as u32).await?;
    let started = Instant::now();
    let extra_pages = std::iter::repeat_n(1, extra as usize);
    let pages: Vec<_> = PAGE_SIZES
        .into_iter()
        .chain(extra_pages)
        .map(|page_size| ListRoutesRequest {
            page_size,
            ..Default::default()
        })
        .collect();
    // All calls are opened before any is read: "at once".
    let mut responses = Vec::new();
    for page in &pages {
        let opened = conn
            .open_call(
                grpc::LIST_ROUTES,
                grpc::CONTENT_TYPE,
                grpc::framed(page),
                true,
                CALL_LIMIT,
            )
            .await?;
        let (response, _request_done) = opened.ok_or("the server accepted no new stream")?;
        responses.push(response);
    }
    let mut ends = Vec::new();
    for response in responses {
        let left = CALL_LIMIT.saturating_sub(started.elapsed());
        ends.push(await_end(response, left, true, started).await.0.label());
    }
    Ok((conn, ends))
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1048576.0 * 10.0).round() / 10.0
}

fn per_conn_kib(before: Option<u64>, after: Option<u64>, conns: usize) -> Option<f64> {
    let (before, after) = (before?, after?);
    (conns > 0)
        .then(|| ((after as f64 - before as f64) / conns as f64 / 1024.0 * 10.0).round() / 10.0)
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let n = knobs.bigframes_conns;
    super::conn_flood::check_own_fd_limit(n);
    let hold = knobs.bigframes_hold();
    let process = ctx.server.process();
    let rss = || process.and_then(|p| p.sample()).map(|s| s.rss);
    let rss_before = rss();

    let extra = knobs.bigframes_extra_pages;
    let calling = std::sync::Arc::new(Semaphore::new(calling_at_once(extra)));
    let mut set = JoinSet::new();
    for _ in 0..n {
        let (dial, calling) = (ctx.dial(), calling.clone());
        set.spawn(async move {
            let _turn = calling.acquire_owned().await?;
            one_connection(dial, extra).await
        });
    }
    let mut d = Details {
        conns: n,
        extra_pages: extra,
        hold_s: hold.as_secs(),
        ..Default::default()
    };
    let mut held = Vec::with_capacity(n as usize);
    let give_up = Instant::now() + CALLING_LIMIT;
    loop {
        let joined = match tokio::time::timeout_at(give_up, set.join_next()).await {
            Ok(Some(joined)) => joined,
            Ok(None) => break,
            Err(_) => {
                d.unfinished = u32::try_from(set.len()).unwrap_or(u32::MAX);
                set.abort_all();
                break;
            }
        };
        match joined.map_err(Error::from).and_then(|r| r) {
            Ok((conn, ends)) => {
                for end in ends {
                    *d.calls.entry(end).or_default() += 1;
                }
                held.push(conn);
            }
            Err(e) => {
                d.connect_errors += 1;
                d.first_error.get_or_insert_with(|| e.to_string());
            }
        }
    }
    tracing::info!(idle = held.len(), "pages read: connections now idle");
    tokio::time::sleep(SETTLE).await;
    let rss_settled = rss();
    tokio::time::sleep(hold.saturating_sub(SETTLE)).await;
    let rss_end = rss();
    d.idle_open = u32::try_from(held.iter().filter(|c| c.is_open()).count()).unwrap_or(u32::MAX);
    drop(held);

    d.rss_before_mib = rss_before.map(mib);
    d.rss_settled_mib = rss_settled.map(mib);
    d.rss_end_mib = rss_end.map(mib);
    let measured = (n - d.connect_errors - d.unfinished) as usize;
    d.per_conn_settled_kib = per_conn_kib(rss_before, rss_settled, measured);
    d.per_conn_kib = per_conn_kib(rss_before, rss_end, measured);
    let extra_pages = match extra {
        0 => String::new(),
        n => format!(" and {n} more 1-route pages"),
    };
    let outcome = format!(
        "{} connections idle after a 1-route and a 2-route page{extra_pages} in 16 MiB frames ({}): {} per idle connection after {}s, {} still open",
        measured,
        describe_tally(&d.calls),
        d.per_conn_kib.map_or_else(
            || "server RSS unknown".into(),
            |k| format!("{k} KiB of server RSS")
        ),
        hold.as_secs(),
        d.idle_open,
    );
    let outcome = match d.unfinished {
        0 => outcome,
        u => format!(
            "{outcome}; {u} had not read their pages after {} s, not measured",
            CALLING_LIMIT.as_secs()
        ),
    };
    Ok(Findings::new(outcome, d))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The growth from before to after, shared out over the connections.
    #[test]
    fn rss_growth_is_shared_out_per_connection() {
        let before = 10 * 1024 * 1024;
        let after = before + 1000 * 40 * 1024;
        assert_eq!(per_conn_kib(Some(before), Some(after), 1000), Some(40.0));
        assert_eq!(per_conn_kib(Some(after), Some(before), 1000), Some(-40.0));
        assert_eq!(per_conn_kib(None, Some(after), 1000), None);
        assert_eq!(per_conn_kib(Some(before), Some(after), 0), None);
    }

    /// 32 connections read their two pages at once, as before the extra
    /// pages; with 48 extra (10.2 MB each) or 98 (20.2 MB), one at a time.
    #[test]
    fn extra_pages_mean_fewer_connections_at_once() {
        assert_eq!((pages_bytes(0), calling_at_once(0)), (600_000, 32));
        assert_eq!((pages_bytes(48), calling_at_once(48)), (10_200_000, 1));
        assert_eq!((pages_bytes(98), calling_at_once(98)), (20_200_000, 1));
    }
}
