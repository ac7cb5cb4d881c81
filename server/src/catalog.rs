//! ListRoutes: the padded 25-route catalog, its pagination and field masks.
//!
//! The catalog is built once at start-up. Every leg's carrier is padded with
//! 100,000 `X` characters, so each route is about 200 kB and the full catalog
//! encodes to about 5.0 MB: more than the default 4 MiB message cap, which is
//! the point of the chapter's message-size lesson.

use routing_contracts::routing::{Leg, ListRoutesRequest, ListRoutesResponse, Route};
use routing_contracts::types::Money;
use tonic::Status;

use crate::quote::usd;

/// Routes in the catalog, `rte_001` to `rte_025`.
pub const ROUTE_COUNT: usize = 25;
/// `X` characters appended to every leg's carrier name (100,000 bytes).
pub const CARRIER_PADDING: usize = 100_000;
/// Page size used when a request asks for 0 or fewer routes.
pub const DEFAULT_PAGE_SIZE: usize = 3;
/// Largest page; bigger requests are clamped to it.
pub const MAX_PAGE_SIZE: usize = ROUTE_COUNT;

/// (origin, hub, destination) UN/LOCODEs. Route `i` uses `LANES[(i-1) % 5]`.
pub const LANES: [(&str, &str, &str); 5] = [
    ("NLRTM", "EGPSD", "SGSIN"),
    ("CNSHA", "KRPUS", "USLAX"),
    ("DEHAM", "ESALG", "USNYC"),
    ("SGSIN", "LKCMB", "AEJEA"),
    ("BRSSZ", "PAPTY", "USHOU"),
];
/// Route `i` is sailed by `CARRIERS[(i-1) % 5]`.
pub const CARRIERS: [&str; 5] = ["MAERSK", "MSC", "CMA-CGM", "COSCO", "HAPAG-LLOYD"];

/// The field-mask paths ListRoutes understands, all relative to the response.
pub const MASK_PATHS: &[&str] = &[
    "routes",
    "routes.id",
    "routes.legs",
    "routes.legs.origin",
    "routes.legs.destination",
    "routes.legs.carrier",
    "routes.price",
    "routes.price.currency",
    "routes.price.amount",
];

/// The immutable route catalog, shared by every call.
#[derive(Debug, Clone)]
pub struct Catalog {
    routes: Vec<Route>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::new()
    }
}

impl Catalog {
    /// Builds the 25 padded routes.
    pub fn new() -> Self {
        Self {
            routes: (1..=ROUTE_COUNT).map(route).collect(),
        }
    }

    /// Every route, in catalog order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Serves one page. Bad tokens and unknown mask paths are
    /// `INVALID_ARGUMENT`; `next_page_token` is returned whatever the mask.
    pub fn list(&self, req: &ListRoutesRequest) -> Result<ListRoutesResponse, Status> {
        let offset = parse_page_token(&req.page_token)?;
        let mask = RouteMask::parse(req.field_mask.as_ref().map_or(&[][..], |m| &m.paths))?;
        let end = (offset + page_size(req.page_size)).min(self.routes.len());
        let routes = self.routes[offset..end]
            .iter()
            .map(|r| mask.apply(r))
            .collect();
        let next_page_token = if end < self.routes.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(ListRoutesResponse {
            routes,
            next_page_token,
        })
    }
}

/// Route `i` (1-based) of the catalog.
fn route(i: usize) -> Route {
    let (origin, hub, destination) = LANES[(i - 1) % LANES.len()];
    let carrier = CARRIERS[(i - 1) % CARRIERS.len()];
    let padded = |leg: usize| format!("{carrier}-{i:03}-{leg}-{}", "X".repeat(CARRIER_PADDING));
    Route {
        id: format!("rte_{i:03}"),
        legs: vec![
            Leg {
                origin: origin.into(),
                destination: hub.into(),
                carrier: padded(1),
            },
            Leg {
                origin: hub.into(),
                destination: destination.into(),
                carrier: padded(2),
            },
        ],
        price: Some(usd((1000 + i).into())),
    }
}

/// `page_size <= 0` means the default, and anything above the catalog is clamped.
fn page_size(requested: i32) -> usize {
    match usize::try_from(requested) {
        Ok(0) | Err(_) => DEFAULT_PAGE_SIZE,
        Ok(n) => n.min(MAX_PAGE_SIZE),
    }
}

/// A page token is empty (the first page) or the decimal offset of the next
/// route, 1 to 24, exactly as this server wrote it: no sign, no leading zero.
fn parse_page_token(token: &str) -> Result<usize, Status> {
    if token.is_empty() {
        return Ok(0);
    }
    let canonical = token.bytes().all(|b| b.is_ascii_digit()) && !token.starts_with('0');
    match token.parse::<usize>() {
        Ok(offset) if canonical && offset < ROUTE_COUNT => Ok(offset),
        _ => Err(Status::invalid_argument(format!(
            "page_token must be empty or a next_page_token from 1 to {}",
            ROUTE_COUNT - 1
        ))),
    }
}

/// Which fields of each `Route` a field mask keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RouteMask {
    id: bool,
    leg_origin: bool,
    leg_destination: bool,
    leg_carrier: bool,
    price_currency: bool,
    price_amount: bool,
}

impl RouteMask {
    const ALL: Self = Self {
        id: true,
        leg_origin: true,
        leg_destination: true,
        leg_carrier: true,
        price_currency: true,
        price_amount: true,
    };
    const NONE: Self = Self {
        id: false,
        leg_origin: false,
        leg_destination: false,
        leg_carrier: false,
        price_currency: false,
        price_amount: false,
    };

    /// An empty mask means the whole route, as in Google's API guidelines.
    fn parse(paths: &[String]) -> Result<Self, Status> {
        if paths.is_empty() {
            return Ok(Self::ALL);
        }
        let mut m = Self::NONE;
        for path in paths {
            match path.as_str() {
                "routes" => m = Self::ALL,
                "routes.id" => m.id = true,
                "routes.legs" => {
                    (m.leg_origin, m.leg_destination, m.leg_carrier) = (true, true, true)
                }
                "routes.legs.origin" => m.leg_origin = true,
                "routes.legs.destination" => m.leg_destination = true,
                "routes.legs.carrier" => m.leg_carrier = true,
                "routes.price" => (m.price_currency, m.price_amount) = (true, true),
                "routes.price.currency" => m.price_currency = true,
                "routes.price.amount" => m.price_amount = true,
                other => {
                    return Err(Status::invalid_argument(format!(
                        "field_mask path {other:?} is not one of {}",
                        MASK_PATHS.join(", ")
                    )));
                }
            }
        }
        Ok(m)
    }

    /// A copy of `route` holding only the selected fields. Legs are kept (as
    /// empty messages if need be) whenever any leg field is selected, so the
    /// number of legs stays visible.
    fn apply(&self, route: &Route) -> Route {
        let keep = |yes: bool, s: &String| if yes { s.clone() } else { String::new() };
        let any_leg = self.leg_origin || self.leg_destination || self.leg_carrier;
        let legs = if any_leg {
            let leg = |l: &Leg| Leg {
                origin: keep(self.leg_origin, &l.origin),
                destination: keep(self.leg_destination, &l.destination),
                carrier: keep(self.leg_carrier, &l.carrier),
            };
            route.legs.iter().map(leg).collect()
        } else {
            Vec::new()
        };
        let price = route
            .price
            .as_ref()
            .filter(|_| self.price_currency || self.price_amount)
            .map(|p| Money {
                currency: keep(self.price_currency, &p.currency),
                amount: keep(self.price_amount, &p.amount),
            });
        Route {
            id: keep(self.id, &route.id),
            legs,
            price,
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::FieldMask;

    use super::*;

    const MIB: usize = 1024 * 1024;

    fn list(page_size: i32, page_token: &str, mask: &[&str]) -> Result<ListRoutesResponse, Status> {
        let field_mask = (!mask.is_empty()).then(|| FieldMask {
            paths: mask.iter().map(|p| (*p).to_owned()).collect(),
        });
        Catalog::new().list(&ListRoutesRequest {
            page_size,
            page_token: page_token.into(),
            field_mask,
        })
    }

    fn ids(resp: &ListRoutesResponse) -> Vec<&str> {
        resp.routes.iter().map(|r| r.id.as_str()).collect()
    }

    #[test]
    fn routes_follow_lanes_carriers_and_prices() {
        let catalog = Catalog::new();
        let routes = catalog.routes();
        assert_eq!(routes.len(), 25);

        let first = &routes[0];
        assert_eq!(first.id, "rte_001");
        assert_eq!(
            first.price,
            Some(Money {
                currency: "USD".into(),
                amount: "1001.00".into()
            })
        );
        assert_eq!(
            (
                first.legs[0].origin.as_str(),
                first.legs[0].destination.as_str()
            ),
            ("NLRTM", "EGPSD")
        );
        assert_eq!(
            (
                first.legs[1].origin.as_str(),
                first.legs[1].destination.as_str()
            ),
            ("EGPSD", "SGSIN")
        );
        assert!(first.legs[0].carrier.starts_with("MAERSK-001-1-XXX"));
        assert!(first.legs[1].carrier.starts_with("MAERSK-001-2-XXX"));

        // Route 7 uses the second lane and the second carrier.
        let seventh = &routes[6];
        assert_eq!(seventh.id, "rte_007");
        assert_eq!(seventh.legs[0].origin, "CNSHA");
        assert_eq!(seventh.legs[1].destination, "USLAX");
        assert!(seventh.legs[1].carrier.starts_with("MSC-007-2-"));

        let last = &routes[24];
        assert_eq!(last.id, "rte_025");
        assert_eq!(
            last.price.as_ref().map(|p| p.amount.as_str()),
            Some("1025.00")
        );
        assert!(last.legs[0].carrier.starts_with("HAPAG-LLOYD-025-1-"));
        assert_eq!(last.legs[1].destination, "USHOU");
    }

    #[test]
    fn every_carrier_is_padded_with_exactly_100000_x() {
        for route in Catalog::new().routes() {
            assert_eq!(route.legs.len(), 2);
            for leg in &route.legs {
                let padding = leg
                    .carrier
                    .rsplit('-')
                    .next()
                    .expect("prefix ends with '-'");
                assert_eq!(padding.len(), CARRIER_PADDING);
                assert!(padding.bytes().all(|b| b == b'X'));
            }
        }
    }

    /// The full catalog must not fit a default 4 MiB client, but must fit our
    /// 16 MiB send cap with room to spare.
    #[test]
    fn full_page_encodes_between_4_and_8_mib() {
        let resp = list(25, "", &[]).expect("full page");
        let len = resp.encoded_len();
        assert!(
            len > 4 * MIB && len < 8 * MIB,
            "full catalog is {len} bytes"
        );
        assert!(
            len > 5_000_000 && len < 5_100_000,
            "about 5.0 MB, got {len}"
        );
    }

    #[test]
    fn default_page_is_three_routes_then_a_token() {
        let resp = list(0, "", &[]).expect("page");
        assert_eq!(ids(&resp), ["rte_001", "rte_002", "rte_003"]);
        assert_eq!(resp.next_page_token, "3");
        assert_eq!(
            ids(&list(-7, "", &[]).expect("page")),
            ["rte_001", "rte_002", "rte_003"]
        );
    }

    #[test]
    fn page_size_is_clamped_to_the_catalog() {
        let resp = list(1000, "", &[]).expect("page");
        assert_eq!(resp.routes.len(), 25);
        assert_eq!(resp.next_page_token, "");
    }

    #[test]
    fn tokens_walk_the_whole_catalog() {
        let (mut token, mut seen) = (String::new(), Vec::new());
        loop {
            let resp = list(10, &token, &["routes.id"]).expect("page");
            seen.extend(resp.routes.iter().map(|r| r.id.clone()));
            if resp.next_page_token.is_empty() {
                break;
            }
            token = resp.next_page_token;
        }
        let expected: Vec<String> = (1..=25).map(|i| format!("rte_{i:03}")).collect();
        assert_eq!(seen, expected);
        assert_eq!(ids(&list(3, "24", &[]).expect("last page")), ["rte_025"]);
    }

    #[test]
    fn bad_tokens_are_invalid_argument() {
        for token in [
            "0",
            "25",
            "-1",
            "+3",
            "03",
            "abc",
            "3 ",
            "99999999999999999999999",
        ] {
            let status = list(3, token, &[]).expect_err(token);
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{token}");
            assert!(status.message().starts_with("page_token "), "{token}");
        }
    }

    #[test]
    fn mask_keeps_only_the_selected_fields() {
        let resp = list(25, "", &["routes.id", "routes.price"]).expect("masked page");
        assert_eq!(resp.routes.len(), 25);
        assert!(
            resp.routes
                .iter()
                .all(|r| r.legs.is_empty() && r.price.is_some())
        );
        assert_eq!(resp.routes[24].id, "rte_025");
        assert_eq!(resp.next_page_token, "");
        // Small enough for any default 4 MiB client.
        assert!(resp.encoded_len() < 4096, "{} bytes", resp.encoded_len());
    }

    #[test]
    fn mask_reaches_into_legs_and_price() {
        let resp = list(1, "", &["routes.legs.origin", "routes.price.amount"]).expect("page");
        let route = &resp.routes[0];
        assert_eq!(route.id, "");
        assert_eq!(route.legs.len(), 2);
        assert_eq!(
            route.legs[1],
            Leg {
                origin: "EGPSD".into(),
                ..Leg::default()
            }
        );
        assert_eq!(
            route.price,
            Some(Money {
                currency: String::new(),
                amount: "1001.00".into()
            })
        );
        assert_eq!(resp.next_page_token, "1");
    }

    #[test]
    fn mask_routes_or_every_leaf_is_the_full_route() {
        let full = list(2, "", &[]).expect("page");
        assert_eq!(list(2, "", &["routes"]).expect("page"), full);
        assert_eq!(list(2, "", &MASK_PATHS[1..]).expect("page"), full);
    }

    #[test]
    fn unknown_mask_paths_are_invalid_argument_naming_the_path() {
        for path in [
            "routes.legs.weight",
            "next_page_token",
            "id",
            "",
            "routes.price.amount.x",
        ] {
            let status = list(3, "", &["routes.id", path]).expect_err(path);
            assert_eq!(status.code(), tonic::Code::InvalidArgument);
            assert!(
                status.message().contains(&format!("{path:?}")),
                "{}",
                status.message()
            );
        }
    }
}
