//! Which deadline reaches the wire: a loopback HTTP/2 server inside the
//! client that records the headers of the one call it is sent.
//!
//! tonic has two ways to give a call a deadline, `Endpoint::timeout` and
//! `Request::set_timeout`, and only a `grpc-timeout` header tells the
//! server about one. Whether each sends it is read here, from the request
//! as it arrives, not from tonic's docs. The probe answers the call with
//! `UNIMPLEMENTED` at once (Trailers-Only): only the request matters.

use std::time::Duration;

use tokio::{net::TcpListener, sync::oneshot};
use tonic::transport::Endpoint;

use crate::{Error, baseline::sample_quote_request};
use routing_contracts::routing::routing_service_client::RoutingServiceClient;

/// The whole probe (connect, call, answer) must end within this: 5 s, on
/// loopback inside this process, where it takes about a millisecond.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// Sends one GetQuote to a loopback probe through `endpoint` (made by
/// `endpoint_at` for the probe's URL), with `request_timeout` set on the
/// request if given, and returns the `grpc-timeout` header the probe
/// received: `None` when the request carried none.
pub async fn grpc_timeout_sent(
    endpoint_at: impl FnOnce(String) -> Result<Endpoint, Error>,
    request_timeout: Option<Duration>,
) -> Result<Option<String>, Error> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (seen_tx, seen_rx) = oneshot::channel();
    let server = tokio::spawn(answer_one_call(listener, seen_tx));
    let probe = async {
        let channel = endpoint_at(format!("http://{addr}"))?.connect().await?;
        let mut request = tonic::Request::new(sample_quote_request());
        if let Some(timeout) = request_timeout {
            request.set_timeout(timeout);
        }
        // The probe's answer is UNIMPLEMENTED by design: only its headers count.
        let _ = RoutingServiceClient::new(channel).get_quote(request).await;
        seen_rx
            .await
            .map_err(|_| -> Error { format!("the probe at {addr} saw no call").into() })
    };
    let seen = tokio::time::timeout(PROBE_TIMEOUT, probe)
        .await
        .map_err(|_| format!("the header probe at {addr} took over {PROBE_TIMEOUT:?}"))??;
    server.abort();
    Ok(seen)
}

/// Accepts one connection and one call on it, reports the call's
/// `grpc-timeout` (or its absence), and answers `UNIMPLEMENTED`.
async fn answer_one_call(listener: TcpListener, seen: oneshot::Sender<Option<String>>) {
    let Ok((tcp, _)) = listener.accept().await else {
        return;
    };
    let Ok(mut connection) = h2::server::handshake(tcp).await else {
        return;
    };
    let Some(Ok((request, mut respond))) = connection.accept().await else {
        return;
    };
    let timeout = request
        .headers()
        .get("grpc-timeout")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    let head = http::Response::builder()
        .header("content-type", "application/grpc")
        .header("grpc-status", "12")
        .header("grpc-message", "header probe")
        .body(())
        .expect("a static response head is valid");
    let _ = respond.send_response(head, true);
    let _ = seen.send(timeout);
    // Drive the connection until the client closes it, so the answer goes out.
    while let Some(Ok(_)) = connection.accept().await {}
}
