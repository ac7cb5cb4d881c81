//! # ready-balance: a tonic balancer that sends calls only where they can land
//!
//! A client-side balancer for tonic that follows a DNS name (a Kubernetes
//! headless Service), keeps one HTTP/2 connection per address, and sends
//! each call to a **ready** endpoint, **picked by load**. It replaces
//! tonic's `Channel::balance_channel`, which keeps picking an address that
//! refuses connections (tonic #2839) and picks at random (its endpoints
//! report a load of 0). `docs/kubernetes.md` has what it measured.
//!
//! | rule | what this crate does | as in |
//! |---|---|---|
//! | which endpoints are picked | only `Ready` ones: the server's SETTINGS arrived and no GOAWAY since | grpc-go's `round_robin` and `least_request` |
//! | a GOAWAY or a closed connection | not picked from that moment; reconnects at once; a resolve is asked for | grpc-go |
//! | a failed connection | `Failing`, not picked; retried with gRPC's backoff (1 s, ×1.6, ±20 %, 120 s cap); a resolve is asked for, at most every 2 s | gRPC connection backoff; grpc-go re-resolves at most every 30 s |
//! | no endpoint ready | a call waits while one is connecting, fails with UNAVAILABLE when all are failing, unless it carries [`WaitForReady`] | gRPC wait-for-ready |
//! | which of two ready endpoints | peak EWMA by default (latency × calls in flight); least request (A48) or random by [`Pick`] | Linkerd; gRFC A48 |
//! | health | optional `grpc.health.v1.Health/Watch` per connection; NOT_SERVING is not picked | gRFC A17 |
//! | DNS | resolved every 10 s ± 20 %, no cache in the process; NXDOMAIN, no address and timeout each keep the last good set, counted apart | grpc-go keeps the last good set |
//! | bounds | 64 endpoints, 1,024 waiting calls, 5 s per resolve, 20 s per connect | [`knobs`] |
//!
//! ```no_run
//! # async fn demo() -> Result<(), ready_balance::BoxError> {
//! use ready_balance::{Balancer, DnsName, Knobs};
//!
//! let name = DnsName::from_system_conf("dns:///routing-headless.routing.svc.cluster.local:9180")?;
//! let balancer = Balancer::start(name, None, Knobs::default()).await?;
//! // let client = RoutingServiceClient::new(balancer.channel());
//! println!("{:?}", balancer.stats().endpoints);
//! # Ok(()) }
//! ```
//!
//! Keep the [`Balancer`] alive as long as its channel: dropping it stops
//! the resolving, the connections and the queue, and the channel's calls
//! then fail with UNAVAILABLE.
//!
//! ## What tower gives, and what is written here
//!
//! tower gives the picker (`balance::p2c`), both load measures
//! (`load::PendingRequests`, `load::PeakEwma`) and the discovery stream.
//! Written here, because tower and tonic lack them: an endpoint whose
//! readiness follows its connection ([`subchannel`]); the tap that sees the
//! server's SETTINGS and GOAWAY ([`tap`]); the queue that applies grpc-go's
//! rule when no endpoint is ready ([`queue`], where tower's `Buffer` would
//! only wait); the A17 watch ([`health`]); and the resolve loop
//! ([`discovery`]).
//!
//! ## Retries are the caller's
//!
//! A call that meets a GOAWAY just before it is written can still be
//! dropped unsent by hyper (`CANCELLED`); the counter `calls_not_ready`
//! shows when the state changed under a pick. Sending such a call again
//! needs the request again, and a tonic request's body is a stream that is
//! read once, so the transparent retry stays where the request is built:
//! `routing_clients::retry::transparent` in this repository, which wraps
//! the call, not the channel. Keeping it out also keeps this crate to one
//! concern.
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
//! - [`stats`]: the counters, as [`Stats`].
//! - [`backoff`]: gRPC's connection backoff.

pub mod backoff;
pub mod changes;
pub mod channel;
pub mod connect;
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
        self.shared
            .counters
            .snapshot(aggregate, self.shared.registry.snapshot())
    }
}
