//! The calls waiting for a pick, and the one task that picks for them.
//!
//! tower's p2c balancer is one `Service`, polled by one task at a time;
//! every clone of the channel sends its calls here, as tower's `Buffer`
//! would. What `Buffer` lacks is grpc-go's rule for a channel with no
//! ready endpoint, which needs to see each waiting call:
//!
//! - "If the channel is CONNECTING, RPCs wait" for an endpoint to turn
//!   ready (the picker stays pending; nothing is sent anywhere meanwhile);
//! - "If the channel is in TRANSIENT_FAILURE, fail-fast RPCs fail with
//!   UNAVAILABLE, and wait-for-ready RPCs keep waiting" (gRPC's
//!   wait-for-ready semantics, doc/wait-for-ready.md). A call asks to wait
//!   by carrying [`crate::WaitForReady`] in its extensions.

use std::{collections::VecDeque, future::Future, net::SocketAddr, pin::Pin, sync::Arc};

use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, watch};
use tokio_stream::wrappers::ReceiverStream;
use tower::{Service, balance::p2c::Balance};

use crate::{
    BoxError,
    connect::Body,
    discovery::Changes,
    load::Measured,
    state::Aggregate,
    stats::{Counters, bump},
};

/// A call's response, once it has been handed to an endpoint.
pub type Sent = Pin<Box<dyn Future<Output = Result<http::Response<Incoming>, BoxError>> + Send>>;

/// A call waiting for a pick.
pub struct Call {
    pub request: http::Request<Body>,
    pub wait_for_ready: bool,
    pub reply: oneshot::Sender<Result<Sent, tonic::Status>>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Call")
            .field("path", &self.request.uri().path())
            .field("wait_for_ready", &self.wait_for_ready)
            .finish()
    }
}

/// The picker over the discovered endpoints.
pub type P2c = Balance<
    ReceiverStream<Result<tower::discover::Change<SocketAddr, Measured>, std::convert::Infallible>>,
    http::Request<Body>,
>;

/// The UNAVAILABLE of a call that found every endpoint failing.
pub fn all_failing() -> tonic::Status {
    tonic::Status::unavailable("no endpoint is reachable: every one is failing or not serving")
}

/// Picks for each waiting call in turn, until every sender is gone.
pub async fn run(
    changes: Changes,
    mut calls: mpsc::Receiver<Call>,
    mut aggregate: watch::Receiver<Aggregate>,
    counters: Arc<Counters>,
    max_waiting: usize,
) {
    let mut picker: P2c = Balance::new(ReceiverStream::new(changes));
    let mut waiting: VecDeque<Call> = VecDeque::new();
    // Every channel clone is gone: finish the calls already waiting.
    let mut closed = false;
    loop {
        // A caller that gave up (its deadline, a cancel) is not picked for.
        waiting.retain(|call| !call.reply.is_closed());
        if *aggregate.borrow_and_update() == Aggregate::Failing {
            waiting.retain_mut(|call| {
                if call.wait_for_ready {
                    return true;
                }
                bump(&counters.failed_fast);
                let reply = std::mem::replace(&mut call.reply, oneshot::channel().0);
                let _ = reply.send(Err(all_failing()));
                false
            });
        }
        let room = waiting.len() < max_waiting;
        if waiting.is_empty() {
            if closed {
                return;
            }
            tokio::select! {
                call = calls.recv() => match call {
                    Some(call) => waiting.push_back(call),
                    None => return,
                },
                changed = aggregate.changed() => if changed.is_err() { return },
            }
            continue;
        }
        tokio::select! {
            biased;
            ready = std::future::poll_fn(|cx| picker.poll_ready(cx)) => {
                // The first call whose caller still waits: one that gave up
                // while the picker was not ready is sent nowhere.
                let Some(call) = std::iter::from_fn(|| waiting.pop_front())
                    .find(|call| !call.reply.is_closed())
                else {
                    continue;
                };
                match ready {
                    Ok(()) => {
                        let sent: Sent = Box::pin(picker.call(call.request));
                        let _ = call.reply.send(Ok(sent));
                    }
                    Err(e) => {
                        let _ = call.reply.send(Err(tonic::Status::unavailable(format!("the picker failed: {e}"))));
                    }
                }
            }
            call = calls.recv(), if room && !closed => match call {
                Some(call) => waiting.push_back(call),
                None => closed = true,
            },
            // The balancer has stopped: the waiting calls' callers hear so.
            changed = aggregate.changed() => if changed.is_err() { return },
        }
    }
}
