//! ListRoutes pages as they leave the server. The page is encoded straight
//! from the shared catalog (`server/src/routing/page_codec.rs`), so these tests read
//! the message bytes off raw HTTP/2 and compare them with prost's encoding of
//! the response a reader would build by copying from the catalog.

mod support;

use std::io::Read;

use prost::Message;
use prost_types::FieldMask;
use routing_contracts::routing::{Leg, ListRoutesRequest, ListRoutesResponse, Route};
use routing_contracts::types::Money;
use routing_server::routing::catalog::Catalog;

fn request(page_size: i32, page_token: &str, mask: &[&str]) -> ListRoutesRequest {
    ListRoutesRequest {
        page_size,
        page_token: page_token.into(),
        field_mask: (!mask.is_empty()).then(|| FieldMask {
            paths: mask.iter().map(|p| (*p).into()).collect(),
        }),
    }
}

/// Three requests and the responses a reader would expect, built by copying.
fn cases() -> Vec<(ListRoutesRequest, ListRoutesResponse)> {
    let catalog = Catalog::new();
    let routes = catalog.routes();
    let full = ListRoutesResponse {
        routes: routes.to_vec(),
        next_page_token: String::new(),
    };
    let id_and_price = ListRoutesResponse {
        routes: routes[10..12]
            .iter()
            .map(|r| Route {
                id: r.id.clone(),
                legs: Vec::new(),
                price: r.price.clone(),
            })
            .collect(),
        next_page_token: "12".into(),
    };
    let origins_and_amounts = ListRoutesResponse {
        routes: routes[..3]
            .iter()
            .map(|r| Route {
                id: String::new(),
                legs: r
                    .legs
                    .iter()
                    .map(|l| Leg {
                        origin: l.origin.clone(),
                        ..Leg::default()
                    })
                    .collect(),
                price: r.price.as_ref().map(|p| Money {
                    currency: String::new(),
                    amount: p.amount.clone(),
                }),
            })
            .collect(),
        next_page_token: "3".into(),
    };
    vec![
        (request(25, "", &[]), full),
        (
            request(2, "10", &["routes.id", "routes.price"]),
            id_and_price,
        ),
        (
            request(0, "", &["routes.legs.origin", "routes.price.amount"]),
            origins_and_amounts,
        ),
    ]
}

/// Given a client that does not accept gzip and one that does, when each
/// asks for the full catalog, a masked middle page and a mask that reaches
/// into legs and price, then each message on the wire (inflated, for the
/// gzip client) is byte for byte prost's encoding of the expected response.
#[tokio::test]
async fn served_pages_are_prosts_encoding_of_the_expected_response() {
    let server = support::start().await;
    let mut h2 = support::raw_h2(server.addr()).await;

    for accept_gzip in [false, true] {
        for (request, expected) in cases() {
            let call =
                support::grpc_request(server.addr(), support::LIST_ROUTES, &request, accept_gzip);
            let reply = support::read_reply(h2.send_request(call).await.expect("response")).await;

            assert_eq!(reply.grpc_status.as_deref(), Some("0"), "{request:?}");
            assert_eq!(reply.compressed_flag, u8::from(accept_gzip), "{request:?}");
            let mut message = reply.message.to_vec();
            if accept_gzip {
                let mut inflated = Vec::new();
                flate2::read::GzDecoder::new(&message[..])
                    .read_to_end(&mut inflated)
                    .expect("valid gzip");
                message = inflated;
            }
            assert!(
                message == expected.encode_to_vec(),
                "{request:?}, gzip {accept_gzip}: {} bytes, {} expected",
                message.len(),
                expected.encoded_len()
            );
        }
    }
}
