//! [`BalancedChannel`]: what a tonic client is built on, as it would be on
//! a `Channel`. Each call gets the name's scheme and authority, then waits
//! in the queue for a pick, unless every endpoint is failing and it did
//! not ask to wait for ready; a call with a deadline (`grpc-timeout`) ends
//! at it, in the queue or on the wire ([`crate::deadline`]).

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use hyper::body::Incoming;
use tokio::sync::{mpsc, oneshot, watch};
use tower::Service;

use crate::{
    BoxError,
    connect::{Body, set_origin},
    deadline,
    queue::{Call, all_failing},
    state::Aggregate,
    stats::{Counters, bump},
};

/// Put this in a call's extensions to have it wait for an endpoint even
/// while every endpoint is failing (gRPC's wait-for-ready). Bound such a
/// call with a deadline: it waits until an endpoint is ready.
///
/// ```no_run
/// # fn demo(mut request: tonic::Request<()>) {
/// request.extensions_mut().insert(ready_balance::WaitForReady);
/// # }
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct WaitForReady;

/// The balanced channel: clone it freely, as a tonic `Channel`.
#[derive(Debug, Clone)]
pub struct BalancedChannel {
    pub(crate) calls: mpsc::Sender<Call>,
    pub(crate) aggregate: watch::Receiver<Aggregate>,
    pub(crate) scheme: http::uri::Scheme,
    pub(crate) authority: http::uri::Authority,
    pub(crate) counters: Arc<Counters>,
}

impl Service<http::Request<Body>> for BalancedChannel {
    type Response = http::Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    /// Always ready: the queue decides, per call.
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        let fail =
            |status: tonic::Status| -> Self::Future { Box::pin(async move { Err(status.into()) }) };
        if let Err(e) = set_origin(&mut request, &self.scheme, &self.authority) {
            return fail(tonic::Status::internal(format!("bad request URI: {e}")));
        }
        let wait_for_ready = request.extensions().get::<WaitForReady>().is_some();
        let limit = deadline::of(&request);
        if !wait_for_ready && *self.aggregate.borrow() == Aggregate::Failing {
            bump(&self.counters.failed_fast);
            return fail(all_failing());
        }
        let (reply, picked) = oneshot::channel();
        let call = Call {
            request,
            wait_for_ready,
            reply,
        };
        match self.calls.try_send(call) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                bump(&self.counters.queue_full);
                return fail(tonic::Status::unavailable(
                    "the balancer's queue of waiting calls is full (max_queued_calls)",
                ));
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                return fail(tonic::Status::unavailable("the balancer has stopped"));
            }
        }
        let call = async move {
            match picked.await {
                Ok(Ok(sent)) => sent.await,
                Ok(Err(status)) => Err(status.into()),
                Err(_) => Err(tonic::Status::unavailable("the balancer has stopped").into()),
            }
        };
        Box::pin(async move {
            match limit {
                None => call.await,
                Some(limit) => tokio::time::timeout(limit, call).await.unwrap_or_else(|_| {
                    Err(tonic::Status::deadline_exceeded(format!(
                        "the call's deadline ({limit:?}, grpc-timeout) passed in the client"
                    ))
                    .into())
                }),
            }
        })
    }
}
