//! A call that fails for want of a connection asks for an early re-resolve.
//!
//! grpc-go re-resolves when a connection fails. tonic's balancer does not
//! say when one does, but each call does: a transport error (the endpoint
//! refused, timed out or reset), or a trailers-only answer with
//! `grpc-status: 14` (UNAVAILABLE, e.g. from a draining server), is the
//! sign that the set may be stale.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};

use tokio::sync::Notify;
use tower::Service;

/// gRPC's UNAVAILABLE as it appears in a `grpc-status` header.
const UNAVAILABLE: &[u8] = b"14";

/// A channel that wakes the resolver when a call fails to reach a server.
/// Clone it as freely as a `Channel`.
#[derive(Debug, Clone)]
pub struct ReResolveOnFailure<S> {
    inner: S,
    wake: Arc<Notify>,
}

impl<S> ReResolveOnFailure<S> {
    pub(super) fn new(inner: S, wake: Arc<Notify>) -> Self {
        Self { inner, wake }
    }
}

impl<S, B, RB> Service<http::Request<B>> for ReResolveOnFailure<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let call = self.inner.call(request);
        let wake = Arc::clone(&self.wake);
        Box::pin(async move {
            let answer = call.await;
            let unreachable = match &answer {
                Err(_) => true,
                Ok(response) => response
                    .headers()
                    .get("grpc-status")
                    .is_some_and(|code| code.as_bytes() == UNAVAILABLE),
            };
            if unreachable {
                // One stored permit however many calls fail: the resolver
                // coalesces them and keeps its minimum gap.
                wake.notify_one();
            }
            answer
        })
    }
}
