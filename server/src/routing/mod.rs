//! The chapter's service: `GetQuote` ([`quote`]) and `ListRoutes` over the
//! padded catalog ([`catalog`], encoded by [`page_codec`], or sent from the
//! catalog itself by [`page_body`] when uncompressed), behind the gRPC
//! adapter ([`service`]); [`replica`] names the replica that answers;
//! [`faults`] makes GetQuote slow or failing on purpose (lever 6).
//! `server/examples/tonic_server.rs` serves the same logic with tonic's own
//! `Server`.

pub mod catalog;
pub mod faults;
pub mod page_body;
pub mod page_codec;
pub mod quote;
pub mod replica;
pub mod service;
