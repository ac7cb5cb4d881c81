//! TLS on the server's port: `routing-server --tls-cert PATH --tls-key PATH`
//! (or `ROUTING_TLS_CERT` and `ROUTING_TLS_KEY`), with rustls through
//! tokio-rustls, the stack tonic's own TLS uses, and its `ring` crypto
//! provider (docs/tls.md says why).
//!
//! - [`ServerTls::from_config`] loads the certificate chain and its key at
//!   start-up. A file that is missing, unreadable or holds no PEM, or a key
//!   that does not belong to the certificate, is a [`BadTlsInput`] that
//!   names the flag: `routing-server` prints it and exits 2.
//! - [`ServerTls::accept`] is the server's side of the handshake. It runs on
//!   the worker that will serve the connection, not on the acceptor, and
//!   inside the connection's handshake timeout: one deadline covers the TLS
//!   handshake and then HTTP/2's preface, SETTINGS and acknowledgement. TLS
//!   1.3 and 1.2, ALPN `h2` only.
//! - [`Transport`] is what [`crate::connection::watched::Connection`] reads and
//!   writes: the socket, or TLS over it. The connection's policies (ping
//!   floor, control-frame budget, GOAWAYs) sit above TLS and see plaintext
//!   HTTP/2 frames; the byte count that tells when a response is
//!   acknowledged sits below it, at the socket ([`crate::kernel_queue`]
//!   converts it back to plaintext, see [`TlsWire`]).
//!
//! What a client that speaks the other language sees:
//! - a **plaintext** HTTP/2 client on the TLS port (`grpcurl -plaintext`):
//!   its first byte is `P` (of the preface `PRI * HTTP/2.0`), never a TLS
//!   record's `0x16`. Closing the connection is not enough: grpc-go's
//!   clients, grpcurl among them, treat a connection closed before the
//!   server's SETTINGS as worth retrying, and wait out their whole deadline
//!   (10 s for grpcurl, against grpc-go's TLS port too). So the server
//!   answers in the client's own language ([`refuse_plaintext`]): every
//!   call gets `UNAVAILABLE` "this port speaks TLS", at once, and the
//!   connection is closed at the handshake deadline at the latest. Any
//!   other first byte gets the connection closed at once.
//! - a **TLS** client on a plaintext port: h2 reads a ClientHello where the
//!   HTTP/2 preface should be, and closes the connection at once; the
//!   client reports a failed handshake (`first record does not look like a
//!   TLS handshake`, `received corrupt message`).

use std::{
    fmt, fs, io,
    net::SocketAddr,
    path::{Path, PathBuf},
    pin::Pin,
    sync::Arc,
    task::{Context, Poll, ready},
};

use rustls::{
    ServerConfig,
    crypto::ring,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    server::{Acceptor, NoServerSessionStorage},
    version::{TLS12, TLS13},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    sync::Semaphore,
    time::Instant,
};
use tokio_rustls::{LazyConfigAcceptor, server::TlsStream};
use tokio_util::either::Either;

use crate::{
    kernel_queue::{CountWrites, SentBytes},
    knobs::Config,
};

/// The one application protocol offered: HTTP/2, as gRPC requires.
pub const ALPN_H2: &[u8] = b"h2";

/// A TLS flag's file that the server cannot use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadTlsInput {
    /// The flag that named the file, e.g. `--tls-key`.
    pub flag: &'static str,
    pub path: PathBuf,
    pub reason: String,
}

impl fmt::Display for BadTlsInput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.flag, self.path.display(), self.reason)
    }
}

impl std::error::Error for BadTlsInput {}

const CERT_FLAG: &str = "--tls-cert";
const KEY_FLAG: &str = "--tls-key";

/// The server's TLS: its rustls configuration, and the slots that bound the
/// handshakes computed at once. Cheap to clone (every worker holds one).
#[derive(Debug, Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
    /// [`crate::knobs::TLS_HANDSHAKES_IN_FLIGHT`], over every worker.
    handshakes: Arc<Semaphore>,
}

impl ServerTls {
    /// The TLS that `config`'s flags ask for: `None` without `--tls-cert`
    /// and `--tls-key` (plaintext), an error that names the flag when one
    /// is given without the other or a file is unusable.
    pub fn from_config(config: &Config) -> Result<Option<Self>, BadTlsInput> {
        let (cert, key) = match (&config.tls_cert, &config.tls_key) {
            (None, None) => return Ok(None),
            (Some(cert), Some(key)) => (cert, key),
            // clap's `requires` already refuses these; a caller that builds
            // a Config by hand gets the same answer.
            (Some(cert), None) => return Err(bad(CERT_FLAG, cert, "needs --tls-key too")),
            (None, Some(key)) => return Err(bad(KEY_FLAG, key, "needs --tls-cert too")),
        };
        let rustls = server_config(cert, key, config.tls_session_tickets)?;
        Ok(Some(Self {
            config: Arc::new(rustls),
            handshakes: Arc::new(Semaphore::new(config.tls_handshakes_in_flight.max(1))),
        }))
    }

    /// Runs the server's side of the handshake on `stream`, by `deadline`.
    ///
    /// The ClientHello is read first, holding no slot: a client that sends
    /// nothing, or half a ClientHello, costs a socket and a timer, no CPU.
    /// Then, holding one of the slots, rustls answers it: the key exchange
    /// and the certificate's signature, the expensive part, computed as the
    /// ClientHello is taken. The slot is kept until the task has let the
    /// worker run its other tasks once, so each worker computes at most as
    /// many handshakes between two looks at its sockets as there are slots,
    /// and calls on established connections wait behind no more than those.
    /// The rest of the handshake (the client's Finished) is waited for
    /// without a slot, so a client that stalls there holds none either.
    pub async fn accept(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        deadline: Instant,
    ) -> io::Result<(Transport, Arc<SentBytes>)> {
        let sent = SentBytes::of_tls(&stream);
        let first = tokio::time::timeout_at(deadline, first_byte(&stream)).await;
        match first {
            Ok(Ok(TLS_HANDSHAKE_RECORD)) => {}
            Ok(Ok(b'P')) => {
                tracing::debug!(%peer, "plaintext HTTP/2 client on the TLS port: every call gets UNAVAILABLE");
                refuse_plaintext(stream, deadline).await;
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "a plaintext HTTP/2 client on the TLS port",
                ));
            }
            Ok(Ok(other)) => {
                tracing::debug!(%peer, first_byte = other, "neither TLS nor HTTP/2: closing");
                return Err(io::Error::new(io::ErrorKind::InvalidData, "not TLS"));
            }
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no TLS handshake within the handshake timeout",
                ));
            }
        }
        let counted = CountWrites::new(stream, Arc::clone(&sent));
        let handshake = async {
            let hello = LazyConfigAcceptor::new(Acceptor::default(), counted).await?;
            let finishing = {
                let _slot = self.handshakes.acquire().await.map_err(io::Error::other)?;
                let finishing = hello.into_stream(Arc::clone(&self.config));
                tokio::task::yield_now().await;
                finishing
            };
            finishing.await
        };
        let stream = match tokio::time::timeout_at(deadline, handshake).await {
            Ok(Ok(stream)) => stream,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "TLS handshake failed: {e}");
                return Err(e);
            }
            Err(_) => {
                tracing::debug!(%peer, "no TLS handshake in time: closing");
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no TLS handshake within the handshake timeout",
                ));
            }
        };
        let session = stream.get_ref().1;
        if session.alpn_protocol() != Some(ALPN_H2) {
            // A client that offered other protocols only was already refused
            // by rustls (alert no_application_protocol); this one offered none.
            tracing::debug!(%peer, "TLS client offered no ALPN h2: closing");
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the TLS client did not offer ALPN h2",
            ));
        }
        tracing::debug!(
            %peer,
            version = ?session.protocol_version(),
            resumed = matches!(session.handshake_kind(), Some(rustls::HandshakeKind::Resumed)),
            "TLS handshake done"
        );
        let wire = TlsWire {
            stream,
            sent: Arc::clone(&sent),
            plaintext: 0,
        };
        wire.mark_if_quiet();
        Ok((Either::Right(Box::new(wire)), sent))
    }
}

/// The first byte of a TLS handshake record (content type 22).
const TLS_HANDSHAKE_RECORD: u8 = 0x16;

/// The connection's first byte, left in the socket for whoever reads next.
async fn first_byte(stream: &TcpStream) -> io::Result<u8> {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte).await? {
        0 => Err(io::ErrorKind::UnexpectedEof.into()),
        _ => Ok(byte[0]),
    }
}

/// What a plaintext HTTP/2 client on the TLS port is told: one stream at a
/// time, each call answered `UNAVAILABLE` with the reason, until the client
/// leaves or `deadline` (the handshake deadline) closes the connection.
/// A gRPC client reports the status and gives up at once, where a closed
/// connection would have had it retry until its deadline.
pub async fn refuse_plaintext(stream: TcpStream, deadline: Instant) {
    use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
    let refuse = hyper::service::service_fn(|_request| async {
        let status = tonic::Status::unavailable(
            "this port speaks TLS: connect with TLS (grpcurl: -cacert CA.pem instead of -plaintext)",
        );
        Ok::<_, std::convert::Infallible>(status.into_http::<tonic::body::Body>())
    });
    let mut http2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http2.timer(TokioTimer::new()).max_concurrent_streams(1);
    let serving = http2.serve_connection(TokioIo::new(stream), refuse);
    let _ = tokio::time::timeout_at(deadline, serving).await;
}

fn bad(flag: &'static str, path: &Path, reason: impl Into<String>) -> BadTlsInput {
    BadTlsInput {
        flag,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// rustls's server configuration for the certificate chain in `cert` and
/// the key in `key` (both PEM): TLS 1.3 and 1.2, ALPN `h2` only, session
/// tickets when `tickets`.
pub fn server_config(cert: &Path, key: &Path, tickets: bool) -> Result<ServerConfig, BadTlsInput> {
    let read = |flag, path: &Path| {
        fs::read(path).map_err(|e| bad(flag, path, format!("cannot read it: {e}")))
    };
    let cert_pem = read(CERT_FLAG, cert)?;
    let key_pem = read(KEY_FLAG, key)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(CERT_FLAG, cert, format!("not a PEM certificate chain: {e}")))?;
    if chain.is_empty() {
        return Err(bad(CERT_FLAG, cert, "holds no PEM certificate"));
    }
    let private_key = PrivateKeyDer::from_pem_slice(&key_pem)
        .map_err(|e| bad(KEY_FLAG, key, format!("holds no PEM private key: {e}")))?;
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&TLS13, &TLS12])
        .map_err(|e| bad(CERT_FLAG, cert, format!("no TLS version to offer: {e}")))?
        .with_no_client_auth();
    // rustls checks here that the key is the certificate's own.
    let mut config = builder.with_single_cert(chain, private_key).map_err(|e| {
        let reason = match e {
            rustls::Error::InconsistentKeys(_) => {
                format!("is not the key of the certificate in {}", cert.display())
            }
            other => format!("cannot be used with the certificate: {other}"),
        };
        bad(KEY_FLAG, key, reason)
    })?;
    config.alpn_protocols = vec![ALPN_H2.to_vec()];
    if tickets {
        config.ticketer = ring::Ticketer::new()
            .map_err(|e| bad(KEY_FLAG, key, format!("cannot make a ticket key: {e}")))?;
    } else {
        // No tickets and no session cache: every handshake is full.
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(config)
}

/// What a connection reads and writes: the socket itself (left), or TLS
/// over it (right). Either way the socket below counts the bytes written to
/// it. tokio-util's `Either` forwards every read and write, vectored ones
/// included, to the side it holds; it is the same size as a hand-written
/// enum, and the TLS side stays boxed, so a plaintext connection's task
/// does not carry rustls's state.
pub type Transport = Either<CountWrites<TcpStream>, Box<TlsWire>>;

/// TLS over the counted socket, writing so that the socket's count can be
/// turned back into plaintext ([`SentBytes::plaintext_acked`]).
///
/// rustls may keep encrypted bytes back when the socket is full. Before it
/// takes more plaintext, this writes those out; so after every write that
/// the socket took whole, and after every flush, rustls holds nothing back,
/// and that quiet moment is recorded: the plaintext so far, and the TLS
/// overhead so far (socket bytes minus plaintext). It costs no throughput
/// that matters: the socket was full anyway, and the coalescing buffer
/// above ([`crate::connection::coalesce`]) keeps writes large.
#[derive(Debug)]
pub struct TlsWire {
    stream: TlsStream<CountWrites<TcpStream>>,
    sent: Arc<SentBytes>,
    /// Plaintext bytes rustls has taken.
    plaintext: u64,
}

impl TlsWire {
    fn holds_back(&self) -> bool {
        self.stream.get_ref().1.wants_write()
    }

    fn mark_if_quiet(&self) {
        if !self.holds_back() {
            self.sent.tls_quiet(self.plaintext);
        }
    }

    /// Writes out what rustls holds back from an earlier write.
    fn poll_write_back(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.holds_back() {
            ready!(Pin::new(&mut self.stream).poll_flush(cx))?;
            self.mark_if_quiet();
        }
        Poll::Ready(Ok(()))
    }

    fn took(&mut self, n: usize) -> Poll<io::Result<usize>> {
        self.plaintext += n as u64;
        self.mark_if_quiet();
        Poll::Ready(Ok(n))
    }

    /// The negotiated TLS version and whether the session was resumed.
    pub fn session(&self) -> &rustls::ServerConnection {
        self.stream.get_ref().1
    }
}

impl AsyncRead for TlsWire {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsWire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let tls = self.get_mut();
        ready!(tls.poll_write_back(cx))?;
        let n = ready!(Pin::new(&mut tls.stream).poll_write(cx, buf))?;
        tls.took(n)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let tls = self.get_mut();
        ready!(tls.poll_write_back(cx))?;
        let n = ready!(Pin::new(&mut tls.stream).poll_write_vectored(cx, bufs))?;
        tls.took(n)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let tls = self.get_mut();
        ready!(Pin::new(&mut tls.stream).poll_flush(cx))?;
        tls.mark_if_quiet();
        Poll::Ready(Ok(()))
    }

    /// close_notify, then the socket's FIN.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
