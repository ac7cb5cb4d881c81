//! Misbehaving clients that are still valid HTTP/2, built on the `h2` crate:
//! a connection that advertises a zero stream window and never reads (the
//! stalled reader), request bodies that never end, and any content-type.
//!
//! `h2` answers the server's PINGs and SETTINGS by itself as long as the
//! connection task runs, and it decodes the server's HPACK headers, which
//! the raw client ([`crate::raw`]) does not.

use std::{net::SocketAddr, time::Duration};

use bytes::Bytes;
use h2::client::{ResponseFuture, SendRequest};
use h2::{RecvStream, SendStream};
use h2_frames::{Reason, reason_name};
use tokio::{task::JoinHandle, time::Instant};

use crate::{
    Error, grpc,
    tls::{self, HarnessTls},
};

/// How long to wait for TCP plus the HTTP/2 handshake: 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// One `h2` client connection. Its driver task answers PINGs and SETTINGS
/// until the connection is dropped, which aborts the task and closes the
/// socket, so no attack outlives its scope.
#[derive(Debug)]
pub struct H2Conn {
    authority: String,
    send: SendRequest<Bytes>,
    driver: JoinHandle<()>,
}

impl Drop for H2Conn {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

/// What a connection advertises about receiving.
#[derive(Debug, Clone, Copy)]
pub struct ReceiveWindows {
    /// SETTINGS_INITIAL_WINDOW_SIZE: 0 means the server may send no DATA on
    /// any stream until we send a WINDOW_UPDATE, which a stalled reader never does.
    pub stream: u32,
    /// The connection-level window (65,535 unless raised).
    pub connection: u32,
}

impl ReceiveWindows {
    /// A stalled reader's: no DATA on any stream, ever, and the protocol's
    /// default connection window.
    pub const STALLED: Self = Self {
        stream: 0,
        connection: 65_535,
    };
}

impl Default for ReceiveWindows {
    /// The protocol's defaults: 65,535 bytes each.
    fn default() -> Self {
        Self {
            stream: 65_535,
            connection: 65_535,
        }
    }
}

impl H2Conn {
    /// Connects with these receive windows, within [`CONNECT_TIMEOUT`].
    pub async fn connect(addr: SocketAddr, windows: ReceiveWindows) -> Result<Self, Error> {
        Self::connect_with(addr, windows, None).await
    }

    /// [`Self::connect`], also advertising SETTINGS_MAX_FRAME_SIZE
    /// `max_frame` (16,384 bytes, the protocol's default, if `None`), so the
    /// server may send DATA frames up to that size.
    pub async fn connect_with(
        addr: SocketAddr,
        windows: ReceiveWindows,
        max_frame: Option<u32>,
    ) -> Result<Self, Error> {
        Self::dial(addr, windows, max_frame, None).await
    }

    /// [`Self::connect_with`], inside a TLS session if `tls` is given (the
    /// TLS handshake counts in [`CONNECT_TIMEOUT`]).
    pub async fn dial(
        addr: SocketAddr,
        windows: ReceiveWindows,
        max_frame: Option<u32>,
        tls: Option<&HarnessTls>,
    ) -> Result<Self, Error> {
        let setup = async {
            let tcp = tls::connect(addr, tls).await?;
            let mut builder = h2::client::Builder::new();
            builder
                .initial_window_size(windows.stream)
                .initial_connection_window_size(windows.connection);
            if let Some(max_frame) = max_frame {
                builder.max_frame_size(max_frame);
            }
            let (send, connection) = builder.handshake::<_, Bytes>(tcp).await?;
            Ok::<_, Error>((send, connection))
        };
        let (send, connection) = tokio::time::timeout(CONNECT_TIMEOUT, setup)
            .await
            .map_err(|_| format!("no HTTP/2 handshake with {addr} within {CONNECT_TIMEOUT:?}"))??;
        let driver = tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("h2 connection ended: {e}");
            }
        });
        Ok(Self {
            authority: addr.to_string(),
            send,
            driver,
        })
    }

    /// A handle that opens streams on this connection from another task
    /// (`bench folklore` runs hundreds of callers on one connection); they
    /// fail once `self` is dropped.
    pub fn sender(&self) -> SendRequest<Bytes> {
        self.send.clone()
    }

    /// The `host:port` requests on this connection name as `:authority`.
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// True while the driver task runs, i.e. the server has not closed us.
    pub fn is_open(&self) -> bool {
        !self.driver.is_finished()
    }

    /// Opens a stream for a gRPC call and sends `body` as its first DATA.
    /// With `end_stream` false the request stays open, and the caller keeps
    /// the returned [`SendStream`] to send more, or nothing, ever.
    ///
    /// Waits at most `limit` for the connection to accept a new stream: a
    /// server's SETTINGS_MAX_CONCURRENT_STREAMS makes `h2` hold new streams
    /// back until others end. `Ok(None)` means the limit passed.
    pub async fn open_call(
        &mut self,
        path: &str,
        content_type: &str,
        body: Bytes,
        end_stream: bool,
        limit: Duration,
    ) -> Result<Option<(ResponseFuture, SendStream<Bytes>)>, Error> {
        self.open_call_with(path, content_type, &[], body, end_stream, limit)
            .await
    }

    /// [`Self::open_call`] with more request headers, e.g. `grpc-timeout`.
    pub async fn open_call_with(
        &mut self,
        path: &str,
        content_type: &str,
        headers: &[(&'static str, &'static str)],
        body: Bytes,
        end_stream: bool,
        limit: Duration,
    ) -> Result<Option<(ResponseFuture, SendStream<Bytes>)>, Error> {
        // Polled on `self.send` itself: the handle remembers a stream it
        // could not open yet, and is not ready again until that one is.
        let ready = std::future::poll_fn(|cx| self.send.poll_ready(cx));
        match tokio::time::timeout(limit, ready).await {
            Ok(ready) => ready?,
            Err(_) => return Ok(None),
        }
        let mut request = grpc::h2_request(&self.authority, path, content_type)?;
        for &(name, value) in headers {
            request
                .headers_mut()
                .insert(name, http::HeaderValue::from_static(value));
        }
        let (response, mut stream) = self.send.send_request(request, false)?;
        // The server may answer (and close the stream) on the headers alone,
        // e.g. with 415, before the body goes out: then its answer, which the
        // response future holds, is the result, not this error.
        if let Err(e) = stream.send_data(body, end_stream) {
            tracing::debug!("request body not sent: {e}");
        }
        Ok(Some((response, stream)))
    }
}

/// How a call ended, as a client on the wire sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallEnd {
    /// A gRPC status, from a trailers-only response or from the trailers.
    Grpc(tonic::Code),
    /// An HTTP response without `grpc-status`, e.g. 415.
    Http(u16),
    /// An HTTP error status that also carries a `grpc-status`, e.g. the 415
    /// with INVALID_ARGUMENT that grpc-go sends for a non-gRPC content-type.
    HttpGrpc { http: u16, code: tonic::Code },
    /// Response headers arrived, then nothing more (a stalled body).
    HeadersOnly,
    /// The server reset the stream with this code.
    Reset(Reason),
    /// The connection failed (GOAWAY, closed, I/O error).
    Connection(String),
    /// Nothing arrived within the limit.
    Pending,
}

impl CallEnd {
    /// A short label for counting outcomes, e.g. `RESOURCE_EXHAUSTED`,
    /// `http_415`, `rst_CANCEL`.
    pub fn label(&self) -> String {
        match self {
            Self::Grpc(code) => grpc::code_name(*code).to_string(),
            Self::Http(status) => format!("http_{status}"),
            Self::HttpGrpc { http, code } => format!("http_{http}+{}", grpc::code_name(*code)),
            Self::HeadersOnly => "headers_then_stalled".into(),
            Self::Reset(code) => format!("rst_{}", reason_name(*code)),
            Self::Connection(_) => "connection_error".into(),
            Self::Pending => "pending".into(),
        }
    }

    fn from_error(e: &h2::Error) -> Self {
        match e.reason() {
            Some(reason) if e.is_reset() => Self::Reset(reason),
            _ => Self::Connection(e.to_string()),
        }
    }
}

/// Waits up to `limit` in all for the response to a call and returns how it
/// ended and when (measured from `started`).
///
/// With `read_body` false the body is never read and its flow-control window
/// never reopened: only a reset, or trailers a server could send without
/// DATA, end it. With `read_body` true the body is drained and its window
/// released, as a well-behaved client does.
pub async fn await_end(
    response: ResponseFuture,
    limit: Duration,
    read_body: bool,
    started: Instant,
) -> (CallEnd, Duration) {
    let deadline = started + limit;
    let end = match tokio::time::timeout_at(deadline, response).await {
        Err(_) => CallEnd::Pending,
        Ok(Err(e)) => CallEnd::from_error(&e),
        Ok(Ok(response)) => {
            let (head, body) = response.into_parts();
            let not_ok = head.status != http::StatusCode::OK;
            if let Some(code) = grpc::grpc_status(&head.headers) {
                if not_ok {
                    CallEnd::HttpGrpc {
                        http: head.status.as_u16(),
                        code,
                    }
                } else {
                    CallEnd::Grpc(code)
                }
            } else if not_ok {
                CallEnd::Http(head.status.as_u16())
            } else {
                match tokio::time::timeout_at(deadline, body_end(body, read_body)).await {
                    Err(_) => CallEnd::HeadersOnly,
                    Ok(end) => end,
                }
            }
        }
    };
    (end, started.elapsed())
}

async fn body_end(mut body: RecvStream, read_body: bool) -> CallEnd {
    loop {
        match body.data().await {
            None => break,
            Some(Err(e)) => return CallEnd::from_error(&e),
            Some(Ok(chunk)) => {
                if read_body {
                    let _ = body.flow_control().release_capacity(chunk.len());
                }
                // Otherwise the chunk is dropped and its window stays closed.
            }
        }
    }
    match body.trailers().await {
        Ok(Some(trailers)) => match grpc::grpc_status(&trailers) {
            Some(code) => CallEnd::Grpc(code),
            None => CallEnd::Http(200),
        },
        Ok(None) => CallEnd::Http(200),
        Err(e) => CallEnd::from_error(&e),
    }
}

/// The first `sent` bytes of a gRPC message that announces `declared` bytes:
/// a valid 5-byte prefix, then zeros. With `sent < declared` the message can
/// never be complete, so a server that waits for it waits forever.
pub fn unfinished_message(declared: u32, sent: usize) -> Bytes {
    let mut body = Vec::with_capacity(5 + sent);
    body.extend_from_slice(&grpc::length_prefix(declared));
    body.resize(5 + sent, 0);
    Bytes::from(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_message_announces_more_than_it_carries() {
        let body = unfinished_message(4_000_000, 10);
        assert_eq!(body.len(), 15);
        assert_eq!(&body[..5], &grpc::length_prefix(4_000_000));
        assert!(body[5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn labels_name_the_code() {
        assert_eq!(
            CallEnd::Grpc(tonic::Code::ResourceExhausted).label(),
            "RESOURCE_EXHAUSTED"
        );
        assert_eq!(CallEnd::Http(415).label(), "http_415");
        assert_eq!(
            CallEnd::HttpGrpc {
                http: 415,
                code: tonic::Code::InvalidArgument
            }
            .label(),
            "http_415+INVALID_ARGUMENT"
        );
        assert_eq!(CallEnd::Reset(Reason::CANCEL).label(), "rst_CANCEL");
    }
}
