//! `gzip-client`: what gzip buys and what it costs. It fetches the full
//! 25-route catalog (about 5.0 MB) twice, on two channels: once uncompressed,
//! once with gzip requested and accepted. It checks both answers are
//! identical, reports the bytes and the time each fetch took, and the link
//! speed below which gzip is faster end to end. It also sends one small
//! GetQuote request each way and reports its size on the wire.
//!
//! Run with:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin gzip-client
//! {"client":"gzip","result":"MATCH","routes":25,"identity_wire_bytes":5005275,"gzip_wire_bytes":7187,"identity_s":0.014588,"gzip_s":0.019245,"break_even_bit_s":8584525840,"gzip_not_slower":false,"quote_request_identity_wire_bytes":112,"quote_request_gzip_wire_bytes":131}
//! ```
//!
//! `*_wire_bytes` are bytes on the wire, HTTP/2 framing included: received
//! during each ListRoutes fetch, sent for each GetQuote request. `identity_s`
//! and `gzip_s` time each fetch, from call to decoded answer.
//! `break_even_bit_s` is `bytes saved × 8 / extra seconds`: on a slower link
//! the bytes gzip saves take longer to send than gzip takes to run, so gzip is
//! faster end to end. When the gzip fetch was not slower at all, there is no
//! break-even: `break_even_bit_s` is null and `gzip_not_slower` is true.
//!
//! On loopback the bytes cost nothing, so gzip can only lose. Over the
//! emulated `wan` link (20 Mbit/s, 60 ms round trip, see
//! `routing_clients::link`) the same two fetches show it winning:
//!
//! ```console
//! $ cargo run --release -p routing-clients --bin gzip-client -- --link wan
//! {"client":"gzip","link":{"preset":"wan","rtt_ms":60.0,"mbit":20.0,"queue_kib":64},"result":"MATCH","routes":25,"identity_wire_bytes":5005275,"gzip_wire_bytes":7187,"identity_s":2.092648,"gzip_s":0.105559,"break_even_bit_s":null,"gzip_not_slower":true,"quote_request_identity_wire_bytes":112,"quote_request_gzip_wire_bytes":131,"faster_end_to_end":"gzip","identity_bytes_over_rate_s":2.00211}
//! ```
//!
//! `faster_end_to_end` is measured; `identity_bytes_over_rate_s` (identity
//! bytes × 8 ÷ the rate) is the least time the uncompressed catalog can take
//! on that link, and `identity_s` is close to it.
//!
//! The decode cap is raised to 16 MiB on both channels, the native
//! counterpart of `grpcurl -max-msg-sz`: the catalog is larger than 4 MiB.
//! Build with `--release`: in a debug build the timings measure the debug
//! build's gzip and protobuf code, not the lesson.

use std::{
    process::ExitCode,
    time::{Duration, Instant},
};

use clap::Parser;
use routing_clients::{
    Baseline, CountingConnector, Error, LinkReport, TlsReport, finish, init_tracing, rpc_error,
    sample_quote_request, seconds,
};
use routing_contracts::routing::{
    ListRoutesRequest, ListRoutesResponse, routing_service_client::RoutingServiceClient,
};
use serde::Serialize;
use tonic::{codec::CompressionEncoding, transport::Channel};

/// Largest response this client will decode: 16 MiB, matching the server's
/// send cap. tonic's default (4 MiB) would reject the 5.0 MB catalog with
/// `OUT_OF_RANGE`, or `RESOURCE_EXHAUSTED` once it is gzip-decompressed.
const MAX_DECODE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Fetch the full catalog with and without gzip: bytes on the wire, time, break-even link speed"
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<LinkReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<TlsReport>,
    result: &'static str,
    routes: usize,
    identity_wire_bytes: u64,
    gzip_wire_bytes: u64,
    identity_s: f64,
    gzip_s: f64,
    /// `None` (JSON null) when gzip was not slower: no break-even exists.
    break_even_bit_s: Option<u64>,
    gzip_not_slower: bool,
    quote_request_identity_wire_bytes: u64,
    quote_request_gzip_wire_bytes: u64,
    /// Over a link: which fetch finished first, end to end ("gzip" or
    /// "identity"). Absent without a link.
    #[serde(skip_serializing_if = "Option::is_none")]
    faster_end_to_end: Option<&'static str>,
    /// Over a link with a rate: the identity bytes ÷ the rate, the least
    /// time the uncompressed catalog can take on it.
    #[serde(skip_serializing_if = "Option::is_none")]
    identity_bytes_over_rate_s: Option<f64>,
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

    let identity_wire = args.baseline.wire();
    let channel = args
        .baseline
        .connect(&endpoint, identity_wire.clone())
        .await?;
    let mut identity =
        RoutingServiceClient::new(channel).max_decoding_message_size(MAX_DECODE_BYTES);

    let gzip_wire = args.baseline.wire();
    let channel = args.baseline.connect(&endpoint, gzip_wire.clone()).await?;
    let mut gzip = RoutingServiceClient::new(channel)
        .max_decoding_message_size(MAX_DECODE_BYTES)
        // The lesson: advertise gzip (grpc-accept-encoding), and compress requests too.
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);

    // First a small request each way: gzip makes it bigger, not smaller.
    let quote_request_identity_wire_bytes =
        quote_request_bytes(&mut identity, &identity_wire).await?;
    let quote_request_gzip_wire_bytes = quote_request_bytes(&mut gzip, &gzip_wire).await?;

    let (plain, identity_s, identity_wire_bytes) =
        fetch_catalog(&mut identity, &identity_wire).await?;
    let (zipped, gzip_s, gzip_wire_bytes) = fetch_catalog(&mut gzip, &gzip_wire).await?;

    // Field for field: prost messages compare every field, nested ones included.
    if plain != zipped {
        let first = plain
            .routes
            .iter()
            .zip(&zipped.routes)
            .position(|(a, b)| a != b);
        return Err(format!(
            "gzip and identity answers differ: {} vs {} routes, first difference at index {first:?}",
            plain.routes.len(),
            zipped.routes.len()
        )
        .into());
    }

    // bytes saved × 8 / extra seconds: below this link speed gzip wins.
    let bits_saved = identity_wire_bytes.saturating_sub(gzip_wire_bytes) as f64 * 8.0;
    let extra = gzip_s.saturating_sub(identity_s);
    let gzip_not_slower = extra.is_zero();
    let break_even_bit_s =
        (!gzip_not_slower).then(|| (bits_saved / extra.as_secs_f64()).round() as u64);
    // Over a link, the same two fetches say who wins on it: measured, not computed.
    let link = args.baseline.link();
    let faster_end_to_end = (!link.is_local()).then_some(if gzip_s < identity_s {
        "gzip"
    } else {
        "identity"
    });
    let identity_bytes_over_rate_s = link
        .rate_bit_s
        .map(|_| seconds(link.transmission_time(identity_wire_bytes)));

    Ok(Report {
        client: "gzip",
        link: args.baseline.link_report(),
        tls: args.baseline.tls_report(),
        result: "MATCH",
        routes: plain.routes.len(),
        identity_wire_bytes,
        gzip_wire_bytes,
        identity_s: seconds(identity_s),
        gzip_s: seconds(gzip_s),
        break_even_bit_s,
        gzip_not_slower,
        quote_request_identity_wire_bytes,
        quote_request_gzip_wire_bytes,
        faster_end_to_end,
        identity_bytes_over_rate_s,
    })
}

/// Fetches the full catalog: the answer, how long it took from call to
/// decoded answer, and the bytes received meanwhile.
async fn fetch_catalog(
    client: &mut RoutingServiceClient<Channel>,
    wire: &CountingConnector,
) -> Result<(ListRoutesResponse, Duration, u64), Error> {
    let full_catalog = ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    };
    let before = wire.snapshot();
    let started = Instant::now();
    let answer = client
        .list_routes(full_catalog)
        .await
        .map_err(rpc_error("ListRoutes"))?
        .into_inner();
    let elapsed = started.elapsed();
    Ok((answer, elapsed, wire.snapshot().since(before).bytes_read))
}

/// Sends one GetQuote and returns the bytes sent for it. A first call settles
/// the new connection (its SETTINGS acknowledgement would otherwise land in
/// the count), so the count is one request on a channel in use.
async fn quote_request_bytes(
    client: &mut RoutingServiceClient<Channel>,
    wire: &CountingConnector,
) -> Result<u64, Error> {
    client
        .get_quote(sample_quote_request())
        .await
        .map_err(rpc_error("GetQuote"))?;
    let before = wire.snapshot();
    client
        .get_quote(sample_quote_request())
        .await
        .map_err(rpc_error("GetQuote"))?;
    Ok(wire.snapshot().since(before).bytes_written)
}
