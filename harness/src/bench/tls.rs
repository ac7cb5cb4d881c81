//! `bench --tls-target`: what TLS costs a reused connection. Each server is
//! measured twice, as two processes of the same build and flags, one
//! plaintext (`--target`, `--compare`) and one TLS (`--tls-target`,
//! `--compare-tls`): server CPU per GetQuote and per full identity
//! ListRoutes page (page_size 25, about 5 MB), and RSS per idle connection.
//! The difference per page, divided by the page's size, is the TLS record
//! layer's cost per MB, where encryption is all that differs.
//!
//! The runs alternate, plaintext then TLS, round after round
//! (`--tls-rounds`), so that both see the same machine; each row is the
//! median over the rounds, and the lines after the table list every
//! round's value, which is the spread.

use std::time::Duration;

use prost::Message;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;

use crate::target::TlsArgs;
use h2_peer::tls::HarnessTls;

use crate::{
    Error,
    bench::{self, BenchKnobs, LIST_DECODE_CAP, Load, Row, RunResult, Server},
    measure::{monitor::ServerProcess, probe},
    target::LoopbackTarget,
};

/// The flags of the TLS table.
#[derive(Debug, Clone, clap::Args)]
pub struct TlsBenchArgs {
    /// The TLS twin of --target: the same server, started with --tls-cert and --tls-key
    /// on another port. With it, bench prints the TLS table instead (needs --tls-ca).
    #[arg(long, requires = "tls_ca")]
    pub tls_target: Option<LoopbackTarget>,

    /// The TLS twin of each --compare server, in the order of --compare.
    #[arg(long, requires = "tls_target")]
    pub compare_tls: Vec<LoopbackTarget>,

    /// Rounds of the TLS table: plaintext and TLS runs alternate this many times.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=20))]
    pub tls_rounds: u32,

    #[command(flatten)]
    pub tls: TlsArgs,
}

/// One server as measured in the TLS table: its plaintext and TLS twins.
#[derive(Debug, Clone)]
pub struct Pair {
    pub plain: Server,
    pub tls: Server,
    pub client: HarnessTls,
}

impl TlsBenchArgs {
    /// The pairs to measure, the first being `servers[0]` with
    /// `--tls-target`; `None` without `--tls-target`.
    pub fn pairs(&self, servers: &[Server]) -> Result<Option<Vec<Pair>>, Error> {
        let Some(first) = self.tls_target else {
            if self.tls.tls_ca.is_some() {
                return Err("--tls-ca in bench needs --tls-target (the target's TLS twin)".into());
            }
            return Ok(None);
        };
        let twins: Vec<LoopbackTarget> = std::iter::once(first)
            .chain(self.compare_tls.iter().copied())
            .collect();
        if twins.len() != servers.len() {
            return Err(format!(
                "{} plaintext servers (--target, --compare) but {} TLS twins (--tls-target, --compare-tls): give one each",
                servers.len(),
                twins.len()
            )
            .into());
        }
        let mut pairs = Vec::new();
        for (plain, twin) in servers.iter().zip(twins) {
            let client = self
                .tls
                .for_target(twin.addr())?
                .ok_or("--tls-target needs --tls-ca")?;
            pairs.push(Pair {
                plain: plain.clone(),
                tls: Server {
                    target: twin,
                    process: ServerProcess::locate(twin.addr(), None),
                },
                client,
            });
        }
        Ok(Some(pairs))
    }
}

/// What one pair measured, per round.
#[derive(Debug, Clone, Default)]
pub struct PairRuns {
    pub idle_plain: bench::IdleResult,
    pub idle_tls: bench::IdleResult,
    pub quote_plain: Vec<RunResult>,
    pub quote_tls: Vec<RunResult>,
    pub list_plain: Vec<RunResult>,
    pub list_tls: Vec<RunResult>,
    /// One identity page as encoded, bytes.
    pub page_bytes: Option<usize>,
}

impl PairRuns {
    fn runs(&self) -> impl Iterator<Item = &RunResult> {
        self.quote_plain
            .iter()
            .chain(&self.quote_tls)
            .chain(&self.list_plain)
            .chain(&self.list_tls)
    }
}

/// The size of one full identity page, as the server encodes it.
async fn page_bytes(server: &Server) -> Result<usize, Error> {
    let channel =
        probe::connect(&server.target, bench::CALL_DEADLINE, Duration::from_secs(5)).await?;
    let mut client = RoutingServiceClient::new(channel).max_decoding_message_size(LIST_DECODE_CAP);
    let page = client
        .list_routes(h2_peer::grpc::full_page_request())
        .await?;
    Ok(page.get_ref().encoded_len())
}

/// Measures every pair: idle connections, a warm-up, then the rounds.
pub async fn run(
    pairs: &[Pair],
    args: &TlsBenchArgs,
    knobs: &BenchKnobs,
) -> Result<Vec<PairRuns>, Error> {
    let max = Duration::from_secs(knobs.max_secs);
    let mut all = vec![PairRuns::default(); pairs.len()];
    for (pair, runs) in pairs.iter().zip(all.iter_mut()) {
        tracing::info!(plain = %pair.plain.target, tls = %pair.tls.target, conns = knobs.idle_conns, "idle connections");
        runs.idle_plain = bench::measure_idle(&pair.plain, knobs.idle_conns).await?;
        runs.idle_tls =
            bench::measure_idle_over(&pair.tls, Some(&pair.client), knobs.idle_conns).await?;
        runs.page_bytes = Some(page_bytes(&pair.plain).await?);
    }
    let quote = |server, tls, calls| {
        bench::measure_load_over(
            server,
            tls,
            Load::GetQuote,
            calls,
            knobs.concurrency,
            1,
            max,
        )
    };
    for pair in pairs {
        tracing::info!(plain = %pair.plain.target, tls = %pair.tls.target, calls = knobs.warmup, "warm-up");
        quote(&pair.plain, None, knobs.warmup).await?;
        quote(&pair.tls, Some(&pair.client), knobs.warmup).await?;
    }
    let list = |server, tls| {
        let load = Load::ListRoutes { gzip: false };
        let c = knobs.list_concurrency;
        bench::measure_load_over(server, tls, load, knobs.list_calls, c, c, max)
    };
    for round in 1..=args.tls_rounds {
        for (pair, runs) in pairs.iter().zip(all.iter_mut()) {
            let tls = Some(&pair.client);
            tracing::info!(round, plain = %pair.plain.target, tls = %pair.tls.target, "GetQuote and ListRoutes, plaintext then TLS");
            runs.quote_plain
                .push(quote(&pair.plain, None, knobs.calls).await?);
            runs.quote_tls
                .push(quote(&pair.tls, tls, knobs.calls).await?);
            runs.list_plain.push(list(&pair.plain, None).await?);
            runs.list_tls.push(list(&pair.tls, tls).await?);
        }
    }
    Ok(all)
}

/// The median of the values that exist; `None` if none do.
pub fn median(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let mut known: Vec<f64> = values.into_iter().flatten().collect();
    if known.is_empty() {
        return None;
    }
    known.sort_by(f64::total_cmp);
    let mid = known.len() / 2;
    Some(if known.len() % 2 == 1 {
        known[mid]
    } else {
        (known[mid - 1] + known[mid]) / 2.0
    })
}

/// Per round, TLS's CPU per call minus plaintext's, in seconds.
fn extra(plain: &[RunResult], tls: &[RunResult]) -> Vec<Option<f64>> {
    plain
        .iter()
        .zip(tls)
        .map(|(p, t)| Some(t.cpu_per_call? - p.cpu_per_call?))
        .collect()
}

fn cpu(runs: &[RunResult]) -> Vec<Option<f64>> {
    runs.iter().map(|r| r.cpu_per_call).collect()
}

fn p99_ms(runs: &[RunResult]) -> Vec<Option<f64>> {
    runs.iter()
        .map(|r| r.p99.map(|d| d.as_secs_f64() * 1e3))
        .collect()
}

/// The record layer's CPU per MB (10^6 bytes), in ms: the median extra
/// CPU per page (seconds) over the page's size.
pub fn per_mb_ms(extra_per_page_s: Option<f64>, page_bytes: Option<usize>) -> Option<f64> {
    let bytes = page_bytes.filter(|&b| b > 0)? as f64;
    Some(extra_per_page_s? * 1e3 / (bytes / 1e6))
}

fn rows(knobs: &BenchKnobs, rounds: u32, all: &[PairRuns]) -> Vec<Row> {
    let row = |label: String, precision: usize, f: &dyn Fn(&PairRuns) -> Option<f64>| Row {
        label,
        values: all.iter().map(f).collect(),
        precision,
        ratio: true,
    };
    let kib = |i: &bench::IdleResult| i.per_conn.map(|b| b / 1024.0);
    let quote = format!("GetQuote -c {} on 1 conn", knobs.concurrency);
    let list = format!("ListRoutes page 25 -c {} identity", knobs.list_concurrency);
    let us = |s: Option<f64>| s.map(|s| s * 1e6);
    let ms = |s: Option<f64>| s.map(|s| s * 1e3);
    let held = knobs.idle_conns;
    vec![
        row(
            format!("server RSS per idle connection, plaintext (KiB, {held} held)"),
            1,
            &|r| kib(&r.idle_plain),
        ),
        row(
            format!("server RSS per idle connection, TLS (KiB, {held} held)"),
            1,
            &|r| kib(&r.idle_tls),
        ),
        row(
            format!("{quote}, plaintext: server CPU per call (µs)"),
            1,
            &|r| us(median(cpu(&r.quote_plain))),
        ),
        row(
            format!("{quote}, TLS: server CPU per call (µs)"),
            1,
            &|r| us(median(cpu(&r.quote_tls))),
        ),
        row(
            format!("{quote}: TLS's extra CPU per call (µs)"),
            1,
            &|r| us(median(extra(&r.quote_plain, &r.quote_tls))),
        ),
        row(format!("{quote}, plaintext: p99 latency (ms)"), 3, &|r| {
            median(p99_ms(&r.quote_plain))
        }),
        row(format!("{quote}, TLS: p99 latency (ms)"), 3, &|r| {
            median(p99_ms(&r.quote_tls))
        }),
        row(
            format!("{list}, plaintext: server CPU per page (ms)"),
            2,
            &|r| ms(median(cpu(&r.list_plain))),
        ),
        row(format!("{list}, TLS: server CPU per page (ms)"), 2, &|r| {
            ms(median(cpu(&r.list_tls)))
        }),
        row(format!("{list}: TLS's extra CPU per page (ms)"), 2, &|r| {
            ms(median(extra(&r.list_plain, &r.list_tls)))
        }),
        row("TLS record layer: server CPU per MB (ms)".into(), 2, &|r| {
            per_mb_ms(median(extra(&r.list_plain, &r.list_tls)), r.page_bytes)
        }),
        Row {
            ratio: false,
            ..row("page size (MB)".into(), 2, &|r| {
                r.page_bytes.map(|b| b as f64 / 1e6)
            })
        },
        Row {
            ratio: false,
            ..row(format!("calls measured ({rounds} rounds)"), 0, &|r| {
                Some(r.runs().map(|x| x.calls).sum::<u64>() as f64)
            })
        },
        Row {
            ratio: false,
            ..row("errors".into(), 0, &|r| {
                Some(r.runs().map(|x| x.errors).sum::<u64>() as f64)
            })
        },
    ]
}

/// The TLS table: one column per server (named by its plaintext address),
/// then the first ÷ each other; then every round's CPU figures.
pub fn table(pairs: &[Pair], knobs: &BenchKnobs, rounds: u32, all: &[PairRuns]) -> String {
    let names = pairs
        .iter()
        .map(|p| format!("{} / TLS :{}", p.plain.target, p.tls.target.addr().port()))
        .collect();
    let mut out = bench::table_of(
        "measurement (median of rounds)",
        names,
        rows(knobs, rounds, all),
    );
    for (pair, r) in pairs.iter().zip(all) {
        let show = |runs: &[RunResult], scale: f64| {
            runs.iter()
                .map(|x| {
                    x.cpu_per_call
                        .map_or("n/a".into(), |s| format!("{:.1}", s * scale))
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        out.push_str(&format!(
            "rounds, {}: GetQuote µs plaintext {} | TLS {}; page ms plaintext {} | TLS {}\n",
            pair.plain.target,
            show(&r.quote_plain, 1e6),
            show(&r.quote_tls, 1e6),
            show(&r.list_plain, 1e3),
            show(&r.list_tls, 1e3),
        ));
        if let Some(e) = r.runs().find_map(|x| x.first_error.as_ref()) {
            out.push_str(&format!("first error from {}: {e}\n", pair.plain.target));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_skips_what_is_missing() {
        assert_eq!(median([Some(3.0), None, Some(1.0), Some(2.0)]), Some(2.0));
        assert_eq!(median([Some(4.0), Some(1.0)]), Some(2.5));
        assert_eq!(median([None, None]), None);
    }

    /// 1.5 ms more per 5 MB page is 0.3 ms per MB.
    #[test]
    fn the_record_layer_cost_is_per_million_bytes() {
        let per_mb = per_mb_ms(Some(1.5e-3), Some(5_000_000)).expect("a figure");
        assert!((per_mb - 0.3).abs() < 1e-12, "{per_mb}");
        assert_eq!(per_mb_ms(Some(1.5e-3), Some(0)), None);
        assert_eq!(per_mb_ms(None, Some(5_000_000)), None);
    }

    /// The extra CPU is taken round by round, and a round a server could
    /// not be measured in gives none.
    #[test]
    fn the_extra_cpu_is_per_round() {
        let run = |cpu| RunResult {
            cpu_per_call: cpu,
            ..RunResult::default()
        };
        let plain = [run(Some(10e-6)), run(Some(12e-6)), run(None)];
        let tls = [run(Some(13e-6)), run(Some(12e-6)), run(Some(1.0))];
        let got: Vec<Option<f64>> = extra(&plain, &tls)
            .into_iter()
            .map(|x| x.map(|s| (s * 1e6).round()))
            .collect();
        assert_eq!(got, vec![Some(3.0), Some(0.0), None]);
    }
}
