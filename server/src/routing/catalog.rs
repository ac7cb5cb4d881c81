//! ListRoutes: the padded 25-route catalog, its pagination and field masks.
//!
//! The catalog is built once at start-up. Every leg's carrier is padded with
//! 100,000 `X` characters, so each route is about 200 kB and the full catalog
//! encodes to about 5.0 MB: more than the default 4 MiB message cap, which is
//! the point of the chapter's message-size lesson.
//!
//! That padding is the best case for gzip (5.0 MB become 7 kB). With
//! [`Filler::Random`] (`routing-server --filler random`) it is random
//! printable ASCII instead, seeded and so the same on every start: the same
//! sizes, ids and prices, but bytes that barely shrink, the case where gzip
//! spends CPU for almost nothing.
//!
//! A page is never copied out of the catalog. [`Catalog::page`] answers a
//! request with a [`Page`]: which routes, which of their fields, and the next
//! token. The page shares the catalog, and [`crate::routing::page_codec`]
//! encodes the selected fields straight from it ([`crate::routing::page_body`]
//! sends an uncompressed page's carriers from it without a copy at all).
//! Copying them into a `ListRoutesResponse` first, the obvious way, would
//! deep-copy up to 5 MB of strings per call.

use std::{fmt, ops::Range, sync::Arc};

use bytes::Bytes;
use routing_contracts::routing::{Leg, ListRoutesRequest, Route};
use tonic::Status;

use crate::routing::quote::usd;

/// Routes in the catalog, `rte_001` to `rte_025`.
pub const ROUTE_COUNT: usize = 25;
/// `X` characters appended to every leg's carrier name (100,000 bytes).
pub const CARRIER_PADDING: usize = 100_000;
/// The seed of [`Filler::Random`]: fixed, so every start, every replica and
/// every run of a benchmark serves the same bytes.
pub const RANDOM_FILLER_SEED: u64 = 0x5eed_ca7a_1095_0001;
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

/// What the padding of every carrier name is made of.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Filler {
    /// 100,000 `X`s: gzip shrinks the full catalog to 0.14 %.
    #[default]
    Repeated,
    /// 100,000 random printable ASCII characters (`!` to `~`, seeded with
    /// [`RANDOM_FILLER_SEED`]): about 6.6 bits of entropy in every 8, so
    /// gzip cannot do much better than 82 %.
    Random,
}

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
    /// Builds the 25 padded routes, padded with `X`s.
    pub fn new() -> Self {
        Self::with_filler(Filler::Repeated)
    }

    /// Builds the 25 routes with padding made of `filler`.
    pub fn with_filler(filler: Filler) -> Self {
        let mut random = SplitMix64(RANDOM_FILLER_SEED);
        let mut padding = || match filler {
            Filler::Repeated => "X".repeat(CARRIER_PADDING),
            Filler::Random => random.printable(CARRIER_PADDING),
        };
        Self {
            routes: (1..=ROUTE_COUNT).map(|i| route(i, &mut padding)).collect(),
        }
    }

    /// Every route, in catalog order.
    pub fn routes(&self) -> &[Route] {
        &self.routes
    }

    /// Every leg's carrier as [`Bytes`] that point into the catalog, in
    /// catalog order: the memory an identity page is sent from
    /// ([`crate::connection::shared_memory`]).
    pub fn carriers(self: &Arc<Self>) -> Vec<Bytes> {
        self.routes
            .iter()
            .enumerate()
            .flat_map(|(route, r)| (0..r.legs.len()).map(move |leg| LegAt { route, leg }))
            .map(|at| carrier_bytes(self, at))
            .collect()
    }

    /// Resolves a request to one page. Bad tokens and unknown mask paths are
    /// `INVALID_ARGUMENT`; `next_page_token` is returned whatever the mask.
    pub fn page(self: &Arc<Self>, req: &ListRoutesRequest) -> Result<Page, Status> {
        let offset = parse_page_token(&req.page_token)?;
        let mask = RouteMask::parse(req.field_mask.as_ref().map_or(&[][..], |m| &m.paths))?;
        let end = (offset + page_size(req.page_size)).min(self.routes.len());
        let next_page_token = if end < self.routes.len() {
            end.to_string()
        } else {
            String::new()
        };
        Ok(Page {
            catalog: Arc::clone(self),
            routes: offset..end,
            mask,
            next_page_token,
        })
    }
}

/// One page of the catalog, ready to encode: a range of routes, the fields
/// the mask keeps, and the next token. It holds the shared catalog, not a
/// copy of it.
#[derive(Clone)]
pub struct Page {
    catalog: Arc<Catalog>,
    routes: Range<usize>,
    mask: RouteMask,
    next_page_token: String,
}

impl Page {
    /// How many routes the page holds.
    pub fn route_count(&self) -> usize {
        self.routes.len()
    }

    /// The token of the next page, empty on the last one.
    pub fn next_page_token(&self) -> &str {
        &self.next_page_token
    }

    /// The routes the page selects, borrowed from the catalog.
    pub(crate) fn routes(&self) -> &[Route] {
        &self.catalog.routes[self.routes.clone()]
    }

    /// The routes the page selects, each with its index in the catalog.
    pub(crate) fn indexed_routes(&self) -> impl Iterator<Item = (usize, &Route)> {
        self.routes.clone().zip(self.routes())
    }

    /// Which fields of each route the page keeps.
    pub(crate) fn mask(&self) -> &RouteMask {
        &self.mask
    }

    /// A leg's carrier as [`Bytes`] that point into the catalog: no copy is
    /// made, and the bytes keep the catalog alive until they are dropped.
    pub(crate) fn shared_carrier(&self, at: LegAt) -> Bytes {
        carrier_bytes(&self.catalog, at)
    }
}

/// The carrier at `at` as [`Bytes`] that point into `catalog` and keep it
/// alive.
fn carrier_bytes(catalog: &Arc<Catalog>, at: LegAt) -> Bytes {
    Bytes::from_owner(CarrierText {
        catalog: Arc::clone(catalog),
        at,
    })
}

/// Where a leg lives in the catalog: its route's index and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegAt {
    pub(crate) route: usize,
    pub(crate) leg: usize,
}

/// A leg's carrier, read in place: what a [`Page::shared_carrier`] points at.
struct CarrierText {
    catalog: Arc<Catalog>,
    at: LegAt,
}

impl AsRef<[u8]> for CarrierText {
    /// A `LegAt` is only made while walking this same catalog
    /// ([`Page::indexed_routes`]), so the indices are in range.
    fn as_ref(&self) -> &[u8] {
        self.catalog.routes[self.at.route].legs[self.at.leg]
            .carrier
            .as_bytes()
    }
}

/// The catalog is 5 MB of text: show what the page selects, not the routes.
impl fmt::Debug for Page {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Page")
            .field("routes", &self.routes)
            .field("mask", &self.mask)
            .field("next_page_token", &self.next_page_token)
            .finish_non_exhaustive()
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): a few lines, statistically
/// good enough to defeat gzip, and the same sequence on every platform. Not
/// for anything secret.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// `len` characters from `!` (0x21) to `~` (0x7e), none of them `-`,
    /// which ends the carrier's prefix.
    fn printable(&mut self, len: usize) -> String {
        const ALPHABET: &[u8] = b"!\"#$%&'()*+,./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";
        (0..len)
            .map(|_| {
                // The high bits, scaled: no modulo bias worth the name over 93.
                let pick = ((self.next() >> 32) * ALPHABET.len() as u64) >> 32;
                char::from(ALPHABET[pick as usize])
            })
            .collect()
    }
}

/// Route `i` (1-based) of the catalog, each leg's carrier padded with what
/// `padding` makes.
fn route(i: usize, padding: &mut impl FnMut() -> String) -> Route {
    let (origin, hub, destination) = LANES[(i - 1) % LANES.len()];
    let carrier = CARRIERS[(i - 1) % CARRIERS.len()];
    let mut padded = |leg: usize| format!("{carrier}-{i:03}-{leg}-{}", padding());
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
pub(crate) struct RouteMask {
    pub(crate) id: bool,
    pub(crate) leg_origin: bool,
    pub(crate) leg_destination: bool,
    pub(crate) leg_carrier: bool,
    pub(crate) price_currency: bool,
    pub(crate) price_amount: bool,
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
}

#[cfg(test)]
mod tests {
    use prost::Message;
    use prost_types::FieldMask;
    use routing_contracts::routing::ListRoutesResponse;
    use routing_contracts::types::Money;

    use super::*;

    const MIB: usize = 1024 * 1024;

    fn request(page_size: i32, page_token: &str, mask: &[&str]) -> ListRoutesRequest {
        let field_mask = (!mask.is_empty()).then(|| FieldMask {
            paths: mask.iter().map(|p| (*p).to_owned()).collect(),
        });
        ListRoutesRequest {
            page_size,
            page_token: page_token.into(),
            field_mask,
        }
    }

    /// The page as a client receives it: decoded from the served encoding.
    fn list(page_size: i32, page_token: &str, mask: &[&str]) -> Result<ListRoutesResponse, Status> {
        let page = Arc::new(Catalog::new()).page(&request(page_size, page_token, mask))?;
        Ok(page.to_message())
    }

    /// The obvious way to serve `page`, kept as the reference for the encoder:
    /// copy the fields the mask keeps into an owned `ListRoutesResponse`.
    fn copied_response(page: &Page) -> ListRoutesResponse {
        let mask = page.mask;
        let keep = |yes: bool, s: &String| if yes { s.clone() } else { String::new() };
        let copy = |route: &Route| Route {
            id: keep(mask.id, &route.id),
            legs: if mask.leg_origin || mask.leg_destination || mask.leg_carrier {
                let leg = |l: &Leg| Leg {
                    origin: keep(mask.leg_origin, &l.origin),
                    destination: keep(mask.leg_destination, &l.destination),
                    carrier: keep(mask.leg_carrier, &l.carrier),
                };
                route.legs.iter().map(leg).collect()
            } else {
                Vec::new()
            },
            price: route
                .price
                .as_ref()
                .filter(|_| mask.price_currency || mask.price_amount)
                .map(|p| Money {
                    currency: keep(mask.price_currency, &p.currency),
                    amount: keep(mask.price_amount, &p.amount),
                }),
        };
        ListRoutesResponse {
            routes: page.catalog.routes[page.routes.clone()]
                .iter()
                .map(copy)
                .collect(),
            next_page_token: page.next_page_token.clone(),
        }
    }

    /// Encodes `page` straight from the catalog and checks it against prost's
    /// encoding of the copied reference, without printing megabytes on failure.
    fn assert_encodes_like_prost(page: &Page, case: &str) {
        let expected = copied_response(page).encode_to_vec();
        let mut served = Vec::new();
        page.encode(&mut served);
        assert_eq!(page.encoded_len(), expected.len(), "encoded_len, {case}");
        if served != expected {
            let first_difference = served.iter().zip(&expected).position(|(a, b)| a != b);
            panic!(
                "{case}: {} bytes served, {} expected, first difference at {first_difference:?}",
                served.len(),
                expected.len()
            );
        }
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

    /// Given the random filler, the catalog has the same ids, prices, lanes
    /// and byte sizes as the repeated one; its padding is printable, never
    /// `-`, not all one character, and the same on every build.
    #[test]
    fn the_random_filler_changes_only_the_padding() {
        let repeated = Catalog::new();
        let random = Catalog::with_filler(Filler::Random);
        assert_eq!(random.routes().len(), ROUTE_COUNT);
        for (x, r) in repeated.routes().iter().zip(random.routes()) {
            assert_eq!(x.id, r.id);
            assert_eq!(x.price, r.price);
            assert_eq!(x.encoded_len(), r.encoded_len(), "{}", x.id);
            for (xl, rl) in x.legs.iter().zip(&r.legs) {
                assert_eq!((&xl.origin, &xl.destination), (&rl.origin, &rl.destination));
                let (prefix, padding) = rl.carrier.rsplit_once('-').expect("prefix ends with '-'");
                assert_eq!(xl.carrier.rsplit_once('-').map(|(p, _)| p), Some(prefix));
                assert_eq!(padding.len(), CARRIER_PADDING);
                assert!(padding.bytes().all(|b| b.is_ascii_graphic() && b != b'-'));
                let distinct: std::collections::HashSet<u8> = padding.bytes().collect();
                assert!(distinct.len() > 90, "{} distinct bytes", distinct.len());
            }
        }
        let again = Catalog::with_filler(Filler::Random);
        assert_eq!(
            random.routes(),
            again.routes(),
            "seeded: the same every time"
        );
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

    /// Given every field mask (each subset of the six leaf paths, the empty
    /// subset meaning no mask at all, plus the group paths) on pages of several
    /// offsets and sizes, when a page is encoded straight from the catalog,
    /// then its bytes and its `encoded_len` equal prost's encoding of the same
    /// response built by copying. Then the same for every offset and size, on
    /// masks small enough to keep the test fast.
    #[test]
    fn page_encoding_equals_prost_encoding_of_the_copied_response() {
        let catalog = Arc::new(Catalog::new());
        let leaves = [
            "routes.id",
            "routes.legs.origin",
            "routes.legs.destination",
            "routes.legs.carrier",
            "routes.price.currency",
            "routes.price.amount",
        ];
        let mut masks: Vec<Vec<&str>> = (0..1u32 << leaves.len())
            .map(|bits| {
                let chosen = leaves
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| bits & (1 << i) != 0);
                chosen.map(|(_, path)| *path).collect()
            })
            .collect();
        masks.push(vec!["routes"]);
        masks.push(vec!["routes.legs", "routes.price"]);
        for mask in &masks {
            for (size, token) in [(0, ""), (25, ""), (1, "24"), (7, "10"), (-1, "22")] {
                let page = catalog.page(&request(size, token, mask)).expect("valid");
                assert_encodes_like_prost(
                    &page,
                    &format!("mask {mask:?}, size {size}, token {token:?}"),
                );
            }
        }
        for mask in [
            &["routes.id"][..],
            &["routes.price"],
            &["routes.legs.origin"],
        ] {
            for offset in 0..ROUTE_COUNT {
                let token = if offset == 0 {
                    String::new()
                } else {
                    offset.to_string()
                };
                for size in 1..=25 {
                    let page = catalog.page(&request(size, &token, mask)).expect("valid");
                    assert_encodes_like_prost(
                        &page,
                        &format!("mask {mask:?}, size {size}, token {token:?}"),
                    );
                }
            }
        }
    }

    /// A page's `encoded_len` is what the budget and the send cap see, so it
    /// must be right before any byte is written: 5,002,495 for the full catalog.
    #[test]
    fn encoded_len_of_the_full_catalog_is_known_before_encoding() {
        let page = Arc::new(Catalog::new())
            .page(&request(25, "", &[]))
            .expect("valid");
        assert_eq!(page.encoded_len(), 5_002_495);
        assert_eq!(page.route_count(), 25);
        assert_eq!(page.next_page_token(), "");
    }
}
