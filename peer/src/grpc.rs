//! gRPC over HTTP/2 by hand: the method paths of the contract, the 5-byte
//! length prefix of each message, and the request headers, for the raw and
//! `h2` clients that cannot use tonic's generated stubs.

use bytes::{BufMut, Bytes, BytesMut};
use http::HeaderMap;
use prost::Message;
use routing_contracts::routing::ListRoutesRequest;

/// The contract's method paths, which every request built here carries.
pub use routing_contracts::{GET_QUOTE, LIST_ROUTES};

/// The content-type every gRPC request carries.
pub const CONTENT_TYPE: &str = "application/grpc";

/// The largest page: all 25 routes, about 5.0 MB encoded. It is the response
/// a stalled reader makes the server hold.
pub const FULL_PAGE: i32 = 25;

/// The 5-byte prefix of a gRPC message: compressed flag 0, then the length.
pub fn length_prefix(len: u32) -> [u8; 5] {
    let [a, b, c, d] = len.to_be_bytes();
    [0, a, b, c, d]
}

/// One uncompressed gRPC message: prefix and protobuf bytes.
pub fn framed(message: &impl Message) -> Bytes {
    let payload = message.encode_to_vec();
    let mut out = BytesMut::with_capacity(5 + payload.len());
    let len = u32::try_from(payload.len()).expect("the peer's requests are small");
    out.put_slice(&length_prefix(len));
    out.put_slice(&payload);
    out.freeze()
}

/// ListRoutes for the full 25-route page.
pub fn full_page_request() -> ListRoutesRequest {
    ListRoutesRequest {
        page_size: FULL_PAGE,
        ..Default::default()
    }
}

/// The sample GetQuote the clients send, framed.
pub fn framed_quote() -> Bytes {
    framed(&routing_clients::sample_quote_request())
}

/// The request headers of a gRPC call, in the order HTTP/2 needs
/// (pseudo-headers first), for [`crate::raw::RawConn::send_headers`].
pub fn request_headers<'a>(
    authority: &'a str,
    path: &'a str,
    content_type: &'a str,
) -> [(&'a str, &'a str); 6] {
    [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", authority),
        ("content-type", content_type),
        ("te", "trailers"),
    ]
}

/// The same request for the `h2` crate, which adds the pseudo-headers itself.
pub fn h2_request(
    authority: &str,
    path: &str,
    content_type: &str,
) -> Result<http::Request<()>, http::Error> {
    http::Request::post(format!("http://{authority}{path}"))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
}

/// The `grpc-status` in response headers or trailers, if any.
pub fn grpc_status(headers: &HeaderMap) -> Option<tonic::Code> {
    let value = headers.get("grpc-status")?.to_str().ok()?;
    value.parse::<i32>().ok().map(tonic::Code::from)
}

/// A status code as its upper-case gRPC name, e.g. `RESOURCE_EXHAUSTED`.
pub fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_is_a_zero_flag_then_a_big_endian_length() {
        assert_eq!(length_prefix(0x0102_0304), [0, 1, 2, 3, 4]);
        let message = full_page_request();
        let framed = framed(&message);
        assert_eq!(framed[0], 0);
        assert_eq!(
            u32::from_be_bytes([framed[1], framed[2], framed[3], framed[4]]) as usize,
            framed.len() - 5
        );
        assert_eq!(
            ListRoutesRequest::decode(&framed[5..]).ok(),
            Some(message),
            "the payload decodes back"
        );
    }

    #[test]
    fn grpc_status_is_read_from_the_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(grpc_status(&headers), None);
        headers.insert("grpc-status", http::HeaderValue::from_static("8"));
        assert_eq!(
            grpc_status(&headers).map(code_name),
            Some("RESOURCE_EXHAUSTED")
        );
    }
}
