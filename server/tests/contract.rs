//! The contract as a gRPC client sees it: answers, validation errors and the
//! exact status codes, over a real socket. Every scenario that needs no
//! routing-server knob runs twice: against `routing-server`'s own assembly,
//! and against the stock tonic server a reader copies
//! (`server/examples/tonic_server.rs`, compiled into this test).

mod support;

#[allow(dead_code)] // the test calls `serve`; `main` and `Args` are the example's
#[path = "../examples/tonic_server.rs"]
mod tonic_server;

use std::net::SocketAddr;

use prost_types::FieldMask;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use routing_contracts::routing::{GetQuoteRequest, Leg, ListRoutesRequest};
use routing_contracts::types::{CargoItem, Money};
use routing_server::LocalServer;
use tokio::{net::TcpListener, sync::oneshot};
use tonic::{Code, transport::Channel};

/// The servers the contract must hold for.
#[derive(Debug, Clone, Copy)]
enum Under {
    /// `routing-server`: hyper directly, with the hardening.
    RoutingServer,
    /// `tonic_server`: tonic's `Server::builder()` with the same levers.
    StockTonic,
}

/// A server under test on a free loopback port; dropping it stops it.
enum Served {
    Routing(LocalServer),
    Tonic {
        addr: SocketAddr,
        _stop: oneshot::Sender<()>,
    },
}

impl Under {
    async fn start(self) -> Served {
        match self {
            Under::RoutingServer => Served::Routing(support::start().await),
            Under::StockTonic => {
                let listener = TcpListener::bind("127.0.0.1:0").await.expect("free port");
                let addr = listener.local_addr().expect("bound address");
                let (stop, stopped) = oneshot::channel::<()>();
                tokio::spawn(tonic_server::serve(listener, async {
                    // A dropped sender also means "stop".
                    let _ = stopped.await;
                }));
                Served::Tonic { addr, _stop: stop }
            }
        }
    }
}

impl Served {
    /// A plain tonic client: every tonic default, including the 4 MiB decode cap.
    async fn client(&self) -> RoutingServiceClient<Channel> {
        let url = match self {
            Served::Routing(server) => server.url(),
            Served::Tonic { addr, .. } => format!("http://{addr}"),
        };
        RoutingServiceClient::new(support::channel_at(url).await)
    }
}

fn quote_request(origin: &str, destination: &str, weights: &[f64]) -> GetQuoteRequest {
    GetQuoteRequest {
        origin: origin.into(),
        destination: destination.into(),
        cargo: weights
            .iter()
            .map(|&weight_kg| CargoItem {
                description: "parts".into(),
                weight_kg,
            })
            .collect(),
    }
}

fn page(page_size: i32, page_token: &str, mask: &[&str]) -> ListRoutesRequest {
    ListRoutesRequest {
        page_size,
        page_token: page_token.into(),
        field_mask: (!mask.is_empty()).then(|| FieldMask {
            paths: mask.iter().map(|p| (*p).into()).collect(),
        }),
    }
}

/// Given the chapter's example, when it is quoted, then the formula, the
/// route id and the single MAERSK leg come back.
async fn get_quote_prices_the_chapters_example(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;

    let reply = client
        .get_quote(quote_request("NLRTM", "SGSIN", &[400.4]))
        .await
        .expect("quote");
    let quote = reply.into_inner().quote.expect("quote is set");

    assert_eq!(quote.route_id, "NLRTM-SGSIN");
    assert_eq!(
        quote.price,
        Some(Money {
            currency: "USD".into(),
            amount: "1001.00".into()
        })
    );
    assert_eq!(
        quote.legs,
        [Leg {
            origin: "NLRTM".into(),
            destination: "SGSIN".into(),
            carrier: "MAERSK".into()
        }]
    );
    // Several items are summed exactly, then rounded half away from zero.
    let reply = client
        .get_quote(quote_request("CNSHA", "USLAX", &[0.1, 0.2, 0.05]))
        .await
        .expect("quote");
    assert_eq!(
        reply
            .into_inner()
            .quote
            .and_then(|q| q.price)
            .map(|p| p.amount),
        Some("0.88".into())
    );
}

/// Each rule is enforced with INVALID_ARGUMENT and a message naming the field.
async fn get_quote_rejects_bad_input_with_invalid_argument(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;
    let too_many = vec![1.0; 1001];
    let cases: [(GetQuoteRequest, &str); 9] = [
        (quote_request("", "SGSIN", &[1.0]), "origin "),
        (quote_request("NLRTM", "sgsin", &[1.0]), "destination "),
        (quote_request("NL1TM", "SGSIN", &[1.0]), "origin "),
        (
            quote_request("NLRTM", "NLRTM", &[1.0]),
            "destination must differ from origin",
        ),
        (
            quote_request("NLRTM", "SGSIN", &[]),
            "cargo must hold 1 to 1000 items",
        ),
        (
            quote_request("NLRTM", "SGSIN", &too_many),
            "cargo must hold 1 to 1000 items",
        ),
        (
            quote_request("NLRTM", "SGSIN", &[0.0]),
            "cargo[0].weight_kg ",
        ),
        (
            quote_request("NLRTM", "SGSIN", &[1.0, f64::NAN]),
            "cargo[1].weight_kg ",
        ),
        (
            quote_request("NLRTM", "SGSIN", &[1_000_000.01]),
            "cargo[0].weight_kg ",
        ),
    ];
    for (request, expected) in cases {
        let status = client.get_quote(request).await.expect_err(expected);
        assert_eq!(status.code(), Code::InvalidArgument, "{expected}");
        assert!(
            status.message().starts_with(expected),
            "{expected:?} vs {:?}",
            status.message()
        );
    }
}

/// The default page is 3 routes with a token; tokens walk to the end; bad
/// tokens and unknown mask paths are INVALID_ARGUMENT.
async fn list_routes_pages_and_validates(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;

    let first = client
        .list_routes(page(0, "", &[]))
        .await
        .expect("page")
        .into_inner();
    let ids: Vec<_> = first.routes.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["rte_001", "rte_002", "rte_003"]);
    assert_eq!(first.next_page_token, "3");

    let next = client
        .list_routes(page(3, &first.next_page_token, &[]))
        .await
        .expect("page")
        .into_inner();
    assert_eq!(next.routes[0].id, "rte_004");
    assert_eq!(next.next_page_token, "6");

    let last = client
        .list_routes(page(3, "24", &[]))
        .await
        .expect("page")
        .into_inner();
    assert_eq!(last.routes.len(), 1);
    assert_eq!(last.next_page_token, "");

    let status = client
        .list_routes(page(3, "25", &[]))
        .await
        .expect_err("bad token");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().starts_with("page_token "));

    let status = client
        .list_routes(page(3, "", &["routes.weight"]))
        .await
        .expect_err("bad mask");
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(
        status.message().contains("\"routes.weight\""),
        "{}",
        status.message()
    );
}

/// The chapter's cap lesson as tonic sees it. A default client (4 MiB decode
/// cap) gets OUT_OF_RANGE for the 5.0 MB catalog: tonic's code, where grpc-go
/// and grpc-java say RESOURCE_EXHAUSTED.
async fn full_catalog_is_out_of_range_for_a_default_client(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;

    let status = client
        .list_routes(page(25, "", &[]))
        .await
        .expect_err("over 4 MiB");

    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        status
            .message()
            .contains("decoded message length too large"),
        "{}",
        status.message()
    );
}

/// With gzip the 5.0 MB catalog arrives as a few kB, so the length check
/// passes; the limit bites after decompression, as RESOURCE_EXHAUSTED.
async fn gzipped_full_catalog_is_resource_exhausted_for_a_default_client(under: Under) {
    let server = under.start().await;
    let mut client = server
        .client()
        .await
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip);

    let status = client
        .list_routes(page(25, "", &[]))
        .await
        .expect_err("over 4 MiB once inflated");

    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
}

/// Raising the client's cap to 16 MiB, where it is needed, lets it through.
async fn full_catalog_fits_a_16_mib_client(under: Under) {
    let server = under.start().await;
    let mut client = server
        .client()
        .await
        .max_decoding_message_size(16 * support::MIB);

    let reply = client
        .list_routes(page(25, "", &[]))
        .await
        .expect("fits 16 MiB")
        .into_inner();

    assert_eq!(reply.routes.len(), 25);
    assert_eq!(reply.routes[0].id, "rte_001");
    assert_eq!(reply.routes[24].id, "rte_025");
    assert_eq!(reply.next_page_token, "");
}

/// Shrinking beats raising: the same 25 routes with only id and price fit a
/// default 4 MiB client.
async fn masked_full_catalog_fits_a_default_client(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;

    let reply = client
        .list_routes(page(25, "", &["routes.id", "routes.price"]))
        .await
        .expect("fits 4 MiB")
        .into_inner();

    assert_eq!(reply.routes.len(), 25);
    assert!(reply.routes.iter().all(|r| r.legs.is_empty()));
    assert_eq!(
        reply.routes[24].price,
        Some(Money {
            currency: "USD".into(),
            amount: "1025.00".into()
        })
    );
}

/// The server's send cap is real: lowered to 1 MiB, the full catalog is never
/// sent, even to a client that would accept 16 MiB.
#[tokio::test]
async fn send_cap_stops_oversized_responses_at_the_server() {
    let config = routing_server::Config {
        max_send_bytes: support::MIB,
        ..Default::default()
    };
    let server = support::start_with(config).await;
    let mut client = support::client(&server)
        .await
        .max_decoding_message_size(16 * support::MIB);

    let status = client
        .list_routes(page(25, "", &[]))
        .await
        .expect_err("over the send cap");

    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(
        status
            .message()
            .contains("encoded message length too large"),
        "{}",
        status.message()
    );
}

/// The receive cap stays at 4 MiB: a 5 MB request is refused.
async fn receive_cap_refuses_oversized_requests(under: Under) {
    let server = under.start().await;
    let mut client = server.client().await;
    let mut request = quote_request("NLRTM", "SGSIN", &[1.0]);
    request.cargo[0].description = "X".repeat(5_000_000);

    let status = client
        .get_quote(request)
        .await
        .expect_err("over the receive cap");

    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
}

/// Gzip-compressed requests are accepted.
async fn gzip_requests_are_accepted(under: Under) {
    let server = under.start().await;
    let mut client = server
        .client()
        .await
        .send_compressed(tonic::codec::CompressionEncoding::Gzip);

    let reply = client
        .get_quote(quote_request("NLRTM", "SGSIN", &[400.4]))
        .await
        .expect("quote");

    assert_eq!(
        reply.into_inner().quote.map(|q| q.route_id),
        Some("NLRTM-SGSIN".into())
    );
}

/// Each scenario above, once against each server.
macro_rules! against_both {
    ($($scenario:ident),* $(,)?) => {
        mod against_routing_server {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(super::Under::RoutingServer).await;
            })*
        }
        mod against_stock_tonic {
            $(#[tokio::test]
            async fn $scenario() {
                super::$scenario(super::Under::StockTonic).await;
            })*
        }
    };
}

against_both!(
    get_quote_prices_the_chapters_example,
    get_quote_rejects_bad_input_with_invalid_argument,
    list_routes_pages_and_validates,
    full_catalog_is_out_of_range_for_a_default_client,
    gzipped_full_catalog_is_resource_exhausted_for_a_default_client,
    full_catalog_fits_a_16_mib_client,
    masked_full_catalog_fits_a_default_client,
    receive_cap_refuses_oversized_requests,
    gzip_requests_are_accepted,
);
