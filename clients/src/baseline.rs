//! What every client shares: the command-line baseline, the channel set-up
//! with bounded timeouts, the emulated link (`--link`), and the sample quote.

use std::{sync::Arc, time::Duration};

use routing_contracts::routing::GetQuoteRequest;
use routing_contracts::types::CargoItem;
use tonic::transport::{Channel, Endpoint};

use crate::{
    Error,
    link::{Link, LinkArgs, LinkReport},
    target::Target,
    tls::{ClientTls, TlsCa, TlsCounts, TlsReport, tls_ca, tls_server_name},
    wire::CountingConnector,
};

/// TCP connect plus HTTP/2 handshake must finish within this: 5 s.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Every RPC has this bound: 10 s, set with `Endpoint::timeout`. tonic
/// enforces it in the client alone and sends no `grpc-timeout`
/// (`deadline-client` measures it): a call that hits it is reset, and the
/// server learns of it only from that reset. `Request::set_timeout` is what
/// puts a deadline on the wire (lever 6, docs/deadlines.md).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// The flags every client takes.
#[derive(Debug, Clone, clap::Args)]
pub struct Baseline {
    /// Server address: host:port or http://host:port.
    #[arg(long, env = "ROUTING_TARGET", default_value = crate::target::DEFAULT_TARGET)]
    pub target: Target,

    /// Seconds allowed to open a connection (TCP and HTTP/2 handshake).
    #[arg(long, default_value_t = CONNECT_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub connect_timeout_secs: u64,

    /// Deadline of each RPC, in seconds.
    #[arg(long, default_value_t = CALL_TIMEOUT.as_secs(), value_parser = clap::value_parser!(u64).range(1..))]
    pub call_timeout_secs: u64,

    /// The emulated link to the server: `--link wan`, `--rtt-ms`, `--mbit`,
    /// `--nat-idle-secs`. Without them, no link.
    #[command(flatten)]
    pub link: LinkArgs,

    /// Speak TLS, trusting the CA certificates in this PEM file (e.g. the ca.pem of
    /// `routing-server dev-cert`). Without it, plaintext.
    #[arg(long, env = "ROUTING_TLS_CA", value_name = "PATH", value_parser = tls_ca)]
    pub tls_ca: Option<TlsCa>,

    /// The name to check in the server's certificate [default: the target's host].
    #[arg(long, requires = "tls_ca", value_name = "NAME", value_parser = tls_server_name)]
    pub tls_server_name: Option<rustls::pki_types::ServerName<'static>>,

    /// The handshakes of every connector made from this baseline.
    #[arg(skip)]
    pub tls_counts: Arc<TlsCounts>,
}

impl Baseline {
    /// The baseline endpoint: the target with a connect timeout and a deadline
    /// on every call. Lessons add their own settings to it.
    pub fn endpoint(&self) -> Result<Endpoint, Error> {
        self.endpoint_at(self.target.uri())
    }

    /// The same settings for another address, such as a relay in front of
    /// the target.
    pub fn endpoint_at(&self, uri: String) -> Result<Endpoint, Error> {
        Ok(Endpoint::from_shared(uri)?
            .connect_timeout(Duration::from_secs(self.connect_timeout_secs))
            .timeout(Duration::from_secs(self.call_timeout_secs)))
    }

    /// A connector that counts the wire, through the link `--link` names.
    /// Channels opened through one connector (or its clones) share the
    /// link's rate, as flows on one real link do.
    pub fn wire(&self) -> CountingConnector {
        CountingConnector::with_link(self.link()).with_tls(self.tls())
    }

    /// TLS as `--tls-ca` and `--tls-server-name` ask; `None`: plaintext.
    /// Each call makes a new session cache, shared by the connector's
    /// connections and its clones.
    pub fn tls(&self) -> Option<ClientTls> {
        let ca = self.tls_ca.as_ref()?;
        let name = match &self.tls_server_name {
            Some(name) => Ok(name.clone()),
            None => tls_server_name(self.target.host()).map_err(|e| {
                format!("the target's host cannot be checked by TLS ({e}): give --tls-server-name")
            }),
        };
        Some(ClientTls::new(ca, name, Arc::clone(&self.tls_counts)))
    }

    /// The TLS handshakes for the client's JSON line; `None` (absent) in
    /// plaintext, so plaintext lines stay as they were.
    pub fn tls_report(&self) -> Option<TlsReport> {
        self.tls_ca.as_ref().map(|_| self.tls_counts.report())
    }

    /// The link's settings: the preset with the explicit flags applied.
    pub fn link(&self) -> Link {
        self.link.link()
    }

    /// The link for the client's JSON line; `None` (absent) without one.
    pub fn link_report(&self) -> Option<LinkReport> {
        self.link.report()
    }

    /// Opens one channel (one TCP connection) through `wire`, which counts it.
    ///
    /// The whole set-up is bounded by the connect timeout: tonic's own covers
    /// TCP only, so a server that accepts but never answers the HTTP/2
    /// handshake is caught here instead of hanging.
    pub async fn connect(
        &self,
        endpoint: &Endpoint,
        wire: CountingConnector,
    ) -> Result<Channel, Error> {
        let limit = Duration::from_secs(self.connect_timeout_secs);
        match tokio::time::timeout(limit, endpoint.connect_with_connector(wire)).await {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(e)) => {
                Err(format!("cannot connect to {}: {}", self.target, source_chain(&e)).into())
            }
            Err(_) => Err(format!(
                "cannot connect to {}: no HTTP/2 handshake within {limit:?}",
                self.target
            )
            .into()),
        }
    }
}

/// The quote every client asks for: 400.4 kg from Rotterdam to Singapore,
/// which the server prices at USD 1001.00.
pub fn sample_quote_request() -> GetQuoteRequest {
    GetQuoteRequest {
        origin: "NLRTM".into(),
        destination: "SGSIN".into(),
        cargo: vec![CargoItem {
            description: "machine parts".into(),
            weight_kg: 400.4,
        }],
    }
}

/// Turns a failed RPC into a short error: `GetQuote failed: Unavailable: ...`.
pub fn rpc_error(method: &'static str) -> impl Fn(tonic::Status) -> Error {
    move |status| format!("{method} failed: {:?}: {}", status.code(), status.message()).into()
}

/// An error and its causes on one line, e.g. "transport error: Connection refused".
fn source_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        // hyper and io errors often repeat their cause in their own text.
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
