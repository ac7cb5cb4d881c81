//! GetQuote: request validation and the pricing formula.
//!
//! ```text
//! price.amount = round_half_up(sum(weight_kg) * 2.50, 2)   in USD
//! ```
//!
//! Everything here is pure, so the rules are unit-tested without a socket.

use std::str::FromStr;

use routing_contracts::routing::{GetQuoteRequest, Leg, Quote};
use routing_contracts::types::{CargoItem, Money};
use rust_decimal::{Decimal, RoundingStrategy};
use tonic::Status;

/// USD per kilogram of total cargo weight.
pub const RATE_USD_PER_KG: Decimal = Decimal::from_parts(250, 0, 0, false, 2); // 2.50
/// Currency of every price.
pub const CURRENCY: &str = "USD";
/// Carrier of the single leg of every quote.
pub const QUOTE_CARRIER: &str = "MAERSK";
/// A request carries 1 to this many cargo items.
pub const MAX_CARGO_ITEMS: usize = 1000;
/// Heaviest single item, in kilograms.
pub const MAX_WEIGHT_KG: f64 = 1_000_000.0;

/// Validates a request and prices it. Errors are `INVALID_ARGUMENT` with a
/// short message naming the offending field.
pub fn quote(req: &GetQuoteRequest) -> Result<Quote, Status> {
    check_locode("origin", &req.origin)?;
    check_locode("destination", &req.destination)?;
    if req.origin == req.destination {
        return Err(Status::invalid_argument(
            "destination must differ from origin",
        ));
    }
    let total_kg = total_weight_kg(&req.cargo)?;
    Ok(Quote {
        route_id: [req.origin.as_str(), "-", req.destination.as_str()].concat(),
        price: Some(usd(price_for(total_kg))),
        legs: vec![Leg {
            origin: req.origin.clone(),
            destination: req.destination.clone(),
            carrier: QUOTE_CARRIER.to_owned(),
        }],
    })
}

/// The formula: total weight times the rate, rounded half away from zero to
/// cents. `round_dp` alone would round half to even (banker's rounding), and
/// 0.125 would become 0.12 instead of 0.13.
pub fn price_for(total_kg: Decimal) -> Decimal {
    (total_kg * RATE_USD_PER_KG).round_dp_with_strategy(2, RoundingStrategy::MidpointAwayFromZero)
}

/// Formats an amount as `Money` with exactly two fractional digits.
pub fn usd(amount: Decimal) -> Money {
    Money {
        currency: CURRENCY.to_owned(),
        amount: format!("{amount:.2}"),
    }
}

/// A UN/LOCODE: 2 uppercase ASCII letters (the country), then 3 uppercase
/// letters or digits 2-9 (the place), e.g. `NLRTM`, `DE2HM`.
pub fn is_locode(code: &str) -> bool {
    let b = code.as_bytes();
    b.len() == 5
        && b[..2].iter().all(u8::is_ascii_uppercase)
        && b[2..]
            .iter()
            .all(|&c| c.is_ascii_uppercase() || (b'2'..=b'9').contains(&c))
}

fn check_locode(field: &str, code: &str) -> Result<(), Status> {
    if is_locode(code) {
        Ok(())
    } else {
        Err(Status::invalid_argument(format!(
            "{field} must be a UN/LOCODE such as NLRTM"
        )))
    }
}

/// Sums the weights exactly. Each `f64` counts as its shortest round-trip
/// decimal form (what `{}` prints), so 0.1 counts as 0.1, not as
/// 0.1000000000000000055511151231257827.
fn total_weight_kg(cargo: &[CargoItem]) -> Result<Decimal, Status> {
    if cargo.is_empty() || cargo.len() > MAX_CARGO_ITEMS {
        return Err(Status::invalid_argument(format!(
            "cargo must hold 1 to {MAX_CARGO_ITEMS} items, got {}",
            cargo.len()
        )));
    }
    let mut total = Decimal::ZERO;
    for (i, item) in cargo.iter().enumerate() {
        let w = item.weight_kg;
        let bad = || {
            Status::invalid_argument(format!(
                "cargo[{i}].weight_kg must be finite, > 0 and <= {MAX_WEIGHT_KG}, got {w}"
            ))
        };
        if !w.is_finite() || w <= 0.0 || w > MAX_WEIGHT_KG {
            return Err(bad());
        }
        let kg = shortest_decimal(w).ok_or_else(bad)?;
        total = total.checked_add(kg).ok_or_else(bad)?;
    }
    Ok(total)
}

/// `w` (finite, positive) as the shortest decimal that reads back as `w`:
/// what `{}` prints, as a `Decimal`.
fn shortest_decimal(w: f64) -> Option<Decimal> {
    // Fast path, for weights with up to 6 decimals: the first `k` for which
    // n = round(w * 10^k) gives back `w` as n / 10^k is the fewest decimals
    // that read as `w`. Below 10^15 no two decimals read as the same f64, so
    // it is also the only one, the one `{}` prints. It skips formatting and
    // parsing text, half of GetQuote's own CPU (measured with callgrind).
    let mut scale = 1.0;
    for k in 0..=6 {
        let n = (w * scale).round();
        if n < 1e15 && n / scale == w {
            // Exact: n is a whole number below 2^53.
            return Some(Decimal::new(n as i64, k));
        }
        scale *= 10.0;
    }
    // Everything else goes through the text. `{}` never uses an exponent for
    // f64; tiny weights beyond 28 decimals are rounded by Decimal.
    Decimal::from_str(&w.to_string()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(origin: &str, destination: &str, weights: &[f64]) -> GetQuoteRequest {
        GetQuoteRequest {
            origin: origin.into(),
            destination: destination.into(),
            cargo: weights
                .iter()
                .map(|&weight_kg| CargoItem {
                    description: "crate".into(),
                    weight_kg,
                })
                .collect(),
        }
    }

    fn amount(weights: &[f64]) -> String {
        let quote = quote(&request("NLRTM", "SGSIN", weights)).expect("valid request");
        quote.price.expect("price is set").amount
    }

    fn rejected(req: &GetQuoteRequest) -> String {
        let status = quote(req).expect_err("request must be rejected");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        status.message().to_owned()
    }

    #[test]
    fn prices_total_weight_at_two_fifty_per_kg() {
        assert_eq!(amount(&[400.4]), "1001.00");
        assert_eq!(amount(&[1000.0, 250.0]), "3125.00");
        assert_eq!(amount(&[1.0]), "2.50");
    }

    /// 0.1 + 0.2 in f64 is 0.30000000000000004; through the shortest decimal
    /// form it is exactly 0.3, so the price is exactly 0.75.
    #[test]
    fn weights_use_their_shortest_decimal_form() {
        assert_eq!(amount(&[0.1, 0.2]), "0.75");
        assert_eq!(amount(&[0.1; 10]), "2.50");
    }

    /// 0.05 kg costs exactly 0.125: half away from zero gives 0.13, where
    /// banker's rounding (`round_dp`) would give 0.12.
    #[test]
    fn rounds_half_away_from_zero_not_to_even() {
        assert_eq!(amount(&[0.05]), "0.13"); // 0.125 -> 0.13 (banker's: 0.12)
        assert_eq!(amount(&[1.01]), "2.53"); // 2.525 -> 2.53 (banker's: 2.52)
        assert_eq!(amount(&[0.15]), "0.38"); // 0.375 -> 0.38 either way
        assert_eq!(amount(&[0.001]), "0.00"); // 0.0025 is below the midpoint
        let bankers = (Decimal::new(5, 2) * RATE_USD_PER_KG).round_dp(2);
        assert_eq!(
            bankers.to_string(),
            "0.12",
            "round_dp alone is banker's rounding"
        );
    }

    #[test]
    fn always_prints_two_fractional_digits() {
        assert_eq!(amount(&[4.0]), "10.00");
        assert_eq!(amount(&[0.2]), "0.50");
    }

    #[test]
    fn largest_request_prices_without_overflow() {
        let weights = vec![MAX_WEIGHT_KG; MAX_CARGO_ITEMS];
        assert_eq!(amount(&weights), "2500000000.00");
    }

    #[test]
    fn tiny_weights_price_to_zero_without_error() {
        assert_eq!(amount(&[f64::MIN_POSITIVE]), "0.00");
        assert_eq!(amount(&[5e-324]), "0.00");
    }

    #[test]
    fn quote_has_route_id_usd_and_one_maersk_leg() {
        let q = quote(&request("NLRTM", "SGSIN", &[10.0])).expect("valid");
        assert_eq!(q.route_id, "NLRTM-SGSIN");
        assert_eq!(q.price.expect("price").currency, "USD");
        assert_eq!(
            q.legs,
            vec![Leg {
                origin: "NLRTM".into(),
                destination: "SGSIN".into(),
                carrier: "MAERSK".into()
            }]
        );
    }

    /// The fast path agrees with the text: every weight with up to 3
    /// decimals up to 300 kg, and 100,000 spread over the whole range.
    #[test]
    fn shortest_decimal_matches_what_display_prints() {
        let through_text = |w: f64| Decimal::from_str(&w.to_string()).expect("parses");
        let grams = (1..=300_000).map(|g| f64::from(g) / 1000.0);
        let mut state = 0x9E37_79B9_7F4A_7C15_u64;
        let spread = std::iter::repeat_with(move || {
            // xorshift64: any f64 in (0, MAX_WEIGHT_KG], all bits random.
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 11) as f64 / (1u64 << 53) as f64 * MAX_WEIGHT_KG
        })
        .filter(|w| *w > 0.0)
        .take(100_000);
        for w in grams
            .chain(spread)
            .chain([0.1, 0.2, 0.3, 1e-7, 5e-324, MAX_WEIGHT_KG])
        {
            let fast = shortest_decimal(w).expect("in range");
            let slow = through_text(w);
            assert_eq!(fast, slow, "{w}");
            assert_eq!(fast.to_string(), slow.to_string(), "same digits for {w}");
        }
    }

    #[test]
    fn locodes_follow_the_un_pattern() {
        for ok in ["NLRTM", "SGSIN", "DE2HM", "US9ZZ", "AB234"] {
            assert!(is_locode(ok), "{ok} should be valid");
        }
        for bad in [
            "", "nlrtm", "NLRT", "NLRTMX", "N1RTM", "NLRT1", "NLRT0", "NL-TM", "ÑLRTM",
        ] {
            assert!(!is_locode(bad), "{bad:?} should be invalid");
        }
    }

    #[test]
    fn rejects_bad_ports_naming_the_field() {
        assert!(rejected(&request("nlrtm", "SGSIN", &[1.0])).starts_with("origin "));
        assert!(rejected(&request("NLRTM", "SG", &[1.0])).starts_with("destination "));
        assert!(rejected(&request("NLRTM", "NLRTM", &[1.0])).contains("differ"));
    }

    #[test]
    fn rejects_empty_or_oversized_cargo() {
        assert!(rejected(&request("NLRTM", "SGSIN", &[])).starts_with("cargo "));
        let too_many = vec![1.0; MAX_CARGO_ITEMS + 1];
        assert!(rejected(&request("NLRTM", "SGSIN", &too_many)).contains("got 1001"));
    }

    #[test]
    fn rejects_bad_weights_naming_the_item() {
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_WEIGHT_KG + 0.5] {
            let msg = rejected(&request("NLRTM", "SGSIN", &[1.0, w]));
            assert!(msg.starts_with("cargo[1].weight_kg "), "{w}: {msg}");
        }
    }
}
