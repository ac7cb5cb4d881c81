//! The two figures of `docs/network.md`, drawn as SVG with `plotters` from
//! measured points (see the `link-chart` binary, which measures them).
//!
//! - [`draw_catalog_by_link`]: the full catalog's fetch time, identity and
//!   gzip, on each link, with the physics floor of the identity fetch
//!   (bytes ÷ rate + one round trip).
//! - [`draw_window_sweep`]: throughput against the receive window on each
//!   link, with the physics ceiling `min(window ÷ RTT, rate)` and the
//!   adaptive window's throughput.
//!
//! Both take plain data, so tests can draw into a string.

use plotters::{
    coord::Shift,
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};
use serde::Serialize;

use crate::Error;

/// Size of each figure, in pixels: wide enough for a README column.
const SIZE: (u32, u32) = (900, 520);
const FONT: &str = "sans-serif";
/// One colour per series, told apart in grey too (dark, mid, light).
const IDENTITY: RGBColor = RGBColor(31, 119, 180);
const GZIP: RGBColor = RGBColor(255, 127, 14);
/// One colour per link in the window sweep.
const LINK_COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(148, 103, 189),
];

/// One link's full-catalog fetches (the median of the runs).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CatalogBar {
    /// The link's name: `local`, `lan`, `wan`, `longhaul`.
    pub link: String,
    /// Seconds from call to decoded answer, uncompressed.
    pub identity_s: f64,
    /// The same with gzip accepted.
    pub gzip_s: f64,
    /// The least the identity fetch can take: bytes ÷ rate + one round
    /// trip; 0 on a link without rate or delay.
    pub identity_floor_s: f64,
}

/// One measured point of the window sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowPoint {
    /// Both windows (stream and connection), in bytes.
    pub window_bytes: u64,
    /// Measured throughput, in Mbit/s.
    pub mbit_s: f64,
}

/// One link's window sweep.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WindowSweep {
    pub link: String,
    /// Round trip, in seconds.
    pub rtt_s: f64,
    /// The link's rate, in Mbit/s.
    pub rate_mbit_s: f64,
    /// Fixed windows, smallest first.
    pub fixed: Vec<WindowPoint>,
    /// Throughput with `http2_adaptive_window(true)`, in Mbit/s.
    pub adaptive_mbit_s: f64,
    /// Throughput with tonic's defaults (2 MiB stream, 5 MiB connection).
    pub tonic_default_mbit_s: f64,
}

impl WindowSweep {
    /// The physics ceiling at `window` bytes: min(window ÷ RTT, rate).
    pub fn ceiling_mbit_s(&self, window: u64) -> f64 {
        let by_window = window as f64 * 8.0 / self.rtt_s / 1e6;
        by_window.min(self.rate_mbit_s)
    }
}

/// Draws the full-catalog fetch times as grouped bars on a log scale.
pub fn draw_catalog_by_link(bars: &[CatalogBar], svg: &mut String) -> Result<(), Error> {
    render(svg, "catalog", |root| catalog_by_link(root, bars))
}

fn catalog_by_link(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    bars: &[CatalogBar],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    root.fill(&WHITE)?;
    let values = bars
        .iter()
        .flat_map(|b| [b.identity_s, b.gzip_s, b.identity_floor_s]);
    let (low, high) = log_range(values);
    let count = bars.len() as f64;
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Full catalog (5.0 MB) fetch time, identity vs gzip, by link",
            (FONT, 22),
        )
        .margin(16)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(-0.5..count - 0.5, (low..high).log_scale())?;
    let names: Vec<String> = bars.iter().map(|b| b.link.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(bars.len())
        .x_label_formatter(&|x| {
            let i = x.round();
            if (x - i).abs() < 1e-6 && i >= 0.0 {
                names.get(i as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc("seconds (log scale)")
        .y_label_formatter(&|s| seconds_label(*s))
        .label_style((FONT, 15))
        .draw()?;

    let bar = |i: usize, left: f64, right: f64, top: f64, colour: RGBColor| {
        let x = i as f64;
        Rectangle::new([(x + left, low), (x + right, top)], colour.filled())
    };
    chart
        .draw_series(
            bars.iter()
                .enumerate()
                .map(|(i, b)| bar(i, -0.38, -0.02, b.identity_s, IDENTITY)),
        )?
        .label("identity (no compression)")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], IDENTITY.filled()));
    chart
        .draw_series(
            bars.iter()
                .enumerate()
                .map(|(i, b)| bar(i, 0.02, 0.38, b.gzip_s, GZIP)),
        )?
        .label("gzip")
        .legend(|(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], GZIP.filled()));
    // The physics floor of the identity fetch, as a black tick across its bar.
    chart
        .draw_series(
            bars.iter()
                .enumerate()
                .filter(|(_, b)| b.identity_floor_s > 0.0)
                .map(|(i, b)| {
                    let x = i as f64;
                    PathElement::new(
                        [
                            (x - 0.42, b.identity_floor_s),
                            (x + 0.02, b.identity_floor_s),
                        ],
                        BLACK.stroke_width(3),
                    )
                }),
        )?
        .label("identity floor: bytes ÷ rate + 1 round trip")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(3)));
    // Each bar's value, above it.
    let above = Pos::new(HPos::Center, VPos::Bottom);
    let value_style = TextStyle::from((FONT, 13).into_font()).pos(above);
    chart.draw_series(bars.iter().enumerate().flat_map(|(i, b)| {
        let x = i as f64;
        [
            Text::new(
                seconds_label(b.identity_s),
                (x - 0.2, b.identity_s * 1.08),
                value_style.clone(),
            ),
            Text::new(
                seconds_label(b.gzip_s),
                (x + 0.2, b.gzip_s * 1.08),
                value_style.clone(),
            ),
        ]
    }))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// Draws throughput against window, log-log, one colour per link.
pub fn draw_window_sweep(sweeps: &[WindowSweep], svg: &mut String) -> Result<(), Error> {
    render(svg, "window", |root| window_sweep(root, sweeps))
}

/// Draws one chart into `svg` with `draw`, then writes it out; `name` is the
/// chart's name in an error.
pub(crate) fn render(
    svg: &mut String,
    name: &str,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend<'_>, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<std::io::Error>>,
) -> Result<(), Error> {
    render_sized(svg, SIZE, name, draw)
}

/// [`render`] at another size, in pixels.
pub(crate) fn render_sized(
    svg: &mut String,
    size: (u32, u32),
    name: &str,
    draw: impl FnOnce(
        &DrawingArea<SVGBackend<'_>, Shift>,
    ) -> Result<(), DrawingAreaErrorKind<std::io::Error>>,
) -> Result<(), Error> {
    let root = SVGBackend::with_string(svg, size).into_drawing_area();
    draw(&root).map_err(|e| format!("cannot draw the {name} chart: {e}"))?;
    root.present()
        .map_err(|e| format!("cannot write the {name} chart: {e}"))?;
    Ok(())
}

fn window_sweep(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    sweeps: &[WindowSweep],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    root.fill(&WHITE)?;
    // Ticks at exactly the windows measured (powers of two), not decades.
    let mut ticks: Vec<f64> = sweeps
        .iter()
        .flat_map(|s| s.fixed.iter().map(|p| p.window_bytes as f64 / 1024.0))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();
    let (x_low, x_high) = match (ticks.first(), ticks.last()) {
        (Some(first), Some(last)) => (first / 1.4, last * 1.4),
        _ => (1.0, 10.0),
    };
    let rates = sweeps.iter().flat_map(|s| {
        s.fixed
            .iter()
            .map(|p| p.mbit_s)
            .chain([s.adaptive_mbit_s, s.tonic_default_mbit_s])
            .chain(s.fixed.iter().map(|p| s.ceiling_mbit_s(p.window_bytes)))
    });
    let (y_low, y_high) = log_range(rates);
    let mut chart = ChartBuilder::on(root)
        .caption(
            "Throughput against the client's receive window (fetches of up to 5.0 MB)",
            (FONT, 20),
        )
        .margin(16)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(
            (x_low..x_high).log_scale().with_key_points(ticks),
            (y_low..y_high).log_scale(),
        )?;
    chart
        .configure_mesh()
        .x_desc("receive window, stream and connection (KiB, log scale)")
        .y_desc("Mbit/s (log scale)")
        .x_label_formatter(&|kib| window_label(*kib))
        .y_label_formatter(&|mbit| number_label(*mbit))
        .label_style((FONT, 15))
        .draw()?;

    for (sweep, colour) in sweeps.iter().zip(LINK_COLOURS.iter().cycle()) {
        let colour = *colour;
        let kib = |bytes: u64| bytes as f64 / 1024.0;
        let measured: Vec<(f64, f64)> = sweep
            .fixed
            .iter()
            .map(|p| (kib(p.window_bytes), p.mbit_s))
            .collect();
        let name = format!(
            "{}: {} ms RTT, {} Mbit/s",
            sweep.link,
            number_label(sweep.rtt_s * 1e3),
            number_label(sweep.rate_mbit_s)
        );
        chart
            .draw_series(LineSeries::new(measured.clone(), colour.stroke_width(2)))?
            .label(name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2)));
        chart.draw_series(
            measured
                .iter()
                .map(|&point| Circle::new(point, 4, colour.filled())),
        )?;
        // Physics: min(window ÷ RTT, rate), evaluated densely so the knee shows.
        let (first, last) = match (sweep.fixed.first(), sweep.fixed.last()) {
            (Some(first), Some(last)) => (first.window_bytes as f64, last.window_bytes as f64),
            _ => continue,
        };
        let steps = 60;
        let ceiling: Vec<(f64, f64)> = (0..=steps)
            .map(|i| {
                let window = first * (last / first).powf(f64::from(i) / f64::from(steps));
                (window / 1024.0, sweep.ceiling_mbit_s(window as u64))
            })
            .collect();
        chart.draw_series(DashedLineSeries::new(ceiling, 6, 4, colour.stroke_width(1)))?;
        // The adaptive window: a dotted horizontal line across the sweep.
        chart.draw_series(DashedLineSeries::new(
            [
                (kib(first as u64), sweep.adaptive_mbit_s),
                (kib(last as u64), sweep.adaptive_mbit_s),
            ],
            2,
            4,
            colour.stroke_width(2),
        ))?;
        let label_style = TextStyle::from((FONT, 13).into_font())
            .color(&colour)
            .pos(Pos::new(HPos::Left, VPos::Bottom));
        chart.draw_series([Text::new(
            format!(
                "{} adaptive: {} Mbit/s",
                sweep.link,
                number_label(sweep.adaptive_mbit_s)
            ),
            (kib(first as u64), sweep.adaptive_mbit_s * 1.05),
            label_style,
        )])?;
        // tonic's default (2 MiB stream window): a diamond at 2 MiB.
        let default_at = f64::from(routing_clients::windows::HYPER_STREAM_WINDOW) / 1024.0;
        chart.draw_series([Cross::new(
            (default_at, sweep.tonic_default_mbit_s),
            7,
            colour.stroke_width(2),
        )])?;
    }
    // Legend entries for the line styles, drawn once.
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("dashed: min(window ÷ RTT, rate), the physics")
        .legend(|(x, y)| PathElement::new([(x, y), (x + 20, y)], BLACK.stroke_width(1)));
    chart
        .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
        .label("dotted: http2_adaptive_window(true); ×: tonic's default")
        .legend(|(x, y)| Cross::new((x + 10, y), 5, BLACK.stroke_width(2)));
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font((FONT, 14))
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// A log-scale axis range that holds every positive value, with room above
/// for labels: from a power of ten below the smallest to one above the largest.
pub(crate) fn log_range(values: impl Iterator<Item = f64>) -> (f64, f64) {
    let (low, high) = values
        .filter(|v| v.is_finite() && *v > 0.0)
        .fold((f64::MAX, f64::MIN), |(lo, hi), v| (lo.min(v), hi.max(v)));
    if low > high {
        return (0.1, 10.0);
    }
    (
        10f64.powf(low.log10().floor()),
        10f64.powf((high * 1.5).log10().ceil()),
    )
}

/// `0.015 s` → "15 ms", `2.3` → "2.3 s".
fn seconds_label(seconds: f64) -> String {
    if seconds < 1.0 {
        format!("{} ms", number_label(seconds * 1e3))
    } else {
        format!("{} s", number_label(seconds))
    }
}

/// `64.0` → "64 KiB", `2048.0` → "2 MiB".
fn window_label(kib: f64) -> String {
    if kib >= 1024.0 {
        format!("{} MiB", number_label(kib / 1024.0))
    } else {
        format!("{} KiB", number_label(kib))
    }
}

/// Up to three significant digits, no trailing zeros: 0.0123, 1.5, 42, 1000.
pub(crate) fn number_label(value: f64) -> String {
    if value == 0.0 || !value.is_finite() {
        return format!("{value}");
    }
    let digits = (2 - value.abs().log10().floor() as i32).max(0) as usize;
    let text = format!("{value:.digits$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bars() -> Vec<CatalogBar> {
        ["local", "lan", "wan", "longhaul"]
            .iter()
            .zip([
                (0.015, 0.02, 0.0),
                (0.45, 0.03, 0.404),
                (2.1, 0.09, 2.06),
                (1.4, 0.45, 0.44),
            ])
            .map(
                |(link, (identity_s, gzip_s, identity_floor_s))| CatalogBar {
                    link: (*link).into(),
                    identity_s,
                    gzip_s,
                    identity_floor_s,
                },
            )
            .collect()
    }

    /// Given four links' fetch times, the SVG names every link and every
    /// bar's value, and has one bar per fetch.
    #[test]
    fn catalog_chart_labels_every_link_and_value() {
        let mut svg = String::new();
        draw_catalog_by_link(&bars(), &mut svg).expect("draws");

        for text in [
            "local", "lan", "wan", "longhaul", "15 ms", "2.1 s", "450 ms", "gzip",
        ] {
            assert!(
                svg.contains(&format!(">{text}<")) || svg.contains(text),
                "{text} missing"
            );
        }
        assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
        // 8 bars, 2 legend swatches, the background and the plot area.
        let rects = svg.matches("<rect").count();
        assert!(rects >= 8 + 2, "{rects} rectangles");
    }

    /// The physics ceiling is the window's until the window covers the
    /// bandwidth-delay product, the rate's after.
    #[test]
    fn ceiling_is_the_window_until_the_bdp_then_the_rate() {
        let wan = WindowSweep {
            link: "wan".into(),
            rtt_s: 0.060,
            rate_mbit_s: 20.0,
            fixed: Vec::new(),
            adaptive_mbit_s: 18.0,
            tonic_default_mbit_s: 19.0,
        };
        // 65,536 bytes × 8 ÷ 60 ms = 8.74 Mbit/s, under the 20 Mbit/s rate.
        assert!((wan.ceiling_mbit_s(65_536) - 8.738).abs() < 0.001);
        // The BDP is 20 Mbit/s × 60 ms = 150 kB; a 1 MiB window is past it.
        assert_eq!(wan.ceiling_mbit_s(1 << 20), 20.0);
    }

    /// Given a sweep on one link, the SVG has a line per link and the labels.
    #[test]
    fn window_chart_draws_points_and_labels() {
        let sweep = WindowSweep {
            link: "longhaul".into(),
            rtt_s: 0.4,
            rate_mbit_s: 1000.0,
            fixed: [64u64, 256, 1024, 4096]
                .iter()
                .map(|kib| WindowPoint {
                    window_bytes: kib * 1024,
                    mbit_s: *kib as f64 / 60.0,
                })
                .collect(),
            adaptive_mbit_s: 20.0,
            tonic_default_mbit_s: 30.0,
        };
        let mut svg = String::new();
        draw_window_sweep(&[sweep], &mut svg).expect("draws");

        for text in [
            "64 KiB",
            "1 MiB",
            "longhaul: 400 ms RTT, 1000 Mbit/s",
            "adaptive: 20 Mbit/s",
        ] {
            assert!(svg.contains(text), "{text} missing");
        }
        assert_eq!(svg.matches("<circle").count(), 4, "one dot per window");
    }

    #[test]
    fn labels_read_like_a_person_wrote_them() {
        assert_eq!(seconds_label(0.015), "15 ms");
        assert_eq!(seconds_label(2.31), "2.31 s");
        assert_eq!(window_label(64.0), "64 KiB");
        assert_eq!(window_label(2048.0), "2 MiB");
        assert_eq!(number_label(1000.0), "1000");
        assert_eq!(number_label(0.0123), "0.0123");
        assert_eq!(log_range([0.02, 3.0].into_iter()), (0.01, 10.0));
    }
}
