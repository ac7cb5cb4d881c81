//! The `RoutingService` implementation: a thin adapter from gRPC to the pure
//! logic in [`crate::routing::quote`] and [`crate::routing::catalog`].
//!
//! [`RoutingServer`] is the service the server mounts. GetQuote goes to the
//! generated server as usual, and its ~100-byte answers are never
//! compressed: gzip would cost CPU and can make them larger. ListRoutes goes
//! to [`RoutingApi::list_page`] through [`PageCodec`], so a page is encoded
//! straight from the shared catalog instead of being copied into a
//! `ListRoutesResponse` first; it is gzipped for clients that accept gzip,
//! sent from the catalog itself when it goes out uncompressed
//! ([`crate::routing::page_body`]), and it holds its share of the response
//! budget until it is sent.

use std::{
    convert::Infallible,
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Duration,
};

use routing_contracts::routing::routing_service_server::{
    RoutingService, RoutingServiceServer, SERVICE_NAME,
};
use routing_contracts::routing::{
    GetQuoteRequest, GetQuoteResponse, ListRoutesRequest, ListRoutesResponse,
};
use tonic::codec::{CompressionEncoding, EnabledCompressionEncodings};
use tonic::server::{Grpc, NamedService};
use tonic::{Request, Response, Status, body::Body};
use tower::Service;

use crate::call::budget::ByteBudget;
use crate::call::info::ConnectionInfo;
use crate::call::response_hold::{
    HeldResponse, hold_until_sent, response_budget_full, response_budget_refused,
};
use crate::routing::catalog::{Catalog, Page};
use crate::routing::faults::Faults;
use crate::routing::page_body::{PageToSend, share_identity_page};
use crate::routing::page_codec::PageCodec;
use crate::routing::quote;

/// Serves quotes and the shared, immutable catalog.
#[derive(Debug, Clone)]
pub struct RoutingApi {
    /// Built once at start-up and shared read-only, so no lock is needed.
    catalog: Arc<Catalog>,
    /// Memory for ListRoutes pages being sent, shared by every connection.
    response_budget: Arc<ByteBudget>,
    /// A page not sent within this closes its connection (knobs::SEND_DEADLINE).
    send_deadline: Duration,
    /// GetQuote's injected faults, off unless `--fault-*` asks (lever 6).
    faults: Faults,
}

impl RoutingApi {
    pub fn new(
        catalog: Catalog,
        response_budget: Arc<ByteBudget>,
        send_deadline: Duration,
    ) -> Self {
        Self {
            catalog: Arc::new(catalog),
            response_budget,
            send_deadline,
            faults: Faults::default(),
        }
    }

    /// The same API with GetQuote playing `faults` (see
    /// [`crate::routing::faults`]).
    #[must_use]
    pub fn with_faults(mut self, faults: Faults) -> Self {
        self.faults = faults;
        self
    }

    /// The catalog's carriers, which every identity page is sent from
    /// (see [`Catalog::carriers`]).
    pub fn carriers(&self) -> Vec<bytes::Bytes> {
        self.catalog.carriers()
    }

    /// The response budget, which every clone shares (for the metrics).
    pub fn response_budget(&self) -> Arc<ByteBudget> {
        Arc::clone(&self.response_budget)
    }

    /// ListRoutes as served: the page the request asks for, which shares the
    /// catalog. Nothing is copied or encoded yet, but [`Page::encoded_len`]
    /// already tells how many bytes the answer will take.
    pub async fn list_page(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<Page>, Status> {
        let page = self.catalog.page(request.get_ref())?;
        // A page stays in memory until the client has read it: reserve its
        // size, or refuse at once (see knobs::RESPONSE_BUDGET_BYTES). An
        // uncompressed page shares the catalog and holds far less, but is
        // charged its size all the same, so the budget bounds the pages in
        // flight, and what a client that stops reading can hold, whatever
        // the encoding.
        // A call that knows its connection is held to that connection's
        // share, and may make a stalled connection give up its room.
        let bytes = page.encoded_len();
        let budget = &self.response_budget;
        let reservation = match request.extensions().get::<ConnectionInfo>() {
            Some(connection) => budget
                .reserve_for(&connection.responses, bytes)
                .await
                .map_err(|refusal| response_budget_refused(budget, refusal, bytes))?,
            None => budget
                .try_reserve(bytes)
                .ok_or_else(|| response_budget_full(budget, bytes))?,
        };
        tracing::debug!(
            routes = page.route_count(),
            bytes,
            next = %page.next_page_token(),
            "listed"
        );
        let mut response = Response::new(page.clone());
        response
            .extensions_mut()
            .insert(HeldResponse(Arc::new(reservation)));
        response.extensions_mut().insert(PageToSend(page));
        Ok(response)
    }
}

#[tonic::async_trait]
impl RoutingService for RoutingApi {
    async fn get_quote(
        &self,
        request: Request<GetQuoteRequest>,
    ) -> Result<Response<GetQuoteResponse>, Status> {
        // Off by default; with --fault-* on, a wait or an UNAVAILABLE.
        self.faults.play().await?;
        let quote = quote::quote(request.get_ref())?;
        tracing::debug!(route_id = %quote.route_id, "quoted");
        Ok(Response::new(GetQuoteResponse { quote: Some(quote) }))
    }

    /// Reached only through a bare `RoutingServiceServer`: [`RoutingServer`]
    /// sends ListRoutes to [`RoutingApi::list_page`]. Same page, as an owned
    /// (copied) message.
    async fn list_routes(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        Ok(self.list_page(request).await?.map(|page| page.to_message()))
    }
}

/// `shipping.routing.v1.RoutingService` as the server mounts it: the
/// generated server for GetQuote, and ListRoutes through [`PageCodec`] with
/// the same size caps. Only ListRoutes compresses its answers.
#[derive(Debug, Clone)]
pub struct RoutingServer {
    generated: RoutingServiceServer<RoutingApi>,
    api: Arc<RoutingApi>,
    accept_compression: EnabledCompressionEncodings,
    /// For ListRoutes only: GetQuote answers are never compressed.
    send_compression: EnabledCompressionEncodings,
    max_decoding_message_size: Option<usize>,
    max_encoding_message_size: Option<usize>,
}

impl RoutingServer {
    pub fn new(api: RoutingApi) -> Self {
        let api = Arc::new(api);
        Self {
            generated: RoutingServiceServer::from_arc(Arc::clone(&api)),
            api,
            accept_compression: EnabledCompressionEncodings::default(),
            send_compression: EnabledCompressionEncodings::default(),
            max_decoding_message_size: None,
            max_encoding_message_size: None,
        }
    }

    /// Decompress requests with `encoding` (both methods).
    #[must_use]
    pub fn accept_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.generated = self.generated.accept_compressed(encoding);
        self.accept_compression.enable(encoding);
        self
    }

    /// Compress ListRoutes pages with `encoding` when the client accepts it.
    /// GetQuote answers stay uncompressed whatever the client accepts.
    #[must_use]
    pub fn send_compressed(mut self, encoding: CompressionEncoding) -> Self {
        self.send_compression.enable(encoding);
        self
    }

    /// Largest request message decoded, in bytes (both methods).
    #[must_use]
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.generated = self.generated.max_decoding_message_size(limit);
        self.max_decoding_message_size = Some(limit);
        self
    }

    /// Largest response message encoded, in bytes (both methods).
    #[must_use]
    pub fn max_encoding_message_size(mut self, limit: usize) -> Self {
        self.generated = self.generated.max_encoding_message_size(limit);
        self.max_encoding_message_size = Some(limit);
        self
    }
}

/// What the server's router awaits for each call.
type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send + 'static>>;

impl Service<http::Request<Body>> for RoutingServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        if request.uri().path() != routing_contracts::LIST_ROUTES {
            return self.generated.call(request);
        }
        // What the generated server does for each method, with PageCodec
        // in place of prost's codec for the response.
        let mut grpc = Grpc::new(PageCodec)
            .apply_compression_config(self.accept_compression, self.send_compression)
            .apply_max_message_size_config(
                self.max_decoding_message_size,
                self.max_encoding_message_size,
            );
        let connection = request.extensions().get::<ConnectionInfo>().cloned();
        let send_deadline = self.api.send_deadline;
        let max_encoding = self.max_encoding_message_size;
        let api = Arc::clone(&self.api);
        let list_page = tower::service_fn(move |request| {
            let api = Arc::clone(&api);
            async move { api.list_page(request).await }
        });
        Box::pin(async move {
            let mut response = grpc.unary(list_page, request).await;
            // An uncompressed page goes out of the catalog itself, uncopied
            // (see crate::routing::page_body); tonic's body is dropped unread.
            if let Some(PageToSend(page)) = response.extensions_mut().remove() {
                share_identity_page(&mut response, &page, max_encoding);
            }
            if let Some(HeldResponse(reservation)) = response.extensions_mut().remove() {
                response = hold_until_sent(response, reservation, connection, send_deadline);
            }
            Ok(response)
        })
    }
}

impl NamedService for RoutingServer {
    const NAME: &'static str = SERVICE_NAME;
}
