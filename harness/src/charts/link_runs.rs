//! The measurements behind the figures of `docs/network.md`: full-catalog
//! fetches over each emulated link, with and without gzip, and a sweep of
//! receive windows on the long links. Every fetch opens a channel of its
//! own through [`routing_clients::CountingConnector::with_link`], so no
//! fetch inherits another's link queue or grown window; the connection is
//! set up before the clock starts.

use std::time::Duration;

use routing_clients::{
    Baseline, CountingConnector, Link, LinkArgs, Preset,
    catalog::{FULL_CATALOG_ROUTES, catalog_client, fetch_routes},
    seconds,
    windows::{HYPER_STREAM_WINDOW, ReceiveWindow, window_ceiling_bit_s},
};
use serde::Serialize;
use tonic::codec::CompressionEncoding;

use crate::{
    Error, LoopbackTarget,
    charts::draw::{CatalogBar, WindowPoint, WindowSweep},
};

/// The links of the catalog figure, in grpc-go's order.
pub const CATALOG_LINKS: [Preset; 4] = [Preset::Local, Preset::Lan, Preset::Wan, Preset::Longhaul];
/// The links of the window sweep: those whose round trip makes the window matter.
pub const SWEEP_LINKS: [Preset; 2] = [Preset::Wan, Preset::Longhaul];
/// The windows swept: 65,535 bytes (HTTP/2's default), then 128 KiB to
/// 16 MiB (the most hyper's adaptive window grows to), doubling.
pub const SWEEP_WINDOWS: [u32; 9] = [
    65_535,
    128 << 10,
    256 << 10,
    512 << 10,
    1 << 20,
    2 << 20,
    4 << 20,
    8 << 20,
    16 << 20,
];
/// Bytes of one route on the wire: 200,100 (measured: 5,002,500 for 25).
const ROUTE_BYTES: f64 = 200_100.0;
/// Each sweep fetch asks for as many routes as its ceiling moves in this
/// long (at least 1, at most the catalog), so a 64 KiB window on a 400 ms
/// round trip fetches 2 routes instead of taking 31 s for the catalog, past
/// the server's 30 s send deadline.
const SWEEP_FETCH_S: f64 = 3.0;
/// Connect and call limits: generous, every fetch here is sized to take
/// seconds.
const CONNECT_TIMEOUT_S: u64 = 10;
const CALL_TIMEOUT_S: u64 = 30;

/// One fetch, as measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    routes: usize,
    seconds: f64,
    /// Bytes received on the wire, framing included.
    wire_bytes: u64,
    /// DATA payload received (what flow control counts).
    data_bytes: u64,
    grown_stream_window: u32,
}

/// One plotted point and the runs behind it: the JSON lines `link-chart` prints.
#[derive(Debug, Clone, Serialize)]
pub struct PlottedLine {
    pub figure: &'static str,
    pub link: Preset,
    /// `identity`/`gzip` (catalog figure), or the window (sweep figure).
    pub series: String,
    pub routes: usize,
    pub wire_bytes: u64,
    pub data_bytes: u64,
    /// Every run, in seconds; the point is their median.
    pub runs_s: Vec<f64>,
    pub median_s: f64,
    /// DATA bytes × 8 ÷ the median.
    pub mbit_s: f64,
    /// Physics: the identity floor (bytes ÷ rate + 1 RTT) in the catalog
    /// figure; `min(window ÷ RTT, rate)` in Mbit/s in the sweep.
    pub physics: f64,
    /// The largest stream window the client granted (the adaptive window's growth).
    pub grown_stream_window: u32,
}

/// What the two figures plot, and the lines that say so.
#[derive(Debug, Default)]
pub struct Measured {
    pub bars: Vec<CatalogBar>,
    pub sweeps: Vec<WindowSweep>,
    pub lines: Vec<PlottedLine>,
}

/// Measures both figures against `target`, `runs` times each point.
pub async fn measure(target: LoopbackTarget, runs: usize) -> Result<Measured, Error> {
    let mut measured = Measured::default();
    for preset in CATALOG_LINKS {
        let link = preset.link();
        let mut point = |series: &str, samples: Vec<Sample>| {
            let line = plotted(
                "catalog-by-link",
                preset,
                series.into(),
                &samples,
                identity_floor_s(&link, &samples),
            );
            measured.lines.push(line.clone());
            line
        };
        let identity = repeat(runs, || {
            fetch(
                target,
                link,
                ReceiveWindow::TonicDefault,
                FULL_CATALOG_ROUTES,
                false,
            )
        })
        .await?;
        let identity = point("identity", identity);
        let gzip = repeat(runs, || {
            fetch(
                target,
                link,
                ReceiveWindow::TonicDefault,
                FULL_CATALOG_ROUTES,
                true,
            )
        })
        .await?;
        let gzip = point("gzip", gzip);
        measured.bars.push(CatalogBar {
            link: preset_name(preset),
            identity_s: identity.median_s,
            gzip_s: gzip.median_s,
            identity_floor_s: identity.physics,
        });
    }
    for preset in SWEEP_LINKS {
        let link = preset.link();
        let rate_bit_s = link.rate_bit_s.unwrap_or(u64::MAX) as f64;
        let ceiling_mbit = |window: u64| {
            window_ceiling_bit_s(window, link.rtt()).map_or(rate_bit_s, |c| c.min(rate_bit_s)) / 1e6
        };
        let mut sweep = WindowSweep {
            link: preset_name(preset),
            rtt_s: link.rtt().as_secs_f64(),
            rate_mbit_s: rate_bit_s / 1e6,
            fixed: Vec::new(),
            adaptive_mbit_s: 0.0,
            tonic_default_mbit_s: 0.0,
        };
        for window in SWEEP_WINDOWS {
            let ceiling = ceiling_mbit(window.into());
            let routes = (SWEEP_FETCH_S * ceiling * 1e6 / 8.0 / ROUTE_BYTES)
                .floor()
                .clamp(1.0, f64::from(FULL_CATALOG_ROUTES)) as u32;
            let choice = ReceiveWindow::Fixed(window);
            let samples = repeat(runs, || fetch(target, link, choice, routes, false)).await?;
            let line = plotted("window-sweep", preset, choice.label(), &samples, ceiling);
            sweep.fixed.push(WindowPoint {
                window_bytes: window.into(),
                mbit_s: line.mbit_s,
            });
            measured.lines.push(line);
        }
        for choice in [ReceiveWindow::Adaptive, ReceiveWindow::TonicDefault] {
            let samples = repeat(runs, || {
                fetch(target, link, choice, FULL_CATALOG_ROUTES, false)
            })
            .await?;
            let ceiling = match choice {
                ReceiveWindow::TonicDefault => ceiling_mbit(HYPER_STREAM_WINDOW.into()),
                _ => ceiling_mbit(
                    samples
                        .iter()
                        .map(|s| u64::from(s.grown_stream_window))
                        .max()
                        .unwrap_or(0),
                ),
            };
            let line = plotted("window-sweep", preset, choice.label(), &samples, ceiling);
            match choice {
                ReceiveWindow::Adaptive => sweep.adaptive_mbit_s = line.mbit_s,
                _ => sweep.tonic_default_mbit_s = line.mbit_s,
            }
            measured.lines.push(line);
        }
        measured.sweeps.push(sweep);
    }
    Ok(measured)
}

/// Runs `fetch` `runs` times, one after another.
async fn repeat<F, Fut>(runs: usize, mut fetch: F) -> Result<Vec<Sample>, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Sample, Error>>,
{
    let mut samples = Vec::with_capacity(runs);
    for _ in 0..runs {
        samples.push(fetch().await?);
    }
    Ok(samples)
}

/// One fetch of `routes` routes on a new channel through its own `link`.
async fn fetch(
    target: LoopbackTarget,
    link: Link,
    window: ReceiveWindow,
    routes: u32,
    gzip: bool,
) -> Result<Sample, Error> {
    let baseline = Baseline {
        target: target.to_string().parse()?,
        connect_timeout_secs: CONNECT_TIMEOUT_S,
        call_timeout_secs: CALL_TIMEOUT_S,
        link: LinkArgs::default(),
        tls_ca: None,
        tls_server_name: None,
        tls_counts: Default::default(),
    };
    let endpoint = window.apply(baseline.endpoint()?);
    let wire = CountingConnector::with_link(link);
    let channel = baseline.connect(&endpoint, wire.clone()).await?;
    let mut client = catalog_client(channel);
    if gzip {
        client = client.accept_compressed(CompressionEncoding::Gzip);
    }
    let (bytes_before, windows_before) = (wire.snapshot(), wire.windows());
    let (got, elapsed) = fetch_routes(client, routes).await?;
    let windows = wire.windows().since(windows_before);
    Ok(Sample {
        routes: got,
        seconds: seconds(elapsed),
        wire_bytes: wire.snapshot().since(bytes_before).bytes_read,
        data_bytes: windows.data_bytes_received,
        grown_stream_window: windows.largest_stream_window,
    })
}

/// The least an identity fetch of these bytes can take on `link`: its
/// bytes ÷ rate, plus one round trip (the request out, the first byte back).
fn identity_floor_s(link: &Link, samples: &[Sample]) -> f64 {
    let bytes = samples.first().map_or(0, |s| s.wire_bytes);
    (link.transmission_time(bytes) + link.rtt()).as_secs_f64()
}

fn plotted(
    figure: &'static str,
    link: Preset,
    series: String,
    samples: &[Sample],
    physics: f64,
) -> PlottedLine {
    let runs_s: Vec<f64> = samples.iter().map(|s| s.seconds).collect();
    let median_s = median(&runs_s);
    tracing::info!(figure, ?link, %series, ?runs_s, "measured");
    let first = samples.first().copied().unwrap_or(Sample {
        routes: 0,
        seconds: 0.0,
        wire_bytes: 0,
        data_bytes: 0,
        grown_stream_window: 0,
    });
    let mbit_s = if median_s > 0.0 {
        (first.data_bytes as f64 * 8.0 / median_s / 1e3).round() / 1e3
    } else {
        0.0
    };
    PlottedLine {
        figure,
        link,
        series,
        routes: first.routes,
        wire_bytes: first.wire_bytes,
        data_bytes: first.data_bytes,
        runs_s,
        median_s,
        mbit_s,
        physics: (physics * 1e4).round() / 1e4,
        grown_stream_window: samples
            .iter()
            .map(|s| s.grown_stream_window)
            .max()
            .unwrap_or(0),
    }
}

/// The middle value (the mean of the middle two for an even count); 0 for none.
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[middle],
        _ => (sorted[middle - 1] + sorted[middle]) / 2.0,
    }
}

fn preset_name(preset: Preset) -> String {
    serde_json::to_value(preset)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The whole run's worst case, for `--max-secs`' default: a sweep point takes
/// about [`SWEEP_FETCH_S`] plus a few round trips.
pub fn expected_duration(runs: usize) -> Duration {
    let per_run =
        SWEEP_LINKS.len() as f64 * (SWEEP_WINDOWS.len() as f64 + 2.0) * (SWEEP_FETCH_S + 1.0)
            + CATALOG_LINKS.len() as f64 * 2.0 * 3.0;
    Duration::from_secs_f64(per_run * runs as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The identity floor is bytes ÷ rate plus one round trip: 5,002,500
    /// bytes on wan (20 Mbit/s, 60 ms) take 2.001 s + 0.060 s.
    #[test]
    fn identity_floor_is_bytes_over_rate_plus_a_round_trip() {
        let sample = Sample {
            routes: 25,
            seconds: 2.2,
            wire_bytes: 5_002_500,
            data_bytes: 5_002_500,
            grown_stream_window: HYPER_STREAM_WINDOW,
        };
        let floor = identity_floor_s(&Preset::Wan.link(), &[sample]);
        assert!((floor - (2.001 + 0.060)).abs() < 1e-6, "{floor}");
        assert_eq!(identity_floor_s(&Preset::Local.link(), &[sample]), 0.0);
    }

    #[test]
    fn median_of_runs() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn presets_are_named_as_on_the_command_line() {
        assert_eq!(preset_name(Preset::Longhaul), "longhaul");
        assert_eq!(preset_name(Preset::Local), "local");
    }
}
