//! The well-behaved client that watches a server while it is attacked: one
//! tonic channel calling GetQuote at a steady rate, each call with a
//! deadline. Its p99 and error count say whether "other clients" are still
//! served, which is what an attack on a shared server is really about.

use std::{sync::Arc, time::Duration};

use h2_peer::tls::HarnessTls;
use routing_contracts::routing::routing_service_client::RoutingServiceClient;
use serde::Serialize;
use tokio::{
    sync::{Mutex, oneshot, watch},
    task::JoinSet,
    time::Instant,
};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

use crate::{Error, measure::latency::Latencies, target::LoopbackTarget};

/// Calls per second: 20, i.e. one every 50 ms. Enough samples for a p99 over
/// a 10 s attack (200 calls), too few to be load in themselves.
pub const PROBE_RATE: u32 = 20;

/// Deadline of each probe call: 1 s. A call that takes longer has failed
/// from a user's point of view; its latency is recorded as the time waited.
pub const PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// Opens a channel to `target` within `limit` (TCP plus HTTP/2 handshake),
/// with `deadline` on every call.
pub async fn connect(
    target: &LoopbackTarget,
    deadline: Duration,
    limit: Duration,
) -> Result<Channel, Error> {
    connect_over(target, None, deadline, limit).await
}

/// [`connect`], speaking `tls` if given (the TLS handshake counts in `limit`).
pub async fn connect_over(
    target: &LoopbackTarget,
    tls: Option<&HarnessTls>,
    deadline: Duration,
    limit: Duration,
) -> Result<Channel, Error> {
    let endpoint = Endpoint::from_shared(target.uri())?
        .connect_timeout(limit)
        .timeout(deadline)
        .tcp_nodelay(true);
    let connecting = async {
        match tls {
            None => endpoint.connect().await,
            Some(tls) => endpoint.connect_with_connector(tls.connector()).await,
        }
    };
    match tokio::time::timeout(limit, connecting).await {
        Ok(Ok(channel)) => Ok(channel),
        Ok(Err(e)) => Err(format!("cannot connect to {target}: {e}").into()),
        Err(_) => Err(format!("cannot connect to {target}: no handshake within {limit:?}").into()),
    }
}

/// What the probe calls: GetQuote, or the health check when GetQuote is
/// slow on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeCall {
    /// The contract's call, as any client of the service makes it.
    GetQuote,
    /// `grpc.health.v1.Health/Check`: for a server started with
    /// `--fault-delay-ms` (`abuse nodeadline`), whose every GetQuote waits
    /// on purpose, so that the probe still says whether the server answers
    /// other calls. Every server of the contract serves it.
    Health,
}

impl ProbeCall {
    async fn once(self, channel: Channel) -> Result<(), tonic::Status> {
        match self {
            Self::GetQuote => get_quote(channel).await,
            Self::Health => HealthClient::new(channel)
                .check(HealthCheckRequest::default())
                .await
                .map(drop),
        }
    }
}

/// A channel that has answered one `call`, so that measured calls find a
/// warm connection.
async fn warm_channel(
    target: &LoopbackTarget,
    tls: Option<&HarnessTls>,
    deadline: Duration,
    call: ProbeCall,
) -> Result<Channel, Error> {
    let channel = connect_over(target, tls, deadline, Duration::from_secs(5)).await?;
    call.once(channel.clone())
        .await
        .map_err(|s| format!("probe {call:?} failed before the attack: {s}"))?;
    Ok(channel)
}

/// Calls GetQuote `rate` times a second on `channels` in turn, each call in
/// a task of its own, until `stopped` changes; then waits for the calls in
/// flight.
async fn call_until_stopped(
    channels: Vec<Channel>,
    call: ProbeCall,
    rate: u32,
    mut stopped: watch::Receiver<bool>,
    record: Arc<Mutex<Record>>,
) {
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let mut ticker = tokio::time::interval(period);
    // A steady rate: a slow call never delays the next one.
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut calls = JoinSet::new();
    for channel in channels.iter().cycle() {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        let (channel, record) = (channel.clone(), record.clone());
        calls.spawn(async move {
            let started = Instant::now();
            let result = call.once(channel).await;
            let mut record = record.lock().await;
            record.latencies.push(started.elapsed());
            if let Err(status) = result {
                record.errors += 1;
                record.first_error.get_or_insert_with(|| {
                    format!(
                        "{}: {}",
                        h2_peer::grpc::code_name(status.code()),
                        status.message()
                    )
                });
            }
        });
        // Reap finished calls so the set stays small.
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// One GetQuote on `channel`; true if it returned OK.
pub async fn get_quote(channel: Channel) -> Result<(), tonic::Status> {
    let mut client = RoutingServiceClient::new(channel);
    client
        .get_quote(routing_clients::sample_quote_request())
        .await
        .map(drop)
}

/// What the probe saw.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProbeSummary {
    pub calls: usize,
    pub errors: usize,
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
    /// The first error's status, e.g. "DEADLINE_EXCEEDED: Timeout expired".
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_error: Option<String>,
}

#[derive(Debug, Default)]
struct Record {
    latencies: Latencies,
    errors: usize,
    first_error: Option<String>,
}

/// A running probe; [`Probe::stop`] ends it and returns its summary.
///
/// It runs on a thread of its own, with a runtime of its own, so that it
/// measures the server and not the attack: the attacks' tasks share the
/// harness's runtime, and a flood that keeps its worker threads busy would
/// otherwise delay the probe's calls before they reach the socket (the
/// `wuflood` probe's p99 read 15 to 33 ms that way, against 5 to 17 ms from
/// a second process; issue 14, D).
#[derive(Debug)]
pub struct Probe {
    stop: watch::Sender<bool>,
    finished: oneshot::Receiver<()>,
    record: Arc<Mutex<Record>>,
}

impl Probe {
    /// Connects (before the attack starts, so the probe measures service,
    /// not whether new connections are accepted), speaking `tls` if given,
    /// and starts calling, spread over `connections` channels in turn (at
    /// least 1; `bench folklore` spreads 400 calls/s over 10).
    pub async fn start(
        target: &LoopbackTarget,
        tls: Option<&HarnessTls>,
        rate: u32,
        deadline: Duration,
        connections: usize,
    ) -> Result<Self, Error> {
        Self::start_calling(
            ProbeCall::GetQuote,
            target,
            tls,
            rate,
            deadline,
            connections,
        )
        .await
    }

    /// [`Probe::start`], making `call` instead of GetQuote.
    pub async fn start_calling(
        call: ProbeCall,
        target: &LoopbackTarget,
        tls: Option<&HarnessTls>,
        rate: u32,
        deadline: Duration,
        connections: usize,
    ) -> Result<Self, Error> {
        let tls = tls.cloned();
        let record = Arc::new(Mutex::new(Record::default()));
        let (stop, stopped) = watch::channel(false);
        let (ready_tx, ready) = oneshot::channel::<Result<(), String>>();
        let (finished_tx, finished) = oneshot::channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (target, calls_record) = (*target, record.clone());
        std::thread::Builder::new()
            .name("probe".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let mut channels = Vec::new();
                    for _ in 0..connections.max(1) {
                        match warm_channel(&target, tls.as_ref(), deadline, call).await {
                            Ok(channel) => channels.push(channel),
                            Err(e) => {
                                let _ = ready_tx.send(Err(e.to_string()));
                                return;
                            }
                        }
                    }
                    let _ = ready_tx.send(Ok(()));
                    call_until_stopped(channels, call, rate, stopped, calls_record).await;
                });
                let _ = finished_tx.send(());
            })?;
        match ready.await {
            Ok(Ok(())) => Ok(Self {
                stop,
                finished,
                record,
            }),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err("the probe's thread ended before it connected".into()),
        }
    }

    pub async fn stop(self) -> ProbeSummary {
        let _ = self.stop.send(true);
        // Calls in flight end within their deadline, so this ends too.
        let _ = self.finished.await;
        let mut record = self.record.lock().await;
        ProbeSummary {
            calls: record.latencies.len(),
            errors: record.errors,
            p50_ms: record.latencies.percentile_ms(50.0),
            p99_ms: record.latencies.percentile_ms(99.0),
            max_ms: record.latencies.percentile_ms(100.0),
            first_error: record.first_error.take(),
        }
    }
}
