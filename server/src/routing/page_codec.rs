//! How a ListRoutes page goes on the wire without being copied first.
//!
//! tonic's generated server encodes the `ListRoutesResponse` a handler returns,
//! so serving a page that way means first copying up to 5 MB of catalog strings
//! into one. ListRoutes is served through [`PageCodec`] instead: its encoder
//! writes a [`Page`] straight from the shared catalog into tonic's send buffer,
//! the one copy gzip needs. Everything else stays tonic's own: decoding the
//! request, gzip, the size caps and the status codes. A page that goes out
//! uncompressed skips even that copy: [`crate::routing::page_body`] lays it
//! out from the same [`Field`]s, its carriers shared with the catalog.
//!
//! A page holds only strings and nested messages, and protobuf puts both on
//! the wire the same way (wire type 2, "length-delimited"): a key (field
//! number and wire type), the length as a varint, then the bytes. [`Field`]
//! is that shape, borrowing its text. Every field number of the response
//! lives here (`tag`), so [`crate::routing::catalog`] stays pure data:
//! routes, pages and masks. The catalog's tests check the result
//! against prost's encoding of the same response for every field mask.

use bytes::BufMut;
use prost::Message;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint, key_len};
use routing_contracts::routing::{ListRoutesRequest, ListRoutesResponse, Route};
use tonic::Status;
use tonic::codec::{Codec, EncodeBuf, Encoder};
use tonic_prost::ProstDecoder;

use crate::routing::catalog::{LegAt, Page, RouteMask};

/// One protobuf field of a response, borrowed from the catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Field<'a> {
    /// A `string` field. proto3 leaves an empty string off the wire, as prost does.
    Text(u32, &'a str),
    /// A leg's carrier: a `string` field like [`Field::Text`], the long
    /// one (about 100 kB), with where it lives in the catalog, so that an
    /// identity page can send it without copying it
    /// ([`crate::routing::page_body`]).
    Carrier(&'a str, LegAt),
    /// A nested message field. It goes on the wire even when all its fields
    /// are empty: `price {}` is not the same as no price.
    Message(u32, Vec<Field<'a>>),
}

impl Field<'_> {
    /// Bytes this field takes on the wire, key and length prefix included.
    pub fn encoded_len(&self) -> usize {
        match self.body_len() {
            Some(len) => key_len(self.tag()) + encoded_len_varint(len as u64) + len,
            None => 0,
        }
    }

    /// Writes the field: key, length, then the text or the nested fields.
    pub fn encode(&self, buf: &mut impl BufMut) {
        let Some(len) = self.body_len() else {
            return;
        };
        encode_key(self.tag(), WireType::LengthDelimited, buf);
        encode_varint(len as u64, buf);
        match self {
            Self::Text(_, text) | Self::Carrier(text, _) => buf.put_slice(text.as_bytes()),
            Self::Message(_, fields) => fields.iter().for_each(|field| field.encode(buf)),
        }
    }

    /// Writes the key and the length prefix only: what precedes the body.
    /// Nothing for a field left off the wire.
    pub(crate) fn encode_head(&self, buf: &mut impl BufMut) {
        if let Some(len) = self.body_len() {
            encode_key(self.tag(), WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
        }
    }

    fn tag(&self) -> u32 {
        match self {
            Self::Text(tag, _) | Self::Message(tag, _) => *tag,
            Self::Carrier(..) => tag::LEG_CARRIER,
        }
    }

    /// Length of what follows the length prefix, or `None` when the field is
    /// left off the wire.
    fn body_len(&self) -> Option<usize> {
        match self {
            Self::Text(_, "") | Self::Carrier("", _) => None,
            Self::Text(_, text) | Self::Carrier(text, _) => Some(text.len()),
            Self::Message(_, fields) => Some(fields.iter().map(Field::encoded_len).sum()),
        }
    }
}

/// Field numbers from `routing_service.proto` and `money.proto`, for encoding
/// a page by hand. A test checks the result against prost's own encoding.
mod tag {
    // `ListRoutesResponse.routes` and `.next_page_token`.
    pub const RESPONSE_ROUTES: u32 = 1;
    pub const RESPONSE_NEXT_PAGE_TOKEN: u32 = 2;
    // `Route.id`, `.legs` and `.price`.
    pub const ROUTE_ID: u32 = 1;
    pub const ROUTE_LEGS: u32 = 2;
    pub const ROUTE_PRICE: u32 = 3;
    // `Leg.origin`, `.destination` and `.carrier`.
    pub const LEG_ORIGIN: u32 = 1;
    pub const LEG_DESTINATION: u32 = 2;
    pub const LEG_CARRIER: u32 = 3;
    // `Money.currency` and `.amount`.
    pub const MONEY_CURRENCY: u32 = 1;
    pub const MONEY_AMOUNT: u32 = 2;
}

/// A page's encoding, field by field: the fields come from the catalog's
/// [`Page`], the field numbers from `tag`.
impl Page {
    /// The `ListRoutesResponse` as protobuf fields, in field-number order,
    /// each string borrowed from the catalog.
    pub fn fields(&self) -> Vec<Field<'_>> {
        let routes = self.indexed_routes().map(|(index, route)| {
            Field::Message(tag::RESPONSE_ROUTES, self.mask().fields(route, index))
        });
        let token = Field::Text(tag::RESPONSE_NEXT_PAGE_TOKEN, self.next_page_token());
        routes.chain([token]).collect()
    }

    /// Bytes the page encodes to. Cheap: it adds up lengths and reads no text,
    /// so a caller can size or budget a response before encoding it.
    pub fn encoded_len(&self) -> usize {
        self.fields().iter().map(Field::encoded_len).sum()
    }

    /// Writes the page's protobuf encoding: the same bytes prost would write
    /// for the equivalent `ListRoutesResponse`.
    pub fn encode(&self, buf: &mut impl BufMut) {
        for field in self.fields() {
            field.encode(buf);
        }
    }

    /// The page as an owned message, decoded from its own encoding: what a
    /// client receives. This copies every selected string; the server's
    /// ListRoutes path never calls it.
    pub fn to_message(&self) -> ListRoutesResponse {
        let mut bytes = Vec::with_capacity(self.encoded_len());
        self.encode(&mut bytes);
        ListRoutesResponse::decode(bytes.as_slice())
            .expect("a page encodes to a valid ListRoutesResponse")
    }
}

impl RouteMask {
    /// The fields of `route` (at `index` in the catalog) this mask keeps,
    /// borrowed, in field-number order. A field that is not kept is an empty
    /// string, which proto3 leaves off the wire. Legs are kept (as empty
    /// messages if need be) whenever any leg field is selected, so the number
    /// of legs stays visible.
    pub(crate) fn fields<'a>(&self, route: &'a Route, index: usize) -> Vec<Field<'a>> {
        let keep =
            |yes: bool, tag: u32, text: &'a str| Field::Text(tag, if yes { text } else { "" });
        let mut fields = vec![keep(self.id, tag::ROUTE_ID, &route.id)];
        if self.leg_origin || self.leg_destination || self.leg_carrier {
            fields.extend(route.legs.iter().enumerate().map(|(at, leg)| {
                let carrier = if self.leg_carrier {
                    &leg.carrier[..]
                } else {
                    ""
                };
                let at = LegAt {
                    route: index,
                    leg: at,
                };
                let leg = vec![
                    keep(self.leg_origin, tag::LEG_ORIGIN, &leg.origin),
                    keep(self.leg_destination, tag::LEG_DESTINATION, &leg.destination),
                    Field::Carrier(carrier, at),
                ];
                Field::Message(tag::ROUTE_LEGS, leg)
            }));
        }
        let price = route
            .price
            .as_ref()
            .filter(|_| self.price_currency || self.price_amount);
        if let Some(price) = price {
            let price = vec![
                keep(self.price_currency, tag::MONEY_CURRENCY, &price.currency),
                keep(self.price_amount, tag::MONEY_AMOUNT, &price.amount),
            ];
            fields.push(Field::Message(tag::ROUTE_PRICE, price));
        }
        fields
    }
}

/// The codec ListRoutes is served with: a [`Page`] out, a `ListRoutesRequest`
/// in. Requests are decoded by prost, exactly as the generated server does.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageCodec;

impl Codec for PageCodec {
    type Encode = Page;
    type Decode = ListRoutesRequest;
    type Encoder = PageEncoder;
    type Decoder = ProstDecoder<ListRoutesRequest>;

    fn encoder(&mut self) -> Self::Encoder {
        PageEncoder
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::default()
    }
}

/// Encodes a [`Page`] straight from the catalog into tonic's buffer.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageEncoder;

impl Encoder for PageEncoder {
    type Item = Page;
    type Error = Status;

    fn encode(&mut self, page: Page, buf: &mut EncodeBuf<'_>) -> Result<(), Status> {
        // The length is known up front: grow the buffer once, not by doubling.
        buf.reserve(page.encoded_len());
        page.encode(buf);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use routing_contracts::routing::Leg;

    use super::*;

    /// Given fields with empty and non-empty text and an empty nested
    /// message, when they are encoded by hand, then the bytes are prost's:
    /// empty strings are left off, the empty message is kept.
    #[test]
    fn fields_encode_like_prost() {
        let leg = Leg {
            origin: "NLRTM".into(),
            destination: String::new(),
            carrier: "X".repeat(300), // a two-byte length varint
        };
        let by_hand = Field::Message(
            7,
            vec![
                Field::Text(1, &leg.origin),
                Field::Text(2, &leg.destination),
                Field::Text(3, &leg.carrier),
            ],
        );
        let mut expected = Vec::new();
        prost::encoding::message::encode(7, &leg, &mut expected);

        let mut encoded = Vec::new();
        by_hand.encode(&mut encoded);
        assert_eq!(encoded, expected);
        assert_eq!(by_hand.encoded_len(), expected.len());

        let empty = Field::Message(3, Vec::new());
        let mut encoded = Vec::new();
        empty.encode(&mut encoded);
        assert_eq!(encoded, [3 << 3 | 2, 0], "key for field 3, length 0");
    }
}
