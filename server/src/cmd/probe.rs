//! `routing-server probe`: a gRPC health check for container healthchecks,
//! which must work in an image with no shell and no grpcurl.

use std::time::Duration;

use tonic::transport::Endpoint;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};

use crate::server::error::Error;

/// Asks `addr` (`host:port`) for the overall health (service `""`) and returns
/// the status it reports. Connecting and the call share one `timeout`.
pub async fn probe(addr: &str, timeout: Duration) -> Result<ServingStatus, Error> {
    let endpoint = Endpoint::from_shared(format!("http://{addr}"))
        .map_err(|_| format!("bad address {addr:?}: expected host:port"))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let check = async {
        let channel = endpoint.connect().await.map_err(|e| {
            // tonic's error says only "transport error"; its causes ("tcp
            // connect error: Connection refused") are what an operator needs.
            let mut causes: Vec<String> =
                std::iter::successors(std::error::Error::source(&e), |c| c.source())
                    .map(ToString::to_string)
                    .collect();
            causes.dedup(); // hyper repeats some causes verbatim
            format!("cannot connect to {addr}: {}", causes.join(": "))
        })?;
        let reply = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: String::new(),
            })
            .await
            .map_err(|s| format!("health check failed: {:?}: {}", s.code(), s.message()))?;
        Ok::<_, Error>(reply.into_inner().status())
    };
    tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}
