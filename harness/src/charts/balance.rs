//! The figure of README "Behind a load balancer": calls each replica
//! answered, second by second, through HAProxy L4 on one channel, without
//! and with a connection age (`docs/figures/balance-over-time.svg`). The
//! data is `balance-client`'s JSON line (`--phases l4_pooled,l4_aged
//! --pooled-secs N`); `balance-chart` reads it and calls
//! [`draw_calls_over_time`].

use std::collections::BTreeMap;

use plotters::{coord::Shift, prelude::*};
use serde::Deserialize;

use crate::Error;

const FONT: &str = "sans-serif";
/// One colour per replica, in name order.
const REPLICA_COLOURS: [RGBColor; 4] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
];

/// One timed phase of `balance-client`: what its JSON carries for the figure.
#[derive(Debug, Clone, Deserialize)]
pub struct TimedPhase {
    /// Calls per replica per second: `[second, replica, calls]`.
    pub timeline: Vec<(u64, String, u32)>,
    #[serde(default)]
    pub reconnects: Option<u64>,
    pub failed: u32,
}

/// One panel: a title and its phase.
#[derive(Debug, Clone)]
pub struct Panel {
    pub title: String,
    pub phase: TimedPhase,
}

/// Calls per second for each replica, zeros included, over `seconds` seconds.
pub fn per_second(phase: &TimedPhase, seconds: u64) -> BTreeMap<String, Vec<u32>> {
    let mut series: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (second, replica, calls) in &phase.timeline {
        let slot = series
            .entry(replica.clone())
            .or_insert_with(|| vec![0; seconds as usize]);
        if let Some(count) = slot.get_mut(*second as usize) {
            *count += calls;
        }
    }
    series
}

/// Draws the panels one above the other into `svg`, each with the replicas
/// that answered in it (a replica that served nothing has no line: the
/// panel's title says so).
pub fn draw_calls_over_time(panels: &[Panel], svg: &mut String) -> Result<(), Error> {
    crate::charts::draw::render(svg, "balance", |root| draw(root, panels))
}

fn draw(
    root: &DrawingArea<SVGBackend<'_>, Shift>,
    panels: &[Panel],
) -> Result<(), DrawingAreaErrorKind<std::io::Error>> {
    root.fill(&WHITE)?;
    let seconds = panels
        .iter()
        .flat_map(|p| p.phase.timeline.iter().map(|(s, _, _)| s + 1))
        .max()
        .unwrap_or(1);
    let series: Vec<BTreeMap<String, Vec<u32>>> = panels
        .iter()
        .map(|p| per_second(&p.phase, seconds))
        .collect();
    let top = series
        .iter()
        .flat_map(|s| s.values().flatten().copied())
        .max()
        .unwrap_or(1);
    let areas = root.split_evenly((panels.len().max(1), 1));
    for ((area, panel), counts) in areas.iter().zip(panels).zip(&series) {
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, (FONT, 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(55)
            .build_cartesian_2d(0u64..seconds, 0u32..(top + top / 5 + 1))?;
        chart
            .configure_mesh()
            .x_desc("second of the run")
            .y_desc("calls answered")
            .label_style((FONT, 14))
            .draw()?;
        // The panel's own replicas, in name order, each with its colour.
        for (i, (name, values)) in counts.iter().enumerate() {
            let colour = REPLICA_COLOURS[i % REPLICA_COLOURS.len()];
            let points: Vec<(u64, u32)> = (0..seconds).zip(values.iter().copied()).collect();
            chart
                .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
                .label(format!("replica {name}"))
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 20, y)], colour.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font((FONT, 14))
            .draw()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(timeline: &[(u64, &str, u32)]) -> TimedPhase {
        TimedPhase {
            timeline: timeline
                .iter()
                .map(|&(s, r, n)| (s, r.to_owned(), n))
                .collect(),
            reconnects: None,
            failed: 0,
        }
    }

    /// Given a timeline with a replica change inside second 1, then each
    /// replica's series has its calls in that second and zeros elsewhere.
    #[test]
    fn per_second_fills_the_gaps_with_zeros() {
        let series = per_second(&phase(&[(0, "a", 40), (1, "a", 10), (1, "b", 30)]), 3);
        assert_eq!(series["a"], [40, 10, 0]);
        assert_eq!(series["b"], [0, 30, 0]);
    }

    /// Given two panels, when drawn, then the SVG names every replica and
    /// both titles.
    #[test]
    fn the_chart_names_every_replica_and_panel() {
        let panels = [
            Panel {
                title: "pinned".into(),
                phase: phase(&[(0, "a", 5), (1, "a", 5)]),
            },
            Panel {
                title: "aged".into(),
                phase: phase(&[(0, "aged-a", 5), (1, "aged-b", 5)]),
            },
        ];
        let mut svg = String::new();
        draw_calls_over_time(&panels, &mut svg).expect("draws");
        for text in ["pinned", "aged", "replica a", "replica aged-b"] {
            assert!(svg.contains(text), "{text}");
        }
    }
}
