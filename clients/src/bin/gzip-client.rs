//! `gzip-client`: fetches the full 25-route catalog (about 5.0 MB) twice, on
//! two channels: once uncompressed, once with gzip requested and accepted.
//! It checks both answers are identical and reports the bytes each one moved.
//!
//! Run with:
//!
//! ```console
//! $ cargo run -p routing-clients --bin gzip-client
//! {"client":"gzip","result":"MATCH","routes":25,"identity_wire_bytes":5005371,"gzip_wire_bytes":7168}
//! ```
//!
//! `*_wire_bytes` are the bytes received on each connection, HTTP/2 framing
//! included. The decode cap is raised to 16 MiB on both channels, the native
//! counterpart of `grpcurl -max-msg-sz`: the catalog is larger than 4 MiB.

use std::process::ExitCode;

use clap::Parser;
use routing_clients::{Baseline, CountingConnector, Error, finish, init_tracing, rpc_error};
use routing_contracts::routing::{ListRoutesRequest, routing_service_client::RoutingServiceClient};
use serde::Serialize;
use tonic::codec::CompressionEncoding;

/// Largest response this client will decode: 16 MiB, matching the server's
/// send cap. tonic's default (4 MiB) would reject the 5.0 MB catalog with
/// `OUT_OF_RANGE`, or `RESOURCE_EXHAUSTED` once it is gzip-decompressed.
const MAX_DECODE_BYTES: usize = 16 * 1024 * 1024;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Fetch the full catalog with and without gzip and compare bytes on the wire"
)]
struct Args {
    #[command(flatten)]
    baseline: Baseline,
}

#[derive(Debug, Serialize)]
struct Report {
    client: &'static str,
    result: &'static str,
    routes: usize,
    identity_wire_bytes: u64,
    gzip_wire_bytes: u64,
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
    let full_catalog = ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    };

    let identity_wire = CountingConnector::new();
    let channel = args
        .baseline
        .connect(&endpoint, identity_wire.clone())
        .await?;
    let mut identity =
        RoutingServiceClient::new(channel).max_decoding_message_size(MAX_DECODE_BYTES);

    let gzip_wire = CountingConnector::new();
    let channel = args.baseline.connect(&endpoint, gzip_wire.clone()).await?;
    let mut gzip = RoutingServiceClient::new(channel)
        .max_decoding_message_size(MAX_DECODE_BYTES)
        // The lesson: advertise gzip (grpc-accept-encoding), and compress requests too.
        .accept_compressed(CompressionEncoding::Gzip)
        .send_compressed(CompressionEncoding::Gzip);

    let plain = identity
        .list_routes(full_catalog.clone())
        .await
        .map_err(rpc_error("ListRoutes"))?;
    let zipped = gzip
        .list_routes(full_catalog)
        .await
        .map_err(rpc_error("ListRoutes"))?;
    let (plain, zipped) = (plain.into_inner(), zipped.into_inner());

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

    Ok(Report {
        client: "gzip",
        result: "MATCH",
        routes: plain.routes.len(),
        identity_wire_bytes: identity_wire.snapshot().bytes_read,
        gzip_wire_bytes: gzip_wire.snapshot().bytes_read,
    })
}
