//! `keepalive-client`: one channel with HTTP/2 keepalive. Calls GetQuote,
//! stays idle longer than the keepalive interval, and calls again. The
//! connection survives the gap, and the PINGs that kept it alive are counted.
//!
//! Run with:
//!
//! ```console
//! $ cargo run -p routing-clients --bin keepalive-client -- --idle-secs 8
//! {"client":"keepalive","result":"SURVIVED","connections":1,"idle_s":8,"idle_bytes_sent":34,"idle_bytes_received":34}
//! ```
//!
//! SURVIVED means both answers are identical and both calls used the same,
//! single connection. The idle byte counts are PING frames (17 bytes each)
//! and their acks, from both sides: the server pings idle connections too.

use std::{process::ExitCode, time::Duration};

use clap::Parser;
use routing_clients::{
    Baseline, CountingConnector, Error, finish, init_tracing, rpc_error, sample_quote_request,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;

/// Send a PING after 5 s without traffic: the chapter's client keepalive.
/// grpc-go and grpc-java servers would answer this with `too_many_pings`
/// (their floor is 5 min by default); tonic servers enforce no floor.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(5);
/// Declare the connection dead if a PING is not acked within 20 s.
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(20);

#[derive(Debug, Parser)]
#[command(
    version,
    about = "GetQuote, stay idle past the keepalive interval, GetQuote again on the same connection"
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
    /// Seconds to stay idle between the two calls.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(0..=3600))]
    idle_secs: u64,
    /// Send a keepalive PING after this many seconds without traffic.
    #[arg(long, default_value_t = KEEPALIVE_INTERVAL.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    keepalive_secs: u64,
    /// Close the connection as dead if a PING is not acked within this many seconds.
    #[arg(long, default_value_t = KEEPALIVE_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    keepalive_timeout_secs: u64,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    result: &'static str,
    connections: u64,
    idle_s: u64,
    idle_bytes_sent: u64,
    idle_bytes_received: u64,
}

// One thread: the calls are sequential, and timings are steadier without
// wake-ups crossing threads.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    finish(run(Args::parse()).await)
}

async fn run(args: Args) -> Result<Report, Error> {
    let endpoint = args
        .baseline
        .endpoint()?
        // The lesson: PING after this long without traffic (5 s by default)...
        .http2_keep_alive_interval(Duration::from_secs(args.keepalive_secs))
        // ...declare the connection dead if the ack takes longer (20 s)...
        .keep_alive_timeout(Duration::from_secs(args.keepalive_timeout_secs))
        // ...and keep pinging when no call is in flight, so idle gaps are covered.
        .keep_alive_while_idle(true);
    let wire = CountingConnector::new();
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
    Ok(Report {
        client: "keepalive",
        result: "SURVIVED",
        connections,
        idle_s: args.idle_secs,
        idle_bytes_sent: idle.bytes_written,
        idle_bytes_received: idle.bytes_read,
    })
}
