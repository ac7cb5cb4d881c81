//! Rust types, clients and servers generated from `contracts/proto/`.
//!
//! The generated modules mirror the proto packages:
//! - [`shipping::r#type::v1`]: `Money` and `CargoItem`;
//! - [`shipping::routing::v1`]: `RoutingService` and its messages.
//!
//! [`FILE_DESCRIPTOR_SET`] is the encoded descriptor set (with comments and
//! imports) that the server registers for gRPC reflection, so grpcurl and
//! other tools need no local copy of the protos.
//!
//! The names on the wire that generated code does not export live here
//! once, for the server, the clients and the harness: the HTTP/2 paths of
//! the two methods ([`GET_QUOTE`], [`LIST_ROUTES`]) and the response header
//! that names a replica ([`REPLICA_HEADER`]).

// Generated code is not ours to restyle.
#[allow(unused_qualifications, clippy::all)]
pub mod shipping {
    pub mod r#type {
        pub mod v1 {
            tonic::include_proto!("shipping.r#type.v1");
        }
    }
    pub mod routing {
        pub mod v1 {
            tonic::include_proto!("shipping.routing.v1");
        }
    }
}

pub use shipping::routing::v1 as routing;
pub use shipping::r#type::v1 as types;

/// Encoded `google.protobuf.FileDescriptorSet` for every file under `proto/`
/// and its imports, with source comments. Register it with tonic-reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/routing_descriptor.bin"));

/// The HTTP/2 `:path` of `RoutingService.GetQuote` (gRPC puts
/// `/package.Service/Method` there). For code that routes or builds
/// requests without tonic's generated stubs: the server's per-method
/// rules, the harness's raw clients.
pub const GET_QUOTE: &str = "/shipping.routing.v1.RoutingService/GetQuote";

/// The HTTP/2 `:path` of `RoutingService.ListRoutes`, as [`GET_QUOTE`].
pub const LIST_ROUTES: &str = "/shipping.routing.v1.RoutingService/ListRoutes";

/// The response header that names the replica that served a call
/// (`routing-server --replica NAME`). `balance-client` counts calls by it
/// to show how a load balancer spread them. Lower case: HTTP/2 sends
/// header names in lower case only.
pub const REPLICA_HEADER: &str = "routing-replica";

#[cfg(test)]
mod tests {
    use super::*;
    use routing::routing_service_server::SERVICE_NAME;

    /// The paths are spelled by hand (`concat!` takes literals only), so
    /// they are checked against the generated service name.
    #[test]
    fn method_paths_name_the_generated_service() {
        assert_eq!(GET_QUOTE, format!("/{SERVICE_NAME}/GetQuote"));
        assert_eq!(LIST_ROUTES, format!("/{SERVICE_NAME}/ListRoutes"));
    }
}
