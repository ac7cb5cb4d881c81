//! Health and reflection: what grpcurl, ghz and container healthchecks use.

mod support;

use std::time::Duration;

use tokio_stream::StreamExt;
use tonic_health::pb::{
    HealthCheckRequest, health_check_response::ServingStatus, health_client::HealthClient,
};
use tonic_reflection::pb::{v1, v1alpha};

const ROUTING: &str = "shipping.routing.v1.RoutingService";
const HEALTH: &str = "grpc.health.v1.Health";
const REFLECTION_V1: &str = "grpc.reflection.v1.ServerReflection";
const REFLECTION_V1ALPHA: &str = "grpc.reflection.v1alpha.ServerReflection";

/// What every ListServices reply must hold, in either reflection version:
/// grpc-go lists both reflection services in both, and so does this server.
const LISTED: [&str; 4] = [ROUTING, HEALTH, REFLECTION_V1, REFLECTION_V1ALPHA];

fn assert_lists_everything(names: &[&str]) {
    for name in LISTED {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }
}

/// Given a running server, health reports SERVING for the whole server and
/// for the routing service, and `routing-server probe`'s function agrees.
#[tokio::test]
async fn health_is_serving() {
    let server = support::start().await;
    let mut health = HealthClient::new(support::channel(&server).await);

    for service in ["", ROUTING] {
        let reply = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .expect("check");
        assert_eq!(
            reply.into_inner().status(),
            ServingStatus::Serving,
            "{service:?}"
        );
    }
    let probed =
        routing_server::cmd::probe::probe(&server.addr().to_string(), Duration::from_secs(3)).await;
    assert_eq!(probed.expect("probe answers"), ServingStatus::Serving);
}

/// The probe fails fast, with an error rather than a hang, when nothing listens.
#[tokio::test]
async fn probe_fails_when_nothing_listens() {
    let server = support::start().await;
    let addr = server.addr().to_string();
    server.shutdown().await.expect("clean shutdown");

    let probed = routing_server::cmd::probe::probe(&addr, Duration::from_secs(2)).await;

    assert!(probed.is_err(), "{probed:?}");
}

/// Reflection v1 lists the routing and health services and both reflection
/// services, and can resolve the imported FieldMask and the v1alpha
/// service it lists, so grpcurl needs no .proto files.
#[tokio::test]
async fn reflection_v1_lists_services_and_resolves_imports() {
    use v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let server = support::start().await;
    let mut reflection = ServerReflectionClient::new(support::channel(&server).await);

    let ask = |message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    };
    let requests = tokio_stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "google.protobuf.FieldMask".into(),
        )),
        ask(MessageRequest::FileContainingSymbol(
            REFLECTION_V1ALPHA.into(),
        )),
    ]);
    let mut replies = reflection
        .server_reflection_info(requests)
        .await
        .expect("stream")
        .into_inner();

    let listed = replies
        .next()
        .await
        .expect("a reply")
        .expect("ok")
        .message_response;
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("{listed:?}")
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert_lists_everything(&names);

    for symbol in ["google.protobuf.FieldMask", REFLECTION_V1ALPHA] {
        let file = replies
            .next()
            .await
            .expect("a reply")
            .expect("ok")
            .message_response;
        assert!(
            matches!(&file, Some(MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty()),
            "{symbol}: {file:?}"
        );
    }
}

/// Reflection v1alpha, for older tools, lists the same services, both
/// reflection versions included, and resolves the v1 service it lists.
#[tokio::test]
async fn reflection_v1alpha_lists_services() {
    use v1alpha::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let server = support::start().await;
    let mut reflection = ServerReflectionClient::new(support::channel(&server).await);

    let ask = |message| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(message),
    };
    let requests = tokio_stream::iter([
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(REFLECTION_V1.into())),
    ]);
    let mut replies = reflection
        .server_reflection_info(requests)
        .await
        .expect("stream")
        .into_inner();

    let listed = replies
        .next()
        .await
        .expect("a reply")
        .expect("ok")
        .message_response;
    let Some(MessageResponse::ListServicesResponse(list)) = listed else {
        panic!("{listed:?}")
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert_lists_everything(&names);

    let file = replies
        .next()
        .await
        .expect("a reply")
        .expect("ok")
        .message_response;
    assert!(
        matches!(&file, Some(MessageResponse::FileDescriptorResponse(f)) if !f.file_descriptor_proto.is_empty()),
        "{file:?}"
    );
}

/// Given a service the server does not have, the call gets UNIMPLEMENTED,
/// as from tonic's own router (the server routes by service name itself).
#[tokio::test]
async fn unknown_services_are_unimplemented() {
    let server = support::start().await;
    let mut h2 = support::raw_h2(server.addr()).await;
    for path in ["/shipping.routing.v2.RoutingService/GetQuote", "/nothing"] {
        let request =
            support::grpc_request(server.addr(), path, &HealthCheckRequest::default(), false);
        let response = h2.send_request(request).await.expect("response");
        // A trailers-only response: the status is in the headers.
        let status = response.headers().get("grpc-status").map(|v| v.as_bytes());
        assert_eq!(status, Some(&b"12"[..]), "{path}");
    }
}
