//! Fetching a page of the catalog, timed, as the window lesson (and the
//! harness's link chart) measure it.

use std::time::{Duration, Instant};

use routing_contracts::routing::{ListRoutesRequest, routing_service_client::RoutingServiceClient};
use tonic::transport::Channel;

use crate::{Error, rpc_error};

/// Routes in the full catalog: `page_size` 25 asks for all of them, about
/// 5.0 MB (each route carries 100,000-character padding per leg).
pub const FULL_CATALOG_ROUTES: u32 = 25;

/// Largest response decoded: 16 MiB, the server's send cap. tonic's default
/// (4 MiB) would reject the 5.0 MB catalog with `OUT_OF_RANGE`.
pub const MAX_DECODE_BYTES: usize = 16 * 1024 * 1024;

/// A catalog client on `channel` with the decode cap raised. It does not
/// accept gzip, so every byte of the catalog crosses the wire.
pub fn catalog_client(channel: Channel) -> RoutingServiceClient<Channel> {
    RoutingServiceClient::new(channel).max_decoding_message_size(MAX_DECODE_BYTES)
}

/// Fetches the first `routes` routes: how many came back, and how long the
/// call took from start to decoded answer.
pub async fn fetch_routes(
    mut client: RoutingServiceClient<Channel>,
    routes: u32,
) -> Result<(usize, Duration), Error> {
    let page = ListRoutesRequest {
        page_size: i32::try_from(routes).unwrap_or(i32::MAX),
        ..Default::default()
    };
    let started = Instant::now();
    let answer = client
        .list_routes(page)
        .await
        .map_err(rpc_error("ListRoutes"))?
        .into_inner();
    Ok((answer.routes.len(), started.elapsed()))
}
