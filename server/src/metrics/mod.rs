//! The server's own metrics, served on `--metrics-listen` ([`endpoint`]) in
//! the Prometheus text format: gRFC A66's per-call metrics ([`a66`], a tower
//! layer any tonic server can use) and the connection metrics
//! ([`connection`]), in one registry per server ([`registry`]). A leaf:
//! the layers above count into it, and it imports none of them.
//!
//! With metrics off (no `--metrics-listen`), the per-call layer passes
//! calls through and the connection counters are no-ops.

pub mod a66;
pub mod connection;
pub mod endpoint;
pub mod message_bytes;
pub mod registry;
pub mod slots;

use std::sync::{Arc, Mutex, PoisonError};

use crate::metrics::a66::CallMetrics;
use crate::metrics::connection::ConnectionMetrics;
use crate::metrics::registry::Registry;

/// Sets gauges from state the server keeps anyway (connections open, budget
/// bytes held), just before a scrape renders.
type Collector = Box<dyn Fn() + Send + Sync>;

/// One server's metrics: on, with a registry, or off.
pub struct Metrics {
    registry: Option<Registry>,
    /// The A66 layer's handles (`None`: off).
    pub calls: Option<Arc<CallMetrics>>,
    pub connections: &'static ConnectionMetrics,
    collectors: Mutex<Vec<Collector>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("on", &self.registry.is_some())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Metrics on, for a server that serves `methods` (paths as tonic
    /// routes them); any other path is recorded as `other`.
    pub fn on(methods: &[&'static str]) -> Self {
        let registry = Registry::new();
        let in_flight = registry.gauge(
            "routing_server_calls_in_flight",
            &[],
            "Calls from their request's headers to their end (trailers, reset or dropped handler)",
        );
        Self {
            calls: Some(Arc::new(
                CallMetrics::new(&registry, methods).with_in_flight(in_flight),
            )),
            connections: ConnectionMetrics::leaked(&registry),
            registry: Some(registry),
            collectors: Mutex::new(Vec::new()),
        }
    }

    /// gRFC A66's call metrics alone, for a server whose connections this
    /// crate does not serve (`server/examples/tonic_server.rs`).
    pub fn per_call(methods: &[&'static str]) -> Self {
        let registry = Registry::new();
        Self {
            calls: Some(Arc::new(CallMetrics::new(&registry, methods))),
            connections: &connection::OFF,
            registry: Some(registry),
            collectors: Mutex::new(Vec::new()),
        }
    }

    /// Metrics off: nothing is recorded, and nothing is served.
    pub fn off() -> Self {
        Self {
            registry: None,
            calls: None,
            connections: &connection::OFF,
            collectors: Mutex::new(Vec::new()),
        }
    }

    /// The registry, to register more handles (`None`: metrics off).
    pub fn registry(&self) -> Option<&Registry> {
        self.registry.as_ref()
    }

    /// Runs `collect` before every render (it sets gauges from state the
    /// server already keeps). Not on any call's path.
    pub fn on_scrape(&self, collect: impl Fn() + Send + Sync + 'static) {
        self.collectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Box::new(collect));
    }

    /// Every metric in the Prometheus text format (empty when off).
    pub fn render(&self) -> String {
        let Some(registry) = &self.registry else {
            return String::new();
        };
        for collect in self
            .collectors
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
        {
            collect();
        }
        registry.run_upkeep();
        registry.render()
    }

    /// See [`Registry::run_upkeep`].
    pub fn run_upkeep(&self) {
        if let Some(registry) = &self.registry {
            registry.run_upkeep();
        }
    }
}
