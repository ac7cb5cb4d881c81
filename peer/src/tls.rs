//! TLS for the peer's connections: with a [`HarnessTls`] (the harness's
//! `--tls-ca PATH`), every connection an attack, a benchmark or a test opens
//! speaks TLS 1.3 or 1.2 with ALPN `h2`, as a gRPC client does, so the same
//! misbehaviour runs against a TLS server unchanged.
//!
//! Three kinds of connection use it:
//! - the raw and `h2` clients ([`crate::raw`], [`crate::h2client`]) run
//!   the handshake on their socket ([`HarnessTls::handshake`]) and then
//!   misbehave inside the TLS session exactly as they do in plaintext;
//! - tonic channels (the probe, `bench`'s load) dial through
//!   `routing-clients`' connector, which runs the same handshake;
//! - handshake attacks send TLS records by hand: half a ClientHello
//!   ([`client_hello`]), or a whole one and then nothing.
//!
//! The server's certificate is checked against the CA, for the target's IP
//! (`dev-cert` certificates name `127.0.0.1`) or `--tls-server-name`.
//! [`HarnessTls::flooder`] is the exception: a flooding attacker checks
//! nothing, and skipping the check keeps the flood's own CPU below the
//! server's (a certificate check costs the client two ECDSA verifications,
//! more than the server's one signature).

use std::{io, net::SocketAddr, path::Path, sync::Arc};

use rustls::{
    ClientConfig, ClientConnection, DigitallySignedStruct, SignatureScheme,
    client::{
        Resumption,
        danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    },
    crypto::ring,
    pki_types::{CertificateDer, ServerName, UnixTime},
};
use tokio::net::TcpStream;
use tokio_rustls::{TlsConnector, client::TlsStream};
use tokio_util::either::Either;

use crate::Error;

/// The one application protocol offered: HTTP/2, as gRPC requires.
pub const ALPN_H2: &[u8] = b"h2";

/// A client's TLS: its rustls configuration and the name it checks.
/// Cheap to clone; clones share the session cache.
#[derive(Debug, Clone)]
pub struct HarnessTls {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    /// The CA for `routing-clients`' connector (tonic channels).
    ca: routing_clients::tls::TlsCa,
}

impl HarnessTls {
    /// TLS 1.3 and 1.2, ALPN `h2`, trusting the CA certificates in `ca`
    /// (PEM), checking `name`.
    pub fn new(ca: &Path, name: ServerName<'static>) -> Result<Self, Error> {
        let shown = ca.display().to_string();
        let ca = routing_clients::tls::tls_ca(&shown).map_err(|e| format!("--tls-ca {e}"))?;
        let mut config = builder()?
            .with_root_certificates(ca.roots())
            .with_no_client_auth();
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Ok(Self {
            config: Arc::new(config),
            name,
            ca,
        })
    }

    /// The same TLS for a flooding attacker: no certificate check and no
    /// resumption (unless `resume`), so that every handshake costs the
    /// server a full one and the attacker as little as a handshake can.
    pub fn flooder(&self, resume: bool) -> Result<Self, Error> {
        let mut config = builder()?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChecksNothing))
            .with_no_client_auth();
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        if !resume {
            config.resumption = Resumption::disabled();
        }
        Ok(Self {
            config: Arc::new(config),
            ..self.clone()
        })
    }

    /// Runs the client's side of the handshake on `tcp`. The connection is
    /// refused if the server did not agree to `h2`.
    pub async fn handshake(&self, tcp: TcpStream) -> io::Result<TlsStream<TcpStream>> {
        let connector = TlsConnector::from(Arc::clone(&self.config));
        let stream = connector.connect(self.name.clone(), tcp).await?;
        if stream.get_ref().1.alpn_protocol() != Some(ALPN_H2) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the server did not agree to ALPN h2",
            ));
        }
        Ok(stream)
    }

    /// A connector for tonic channels (`Endpoint::connect_with_connector`)
    /// that speaks this TLS, with a session cache of its own.
    pub fn connector(&self) -> routing_clients::wire::CountingConnector {
        let tls =
            routing_clients::tls::ClientTls::new(&self.ca, Ok(self.name.clone()), Arc::default());
        routing_clients::wire::CountingConnector::new().with_tls(Some(tls))
    }

    /// The first flight this client sends: one TLS record holding its
    /// ClientHello, as bytes.
    pub fn client_hello(&self) -> Result<Vec<u8>, Error> {
        client_hello(&self.config, self.name.clone())
    }
}

fn builder() -> Result<rustls::ConfigBuilder<ClientConfig, rustls::WantsVerifier>, rustls::Error> {
    ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
}

/// The bytes a client with `config` sends first, for `name`: its
/// ClientHello in one TLS handshake record.
pub fn client_hello(
    config: &Arc<ClientConfig>,
    name: ServerName<'static>,
) -> Result<Vec<u8>, Error> {
    let mut conn = ClientConnection::new(Arc::clone(config), name)?;
    let mut bytes = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut bytes)?;
    }
    Ok(bytes)
}

/// The length a TLS record's 5-byte header announces for its body, if
/// `bytes` starts with a handshake record (content type 22).
pub fn handshake_record_len(bytes: &[u8]) -> Option<usize> {
    match bytes {
        [0x16, 0x03, _, high, low, ..] => Some(usize::from(*high) << 8 | usize::from(*low)),
        _ => None,
    }
}

/// The flooder's certificate check: none. Only ever used against the
/// loopback target, by an attack whose point is to make the server work.
#[derive(Debug)]
struct ChecksNothing;

impl ServerCertVerifier for ChecksNothing {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.verify_tls12_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A connection's byte stream: the socket itself (`Left`), or TLS over it
/// (`Right`). `Either` forwards reads and writes to whichever it holds.
pub type Stream = Either<TcpStream, Box<TlsStream<TcpStream>>>;

/// `tcp` as it is, or after the client's TLS handshake on it.
pub async fn over(tcp: TcpStream, tls: Option<&HarnessTls>) -> io::Result<Stream> {
    Ok(match tls {
        None => Either::Left(tcp),
        Some(tls) => Either::Right(Box::new(tls.handshake(tcp).await?)),
    })
}

/// Connects to `addr` (TCP_NODELAY on), then [`over`].
pub async fn connect(addr: SocketAddr, tls: Option<&HarnessTls>) -> io::Result<Stream> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    over(tcp, tls).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Arc<ClientConfig> {
        let mut config = builder()
            .expect("ring supports TLS 1.3 and 1.2")
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        config.alpn_protocols = vec![ALPN_H2.to_vec()];
        Arc::new(config)
    }

    /// A ClientHello is one handshake record, whose header announces the
    /// rest of the bytes exactly, so half of it is a record the server can
    /// never finish reading.
    #[test]
    fn a_client_hello_is_one_whole_handshake_record() {
        let name = ServerName::try_from("localhost").expect("a DNS name");
        let hello = client_hello(&config(), name).expect("a ClientHello");
        let body = handshake_record_len(&hello).expect("a handshake record");
        assert_eq!(hello.len(), 5 + body);
        // Its first handshake message is a ClientHello (type 1).
        assert_eq!(hello[5], 1);
        let half = &hello[..hello.len() / 2];
        assert!(half.len() < 5 + handshake_record_len(half).expect("still a header"));
    }

    #[test]
    fn only_a_handshake_record_has_a_record_length() {
        assert_eq!(
            handshake_record_len(&[0x16, 0x03, 0x01, 0x01, 0x02]),
            Some(258)
        );
        assert_eq!(handshake_record_len(b"PRI * HTTP/2.0"), None);
        assert_eq!(handshake_record_len(&[0x16, 0x03]), None);
    }
}
