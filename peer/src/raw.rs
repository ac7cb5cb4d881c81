//! A raw HTTP/2 client over TCP (or TLS, [`RawConn::dial`]): it sends exactly the frames it is told to,
//! in the order it is told, including the ones a well-behaved client never
//! would. Use it where the `h2` crate refuses to misbehave: PING floods,
//! WINDOW_UPDATE overflows, half a preface, a connection that never reads.
//!
//! ```no_run
//! # async fn demo(addr: std::net::SocketAddr) -> Result<(), h2_peer::raw::RawError> {
//! use std::time::Duration;
//! use h2_peer::raw::RawConn;
//!
//! let mut conn = RawConn::connect(addr).await?;
//! conn.handshake().await?;
//! for i in 0..10u64 {
//!     conn.send_ping(i.to_be_bytes()).await?;
//! }
//! let goaway = conn.expect_goaway(Duration::from_secs(5)).await?;
//! println!("{} {}", h2_frames::reason_name(goaway.error_code), goaway.debug_text());
//! # Ok(()) }
//! ```

use std::{fmt, io, net::SocketAddr, time::Duration};

use bytes::BytesMut;
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf},
    net::{
        TcpSocket, TcpStream,
        tcp::{OwnedReadHalf, OwnedWriteHalf},
    },
};
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use h2_frames::{
    self as frame, DecodedFrame, FrameDecoder, GoAway, MalformedFrame, Reason, kind, reason_name,
};

use crate::{hpack, tls::HarnessTls};

/// How long [`RawConn::handshake`] waits for the server's SETTINGS: 5 s.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest frame we send. 16 KiB is the protocol's initial
/// SETTINGS_MAX_FRAME_SIZE, so every peer accepts it without negotiation.
pub const SEND_MAX_FRAME: usize = 16_384;

/// Anything that ends a raw exchange early.
#[derive(Debug)]
pub enum RawError {
    /// No frame (or not the expected one) within the time given.
    Timeout(Duration),
    /// The peer closed the connection.
    Closed,
    /// The socket failed (e.g. a reset).
    Io(io::Error),
    /// The peer sent something that is not valid HTTP/2.
    Protocol(String),
}

impl fmt::Display for RawError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Timeout(limit) => write!(f, "no answer within {limit:?}"),
            Self::Closed => f.write_str("the server closed the connection"),
            Self::Io(e) => write!(f, "socket error: {e}"),
            Self::Protocol(what) => write!(f, "protocol error: {what}"),
        }
    }
}

impl std::error::Error for RawError {}

impl From<io::Error> for RawError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

impl From<MalformedFrame> for RawError {
    fn from(e: MalformedFrame) -> Self {
        Self::Protocol(e.0)
    }
}

/// The read half: turns bytes from the socket into frames.
#[derive(Debug)]
pub struct FrameReader<R> {
    io: R,
    decoder: FrameDecoder,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(io: R) -> Self {
        Self {
            io,
            decoder: FrameDecoder::new(),
        }
    }

    /// The next frame; `Ok(None)` once the peer has closed the connection.
    /// Bytes of an unfinished frame at close are a protocol error.
    pub async fn next(&mut self) -> Result<Option<DecodedFrame>, RawError> {
        loop {
            if let Some(frame) = self.decoder.next_frame() {
                return Ok(Some(frame));
            }
            let buffer = self.decoder.buffer_mut();
            buffer.reserve(16 * 1024);
            if self.io.read_buf(buffer).await? == 0 {
                return match self.decoder.pending() {
                    0 => Ok(None),
                    n => Err(RawError::Protocol(format!(
                        "connection closed inside a frame ({n} bytes pending)"
                    ))),
                };
            }
        }
    }

    /// [`Self::next`] bounded by `limit`.
    pub async fn read_frame(&mut self, limit: Duration) -> Result<Option<DecodedFrame>, RawError> {
        tokio::time::timeout(limit, self.next())
            .await
            .map_err(|_| RawError::Timeout(limit))?
    }
}

/// The write half: frames are queued into a buffer, then written together by
/// [`FrameWriter::flush`], so a flood costs one syscall per batch.
#[derive(Debug)]
pub struct FrameWriter<W> {
    io: W,
    out: BytesMut,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(io: W) -> Self {
        Self {
            io,
            out: BytesMut::with_capacity(64 * 1024),
        }
    }

    /// Bytes queued and not yet written.
    pub fn queued(&self) -> usize {
        self.out.len()
    }

    /// Queues raw bytes, e.g. the preface or a deliberately broken frame.
    pub fn queue_raw(&mut self, bytes: &[u8]) {
        self.out.extend_from_slice(bytes);
    }

    pub fn queue_settings(&mut self, pairs: &[(u16, u32)]) {
        frame::encode_settings(&mut self.out, pairs);
    }

    pub fn queue_settings_ack(&mut self) {
        frame::encode_settings_ack(&mut self.out);
    }

    pub fn queue_ping(&mut self, payload: [u8; 8], ack: bool) {
        frame::encode_ping(&mut self.out, payload, ack);
    }

    /// HEADERS (and CONTINUATION if needed) with a literal HPACK block.
    pub fn queue_headers(&mut self, stream_id: u32, headers: &[(&str, &str)], end_stream: bool) {
        let block = hpack::encode_block(headers);
        frame::encode_headers(&mut self.out, stream_id, &block, end_stream, SEND_MAX_FRAME);
    }

    pub fn queue_data(&mut self, stream_id: u32, data: &[u8], end_stream: bool) {
        frame::encode_data(&mut self.out, stream_id, data, end_stream, SEND_MAX_FRAME);
    }

    pub fn queue_window_update(&mut self, stream_id: u32, increment: u32) {
        frame::encode_window_update(&mut self.out, stream_id, increment);
    }

    pub fn queue_rst_stream(&mut self, stream_id: u32, code: Reason) {
        frame::encode_rst_stream(&mut self.out, stream_id, code);
    }

    pub fn queue_goaway(&mut self, last_stream_id: u32, code: Reason, debug: &[u8]) {
        frame::encode_goaway(&mut self.out, last_stream_id, code, debug);
    }

    /// Writes everything queued.
    pub async fn flush(&mut self) -> Result<(), RawError> {
        let pending = self.out.split();
        self.io.write_all(&pending).await?;
        self.io.flush().await?;
        Ok(())
    }

    /// Closes the write side (TCP FIN); the read side stays open.
    pub async fn shutdown(&mut self) -> Result<(), RawError> {
        self.io.shutdown().await?;
        Ok(())
    }
}

/// The read half of a raw connection: the socket's (`Left`), or the TLS
/// session's (`Right`).
pub type RawRead = Either<OwnedReadHalf, ReadHalf<TlsStream<TcpStream>>>;

/// The write half of a raw connection: the socket's (`Left`), or the TLS
/// session's (`Right`).
pub type RawWrite = Either<OwnedWriteHalf, WriteHalf<TlsStream<TcpStream>>>;

/// One raw HTTP/2 connection: a [`FrameReader`] and a [`FrameWriter`] on a
/// TCP socket, or on a TLS session over one. The `send_*` methods queue one
/// frame and write it at once; use [`RawConn::writer`] to batch many.
#[derive(Debug)]
pub struct RawConn {
    peer: SocketAddr,
    reader: FrameReader<RawRead>,
    writer: FrameWriter<RawWrite>,
}

impl RawConn {
    /// Opens the TCP connection. Nothing is sent yet.
    pub async fn connect(addr: SocketAddr) -> Result<Self, RawError> {
        Self::dial(addr, None).await
    }

    /// [`Self::connect`], then with `tls` the TLS handshake (ALPN `h2`):
    /// the frames then go inside the TLS session. No HTTP/2 byte is sent yet.
    pub async fn dial(addr: SocketAddr, tls: Option<&HarnessTls>) -> Result<Self, RawError> {
        Self::from_tcp(addr, TcpStream::connect(addr).await?, tls).await
    }

    /// [`Self::connect`] with the socket's receive buffer (`SO_RCVBUF`) set
    /// to `bytes` before connecting, so the TCP window it advertises stays
    /// that small (Linux doubles the value, and keeps a floor of a few KiB).
    pub async fn connect_with_receive_buffer(
        addr: SocketAddr,
        bytes: u32,
    ) -> Result<Self, RawError> {
        Self::dial_with_receive_buffer(addr, bytes, None).await
    }

    /// [`Self::connect_with_receive_buffer`], over `tls` if given.
    pub async fn dial_with_receive_buffer(
        addr: SocketAddr,
        bytes: u32,
        tls: Option<&HarnessTls>,
    ) -> Result<Self, RawError> {
        let socket = if addr.is_ipv4() {
            TcpSocket::new_v4()?
        } else {
            TcpSocket::new_v6()?
        };
        socket.set_recv_buffer_size(bytes)?;
        Self::from_tcp(addr, socket.connect(addr).await?, tls).await
    }

    async fn from_tcp(
        addr: SocketAddr,
        tcp: TcpStream,
        tls: Option<&HarnessTls>,
    ) -> Result<Self, RawError> {
        // Frames must leave when written, not when Nagle decides.
        tcp.set_nodelay(true)?;
        let (read, write) = match tls {
            None => {
                let (read, write) = tcp.into_split();
                (Either::Left(read), Either::Left(write))
            }
            Some(tls) => {
                let (read, write) = tokio::io::split(tls.handshake(tcp).await?);
                (Either::Right(read), Either::Right(write))
            }
        };
        Ok(Self {
            peer: addr,
            reader: FrameReader::new(read),
            writer: FrameWriter::new(write),
        })
    }

    /// The server's address, e.g. for the `:authority` header.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The client side of the HTTP/2 handshake with default settings:
    /// preface and an empty SETTINGS, then the server's SETTINGS acknowledged.
    /// Returns the server's settings.
    pub async fn handshake(&mut self) -> Result<Vec<(u16, u32)>, RawError> {
        self.handshake_with(&[], HANDSHAKE_TIMEOUT).await
    }

    /// [`Self::handshake`] with our own settings (e.g.
    /// `(setting::INITIAL_WINDOW_SIZE, 0)`) and time limit. Frames the server
    /// sends before its SETTINGS (none should come) are dropped; a GOAWAY
    /// then is an error naming it.
    pub async fn handshake_with(
        &mut self,
        settings: &[(u16, u32)],
        limit: Duration,
    ) -> Result<Vec<(u16, u32)>, RawError> {
        self.writer.queue_raw(frame::PREFACE);
        self.writer.queue_settings(settings);
        self.writer.flush().await?;
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self
                .reader
                .read_frame(left)
                .await?
                .ok_or(RawError::Closed)?;
            if let Some(goaway) = frame.goaway()? {
                return Err(RawError::Protocol(format!(
                    "GOAWAY {} during the handshake: {}",
                    reason_name(goaway.error_code),
                    goaway.debug_text()
                )));
            }
            if frame.kind == kind::SETTINGS && !frame.is_ack() {
                let pairs = frame.settings()?.unwrap_or_default();
                self.send_settings_ack().await?;
                return Ok(pairs);
            }
        }
    }

    /// Sends raw bytes as they are (e.g. half a preface).
    pub async fn send_raw(&mut self, bytes: &[u8]) -> Result<(), RawError> {
        self.writer.queue_raw(bytes);
        self.writer.flush().await
    }

    pub async fn send_settings(&mut self, pairs: &[(u16, u32)]) -> Result<(), RawError> {
        self.writer.queue_settings(pairs);
        self.writer.flush().await
    }

    pub async fn send_settings_ack(&mut self) -> Result<(), RawError> {
        self.writer.queue_settings_ack();
        self.writer.flush().await
    }

    /// A PING (not an ack) with these 8 opaque bytes.
    pub async fn send_ping(&mut self, payload: [u8; 8]) -> Result<(), RawError> {
        self.writer.queue_ping(payload, false);
        self.writer.flush().await
    }

    /// HEADERS on `stream_id` with each header as an HPACK literal.
    /// Pseudo-headers (`:method`, `:path`, ...) must come first.
    pub async fn send_headers(
        &mut self,
        stream_id: u32,
        headers: &[(&str, &str)],
        end_stream: bool,
    ) -> Result<(), RawError> {
        self.writer.queue_headers(stream_id, headers, end_stream);
        self.writer.flush().await
    }

    /// DATA on `stream_id`, split into 16 KiB frames.
    pub async fn send_data(
        &mut self,
        stream_id: u32,
        data: &[u8],
        end_stream: bool,
    ) -> Result<(), RawError> {
        self.writer.queue_data(stream_id, data, end_stream);
        self.writer.flush().await
    }

    /// WINDOW_UPDATE on `stream_id` (0: the connection). Any increment is
    /// sent as given, including 0 or one that overflows the window.
    pub async fn send_window_update(
        &mut self,
        stream_id: u32,
        increment: u32,
    ) -> Result<(), RawError> {
        self.writer.queue_window_update(stream_id, increment);
        self.writer.flush().await
    }

    pub async fn send_rst_stream(&mut self, stream_id: u32, code: Reason) -> Result<(), RawError> {
        self.writer.queue_rst_stream(stream_id, code);
        self.writer.flush().await
    }

    /// The next frame within `limit`; `Ok(None)` if the server closed.
    pub async fn read_frame(&mut self, limit: Duration) -> Result<Option<DecodedFrame>, RawError> {
        self.reader.read_frame(limit).await
    }

    /// Reads (and drops) frames until a GOAWAY arrives, within `limit` in
    /// all. A close without a GOAWAY is [`RawError::Closed`].
    pub async fn expect_goaway(&mut self, limit: Duration) -> Result<GoAway, RawError> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let frame = self
                .reader
                .read_frame(left)
                .await
                .map_err(|e| match e {
                    RawError::Timeout(_) => RawError::Timeout(limit),
                    other => other,
                })?
                .ok_or(RawError::Closed)?;
            if let Some(goaway) = frame.goaway()? {
                return Ok(goaway);
            }
        }
    }

    /// Waits until the server closes the connection, dropping frames, within
    /// `limit`. Returns the GOAWAY if one came first.
    pub async fn expect_close(&mut self, limit: Duration) -> Result<Option<GoAway>, RawError> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut goaway = None;
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.reader.read_frame(left).await {
                Ok(Some(frame)) => {
                    if let Some(g) = frame.goaway()? {
                        goaway = Some(g);
                    }
                }
                Ok(None) => return Ok(goaway),
                // A reset after a GOAWAY is still a close.
                Err(RawError::Io(_)) => return Ok(goaway),
                Err(RawError::Timeout(_)) => return Err(RawError::Timeout(limit)),
                Err(e) => return Err(e),
            }
        }
    }

    /// Direct access to the write half, to queue many frames then flush once.
    pub fn writer(&mut self) -> &mut FrameWriter<RawWrite> {
        &mut self.writer
    }

    /// Splits the connection so one task can read while another writes.
    pub fn into_split(self) -> (FrameReader<RawRead>, FrameWriter<RawWrite>) {
        (self.reader, self.writer)
    }
}
