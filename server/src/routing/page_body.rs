//! How an identity ListRoutes page goes on the wire without its long strings
//! being copied.
//!
//! [`crate::routing::page_codec`] writes a page into tonic's send buffer:
//! one copy of every byte. gzip needs that pass anyway (it reads the page to
//! compress it), but a page sent as it is need not be copied at all: the
//! catalog is immutable and shared, so the response can point into it.
//! [`PageBody`] is that response body:
//! - the gRPC message prefix and the short fields (ids, ports, prices, every
//!   key and length) copied into one small buffer, about 2 kB for a full page;
//! - each leg's carrier (about 100 kB, 99.9 % of a full page) as [`Bytes`]
//!   that point into the catalog.
//!
//! h2 cuts those into DATA frames as it does any body. The connection's
//! write buffer ([`crate::connection::coalesce`]) finds a frame's payload in
//! the catalog's memory ([`crate::connection::shared_memory`]) and keeps a
//! reference instead of a copy. So most of a carrier's bytes are copied
//! once, by the kernel into the socket. In user space only short runs are
//! copied: the first bytes of each frame, which h2 keeps beside the frame's
//! header (up to 256), and each carrier's last frame, which is under
//! [`crate::knobs::COALESCE_MIN_WRITE`]. Sharing the carriers with tonic's
//! buffer took a full 5 MB page's server CPU from 3.60–4.35 ms to
//! 2.75–3.05 ms, and sharing them with the write buffer took about another
//! 10 % off (see `docs/costs.md`, "The identity page's copy" and "The write
//! buffer's copy"). The price is more chunks per page in h2's frame queue,
//! which the vendored h2 gives back once empty (see
//! [`crate::knobs::SEND_BUFFER_PER_STREAM`]).
//!
//! tonic still does everything else: it decodes the request, calls the
//! handler, picks the encoding and sets the headers. [`share_identity_page`]
//! only swaps the body of a successful response that tonic would send
//! uncompressed and within the size cap. Every other answer, gzip and errors
//! included, is tonic's own.

use std::{
    collections::VecDeque,
    convert::Infallible,
    pin::Pin,
    task::{Context, Poll},
};

use bytes::{BufMut, Bytes, BytesMut};
use http_body::{Frame, SizeHint};
use tonic::{Status, body::Body};

use crate::knobs::PAGE_SHARED_TEXT_MIN;
use crate::routing::catalog::Page;
use crate::routing::page_codec::Field;

/// The header tonic sets when it compresses a response. Its absence means
/// the page goes out as it is (identity).
const ENCODING_HEADER: &str = "grpc-encoding";

/// The page a successful ListRoutes response carries, put in the response's
/// extensions by the handler for [`share_identity_page`].
#[derive(Debug, Clone)]
pub struct PageToSend(pub Page);

/// Gives `response` a [`PageBody`] for `page` when tonic would send the page
/// uncompressed (no `grpc-encoding` header) and within `max_encoding`, the
/// server's encode cap. Otherwise leaves tonic's body, which encodes the page
/// itself and refuses one over the cap with tonic's own status.
pub fn share_identity_page(
    response: &mut http::Response<Body>,
    page: &Page,
    max_encoding: Option<usize>,
) {
    if response.headers().contains_key(ENCODING_HEADER) {
        return;
    }
    if let Some(body) = PageBody::new(page, max_encoding.unwrap_or(usize::MAX)) {
        *response.body_mut() = Body::new(body);
    }
}

/// A ListRoutes answer as a list of chunks, then the `grpc-status: 0`
/// trailers: one gRPC message, uncompressed.
#[derive(Debug)]
pub struct PageBody {
    chunks: VecDeque<Bytes>,
    trailers: Option<http::HeaderMap>,
}

impl PageBody {
    /// The page's message, prefix included, from one walk of its fields.
    /// `None` if the page encodes to more than `max_len` bytes, or more than
    /// one gRPC message can say (4 GiB, which the catalog never reaches):
    /// the caller then leaves the answer to tonic.
    pub fn new(page: &Page, max_len: usize) -> Option<Self> {
        let fields = page.fields();
        let len: usize = fields.iter().map(Field::encoded_len).sum();
        if len > max_len {
            return None;
        }
        let len = u32::try_from(len).ok()?;
        let mut trailers = http::HeaderMap::new();
        Status::ok("").add_header(&mut trailers).ok()?;
        let mut rope = Rope::default();
        rope.small.put_u8(0); // not compressed
        rope.small.put_u32(len);
        for field in &fields {
            rope.put(field, page);
        }
        Some(Self {
            chunks: rope.finish(),
            trailers: Some(trailers),
        })
    }

    /// The chunks still to send, in order.
    pub fn chunks(&self) -> impl Iterator<Item = &Bytes> {
        self.chunks.iter()
    }
}

impl http_body::Body for PageBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let this = self.get_mut();
        let frame = match this.chunks.pop_front() {
            Some(chunk) => Some(Frame::data(chunk)),
            None => this.trailers.take().map(Frame::trailers),
        };
        Poll::Ready(frame.map(Ok))
    }

    fn is_end_stream(&self) -> bool {
        self.chunks.is_empty() && self.trailers.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.chunks.iter().map(|chunk| chunk.len() as u64).sum())
    }
}

/// A message being laid out as chunks: short fields gathered in `small`,
/// long ones shared with the catalog.
struct Rope {
    chunks: VecDeque<Bytes>,
    /// One allocation for every short field: each chunk split off it shares
    /// the buffer, and the rest of its room is used by the next.
    small: BytesMut,
}

impl Default for Rope {
    fn default() -> Self {
        Self {
            chunks: VecDeque::new(),
            // A full page's short fields take about 2 kB.
            small: BytesMut::with_capacity(4 * 1024),
        }
    }
}

impl Rope {
    /// Lays out one field: a long carrier is shared, a message is laid out
    /// field by field, anything else is copied into `small`.
    fn put(&mut self, field: &Field<'_>, page: &Page) {
        match field {
            Field::Carrier(text, at) if text.len() >= PAGE_SHARED_TEXT_MIN => {
                field.encode_head(&mut self.small);
                let shared = page.shared_carrier(*at);
                debug_assert_eq!(shared.len(), text.len(), "the carrier the field names");
                self.push(shared);
            }
            Field::Message(_, fields) => {
                field.encode_head(&mut self.small);
                for field in fields {
                    self.put(field, page);
                }
            }
            _ => field.encode(&mut self.small),
        }
    }

    /// Ends the chunk of short fields so far, then adds `shared`.
    fn push(&mut self, shared: Bytes) {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
        self.chunks.push_back(shared);
    }

    fn finish(mut self) -> VecDeque<Bytes> {
        if !self.small.is_empty() {
            self.chunks.push_back(self.small.split().freeze());
        }
        self.chunks
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use http_body::Body as _;
    use http_body_util::BodyExt;
    use prost_types::FieldMask;
    use routing_contracts::routing::ListRoutesRequest;

    use super::*;
    use crate::connection::shared_memory::SharedMemory;
    use crate::routing::catalog::{Catalog, Filler};

    fn page(catalog: &Arc<Catalog>, page_size: i32, token: &str, mask: &[&str]) -> Page {
        let request = ListRoutesRequest {
            page_size,
            page_token: token.into(),
            field_mask: (!mask.is_empty()).then(|| FieldMask {
                paths: mask.iter().map(|p| (*p).into()).collect(),
            }),
        };
        catalog.page(&request).expect("a valid request")
    }

    /// What tonic would send for `page`: the prefix, then the page encoded
    /// into one buffer.
    fn framed(page: &Page) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&(page.encoded_len() as u32).to_be_bytes());
        page.encode(&mut bytes);
        bytes
    }

    fn joined(body: &PageBody) -> Vec<u8> {
        body.chunks()
            .flat_map(|chunk| chunk.iter().copied())
            .collect()
    }

    /// Given pages of every shape (full, masked, the last, both fillers),
    /// when each is laid out as chunks, then the chunks joined are exactly
    /// the message tonic would have sent: prefix and prost's encoding.
    #[test]
    fn chunks_join_into_the_framed_message() {
        for filler in [Filler::Repeated, Filler::Random] {
            let catalog = Arc::new(Catalog::with_filler(filler));
            let masks: [&[&str]; 5] = [
                &[],
                &["routes.id", "routes.price"],
                &["routes.legs.carrier"],
                &["routes.legs.origin", "routes.price.amount"],
                &["routes.legs"],
            ];
            for mask in masks {
                for (size, token) in [(25, ""), (3, "22"), (0, "")] {
                    let page = page(&catalog, size, token, mask);
                    let body = PageBody::new(&page, usize::MAX).expect("a page under 4 GiB");
                    assert_eq!(
                        joined(&body),
                        framed(&page),
                        "{filler:?} {mask:?} {size} {token:?}"
                    );
                }
            }
        }
    }

    /// Given the full catalog as one page, when it is laid out, then every
    /// carrier is a chunk pointing at the catalog's own bytes (no copy), and
    /// all the copied chunks together are under 4 KiB of the 5 MB.
    #[test]
    fn carriers_point_into_the_catalog() {
        let catalog = Arc::new(Catalog::new());
        let page = page(&catalog, 25, "", &[]);
        let body = PageBody::new(&page, usize::MAX).expect("a page under 4 GiB");
        let carriers: Vec<*const u8> = catalog
            .routes()
            .iter()
            .flat_map(|route| route.legs.iter().map(|leg| leg.carrier.as_ptr()))
            .collect();
        let (shared, copied): (Vec<&Bytes>, Vec<&Bytes>) = body
            .chunks()
            .partition(|chunk| carriers.contains(&chunk.as_ptr()));
        assert_eq!(shared.len(), carriers.len(), "every carrier shared once");
        let copied: usize = copied.iter().map(|chunk| chunk.len()).sum();
        assert!(copied < 4 * 1024, "{copied} bytes copied");
        assert_eq!(
            copied + shared.iter().map(|c| c.len()).sum::<usize>(),
            framed(&page).len()
        );
    }

    /// Given the memory a worker shares with its connections
    /// ([`crate::connection::shared_memory`]), when a full page's chunks are
    /// offered to it cut as h2 cuts them (16 KiB frames), then every frame
    /// of every carrier is found there, in place, and only the short
    /// fields (under 4 KiB) are left to copy.
    #[test]
    fn a_pages_carriers_are_in_the_shared_memory() {
        let catalog = Arc::new(Catalog::new());
        let memory = SharedMemory::new(catalog.carriers());
        let page = page(&catalog, 25, "", &[]);
        let body = PageBody::new(&page, usize::MAX).expect("a page under 4 GiB");
        let (mut shared, mut copied) = (0, 0);
        for frame in body.chunks().flat_map(|chunk| chunk.chunks(16 * 1024)) {
            match memory.share(frame) {
                Some(bytes) => {
                    assert_eq!(bytes.as_ptr(), frame.as_ptr());
                    shared += frame.len();
                }
                None => copied += frame.len(),
            }
        }
        assert_eq!(shared, memory.len(), "every carrier, whole");
        assert!(copied < 4 * 1024, "{copied} bytes to copy");
    }

    /// Given a page with no carriers (ids and prices only), when it is laid
    /// out, then it is one chunk: nothing worth sharing, nothing split.
    #[test]
    fn a_page_without_carriers_is_one_chunk() {
        let catalog = Arc::new(Catalog::new());
        let page = page(&catalog, 25, "", &["routes.id", "routes.price"]);
        let body = PageBody::new(&page, usize::MAX).expect("a page under 4 GiB");
        assert_eq!(body.chunks().count(), 1);
    }

    /// Given a page's body, when it is read to the end, then it gives the
    /// framed message, then the trailers `grpc-status: 0` and nothing else,
    /// and its size hint was exact.
    #[tokio::test]
    async fn body_ends_with_ok_trailers() {
        let catalog = Arc::new(Catalog::new());
        let page = page(&catalog, 4, "", &[]);
        let body = PageBody::new(&page, usize::MAX).expect("a page under 4 GiB");
        assert_eq!(body.size_hint().exact(), Some(framed(&page).len() as u64));
        assert!(!body.is_end_stream());
        let collected = body.collect().await.expect("infallible");
        let trailers = collected.trailers().expect("trailers").clone();
        assert_eq!(collected.to_bytes(), framed(&page));
        assert_eq!(
            trailers.get("grpc-status").map(|v| v.as_bytes()),
            Some(&b"0"[..])
        );
        assert_eq!(trailers.len(), 1, "{trailers:?}");
    }

    /// Bytes of a gRPC message prefix: a compressed flag and a 4-byte length.
    const PREFIX_LEN: usize = 5;

    fn response(encoding: Option<&'static str>) -> http::Response<Body> {
        let mut response = http::Response::new(Body::empty());
        if let Some(encoding) = encoding {
            response
                .headers_mut()
                .insert(ENCODING_HEADER, http::HeaderValue::from_static(encoding));
        }
        response
    }

    /// Given tonic's response to a page, when tonic chose gzip, or the page
    /// is over the encode cap, then its body is left alone; when it is
    /// identity and within the cap, the body becomes the shared page.
    #[test]
    fn only_identity_pages_within_the_cap_are_shared() {
        let catalog = Arc::new(Catalog::new());
        let page = page(&catalog, 25, "", &[]);
        let len = page.encoded_len();
        let swapped = |encoding, cap| {
            let mut response = response(encoding);
            share_identity_page(&mut response, &page, cap);
            response.body().size_hint().exact()
        };
        let tonic_s = Some(0); // Body::empty()
        assert_eq!(swapped(Some("gzip"), None), tonic_s);
        assert_eq!(swapped(None, Some(len - 1)), tonic_s);
        let shared = Some((len + PREFIX_LEN) as u64);
        assert_eq!(swapped(None, Some(len)), shared);
        assert_eq!(swapped(None, None), shared);
    }
}
