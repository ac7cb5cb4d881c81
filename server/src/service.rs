//! The `RoutingService` implementation: a thin adapter from gRPC to the pure
//! logic in [`crate::quote`] and [`crate::catalog`].

use std::sync::Arc;

use prost::Message;
use routing_contracts::routing::routing_service_server::RoutingService;
use routing_contracts::routing::{
    GetQuoteRequest, GetQuoteResponse, ListRoutesRequest, ListRoutesResponse,
};
use tonic::{Request, Response, Status};

use crate::{
    budget::ByteBudget,
    catalog::Catalog,
    edge::{HeldResponse, response_budget_full},
    quote,
};

/// Serves quotes and the shared, immutable catalog.
#[derive(Debug, Clone)]
pub struct RoutingApi {
    /// Built once at start-up and shared read-only, so no lock is needed.
    catalog: Arc<Catalog>,
    /// Memory for ListRoutes pages being sent, shared by every connection.
    response_budget: Arc<ByteBudget>,
}

impl RoutingApi {
    pub fn new(catalog: Catalog, response_budget: Arc<ByteBudget>) -> Self {
        Self {
            catalog: Arc::new(catalog),
            response_budget,
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
        // A page stays in memory until the client has read it: reserve its
        // size, or refuse at once (see knobs::RESPONSE_BUDGET_BYTES).
        let bytes = page.encoded_len();
        let reservation = self
            .response_budget
            .try_reserve(bytes)
            .ok_or_else(|| response_budget_full(&self.response_budget, bytes))?;
        tracing::debug!(routes = page.routes.len(), next = %page.next_page_token, bytes, "listed");
        let mut response = Response::new(page);
        response
            .extensions_mut()
            .insert(HeldResponse(Arc::new(reservation)));
        Ok(response)
    }
}
