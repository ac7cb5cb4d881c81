//! A call's deadline, kept by the channel: the `grpc-timeout` header that
//! tonic's `Request::set_timeout` writes is read back, and the call (its
//! wait for a pick included) ends with DEADLINE_EXCEEDED when it runs out,
//! whether or not the server answers. A frozen server answers nothing, so
//! without this its calls would wait for keepalive to close the connection.
//! grpc-go keeps the deadline in the client the same way (the context).

use std::time::Duration;

/// The header's longest value: 8 digits and a unit (the gRPC HTTP/2 spec).
const MAX_DIGITS: usize = 8;

/// The time a `grpc-timeout` value gives, or `None` if it is malformed
/// ("TimeoutValue → 1*8 digit; TimeoutUnit → H M S m u n").
pub fn parse(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > MAX_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n * 3600),
        'M' => Duration::from_secs(n * 60),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

/// The deadline a request carries, if any.
pub fn of<B>(request: &http::Request<B>) -> Option<Duration> {
    request
        .headers()
        .get("grpc-timeout")
        .and_then(|v| v.to_str().ok())
        .and_then(parse)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_unit_and_refuses_the_malformed() {
        assert_eq!(parse("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse("1999m"), Some(Duration::from_millis(1999)));
        assert_eq!(parse("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse("5u"), Some(Duration::from_micros(5)));
        assert_eq!(parse("7n"), Some(Duration::from_nanos(7)));
        for bad in ["", "S", "123456789S", "12x", "-1S", "1.5S"] {
            assert_eq!(parse(bad), None, "{bad:?} was accepted");
        }
    }
}
