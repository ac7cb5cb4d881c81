//! [`TcpStalledReader`]: a connection that stalls at the TCP level, not the
//! HTTP/2 level. It sets a tiny socket receive buffer, opens a 2 GiB HTTP/2
//! window, asks for a ListRoutes page, and never reads the socket, so HTTP/2
//! flow control never stops the server: the page goes into the kernel's
//! send buffer. The harness's `tcpstall` attack opens many; the server's
//! tests open one and then read its page ([`TcpStalledReader::read_page`]).

use std::{net::SocketAddr, time::Duration};

use h2_frames::{DEFAULT_WINDOW, MAX_WINDOW, PREFACE, kind, setting};
use routing_contracts::routing::ListRoutesRequest;
use tokio::time::Instant;

use crate::{
    grpc,
    raw::{FrameReader, FrameWriter, RawConn, RawError, RawRead, RawWrite},
    tls::HarnessTls,
};

/// One connection that stalls at the TCP level. Its read half is kept and
/// not read (until [`TcpStalledReader::read_page`], which tests use);
/// dropping it closes the socket.
#[derive(Debug)]
pub struct TcpStalledReader {
    not_read: FrameReader<RawRead>,
    writer: FrameWriter<RawWrite>,
    authority: String,
    next_stream: u32,
}

impl TcpStalledReader {
    /// Connects with a `rcvbuf`-byte receive buffer, opens a 2 GiB window
    /// (stream and connection) and asks for a page of `page_size` routes.
    /// Nothing is ever read, not even the server's SETTINGS.
    pub async fn open(addr: SocketAddr, rcvbuf: u32, page_size: i32) -> Result<Self, RawError> {
        Self::open_over(addr, rcvbuf, page_size, None).await
    }

    /// [`Self::open`], inside a TLS session if `tls` is given.
    pub async fn open_over(
        addr: SocketAddr,
        rcvbuf: u32,
        page_size: i32,
        tls: Option<&HarnessTls>,
    ) -> Result<Self, RawError> {
        let conn = RawConn::dial_with_receive_buffer(addr, rcvbuf, tls).await?;
        let (not_read, mut writer) = conn.into_split();
        writer.queue_raw(PREFACE);
        writer.queue_settings(&[(setting::INITIAL_WINDOW_SIZE, MAX_WINDOW)]);
        writer.queue_window_update(0, MAX_WINDOW - DEFAULT_WINDOW);
        let mut reader = Self {
            not_read,
            writer,
            authority: addr.to_string(),
            next_stream: PAGE_STREAM,
        };
        let page = grpc::framed(&ListRoutesRequest {
            page_size,
            ..Default::default()
        });
        reader.queue_call(grpc::LIST_ROUTES, &page);
        reader.writer.flush().await?;
        Ok(reader)
    }

    fn queue_call(&mut self, path: &str, body: &[u8]) {
        let stream = self.next_stream;
        self.next_stream += 2;
        let headers = grpc::request_headers(&self.authority, path, grpc::CONTENT_TYPE);
        self.writer.queue_headers(stream, &headers, false);
        self.writer.queue_data(stream, body, true);
    }

    /// Sends one more GetQuote. Fails once the server has closed the
    /// connection (the peer's reset surfaces on the next write).
    pub async fn poke(&mut self) -> Result<(), RawError> {
        self.queue_call(grpc::GET_QUOTE, &grpc::framed_quote());
        self.writer.flush().await
    }

    /// Stops stalling: reads the socket until the page asked for at
    /// [`Self::open`] has ended (its trailers), within `limit`, and returns
    /// the bytes of its DATA frames.
    pub async fn read_page(&mut self, limit: Duration) -> Result<usize, RawError> {
        let give_up = Instant::now() + limit;
        let mut data = 0;
        loop {
            let left = give_up.saturating_duration_since(Instant::now());
            let frame = self
                .not_read
                .read_frame(left)
                .await?
                .ok_or(RawError::Closed)?;
            if frame.stream_id != PAGE_STREAM {
                continue;
            }
            if frame.kind == kind::DATA {
                data += frame.payload.len();
            }
            if frame.ends_stream() {
                return Ok(data);
            }
        }
    }
}

/// The stream of the page [`TcpStalledReader::open`] asks for: the first.
const PAGE_STREAM: u32 = 1;
