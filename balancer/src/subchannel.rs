//! One endpoint: a task that keeps a connection to its address and
//! publishes its [`State`], and the service the picker holds for it, ready
//! only while that state is `Ready`. grpc-go calls this a subchannel.
//!
//! The task's loop, one connection at a time:
//! - connect (bounded by the connect timeout); the state is `Connecting`;
//! - on success the state is `Ready` (or, with A17, whatever the health
//!   service says) and the backoff starts over;
//! - on a GOAWAY or the end of the connection, the state leaves `Ready` at
//!   once, a resolve is asked for, and a new connection is tried at once;
//!   calls in flight on the old one go on until they end;
//! - on a failed attempt the state is `Failing`, a resolve is asked for,
//!   and the next attempt waits out the backoff.

use std::{
    future::Future,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::{body::Incoming, client::conn::http2::SendRequest};
use tokio::{
    sync::{Notify, watch},
    time::timeout,
};
use tokio_stream::{Stream, wrappers::WatchStream};
use tower::Service;

use crate::{
    BoxError,
    backoff::Backoff,
    connect::{Body, Dial, Open, open},
    health,
    knobs::Knobs,
    state::{Registry, State},
    stats::{Counters, bump},
};

/// What the task publishes: the state, and the connection's sender while
/// ready. `generation` tells one ready connection from the next.
#[derive(Debug, Clone)]
pub struct Conn {
    pub state: State,
    sender: Option<SendRequest<Body>>,
    generation: u64,
}

/// Everything an endpoint's task shares with the rest of the balancer.
#[derive(Debug, Clone)]
pub struct Shared {
    pub dial: Dial,
    pub knobs: Arc<Knobs>,
    pub registry: Registry,
    pub counters: Arc<Counters>,
    /// Asks the resolver for a resolve now.
    pub resolve_now: Arc<Notify>,
    /// The `:authority` of health calls (the name resolved).
    pub authority: http::uri::Authority,
    pub scheme: http::uri::Scheme,
}

/// Starts `addr`'s task; returns the service for the picker, and the
/// handle that ends the task (when the address leaves the answer).
pub fn start(addr: SocketAddr, shared: Shared) -> (Endpoint, tokio::task::JoinHandle<()>) {
    let (publish, watching) = watch::channel(Conn {
        state: State::Connecting,
        sender: None,
        generation: 0,
    });
    shared.registry.insert(addr, State::Connecting);
    let counters = Arc::clone(&shared.counters);
    let task = tokio::spawn(keep_connected(addr, shared, publish));
    (Endpoint::new(watching, counters), task)
}

/// The task: connect, publish, wait until unusable, again.
async fn keep_connected(addr: SocketAddr, shared: Shared, publish: watch::Sender<Conn>) {
    let knobs = &shared.knobs;
    let mut backoff = Backoff::new(knobs.backoff_initial, knobs.backoff_max);
    let mut generation = 0;
    let set = |state: State, sender: Option<SendRequest<Body>>, generation: u64| {
        shared.registry.set(addr, state);
        publish.send_replace(Conn {
            state,
            sender,
            generation,
        });
    };
    loop {
        set(State::Connecting, None, generation);
        bump(&shared.counters.connects);
        let mut open = match timeout(knobs.connect_timeout, open(addr, &shared.dial)).await {
            Ok(Ok(open)) => open,
            failed => {
                let why = match failed {
                    Ok(Err(e)) => e.to_string(),
                    _ => format!("no SETTINGS within {:?}", knobs.connect_timeout),
                };
                bump(&shared.counters.connect_failures);
                set(State::Failing, None, generation);
                shared.resolve_now.notify_one();
                let wait = backoff.next_wait();
                tracing::info!(%addr, "connect failed ({why}); next attempt in {wait:?}");
                tokio::time::sleep(wait).await;
                continue;
            }
        };
        backoff.reset();
        generation += 1;
        let goaway = serve(&shared, &mut open, |state, sender| {
            set(state, sender, generation)
        })
        .await;
        if goaway {
            bump(&shared.counters.goaways);
        } else {
            bump(&shared.counters.closes);
        }
        // grpc-go re-resolves on a GOAWAY and on a closed connection.
        shared.resolve_now.notify_one();
        tracing::info!(%addr, goaway, "connection no longer usable; reconnecting");
    }
}

/// Publishes the open connection as ready (with A17, as its health service
/// says) until a GOAWAY (`true`) or its end (`false`).
async fn serve(
    shared: &Shared,
    open: &mut Open,
    set: impl Fn(State, Option<SendRequest<Body>>),
) -> bool {
    let sender = open.sender.clone();
    let mut health = match &shared.knobs.health_service {
        // "The subchannel is not READY until the first health response":
        // it stays Connecting until the watch answers.
        Some(service) => Some(health::watch(
            sender.clone(),
            shared.scheme.clone(),
            shared.authority.clone(),
            service.clone(),
        )),
        None => {
            set(State::Ready, Some(sender.clone()));
            None
        }
    };
    loop {
        tokio::select! {
            goaway = open.until_unusable() => return goaway,
            serving = health::next(&mut health) => {
                if serving {
                    set(State::Ready, Some(sender.clone()));
                } else {
                    bump(&shared.counters.not_serving);
                    set(State::NotServing, None);
                }
            }
        }
    }
}

/// The picker's handle on one endpoint: ready while the task says `Ready`.
#[derive(Debug)]
pub struct Endpoint {
    now: watch::Receiver<Conn>,
    /// The same channel as a stream of changes, polled to be woken.
    changes: WatchStream<Conn>,
    /// The sender `poll_ready` found ready, for the `call` that follows.
    picked: Option<(u64, SendRequest<Body>)>,
    counters: Arc<Counters>,
}

impl Endpoint {
    fn new(now: watch::Receiver<Conn>, counters: Arc<Counters>) -> Self {
        Self {
            changes: WatchStream::from_changes(now.clone()),
            now,
            picked: None,
            counters,
        }
    }
}

impl Service<http::Request<Body>> for Endpoint {
    type Response = http::Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    /// Ready only while the endpoint is `Ready` and its connection takes
    /// calls. Never an error: tower's p2c drops a service that fails, and
    /// this endpoint may be ready again after a reconnect.
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        loop {
            let conn = self.now.borrow().clone();
            if let (State::Ready, Some(mut sender)) = (conn.state, conn.sender)
                && let Poll::Ready(Ok(())) = sender.poll_ready(cx)
            {
                self.picked = Some((conn.generation, sender));
                return Poll::Ready(Ok(()));
            }
            self.picked = None;
            match Pin::new(&mut self.changes).poll_next(cx) {
                Poll::Ready(Some(_)) => continue,
                // The task is gone (the address left the answer): never
                // ready again; the picker evicts it.
                Poll::Ready(None) | Poll::Pending => return Poll::Pending,
            }
        }
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let Some((generation, mut sender)) = self.picked.take() else {
            return Box::pin(async {
                Err("the balancer called an endpoint before it was ready".into())
            });
        };
        {
            // The state can change between poll_ready and here (a GOAWAY read
            // on another thread). Counted, not hidden: it should stay 0.
            let now = self.now.borrow();
            if now.state != State::Ready || now.generation != generation {
                bump(&self.counters.calls_not_ready);
            }
        }
        let response = sender.send_request(request);
        Box::pin(async move { Ok(response.await?) })
    }
}
