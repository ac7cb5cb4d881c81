//! Per-method response compression.
//!
//! tonic compresses a response only when the client's `grpc-accept-encoding`
//! header lists gzip, and the switch on a generated server is per service,
//! not per method. So to keep small GetQuote answers uncompressed while
//! ListRoutes pages are gzipped, this layer deletes `grpc-accept-encoding`
//! from requests to the chosen methods before tonic sees them. The server
//! then answers those methods uncompressed, which every client accepts.

use std::task::{Context, Poll};

use tower::{Layer, Service};

const ACCEPT_ENCODING: &str = "grpc-accept-encoding";

/// Wraps a service so that the listed gRPC methods (`/package.Service/Method`
/// paths) are always answered uncompressed.
#[derive(Debug, Clone, Copy)]
pub struct IdentityResponsesLayer {
    paths: &'static [&'static str],
}

impl IdentityResponsesLayer {
    /// `paths` are full method paths, e.g. `/shipping.routing.v1.RoutingService/GetQuote`.
    pub const fn new(paths: &'static [&'static str]) -> Self {
        Self { paths }
    }
}

impl<S> Layer<S> for IdentityResponsesLayer {
    type Service = IdentityResponses<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdentityResponses {
            inner,
            paths: self.paths,
        }
    }
}

/// The service made by [`IdentityResponsesLayer`].
#[derive(Debug, Clone)]
pub struct IdentityResponses<S> {
    inner: S,
    paths: &'static [&'static str],
}

impl<S, B> Service<http::Request<B>> for IdentityResponses<S>
where
    S: Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        if self.paths.contains(&req.uri().path()) {
            req.headers_mut().remove(ACCEPT_ENCODING);
        }
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use tower::{ServiceExt, service_fn};

    use super::*;

    /// Given a request that accepts gzip, when it passes the layer, then the
    /// header survives only for methods that are not listed.
    #[tokio::test]
    async fn strips_accept_encoding_only_on_listed_paths() {
        let echo = service_fn(|req: http::Request<()>| async move {
            Ok::<_, Infallible>(req.headers().get(ACCEPT_ENCODING).cloned())
        });
        let svc = IdentityResponsesLayer::new(&["/pkg.Svc/Small"]).layer(echo);

        let request = |path: &str| {
            http::Request::builder()
                .uri(path)
                .header(ACCEPT_ENCODING, "gzip")
                .body(())
                .expect("valid request")
        };
        let small = svc
            .clone()
            .oneshot(request("/pkg.Svc/Small"))
            .await
            .expect("infallible");
        let large = svc
            .oneshot(request("/pkg.Svc/Large"))
            .await
            .expect("infallible");
        assert_eq!(small, None);
        assert_eq!(large.as_ref().map(|v| v.as_bytes()), Some(&b"gzip"[..]));
    }
}
