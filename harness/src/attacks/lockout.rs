//! `lockout`: one client tries to keep every other client's ListRoutes out.
//! Its connection advertises a zero stream window, opens
//! `--lockout-streams` full-page ListRoutes calls (about 5 MB each) that can
//! never be sent, holds them `--lockout-hold-secs`, then closes and opens a
//! fresh connection, for `--lockout-secs`. Meanwhile a normal client asks
//! for the full page every `--lockout-every-ms` and reads it. A server with
//! one response budget and no share per connection refuses the normal
//! client whenever the attacker has filled it.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use h2_peer::{
    grpc,
    h2client::{ReceiveWindows, await_end},
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;
use tokio::{task::JoinSet, time::Instant};

use super::{Context, Findings, Tally, describe_tally, lock};
use crate::measure::probe;

/// Largest message the normal client decodes: 16 MiB, room for the full
/// 5 MB page (tonic's default of 4 MiB is not).
const NORMAL_MAX_DECODE: usize = 16 * 1024 * 1024;

/// Deadline of each of the normal client's calls: 10 s, so a refused or
/// stalled call is counted rather than waited for.
const NORMAL_DEADLINE: Duration = Duration::from_secs(10);

#[derive(Debug, Default, Serialize)]
struct Tallies {
    /// Connections the attacker opened (one per hold).
    attacker_connections: u32,
    attacker_streams: u32,
    /// How the attacker's calls ended within each hold.
    attacker_ends: Tally,
    /// Full pages the normal client asked for, and how each ended.
    normal_asked: u32,
    normal_full_pages: u32,
    normal_ends: Tally,
    #[serde(skip_serializing_if = "Option::is_none")]
    normal_first_error: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    attacker_first_error: Option<String>,
}

pub async fn run(ctx: &Context) -> Result<Findings, crate::Error> {
    let knobs = &ctx.knobs;
    let end = Instant::now() + Duration::from_secs(knobs.lockout_secs);
    let tallies = Arc::new(Mutex::new(Tallies::default()));
    let channel = probe::connect_over(
        &ctx.target,
        ctx.tls.as_ref(),
        NORMAL_DEADLINE,
        NORMAL_DEADLINE,
    )
    .await?;

    let attacker = attack(
        ctx.dial(),
        knobs.lockout_streams,
        Duration::from_secs(knobs.lockout_hold_secs),
        end,
        Arc::clone(&tallies),
    );
    let normal = normal_client(
        channel,
        Duration::from_millis(knobs.lockout_every_ms),
        end,
        Arc::clone(&tallies),
    );
    tokio::join!(attacker, normal);

    let t = std::mem::take(&mut *lock(&tallies));
    let pct = if t.normal_asked == 0 {
        0.0
    } else {
        (f64::from(t.normal_full_pages) / f64::from(t.normal_asked) * 1000.0).round() / 10.0
    };
    let outcome = format!(
        "normal client got {} of {} full pages ({pct}%; {}) while one client held {} window-0 streams per connection over {} connections (its calls: {})",
        t.normal_full_pages,
        t.normal_asked,
        describe_tally(&t.normal_ends),
        knobs.lockout_streams,
        t.attacker_connections,
        describe_tally(&t.attacker_ends),
    );
    Ok(Findings::new(outcome, t))
}

/// Opens a connection, fills it with stalled calls, holds it, drops it, and
/// again, until `end`.
async fn attack(
    dial: super::Dial,
    streams: u32,
    hold: Duration,
    end: Instant,
    tallies: Arc<Mutex<Tallies>>,
) {
    let record = |f: &mut dyn FnMut(&mut Tallies)| f(&mut lock(&tallies));
    let body = grpc::framed(&grpc::full_page_request());
    while Instant::now() < end {
        let hold_until = (Instant::now() + hold).min(end);
        let mut conn = match dial.h2(ReceiveWindows::STALLED).await {
            Ok(conn) => conn,
            Err(e) => {
                record(&mut |t| {
                    t.attacker_first_error.get_or_insert_with(|| e.to_string());
                });
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        record(&mut |t| t.attacker_connections += 1);
        let mut calls = JoinSet::new();
        for _ in 0..streams {
            let left = hold_until.saturating_duration_since(Instant::now());
            match conn
                .open_call(
                    grpc::LIST_ROUTES,
                    grpc::CONTENT_TYPE,
                    body.clone(),
                    true,
                    left,
                )
                .await
            {
                Ok(Some((response, request))) => {
                    record(&mut |t| t.attacker_streams += 1);
                    let started = Instant::now();
                    calls.spawn(async move {
                        // The request handle too: dropping both would cancel.
                        let _request = request;
                        await_end(response, left, false, started).await.0
                    });
                }
                Ok(None) => break,
                Err(e) => {
                    record(&mut |t| {
                        t.attacker_first_error.get_or_insert_with(|| e.to_string());
                    });
                    break;
                }
            }
        }
        while let Some(ended) = calls.join_next().await {
            if let Ok(ended) = ended {
                record(&mut |t| *t.attacker_ends.entry(ended.label()).or_default() += 1);
            }
        }
        tokio::time::sleep_until(hold_until).await;
        // Dropping the connection closes it, and frees what the server held.
        drop(conn);
    }
}

/// Asks for the full page every `every` until `end`, reading each.
async fn normal_client(
    channel: tonic::transport::Channel,
    every: Duration,
    end: Instant,
    tallies: Arc<Mutex<Tallies>>,
) {
    let mut client =
        RoutingServiceClient::new(channel).max_decoding_message_size(NORMAL_MAX_DECODE);
    let mut next = Instant::now();
    while next < end {
        tokio::time::sleep_until(next).await;
        next += every;
        let answer = client.list_routes(grpc::full_page_request()).await;
        let mut t = lock(&tallies);
        t.normal_asked += 1;
        let label = match answer {
            Ok(page) if page.get_ref().routes.len() == grpc::FULL_PAGE as usize => {
                t.normal_full_pages += 1;
                "OK".to_string()
            }
            Ok(page) => format!("short_page_{}", page.get_ref().routes.len()),
            Err(status) => {
                t.normal_first_error
                    .get_or_insert_with(|| format!("{:?}: {}", status.code(), status.message()));
                grpc::code_name(status.code()).to_string()
            }
        };
        *t.normal_ends.entry(label).or_default() += 1;
    }
}
