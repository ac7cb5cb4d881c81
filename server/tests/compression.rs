//! Compression as it crosses the wire, read from raw HTTP/2 frames rather
//! than through tonic's decoder: the `grpc-encoding` header and the
//! compressed-flag byte that precedes every gRPC message.

mod support;

use prost::Message;
use routing_contracts::routing::{GetQuoteRequest, ListRoutesRequest};
use routing_contracts::types::CargoItem;

fn full_catalog() -> ListRoutesRequest {
    ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    }
}

fn a_quote() -> GetQuoteRequest {
    GetQuoteRequest {
        origin: "NLRTM".into(),
        destination: "SGSIN".into(),
        cargo: vec![CargoItem {
            description: "parts".into(),
            weight_kg: 400.4,
        }],
    }
}

/// Given a client that accepts gzip, ListRoutes comes back gzipped (flag 1,
/// `grpc-encoding: gzip`) and tiny, while GetQuote comes back uncompressed
/// (flag 0, no `grpc-encoding`): the per-method gate works.
#[tokio::test]
async fn list_routes_is_gzipped_and_get_quote_is_not() {
    let server = support::start().await;
    let mut h2 = support::raw_h2(server.addr()).await;

    let request = support::grpc_request(server.addr(), support::LIST_ROUTES, &full_catalog(), true);
    let routes = support::read_reply(h2.send_request(request).await.expect("response")).await;
    let request = support::grpc_request(server.addr(), support::GET_QUOTE, &a_quote(), true);
    let quote = support::read_reply(h2.send_request(request).await.expect("response")).await;

    assert_eq!(routes.grpc_status.as_deref(), Some("0"));
    assert_eq!(routes.encoding.as_deref(), Some("gzip"));
    assert_eq!(routes.compressed_flag, 1);
    assert!(
        routes.message.len() < 50_000,
        "gzipped catalog is {} bytes",
        routes.message.len()
    );

    assert_eq!(quote.grpc_status.as_deref(), Some("0"));
    assert_eq!(quote.encoding, None);
    assert_eq!(quote.compressed_flag, 0);
    let decoded = routing_contracts::routing::GetQuoteResponse::decode(quote.message)
        .expect("plain protobuf");
    assert_eq!(
        decoded.quote.map(|q| q.route_id),
        Some("NLRTM-SGSIN".into())
    );
}

/// Given a client that does not advertise gzip, nothing is compressed.
#[tokio::test]
async fn nothing_is_gzipped_for_a_client_without_gzip() {
    let server = support::start().await;
    let mut h2 = support::raw_h2(server.addr()).await;

    let request =
        support::grpc_request(server.addr(), support::LIST_ROUTES, &full_catalog(), false);
    let routes = support::read_reply(h2.send_request(request).await.expect("response")).await;

    assert_eq!(routes.grpc_status.as_deref(), Some("0"));
    assert_eq!(routes.encoding, None);
    assert_eq!(routes.compressed_flag, 0);
    assert!(
        routes.message.len() > 4 * support::MIB,
        "{} bytes",
        routes.message.len()
    );
}

/// `--no-gzip` turns compression off even for clients that accept it.
#[tokio::test]
async fn no_gzip_config_never_compresses() {
    let server = support::start_with(routing_server::Config {
        no_gzip: true,
        ..Default::default()
    })
    .await;
    let mut h2 = support::raw_h2(server.addr()).await;

    let request = support::grpc_request(server.addr(), support::LIST_ROUTES, &full_catalog(), true);
    let routes = support::read_reply(h2.send_request(request).await.expect("response")).await;

    assert_eq!(routes.encoding, None);
    assert_eq!(routes.compressed_flag, 0);
}
