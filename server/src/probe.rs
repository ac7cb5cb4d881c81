//! `routing-server probe`: a gRPC health check for container healthchecks,
//! which must work in an image with no shell and no grpcurl.

use std::time::Duration;

use tonic::transport::Endpoint;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::server::Error;

/// Asks `addr` (`host:port`) for the overall health (service `""`) and returns
/// the status it reports. Connecting and the call share one `timeout`.
pub async fn probe(addr: &str, timeout: Duration) -> Result<ServingStatus, Error> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let check = async {
        let mut client = HealthClient::new(endpoint.connect().await?);
        let reply = client
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await?;
        Ok::<_, Error>(reply.into_inner().status())
    };
    tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}
