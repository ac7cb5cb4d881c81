//! TLS for every client: `--tls-ca PATH` trusts the CA certificates in a
//! PEM file (e.g. `routing-server dev-cert`'s `ca.pem`) and speaks TLS;
//! `--tls-server-name NAME` checks that name in the server's certificate
//! instead of the target's host. Without `--tls-ca`, plaintext, as before.
//!
//! The handshake runs inside the counting connector ([`crate::wire`]), with
//! tokio-rustls and the `ring` provider, as the server's: so the wire counts
//! include the handshake and every record's overhead, and the JSON line can
//! name the TLS version and how many handshakes resumed a session.
//!
//! Resumption: every connection a connector opens shares one rustls
//! `ClientConfig`, whose in-memory cache (256 sessions, rustls's default)
//! keeps the tickets the server sends. So a client that opens many
//! connections to one server (the footgun) resumes from its second on, if
//! the server issues tickets (`routing-server --tls-session-tickets`).

use std::{
    fs,
    path::Path,
    sync::{
        Arc, Mutex,
        atomic::{AtomicU64, Ordering},
    },
};

use rustls::{
    ClientConfig, RootCertStore,
    crypto::ring,
    pki_types::{CertificateDer, ServerName, pem::PemObject},
};
use serde::Serialize;

/// The CA certificates a client trusts, read from `--tls-ca`.
#[derive(Debug, Clone)]
pub struct TlsCa(Arc<RootCertStore>);

impl TlsCa {
    /// The certificates, e.g. for a rustls configuration of one's own
    /// (the harness's raw clients).
    pub fn roots(&self) -> Arc<RootCertStore> {
        Arc::clone(&self.0)
    }
}

/// Parses `--tls-ca`: a readable PEM file with at least one CA certificate.
pub fn tls_ca(path: &str) -> Result<TlsCa, String> {
    let pem = fs::read(Path::new(path)).map_err(|e| format!("{path}: cannot read it: {e}"))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("{path}: not a PEM certificate: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("{path}: not a usable CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!("{path}: holds no PEM certificate"));
    }
    Ok(TlsCa(Arc::new(roots)))
}

/// Parses `--tls-server-name`: a DNS name or an IP address.
pub fn tls_server_name(text: &str) -> Result<ServerName<'static>, String> {
    ServerName::try_from(text.to_owned()).map_err(|e| format!("{text:?}: {e}"))
}

/// What a connector needs to speak TLS: the configuration its connections
/// share (and so their session cache), the name to check, and the counts.
#[derive(Debug, Clone)]
pub struct ClientTls {
    /// Shared by every connection, and with it the session cache.
    config: Arc<ClientConfig>,
    /// The name to check, or why the target's host cannot be one.
    server_name: Result<ServerName<'static>, String>,
    counts: Arc<TlsCounts>,
}

impl ClientTls {
    /// TLS 1.3 and 1.2, ALPN `h2`, trusting `ca`, checking `server_name`.
    pub fn new(
        ca: &TlsCa,
        server_name: Result<ServerName<'static>, String>,
        counts: Arc<TlsCounts>,
    ) -> Self {
        let provider = Arc::new(ring::default_provider());
        let mut config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("ring supports TLS 1.3 and 1.2")
            .with_root_certificates(Arc::clone(&ca.0))
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Self {
            config: Arc::new(config),
            server_name,
            counts,
        }
    }

    /// Runs the handshake on `socket`, and counts it.
    pub(crate) async fn connect<S>(
        &self,
        socket: S,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<S>>
    where
        S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    {
        let name = self
            .server_name
            .clone()
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.config));
        let stream = connector.connect(name, socket).await?;
        self.counts.handshake(stream.get_ref().1);
        Ok(stream)
    }
}

/// Handshakes a connector's connections made.
#[derive(Debug, Default)]
pub struct TlsCounts {
    /// The version of the last handshake, e.g. `TLSv1_3`.
    version: Mutex<Option<String>>,
    handshakes: AtomicU64,
    resumed: AtomicU64,
}

impl TlsCounts {
    /// Records a finished handshake.
    pub(crate) fn handshake(&self, session: &rustls::ClientConnection) {
        self.handshakes.fetch_add(1, Ordering::Relaxed);
        if session.handshake_kind() == Some(rustls::HandshakeKind::Resumed) {
            self.resumed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(version) = session.protocol_version() {
            let mut last = self.version.lock().unwrap_or_else(|e| e.into_inner());
            *last = Some(format!("{version:?}"));
        }
    }

    pub fn report(&self) -> TlsReport {
        TlsReport {
            version: self
                .version
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone()
                .unwrap_or_default(),
            handshakes: self.handshakes.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
        }
    }
}

/// The `tls` object of a client's JSON line (only with `--tls-ca`):
/// `{"version":"TLSv1_3","handshakes":50,"resumed":49}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TlsReport {
    /// The negotiated version, as rustls names it (`TLSv1_3`, `TLSv1_2`).
    pub version: String,
    /// TLS handshakes made (one per connection).
    pub handshakes: u64,
    /// Of those, how many resumed an earlier session (no certificate sent,
    /// no signature computed).
    pub resumed: u64,
}
