//! [`Registry`]: where every metric of one server lives, and how it is
//! rendered in the Prometheus text format.
//!
//! The registry and the format are `metrics-exporter-prometheus`'s, not
//! hand-written: a handle counts with atomics and a histogram records into
//! a lock-free bucket, so a call never takes a lock the workers share (the
//! alternatives take one: `prometheus-client`'s histogram and
//! OpenTelemetry's SDK aggregation each lock per observation). A handle is
//! registered once (at start-up, or the first time a label set is seen, see
//! [`crate::metrics::a66`]) and kept; after that, recording reaches no map.
//!
//! Each server has a registry of its own rather than the process-wide
//! recorder, so several servers in one process (the tests, `bench`) never
//! mix their counts.

use std::{borrow::Cow, sync::Arc};

use metrics::{
    Counter, Gauge, Histogram, Key, KeyName, Label, Metadata, Recorder, SharedString, Unit,
};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

/// gRFC A66's latency buckets, in seconds: every histogram named
/// `*_seconds`.
pub const LATENCY_BUCKETS: &[f64] = &[
    0.0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005,
    0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16,
    0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0,
];

/// gRFC A66's size buckets, in bytes: every histogram named `*_bytes`.
pub const SIZE_BUCKETS: &[f64] = &[
    0.0,
    1024.0,
    2048.0,
    4096.0,
    16384.0,
    65536.0,
    262144.0,
    1048576.0,
    4194304.0,
    16777216.0,
    67108864.0,
    268435456.0,
    1073741824.0,
    4294967296.0,
];

/// One server's metrics: handles are registered here and rendered from
/// here. Cloning shares it.
#[derive(Clone)]
pub struct Registry {
    recorder: Arc<PrometheusRecorder>,
    handle: PrometheusHandle,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

/// Labels as a registration takes them: names and values fixed in code.
pub type Labels<'a> = &'a [(&'static str, &'static str)];

impl Registry {
    /// An empty registry whose histograms have A66's buckets (rendered as
    /// Prometheus histograms, not the exporter's default summaries).
    pub fn new() -> Self {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
            .and_then(|b| b.set_buckets_for_metric(Matcher::Suffix("_bytes".into()), SIZE_BUCKETS))
            .expect("A66's bucket lists are non-empty");
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        Self {
            recorder: Arc::new(recorder),
            handle,
        }
    }

    /// The counter `name` with `labels`, described by `help` (the HELP line).
    pub fn counter(&self, name: &'static str, labels: Labels<'_>, help: &'static str) -> Counter {
        self.recorder.describe_counter(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        );
        self.recorder
            .register_counter(&key(name, labels), &METADATA)
    }

    /// The gauge `name` with `labels`.
    pub fn gauge(&self, name: &'static str, labels: Labels<'_>, help: &'static str) -> Gauge {
        self.recorder.describe_gauge(
            KeyName::from_const_str(name),
            None,
            SharedString::const_str(help),
        );
        self.recorder.register_gauge(&key(name, labels), &METADATA)
    }

    /// The histogram `name` with `labels`; its unit (and so its buckets)
    /// comes from its name's suffix.
    pub fn histogram(
        &self,
        name: &'static str,
        labels: Labels<'_>,
        help: &'static str,
        unit: Unit,
    ) -> Histogram {
        self.recorder.describe_histogram(
            KeyName::from_const_str(name),
            Some(unit),
            SharedString::const_str(help),
        );
        self.recorder
            .register_histogram(&key(name, labels), &METADATA)
    }

    /// Moves what histograms recorded since the last call into their
    /// buckets. Until then each value waits in a lock-free list, so this
    /// runs on a timer ([`crate::knobs::METRICS_UPKEEP_INTERVAL`]) as well
    /// as before every render: it bounds what calls between two scrapes
    /// keep.
    pub fn run_upkeep(&self) {
        self.handle.run_upkeep();
    }

    /// Every metric, in the Prometheus text format (version 0.0.4).
    pub fn render(&self) -> String {
        self.handle.render()
    }
}

/// Metadata is for recorders that filter by target or level; this one
/// keeps everything.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), metrics::Level::INFO, Some(module_path!()));

fn key(name: &'static str, labels: Labels<'_>) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(k, v)| Label::new(Cow::Borrowed(*k), Cow::Borrowed(*v)))
        .collect();
    Key::from_parts(name, labels)
}
