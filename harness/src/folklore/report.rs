//! What `bench folklore` measured, as data: one [`Measurement`] per claim,
//! case and server, printed as one JSON line each and gathered into one
//! table (a column per server, a section per claim). Pure, so the layout is
//! unit-tested.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// The servers compared: the table's columns, in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Stack {
    /// `routing-server` as it starts: one worker per CPU (2 here).
    RoutingServer,
    /// `routing-server --worker-threads 1`, for the head-of-line rows only.
    RoutingServerOneWorker,
    /// `server/examples/tonic_server.rs`: tonic's own `Server::builder()`.
    Tonic,
    /// The grpc-go peer of the same contract.
    GrpcGo,
}

impl Stack {
    /// The column title and the `server` of a JSON line.
    pub fn name(self) -> &'static str {
        match self {
            Self::RoutingServer => "routing-server",
            Self::RoutingServerOneWorker => "routing-server 1 worker",
            Self::Tonic => "stock tonic",
            Self::GrpcGo => "grpc-go",
        }
    }
}

/// The folklore claims, in the order they are measured and printed
/// (`--only message-size,in-flight` picks some).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, clap::ValueEnum)]
pub enum Claim {
    MessageSize,
    Connections,
    StreamCap,
    OneConnectionCpu,
    HeadOfLine,
    InFlight,
}

impl Claim {
    /// The `claim` of a JSON line.
    pub fn key(self) -> &'static str {
        match self {
            Self::MessageSize => "message_size",
            Self::Connections => "connections",
            Self::StreamCap => "stream_cap",
            Self::OneConnectionCpu => "one_connection_cpu",
            Self::HeadOfLine => "head_of_line",
            Self::InFlight => "in_flight",
        }
    }

    /// The section title in the table: what was run.
    pub fn title(self) -> &'static str {
        match self {
            Self::MessageSize => "message size: one call at a time on 1 connection, identity",
            Self::Connections => "80 callers (GetQuote) over 1 or 4 connections",
            Self::StreamCap => {
                "300 callers on connections that allow 100 streams each (grpc-go: no cap)"
            }
            Self::OneConnectionCpu => "one connection's CPU: GetQuote, 100 callers, saturated",
            Self::HeadOfLine => {
                "head-of-line: GetQuote 400/s on 10 connections, alone and beside 40 gzip full pages/s on 4 others"
            }
            Self::InFlight => {
                "calls in flight: GetQuote requests whose body never ends, 100 connections"
            }
        }
    }
}

/// One number a measurement can carry: its JSON key, its row label and
/// how many decimals the table shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    Calls,
    Errors,
    CallsPerSec,
    CpuPerCallUs,
    P50Ms,
    P99Ms,
    /// Server CPU time ÷ wall time: 1.0 is one core busy all along.
    ServerCores,
    BusiestThreadPct,
    /// Pages per second the background load really got through.
    PagesPerSec,
    PageErrors,
    RssPerConnKib,
    RssPerCallKib,
    /// Calls still open when the last RSS sample was taken.
    CallsHeld,
}

impl Metric {
    pub fn key(self) -> &'static str {
        match self {
            Self::Calls => "calls",
            Self::Errors => "errors",
            Self::CallsPerSec => "calls_per_s",
            Self::CpuPerCallUs => "server_cpu_per_call_us",
            Self::P50Ms => "p50_ms",
            Self::P99Ms => "p99_ms",
            Self::ServerCores => "server_cores",
            Self::BusiestThreadPct => "busiest_thread_pct",
            Self::PagesPerSec => "pages_per_s",
            Self::PageErrors => "page_errors",
            Self::RssPerConnKib => "rss_per_conn_kib",
            Self::RssPerCallKib => "rss_per_call_kib",
            Self::CallsHeld => "calls_held",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Calls => "calls",
            Self::Errors => "errors",
            Self::CallsPerSec => "calls per second",
            Self::CpuPerCallUs => "server CPU per call (µs)",
            Self::P50Ms => "p50 latency (ms)",
            Self::P99Ms => "p99 latency (ms)",
            Self::ServerCores => "server CPU (cores)",
            Self::BusiestThreadPct => "busiest server thread's share of its CPU (%)",
            Self::PagesPerSec => "gzip pages per second served",
            Self::PageErrors => "page errors",
            Self::RssPerConnKib => "server RSS per connection (KiB)",
            Self::RssPerCallKib => "server RSS per call held (KiB)",
            Self::CallsHeld => "calls still open at the last sample",
        }
    }

    /// Whether the metric counts things (calls, errors): a whole number.
    pub fn is_count(self) -> bool {
        matches!(
            self,
            Self::Calls | Self::Errors | Self::PageErrors | Self::CallsHeld
        )
    }

    pub fn precision(self) -> usize {
        match self {
            Self::Calls | Self::Errors | Self::CallsPerSec | Self::PageErrors | Self::CallsHeld => {
                0
            }
            Self::BusiestThreadPct => 0,
            Self::CpuPerCallUs | Self::PagesPerSec | Self::RssPerConnKib | Self::RssPerCallKib => 1,
            Self::ServerCores => 2,
            Self::P50Ms | Self::P99Ms => 3,
        }
    }
}

/// One case of one claim on one server, e.g. "ListRoutes page 5" on grpc-go.
#[derive(Debug, Clone, PartialEq)]
pub struct Measurement {
    pub claim: Claim,
    /// What was run, short enough for a figure's axis: `page 5 (1 MB)`.
    pub case: String,
    pub stack: Stack,
    /// Only the numbers that were measured: a server that is not local has
    /// no CPU or RSS, and its row reads n/a.
    pub values: Vec<(Metric, f64)>,
}

impl Measurement {
    pub fn new(claim: Claim, case: impl Into<String>, stack: Stack) -> Self {
        Self {
            claim,
            case: case.into(),
            stack,
            values: Vec::new(),
        }
    }

    /// Adds `metric` if it was measured.
    pub fn with(mut self, metric: Metric, value: Option<f64>) -> Self {
        if let Some(value) = value.filter(|v| v.is_finite()) {
            self.values.push((metric, value));
        }
        self
    }

    pub fn get(&self, metric: Metric) -> Option<f64> {
        self.values
            .iter()
            .find(|(m, _)| *m == metric)
            .map(|(_, v)| *v)
    }

    /// `{"claim":"message_size","case":"page 5 (1 MB)","server":"grpc-go","p50_ms":1.234,...}`
    pub fn json_line(&self) -> String {
        let mut object = Map::new();
        object.insert("claim".into(), self.claim.key().into());
        object.insert("case".into(), self.case.clone().into());
        object.insert("server".into(), self.stack.name().into());
        for (metric, value) in &self.values {
            let number = if metric.is_count() {
                Value::from(value.round() as i64)
            } else {
                // Rounded as the table shows it, plus three decimals.
                let scale = 10f64.powi(metric.precision() as i32 + 3);
                let rounded = (value * scale).round() / scale;
                serde_json::Number::from_f64(rounded).map_or(Value::Null, Value::Number)
            };
            object.insert(metric.key().into(), number);
        }
        Value::Object(object).to_string()
    }
}

/// The table: a section per claim (its title, then a row per case and
/// metric, in the order measured), a column per server that was measured.
pub fn table(all: &[Measurement]) -> String {
    let mut stacks: Vec<Stack> = all.iter().map(|m| m.stack).collect();
    stacks.sort();
    stacks.dedup();
    let mut claims: Vec<Claim> = all.iter().map(|m| m.claim).collect();
    claims.sort();
    claims.dedup();

    // Each section: its title, then (label, one cell per server).
    let mut sections: Vec<(&str, Vec<Vec<String>>)> = Vec::new();
    for claim in claims {
        let mut rows: Vec<(String, Metric, Vec<String>)> = Vec::new();
        for m in all.iter().filter(|m| m.claim == claim) {
            for &(metric, value) in &m.values {
                let label = format!("{}: {}", m.case, metric.label());
                let row = match rows.iter().position(|(l, _, _)| *l == label) {
                    Some(i) => i,
                    None => {
                        rows.push((label.clone(), metric, vec!["-".into(); stacks.len()]));
                        rows.len() - 1
                    }
                };
                if let Some(col) = stacks.iter().position(|s| *s == m.stack) {
                    rows[row].2[col] = format!("{value:.*}", metric.precision());
                }
            }
        }
        let lines = rows
            .into_iter()
            .map(|(label, _, cells)| {
                let mut line = vec![label];
                line.extend(cells);
                line
            })
            .collect();
        sections.push((claim.title(), lines));
    }

    let mut header = vec!["measurement".to_string()];
    header.extend(stacks.iter().map(|s| s.name().to_string()));
    let widths: Vec<usize> = (0..header.len())
        .map(|col| {
            sections
                .iter()
                .flat_map(|(_, lines)| lines.iter())
                .chain([&header])
                .map(|line| line.get(col).map_or(0, |c| c.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
    let mut out = String::new();
    write_line(&mut out, &header, &widths);
    out.push_str(&"-".repeat(total));
    out.push('\n');
    for (title, lines) in sections {
        let _ = writeln!(out, "## {title}");
        for line in &lines {
            write_line(&mut out, line, &widths);
        }
    }
    out
}

/// The label left-aligned, the numbers right-aligned.
fn write_line(out: &mut String, cells: &[String], widths: &[usize]) {
    for (col, cell) in cells.iter().enumerate() {
        let pad = widths[col].saturating_sub(cell.chars().count());
        if col == 0 {
            let _ = write!(out, "{cell}{}", " ".repeat(pad));
        } else {
            let _ = write!(out, "  {}{cell}", " ".repeat(pad));
        }
    }
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given two servers measured in two claims, where tonic lacks one
    /// number, then each claim has its section, each server its column in
    /// the Stack order, and the missing cell reads `-`.
    #[test]
    fn the_table_has_a_section_per_claim_and_a_column_per_server() {
        // Given grpc-go measured before routing-server (columns are sorted anyway).
        let all = [
            Measurement::new(Claim::MessageSize, "GetQuote", Stack::GrpcGo)
                .with(Metric::P50Ms, Some(0.2))
                .with(Metric::CpuPerCallUs, Some(25.0)),
            Measurement::new(Claim::MessageSize, "GetQuote", Stack::RoutingServer)
                .with(Metric::P50Ms, Some(0.1))
                .with(Metric::CpuPerCallUs, None),
            Measurement::new(Claim::InFlight, "1,000 calls", Stack::RoutingServer)
                .with(Metric::RssPerCallKib, Some(3.25)),
        ];
        // When the table is laid out.
        let text = table(&all);
        let lines: Vec<&str> = text.lines().collect();
        // Then the header names routing-server before grpc-go.
        let header = lines[0];
        assert!(
            header.find("routing-server") < header.find("grpc-go"),
            "{header}"
        );
        assert!(lines[1].chars().all(|c| c == '-'), "{}", lines[1]);
        assert_eq!(lines[2], format!("## {}", Claim::MessageSize.title()));
        // The CPU row has routing-server's cell empty and grpc-go's at 1 decimal.
        let cpu = lines
            .iter()
            .find(|l| l.starts_with("GetQuote: server CPU per call"))
            .expect("CPU row");
        let cells: Vec<&str> = cpu.split("  ").filter(|c| !c.trim().is_empty()).collect();
        assert_eq!(
            cells.iter().map(|c| c.trim()).collect::<Vec<_>>()[1..],
            ["-", "25.0"]
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("GetQuote: p50 latency (ms)") && l.ends_with("0.200"))
        );
        // And the in-flight section follows with its own row.
        assert!(text.contains(&format!("## {}", Claim::InFlight.title())));
        assert!(lines.iter().any(
            |l| l.starts_with("1,000 calls: server RSS per call held (KiB)") && l.contains("3.2")
        ));
        // Every line of a section is as wide as the header.
        let width = header.chars().count();
        for line in lines.iter().filter(|l| !l.starts_with("##")) {
            assert_eq!(line.chars().count(), width, "{line}");
        }
    }

    /// A JSON line names its claim, case and server, and carries only the
    /// numbers measured, under their keys.
    #[test]
    fn a_json_line_has_the_measured_keys_only() {
        let line = Measurement::new(Claim::HeadOfLine, "with pages", Stack::Tonic)
            .with(Metric::P99Ms, Some(7.123_456_7))
            .with(Metric::ServerCores, None)
            .with(Metric::Errors, Some(f64::NAN))
            .with(Metric::Calls, Some(1000.0))
            .json_line();
        let value: Value = serde_json::from_str(&line).expect("JSON");
        assert_eq!(value["claim"], "head_of_line");
        assert_eq!(value["case"], "with pages");
        assert_eq!(value["server"], "stock tonic");
        assert_eq!(value["p99_ms"], 7.123457);
        assert!(value.get("server_cores").is_none());
        assert!(value.get("errors").is_none(), "NaN is left out: {line}");
        assert!(
            line.contains(r#""calls":1000,"#),
            "counts are whole: {line}"
        );
    }
}
