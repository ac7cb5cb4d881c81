//! The figure of `docs/folklore.md` (`docs/figures/folklore.svg`): one
//! panel of grouped bars per claim, a bar per server, drawn with `plotters`
//! from the run's [`Measurement`]s. [`panels`] picks the numbers (pure,
//! tested); [`draw`] draws them.

use plotters::{
    coord::Shift,
    coord::types::RangedCoordf64,
    prelude::*,
    style::text_anchor::{HPos, Pos, VPos},
};

use super::report::{Claim, Measurement, Metric, Stack};
use crate::{
    Error,
    charts::draw::{log_range, number_label, render_sized},
};

/// The whole figure, in pixels: two panels a row, four rows.
const SIZE: (u32, u32) = (1200, 1500);
const FONT: &str = "sans-serif";

/// grpc-go's published cost of one call in flight: about 11 KiB (a
/// goroutine's stack and its heap), drawn as a reference line.
pub const GRPC_GO_PUBLISHED_KIB_PER_CALL: f64 = 11.0;

/// One colour per server, the same in every panel.
fn colour(stack: Stack) -> RGBColor {
    match stack {
        Stack::RoutingServer => RGBColor(31, 119, 180),
        Stack::RoutingServerOneWorker => RGBColor(158, 202, 225),
        Stack::Tonic => RGBColor(255, 127, 14),
        Stack::GrpcGo => RGBColor(44, 160, 44),
    }
}

/// One panel: cases along x, a bar per server in each.
#[derive(Debug, Clone, PartialEq)]
pub struct Panel {
    pub title: String,
    pub y_desc: String,
    pub log_y: bool,
    /// The cases, in the order measured.
    pub groups: Vec<String>,
    /// Each server's value per group (`None`: not measured).
    pub series: Vec<(Stack, Vec<Option<f64>>)>,
    /// A horizontal reference line and its label.
    pub reference: Option<(String, f64)>,
}

/// The panel of `metric` over the cases of `claim` that `keep` accepts.
fn panel(
    all: &[Measurement],
    (title, y_desc, log_y): (&str, &str, bool),
    claim: Claim,
    metric: Metric,
    keep: impl Fn(&str) -> bool,
) -> Panel {
    let picked: Vec<&Measurement> = all
        .iter()
        .filter(|m| m.claim == claim && keep(&m.case) && m.get(metric).is_some())
        .collect();
    let mut groups: Vec<String> = Vec::new();
    let mut stacks: Vec<Stack> = Vec::new();
    for m in &picked {
        if !groups.contains(&m.case) {
            groups.push(m.case.clone());
        }
        if !stacks.contains(&m.stack) {
            stacks.push(m.stack);
        }
    }
    stacks.sort();
    let series = stacks
        .iter()
        .map(|&stack| {
            let values = groups
                .iter()
                .map(|case| {
                    picked
                        .iter()
                        .find(|m| m.stack == stack && m.case == *case)
                        .and_then(|m| m.get(metric))
                })
                .collect();
            (stack, values)
        })
        .collect();
    Panel {
        title: title.into(),
        y_desc: y_desc.into(),
        log_y,
        groups,
        series,
        reference: None,
    }
}

/// The figure's panels, from a run's measurements.
pub fn panels(all: &[Measurement]) -> Vec<Panel> {
    let any = |_: &str| true;
    let mut in_flight = panel(
        all,
        ("Server RSS per call held in flight", "KiB per call", false),
        Claim::InFlight,
        Metric::RssPerCallKib,
        any,
    );
    in_flight.reference = Some((
        "grpc-go's published ~11 KiB".into(),
        GRPC_GO_PUBLISHED_KIB_PER_CALL,
    ));
    vec![
        panel(
            all,
            ("Median latency, one call at a time", "ms (log scale)", true),
            Claim::MessageSize,
            Metric::P50Ms,
            any,
        ),
        panel(
            all,
            ("Server CPU per call", "µs (log scale)", true),
            Claim::MessageSize,
            Metric::CpuPerCallUs,
            any,
        ),
        panel(
            all,
            ("80 callers: calls per second", "calls/s", false),
            Claim::Connections,
            Metric::CallsPerSec,
            any,
        ),
        panel(
            all,
            ("300 fast callers: p99 (100-stream cap)", "ms", false),
            Claim::StreamCap,
            Metric::P99Ms,
            |case| case.starts_with("GetQuote"),
        ),
        panel(
            all,
            (
                "300 callers holding 20 ms: p99 (100-stream cap)",
                "ms",
                false,
            ),
            Claim::StreamCap,
            Metric::P99Ms,
            |case| case.starts_with("held"),
        ),
        panel(
            all,
            ("Saturated: server CPU used", "cores", false),
            Claim::OneConnectionCpu,
            Metric::ServerCores,
            any,
        ),
        panel(
            all,
            ("GetQuote p99 at 400/s, beside 40 gzip pages/s", "ms", false),
            Claim::HeadOfLine,
            Metric::P99Ms,
            any,
        ),
        in_flight,
    ]
}

/// Draws `panels` two a row into `svg`.
pub fn draw(panels: &[Panel], svg: &mut String) -> Result<(), Error> {
    render_sized(svg, SIZE, "folklore", |root| {
        root.fill(&WHITE)?;
        let rows = panels.len().div_ceil(2).max(1);
        let areas = root.split_evenly((rows, 2));
        for (area, panel) in areas.iter().zip(panels) {
            draw_panel(area, panel)?;
        }
        Ok(())
    })
}

fn draw_panel(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    panel: &Panel,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    let values = panel
        .series
        .iter()
        .flat_map(|(_, v)| v.iter().flatten().copied())
        .chain(panel.reference.iter().map(|(_, y)| *y));
    let groups = panel.groups.len().max(1) as f64;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(&panel.title, (FONT, 18))
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60);
    let names = panel.groups.clone();
    let x_label = move |x: &f64| {
        let i = x.round();
        if (x - i).abs() < 1e-6 && i >= 0.0 {
            names.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let bar_width = 0.8 / panel.series.len().max(1) as f64;
    // Bars start at the axis's floor: 0, or the log scale's bottom.
    if panel.log_y {
        let (low, high) = log_range(values);
        let mut chart = builder.build_cartesian_2d(-0.5..groups - 0.5, (low..high).log_scale())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(panel.groups.len())
            .x_label_formatter(&x_label)
            .y_desc(&panel.y_desc)
            .y_label_formatter(&|v| number_label(*v))
            .label_style((FONT, 13))
            .draw()?;
        bars(&mut chart, panel, low, bar_width, 1.1)?;
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    } else {
        let high = values.fold(0.0f64, f64::max).max(1e-9) * 1.25;
        let mut chart = builder.build_cartesian_2d(-0.5..groups - 0.5, 0.0..high)?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(panel.groups.len())
            .x_label_formatter(&x_label)
            .y_desc(&panel.y_desc)
            .y_label_formatter(&|v| number_label(*v))
            .label_style((FONT, 13))
            .draw()?;
        bars(&mut chart, panel, 0.0, bar_width, 1.0)?;
        if let Some((label, y)) = &panel.reference {
            chart
                .draw_series([PathElement::new(
                    [(-0.5, *y), (groups - 0.5, *y)],
                    BLACK.stroke_width(2),
                )])?
                .label(label.clone())
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .label_font((FONT, 12))
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()?;
    }
    Ok(())
}

/// The bars of every series, each with its value above it and a legend
/// entry; `label_lift` places the value just above its bar.
fn bars<Y>(
    chart: &mut ChartContext<'_, SVGBackend<'_>, Cartesian2d<RangedCoordf64, Y>>,
    panel: &Panel,
    floor: f64,
    width: f64,
    label_lift: f64,
) -> Result<(), DrawingAreaErrorKind<std::io::Error>>
where
    Y: Ranged<ValueType = f64>,
{
    let above = Pos::new(HPos::Center, VPos::Bottom);
    let value_style = TextStyle::from((FONT, 11).into_font()).pos(above);
    for (s, (stack, values)) in panel.series.iter().enumerate() {
        let fill = colour(*stack);
        let offset = -0.4 + width * s as f64;
        let placed: Vec<(f64, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(g, v)| v.map(|v| (g as f64 + offset, v)))
            .collect();
        chart
            .draw_series(placed.iter().map(|&(x, v)| {
                Rectangle::new([(x + 0.01, floor), (x + width - 0.01, v)], fill.filled())
            }))?
            .label(stack.name())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 14, y + 5)], fill.filled()));
        chart.draw_series(placed.iter().map(|&(x, v)| {
            Text::new(
                number_label(v),
                (x + width / 2.0, v * label_lift),
                value_style.clone(),
            )
        }))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(claim: Claim, case: &str, stack: Stack, metric: Metric, v: f64) -> Measurement {
        Measurement::new(claim, case, stack).with(metric, Some(v))
    }

    /// Given message sizes for two servers, one of which lacks a case, the
    /// latency panel has every case once, in order, and a `None` where a
    /// server was not measured; the stream-cap panels split fast from held.
    #[test]
    fn panels_pick_their_claim_metric_and_cases() {
        let all = [
            m(
                Claim::MessageSize,
                "GetQuote",
                Stack::GrpcGo,
                Metric::P50Ms,
                0.2,
            ),
            m(
                Claim::MessageSize,
                "GetQuote",
                Stack::RoutingServer,
                Metric::P50Ms,
                0.1,
            ),
            m(
                Claim::MessageSize,
                "page 25",
                Stack::RoutingServer,
                Metric::P50Ms,
                8.0,
            ),
            m(
                Claim::StreamCap,
                "GetQuote, 1 conn",
                Stack::Tonic,
                Metric::P99Ms,
                9.0,
            ),
            m(
                Claim::StreamCap,
                "held 20 ms, 1 conn",
                Stack::Tonic,
                Metric::P99Ms,
                61.0,
            ),
        ];
        let panels = panels(&all);
        let latency = &panels[0];
        assert_eq!(latency.groups, ["GetQuote", "page 25"]);
        assert_eq!(
            latency.series,
            [
                (Stack::RoutingServer, vec![Some(0.1), Some(8.0)]),
                (Stack::GrpcGo, vec![Some(0.2), None]),
            ]
        );
        assert_eq!(panels[3].groups, ["GetQuote, 1 conn"]);
        assert_eq!(panels[4].groups, ["held 20 ms, 1 conn"]);
        assert!(
            panels[7].reference.is_some(),
            "the in-flight panel has grpc-go's 11 KiB"
        );
    }

    /// When drawn, the SVG holds every title, server and case.
    #[test]
    fn the_figure_names_its_panels_servers_and_cases() {
        let all = [
            m(
                Claim::MessageSize,
                "GetQuote",
                Stack::GrpcGo,
                Metric::P50Ms,
                0.2,
            ),
            m(
                Claim::MessageSize,
                "page 25",
                Stack::Tonic,
                Metric::P50Ms,
                8.0,
            ),
            m(
                Claim::InFlight,
                "1000 calls held",
                Stack::RoutingServer,
                Metric::RssPerCallKib,
                2.5,
            ),
        ];
        let mut svg = String::new();
        draw(&panels(&all), &mut svg).expect("draws");
        for text in [
            "Median latency, one call at a time",
            "Server RSS per call held in flight",
            "grpc-go",
            "stock tonic",
            "page 25",
            "1000 calls held",
            "published ~11 KiB",
        ] {
            assert!(svg.contains(text), "{text}");
        }
    }
}
