//! `pooled-client`: the fix. Opens one channel and reuses it for every
//! GetQuote call; HTTP/2 multiplexes the calls over one connection.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin pooled-client -- --calls 50
//! {"client":"pooled","calls":50,"connections":1,"total_s":0.005525,"median_call_s":0.000095}
//! ```
//!
//! `connections` is counted on the wire. Compare `median_call_s`, what one
//! call costs, and `total_s` with `footgun-client`.
//!
//! Over the emulated `wan` link (20 Mbit/s, 60 ms round trip, see
//! `routing_clients::link`), a call on the open channel costs one round trip:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin pooled-client -- --calls 50 --link wan
//! {"client":"pooled","link":{"preset":"wan","rtt_ms":60.0,"mbit":20.0,"queue_kib":64},"calls":50,"connections":1,"total_s":3.282552,"median_call_s":0.062836,"median_call_rtts":1.05}
//! ```

use std::{process::ExitCode, time::Instant};

use clap::Parser;
use routing_clients::{
    Baseline, CallTimer, Error, LinkReport, Timings, TlsReport, finish, init_tracing, rpc_error,
    sample_quote_request,
};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;

#[derive(Debug, Parser)]
#[command(version, about = "GetQuote N times over one reused channel")]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
    /// Number of GetQuote calls.
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    calls: u32,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    calls: u32,
    connections: u64,
    #[serde(flatten)]
    timings: Timings,
}

// One thread: the calls are sequential, and timings are steadier without
// wake-ups crossing threads.
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    finish(run(Args::parse()).await)
}

async fn run(args: Args) -> Result<Report, Error> {
    let endpoint = args.baseline.endpoint()?;
    let wire = args.baseline.wire();
    let request = sample_quote_request();

    let mut timer = CallTimer::start();
    // The fix: one channel, opened once. Clones of a client share it.
    let channel = args.baseline.connect(&endpoint, wire.clone()).await?;
    let client = RoutingServiceClient::new(channel);
    for _ in 0..args.calls {
        let call = Instant::now();
        let mut client = client.clone();
        client
            .get_quote(request.clone())
            .await
            .map_err(rpc_error("GetQuote"))?;
        timer.record(call);
    }

    Ok(Report {
        client: "pooled",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        calls: args.calls,
        connections: wire.snapshot().connections,
        timings: timer.finish(args.baseline.link().rtt()),
    })
}
