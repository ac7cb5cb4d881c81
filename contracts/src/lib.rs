//! Rust types, clients and servers generated from `contracts/proto/`.
//!
//! The generated modules mirror the proto packages:
//! - [`shipping::r#type::v1`]: `Money` and `CargoItem`;
//! - [`shipping::routing::v1`]: `RoutingService` and its messages.
//!
//! [`FILE_DESCRIPTOR_SET`] is the encoded descriptor set (with comments and
//! imports) that the server registers for gRPC reflection, so grpcurl and
//! other tools need no local copy of the protos.

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
