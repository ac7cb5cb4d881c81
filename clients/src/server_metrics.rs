//! What the server counted: a scrape of routing-server's `/metrics`
//! (`--metrics-listen`), read before and after each phase of a lesson.
//!
//! Lever 6 is about work the *server* does, or keeps doing, for a client
//! that has given up or is retrying, so `deadline-client` and
//! `retry-client` read it from the server itself, never from their own
//! counts. The series (gRFC A66's names as Prometheus spells them):
//!
//! - `grpc_server_call_started_total{grpc_method}`: calls the server began;
//! - `grpc_server_call_duration_seconds_count{grpc_method,grpc_status}`:
//!   calls it ended, by status;
//! - `routing_server_calls_in_flight`: calls whose handler is still alive.
//!
//! The fetch is one plain HTTP/1.0 GET over a TCP connection (the body ends
//! when the server closes it), bounded by [`SCRAPE_TIMEOUT`]; the text is
//! parsed by the `prometheus-parse` crate.

use std::{fmt, str::FromStr, time::Duration};

use http::uri::{Authority, Uri};
use prometheus_parse::{Sample, Scrape, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Error;

/// A whole scrape (connect, request, body) must take less than this: 5 s.
/// A local server answers in about a millisecond; a bound keeps a server
/// that accepts and never answers from hanging a lesson.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest `/metrics` body read: 1 MiB. routing-server's is a few KiB;
/// anything larger is not the server this client expects.
pub const SCRAPE_MAX_BYTES: u64 = 1024 * 1024;

/// routing-server's gauge of calls whose handler is alive.
pub const CALLS_IN_FLIGHT: &str = "routing_server_calls_in_flight";

/// GetQuote as the server's `grpc_method` label spells it (no leading `/`).
pub fn get_quote_method() -> &'static str {
    routing_contracts::GET_QUOTE.trim_start_matches('/')
}

/// `--metrics`: the server's metrics endpoint, `http://host:port/metrics`
/// (the path defaults to `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricsUrl {
    authority: Authority,
    path: String,
}

impl fmt::Display for MetricsUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority, self.path)
    }
}

impl FromStr for MetricsUrl {
    type Err = String;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let hint = "expected http://host:port/metrics, e.g. http://127.0.0.1:9464/metrics";
        let text = input.trim();
        let with_scheme = if text.contains("://") {
            text.to_owned()
        } else {
            format!("http://{text}")
        };
        let uri: Uri = with_scheme
            .parse()
            .map_err(|_| format!("{input:?}: {hint}"))?;
        let authority = match (uri.scheme_str(), uri.authority()) {
            (Some("http"), Some(a)) if a.port_u16().is_some_and(|p| p > 0) => a.clone(),
            _ => return Err(format!("{input:?}: {hint}")),
        };
        let path = match uri.path() {
            "" | "/" => "/metrics".to_owned(),
            path => path.to_owned(),
        };
        Ok(Self { authority, path })
    }
}

/// One scrape of the server's metrics.
#[derive(Debug)]
pub struct ServerMetrics {
    samples: Vec<Sample>,
}

impl ServerMetrics {
    /// Scrapes `url` once.
    pub async fn fetch(url: &MetricsUrl) -> Result<Self, Error> {
        let body = tokio::time::timeout(SCRAPE_TIMEOUT, get(url))
            .await
            .map_err(|_| format!("{url}: no answer within {SCRAPE_TIMEOUT:?}"))??;
        Self::parse(&body)
    }

    /// Parses a Prometheus text-format body.
    pub fn parse(body: &str) -> Result<Self, Error> {
        let lines = body.lines().map(|line| Ok(line.to_owned()));
        Ok(Self {
            samples: Scrape::parse(lines)?.samples,
        })
    }

    /// The sum of series `name` over every sample whose labels include
    /// `labels`; 0 when none (a counter not yet incremented is absent).
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.metric == name)
            .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
            .map(|s| match s.value {
                Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
                _ => 0.0,
            })
            .sum()
    }

    /// GetQuote calls the server has started.
    pub fn get_quote_started(&self) -> f64 {
        self.sum(
            "grpc_server_call_started_total",
            &[("grpc_method", get_quote_method())],
        )
    }

    /// GetQuote calls the server has ended with `status` (`"OK"`,
    /// `"DEADLINE_EXCEEDED"`, `"CANCELLED"`, `"UNAVAILABLE"`, ...).
    pub fn get_quote_ended(&self, status: &str) -> f64 {
        self.sum(
            "grpc_server_call_duration_seconds_count",
            &[("grpc_method", get_quote_method()), ("grpc_status", status)],
        )
    }

    /// Calls whose handler is alive on the server now.
    pub fn calls_in_flight(&self) -> f64 {
        self.sum(CALLS_IN_FLIGHT, &[])
    }
}

/// `GET path` over HTTP/1.0: the body, if the status is 200.
async fn get(url: &MetricsUrl) -> Result<String, Error> {
    let mut stream = tokio::net::TcpStream::connect(url.authority.as_str())
        .await
        .map_err(|e| format!("cannot connect to {url}: {e}"))?;
    let request = format!(
        "GET {} HTTP/1.0\r\nHost: {}\r\nAccept: text/plain\r\n\r\n",
        url.path, url.authority
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    stream
        .take(SCRAPE_MAX_BYTES)
        .read_to_end(&mut answer)
        .await?;
    let answer = String::from_utf8_lossy(&answer);
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("{url}: not an HTTP answer"))?;
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("{url}: {status}").into());
    }
    Ok(body.to_owned())
}

/// A series read before and after a phase, for its report.
#[derive(Debug, Clone, Copy)]
pub struct Reading {
    pub before: f64,
    pub after: f64,
}

impl Reading {
    /// What the phase added.
    pub fn delta(&self) -> u64 {
        // Counters only grow; a restart in between would read negative.
        (self.after - self.before).max(0.0).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A body in the shape the server serves (the contract of issue 29).
    const BODY: &str = "\
# HELP grpc_server_call_started_total Calls started.
# TYPE grpc_server_call_started_total counter
grpc_server_call_started_total{grpc_method=\"shipping.routing.v1.RoutingService/GetQuote\"} 42
grpc_server_call_started_total{grpc_method=\"other\"} 3
# TYPE grpc_server_call_duration_seconds histogram
grpc_server_call_duration_seconds_bucket{grpc_method=\"shipping.routing.v1.RoutingService/GetQuote\",grpc_status=\"OK\",le=\"+Inf\"} 30
grpc_server_call_duration_seconds_count{grpc_method=\"shipping.routing.v1.RoutingService/GetQuote\",grpc_status=\"OK\"} 30
grpc_server_call_duration_seconds_count{grpc_method=\"shipping.routing.v1.RoutingService/GetQuote\",grpc_status=\"DEADLINE_EXCEEDED\"} 10
# TYPE routing_server_calls_in_flight gauge
routing_server_calls_in_flight 2
";

    /// Each series is read by its name and labels; the histogram's count
    /// line is a series of its own.
    #[test]
    fn reads_the_contracts_series() {
        let metrics = ServerMetrics::parse(BODY).expect("parses");
        assert_eq!(metrics.get_quote_started(), 42.0);
        assert_eq!(metrics.get_quote_ended("OK"), 30.0);
        assert_eq!(metrics.get_quote_ended("DEADLINE_EXCEEDED"), 10.0);
        assert_eq!(metrics.get_quote_ended("CANCELLED"), 0.0, "absent is 0");
        assert_eq!(metrics.calls_in_flight(), 2.0);
    }

    /// `--metrics` takes a URL or host:port, and defaults the path.
    #[test]
    fn metrics_urls() {
        let url: MetricsUrl = "127.0.0.1:9464".parse().expect("host:port");
        assert_eq!(url.to_string(), "http://127.0.0.1:9464/metrics");
        let url: MetricsUrl = "http://server:9464/m".parse().expect("url");
        assert_eq!(url.to_string(), "http://server:9464/m");
        for bad in ["https://a:1/metrics", "server", "http://server/metrics"] {
            assert!(bad.parse::<MetricsUrl>().is_err(), "{bad}");
        }
    }

    /// A phase's delta never reads negative.
    #[test]
    fn a_delta_is_what_the_phase_added() {
        assert_eq!(
            Reading {
                before: 10.0,
                after: 35.0
            }
            .delta(),
            25
        );
        assert_eq!(
            Reading {
                before: 10.0,
                after: 0.0
            }
            .delta(),
            0
        );
    }
}
