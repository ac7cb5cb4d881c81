//! gRFC A17, client-side health checking: one `grpc.health.v1.Health/Watch`
//! stream per ready connection; an endpoint whose server says anything but
//! SERVING is not picked.
//!
//! - "The subchannel will not report READY until the first health response
//!   says SERVING": [`crate::subchannel`] keeps it `Connecting` until then.
//! - "If the server returns UNIMPLEMENTED, the client will disable health
//!   checking for that subchannel" and treat it as serving, with a log line.
//! - Any other end of the stream: not serving, and the watch starts again
//!   after [`RESTART`], for as long as the connection lasts.

use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};

use hyper::{body::Incoming, client::conn::http2::SendRequest};
use tokio::{sync::watch, task::JoinHandle};
use tonic::Code;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tower::Service;

use crate::{
    BoxError,
    connect::{Body, set_origin},
};

/// The wait before a health watch that ended is started again: 1 s, gRPC's
/// initial connection backoff.
pub const RESTART: Duration = Duration::from_secs(1);

/// A running watch: the last answer (`None` before the first), and its task,
/// ended when this is dropped.
#[derive(Debug)]
pub struct Watching {
    serving: watch::Receiver<Option<bool>>,
    task: JoinHandle<()>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `service` on one connection.
pub fn watch(
    sender: SendRequest<Body>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    service: String,
) -> Watching {
    let (tell, serving) = watch::channel(None);
    let one = OneConnection {
        sender,
        scheme,
        authority,
    };
    let task = tokio::spawn(async move {
        let mut client = HealthClient::new(one);
        loop {
            let request = HealthCheckRequest {
                service: service.clone(),
            };
            let ended = match client.watch(request).await {
                Ok(stream) => {
                    let mut stream = stream.into_inner();
                    loop {
                        match stream.message().await {
                            Ok(Some(answer)) => {
                                let up = answer.status() == ServingStatus::Serving;
                                tell.send_replace(Some(up));
                            }
                            Ok(None) => break "the stream ended".to_owned(),
                            Err(status) => break status.to_string(),
                        }
                    }
                }
                Err(status) if status.code() == Code::Unimplemented => {
                    tracing::warn!(
                        "the server has no grpc.health.v1 service: health checking off for this connection (A17)"
                    );
                    tell.send_replace(Some(true));
                    return;
                }
                Err(status) => status.to_string(),
            };
            tracing::info!("health watch ended ({ended}): not serving until it answers again");
            tell.send_replace(Some(false));
            tokio::time::sleep(RESTART).await;
        }
    });
    Watching { serving, task }
}

/// The next answer of the watch: `true` for SERVING. Never resolves when
/// there is no watch (health checking off) or it has stopped.
pub async fn next(watching: &mut Option<Watching>) -> bool {
    let Some(watching) = watching else {
        return std::future::pending().await;
    };
    loop {
        if watching.serving.changed().await.is_err() {
            return std::future::pending().await;
        }
        if let Some(serving) = *watching.serving.borrow_and_update() {
            return serving;
        }
    }
}

/// One connection as a tonic transport, for the health client.
#[derive(Debug, Clone)]
struct OneConnection {
    sender: SendRequest<Body>,
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
}

impl Service<http::Request<Body>> for OneConnection {
    type Response = http::Response<Incoming>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.sender.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: http::Request<Body>) -> Self::Future {
        if let Err(e) = set_origin(&mut request, &self.scheme, &self.authority) {
            return Box::pin(async move { Err(e) });
        }
        let response = self.sender.send_request(request);
        Box::pin(async move { Ok(response.await?) })
    }
}
