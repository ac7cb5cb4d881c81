#![doc = include_str!("../README.md")]
//!
//! ## Layout
//! - [`knobs`]: every setting, with its unit and reason; [`Pick`].
//! - [`resolve`]: the [`Resolve`] trait, [`DnsName`], [`Fixed`], and the
//!   kinds of failed resolve.
//! - [`changes`]: the next set from an answer, within the bound.
//! - [`discovery`]: the resolve loop, feeding the picker.
//! - [`subchannel`]: one endpoint's connection task and its service.
//! - [`connect`]: dialling (TCP, TLS by name) and the HTTP/2 handshake.
//! - [`tap`]: SETTINGS and GOAWAY, read off the socket.
//! - [`state`]: the endpoint states and the balancer's aggregate.
//! - [`load`]: the load measures for p2c.
//! - [`queue`]: the waiting calls and the task that picks for them.
//! - [`health`]: gRFC A17's watch.
//! - [`channel`]: [`BalancedChannel`], what a tonic client is built on.
//! - [`deadline`]: a call's `grpc-timeout`, kept in the client.
//! - [`stats`]: the counters, as [`Stats`].
//! - [`backoff`]: gRPC's connection backoff.

pub mod backoff;
pub mod changes;
pub mod channel;
pub mod connect;
pub mod deadline;
pub mod discovery;
pub mod health;
pub mod knobs;
pub mod load;
pub mod queue;
pub mod resolve;
pub mod state;
pub mod stats;
pub mod subchannel;
pub mod tap;

use std::sync::Arc;

use tokio::{
    sync::{Notify, mpsc},
    task::JoinHandle,
};

pub use channel::{BalancedChannel, WaitForReady};
pub use connect::TlsTo;
pub use knobs::{Knobs, Pick};
pub use resolve::{DnsName, Fixed, Resolve, ResolveError};
pub use state::{Aggregate, State};
pub use stats::Stats;

use crate::{
    connect::Dial, discovery::Discovery, state::Registry, stats::Counters, subchannel::Shared,
};

/// Any error the balancer reports.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The running balancer: its channel, its counters, and its tasks, which
/// end when it is dropped.
#[derive(Debug)]
pub struct Balancer {
    channel: BalancedChannel,
    shared: Shared,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Balancer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Something that names what it resolves: the `:authority` of each call,
/// and the name TLS checks.
pub trait Named {
    /// `HOST:PORT`.
    fn authority(&self) -> String;
}

impl Named for DnsName {
    fn authority(&self) -> String {
        match self.host().contains(':') {
            true => format!("[{}]:{}", self.host(), self.port()),
            false => format!("{}:{}", self.host(), self.port()),
        }
    }
}

impl Named for Fixed {
    fn authority(&self) -> String {
        self.0
            .first()
            .map_or_else(|| "localhost".to_owned(), ToString::to_string)
    }
}

impl Balancer {
    /// Resolves once (an error, or no address, is returned: a name that
    /// resolves to nothing at start is a mistake), starts a connection to
    /// each address, and starts re-resolving. `tls`: `None` for plaintext.
    pub async fn start<R: Resolve + Named>(
        resolver: R,
        tls: Option<TlsTo>,
        knobs: Knobs,
    ) -> Result<Self, BoxError> {
        knobs.check()?;
        let authority: http::uri::Authority = resolver.authority().parse()?;
        let scheme = match tls {
            Some(_) => http::uri::Scheme::HTTPS,
            None => http::uri::Scheme::HTTP,
        };
        let shared = Shared {
            dial: Dial {
                tls,
                keepalive_interval: knobs.keepalive_interval,
                keepalive_timeout: knobs.keepalive_timeout,
            },
            knobs: Arc::new(knobs),
            registry: Registry::default(),
            counters: Arc::new(Counters::default()),
            resolve_now: Arc::new(Notify::new()),
            authority: authority.clone(),
            scheme: scheme.clone(),
        };
        let (discovery, changes) = Discovery::first(resolver, shared.clone())
            .await
            .map_err(|e| format!("cannot resolve {authority}: {e}"))?;
        let half = (shared.knobs.max_queued_calls / 2).max(1);
        let (calls, queued) = mpsc::channel(half);
        let channel = BalancedChannel {
            calls,
            aggregate: shared.registry.watch(),
            scheme,
            authority,
            counters: Arc::clone(&shared.counters),
        };
        let worker = tokio::spawn(queue::run(
            changes,
            queued,
            shared.registry.watch(),
            Arc::clone(&shared.counters),
            half,
        ));
        let resolving = tokio::spawn(discovery.run());
        Ok(Self {
            channel,
            shared,
            tasks: vec![worker, resolving],
        })
    }

    /// The channel to build tonic clients on. Clone it freely.
    pub fn channel(&self) -> BalancedChannel {
        self.channel.clone()
    }

    /// Asks for a resolve now (grpc-go's `ResolveNow`), still no sooner
    /// than the minimum gap after the last one.
    pub fn resolve_now(&self) {
        self.shared.resolve_now.notify_one();
    }

    /// The counts so far, and each endpoint's state now.
    pub fn stats(&self) -> Stats {
        let aggregate = *self.shared.registry.watch().borrow();
        let registry = &self.shared.registry;
        self.shared
            .counters
            .snapshot(aggregate, registry.snapshot(), registry.events())
    }
}
