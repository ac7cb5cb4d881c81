//! The `RoutingService` implementation: a thin adapter from gRPC to the pure
//! logic in [`crate::quote`] and [`crate::catalog`].

use std::sync::Arc;

use routing_contracts::routing::routing_service_server::RoutingService;
use routing_contracts::routing::{
    GetQuoteRequest, GetQuoteResponse, ListRoutesRequest, ListRoutesResponse,
};
use tonic::{Request, Response, Status};

use crate::{catalog::Catalog, quote};

/// Serves quotes and the shared, immutable catalog.
#[derive(Debug, Clone, Default)]
pub struct RoutingApi {
    /// Built once at start-up and shared read-only, so no lock is needed.
    catalog: Arc<Catalog>,
}

impl RoutingApi {
    pub fn new(catalog: Catalog) -> Self {
        Self {
            catalog: Arc::new(catalog),
        }
    }
}

#[tonic::async_trait]
impl RoutingService for RoutingApi {
    async fn get_quote(
        &self,
        request: Request<GetQuoteRequest>,
    ) -> Result<Response<GetQuoteResponse>, Status> {
        let quote = quote::quote(request.get_ref())?;
        tracing::debug!(route_id = %quote.route_id, "quoted");
        Ok(Response::new(GetQuoteResponse { quote: Some(quote) }))
    }

    async fn list_routes(
        &self,
        request: Request<ListRoutesRequest>,
    ) -> Result<Response<ListRoutesResponse>, Status> {
        let page = self.catalog.list(request.get_ref())?;
        tracing::debug!(routes = page.routes.len(), next = %page.next_page_token, "listed");
        Ok(Response::new(page))
    }
}
