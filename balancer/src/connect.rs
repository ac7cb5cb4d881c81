//! One connection to one address: TCP, TLS when asked (dialled by address,
//! verified and sent as SNI by the name), then hyper's HTTP/2 client on a
//! [`Tapped`] socket, ready only once the server's SETTINGS have arrived.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use rustls::pki_types::ServerName;
use tokio::{net::TcpStream, sync::watch, task::JoinHandle};
use tokio_rustls::TlsConnector;
use tokio_util::either::Either;

use crate::{
    BoxError,
    tap::{Heard, Tapped},
};

/// The body tonic's generated clients send.
pub type Body = tonic::body::Body;

/// TLS to every endpoint, checked against one name.
#[derive(Clone)]
pub struct TlsTo {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for TlsTo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TlsTo({:?})", self.name)
    }
}

impl TlsTo {
    /// `config` with ALPN set to `h2` (a gRPC server refuses anything
    /// else); `name` is what each endpoint's certificate must name, and
    /// what goes out as SNI, though the socket is opened to an address.
    pub fn new(config: &rustls::ClientConfig, name: ServerName<'static>) -> Self {
        let mut config = config.clone();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Self {
            connector: TlsConnector::from(Arc::new(config)),
            name,
        }
    }
}

/// How every endpoint's connection is made.
#[derive(Debug, Clone)]
pub struct Dial {
    pub tls: Option<TlsTo>,
    pub keepalive_interval: Option<Duration>,
    pub keepalive_timeout: Duration,
}

/// A connection whose handshake is done.
#[derive(Debug)]
pub struct Open {
    pub sender: SendRequest<Body>,
    /// SETTINGS, GOAWAY and the end of the connection as they happen.
    pub heard: watch::Receiver<Heard>,
    /// Drives the connection until it ends: closed by either side, an I/O
    /// error, or a keepalive PING without an ACK.
    pub driver: JoinHandle<()>,
}

impl Open {
    /// Waits until no new call should go here: a GOAWAY arrived (`true`)
    /// or the connection ended (`false`). Calls in flight go on: the
    /// driver task lives until they end.
    pub async fn until_unusable(&mut self) -> bool {
        match self.heard.wait_for(|h| h.goaway || h.closed).await {
            Ok(heard) => heard.goaway,
            Err(_) => false,
        }
    }
}

/// Aborts a half-open connection's driver, unless disarmed.
struct AbortUnlessReady(Option<tokio::task::AbortHandle>);

impl Drop for AbortUnlessReady {
    fn drop(&mut self) {
        if let Some(driver) = self.0.take() {
            driver.abort();
        }
    }
}

/// Connects to `addr` and waits for the server's SETTINGS. Unbounded
/// here: the caller bounds it with the connect timeout, and dropping this
/// future aborts the half-open connection.
pub async fn open(addr: SocketAddr, dial: &Dial) -> Result<Open, BoxError> {
    let tcp = TcpStream::connect(addr)
        .await
        .map_err(|e| format!("tcp connect {addr}: {e}"))?;
    // gRPC sends small frames that must not wait for Nagle's timer.
    tcp.set_nodelay(true)?;
    let io = match &dial.tls {
        None => Either::Left(tcp),
        Some(tls) => {
            let stream = tls
                .connector
                .connect(tls.name.clone(), tcp)
                .await
                .map_err(|e| format!("tls handshake with {addr} as {:?}: {e}", tls.name))?;
            if stream.get_ref().1.alpn_protocol() != Some(b"h2") {
                return Err(format!("{addr} did not agree to HTTP/2 (ALPN h2)").into());
            }
            Either::Right(stream)
        }
    };
    let heard = Arc::new(watch::Sender::new(Heard::default()));
    let mut builder = Builder::new(TokioExecutor::new());
    builder.timer(TokioTimer::new());
    if let Some(interval) = dial.keepalive_interval {
        builder
            .keep_alive_interval(interval)
            .keep_alive_timeout(dial.keepalive_timeout)
            .keep_alive_while_idle(true);
    }
    let (sender, connection) = builder
        .handshake(TokioIo::new(Tapped::new(io, Arc::clone(&heard))))
        .await
        .map_err(|e| format!("http/2 handshake with {addr}: {e}"))?;
    let mut watching = heard.subscribe();
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(%addr, "connection ended: {e}");
        }
        heard.send_modify(|h| h.closed = true);
    });
    let mut guard = AbortUnlessReady(Some(driver.abort_handle()));
    // "Ready" is the server's SETTINGS, not the TCP connect: a frozen
    // process's kernel still completes the TCP handshake.
    let settings = watching
        .wait_for(|h| h.settings || h.closed)
        .await
        .map(|h| h.settings)
        .unwrap_or(false);
    if !settings {
        return Err(format!("{addr} closed the connection before its SETTINGS").into());
    }
    guard.0 = None;
    Ok(Open {
        sender,
        heard: watching,
        driver,
    })
}

/// Gives a request the scheme and authority every endpoint is called by:
/// tonic's generated clients send a path alone, and HTTP/2 needs
/// `:scheme` and `:authority` (the name, not the address, as grpc-go does).
pub fn set_origin(
    request: &mut http::Request<Body>,
    scheme: &http::uri::Scheme,
    authority: &http::uri::Authority,
) -> Result<(), BoxError> {
    let mut parts = request.uri().clone().into_parts();
    parts.scheme = Some(scheme.clone());
    parts.authority = Some(authority.clone());
    if parts.path_and_query.is_none() {
        parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    }
    *request.uri_mut() = http::Uri::from_parts(parts)?;
    Ok(())
}
