//! The one address the harness may send traffic to: a server on this
//! machine. Anything that does not resolve to loopback only (127.0.0.0/8 or
//! ::1) is refused before a single packet leaves, whatever the flags: abuse
//! traffic never goes anywhere else. [`TlsArgs`]: the flags that say
//! whether to speak TLS to it.

use std::{
    fmt,
    net::{SocketAddr, ToSocketAddrs},
    path::PathBuf,
    str::FromStr,
};

use h2_peer::tls::HarnessTls;
use routing_clients::target::Target;
use rustls::pki_types::ServerName;

use crate::Error;

/// The server address every tool defaults to (the chapter's port).
pub const DEFAULT_TARGET: &str = routing_clients::target::DEFAULT_TARGET;

/// A `host:port` that resolves to loopback addresses only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopbackTarget {
    addr: SocketAddr,
}

impl LoopbackTarget {
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://ADDR`, for tonic's `Endpoint`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl fmt::Display for LoopbackTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.addr.fmt(f)
    }
}

impl FromStr for LoopbackTarget {
    type Err = String;

    /// Accepts what the clients accept (`host:port`, `http://host:port`),
    /// then resolves it: every address must be loopback.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let target: Target = input.parse()?;
        let authority = target.to_string();
        let addrs: Vec<SocketAddr> = authority
            .to_socket_addrs()
            .map_err(|e| format!("{input:?}: cannot resolve: {e}"))?
            .collect();
        let first = *addrs
            .first()
            .ok_or_else(|| format!("{input:?}: resolves to no address"))?;
        if let Some(outside) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(format!(
                "{input:?} resolves to {outside}, which is not a loopback address: \
                 the harness only targets servers on this machine (127.0.0.0/8 or [::1]); \
                 for a server in Compose use its published port, e.g. 127.0.0.1:9180"
            ));
        }
        Ok(Self { addr: first })
    }
}

/// The command-line flags of TLS, shared by `abuse` and `bench`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TlsArgs {
    /// Speak TLS to the target (and to every --compare server), trusting the CA
    /// certificates in this PEM file (e.g. the ca.pem of `routing-server dev-cert`).
    #[arg(long, env = "ROUTING_TLS_CA", value_name = "PATH")]
    pub tls_ca: Option<PathBuf>,

    /// The name to check in the server's certificate [default: the target's IP address].
    #[arg(long, requires = "tls_ca", value_name = "NAME")]
    pub tls_server_name: Option<String>,
}

impl TlsArgs {
    /// The TLS these flags ask for, for a server at `addr`; `None` in plaintext.
    pub fn for_target(&self, addr: SocketAddr) -> Result<Option<HarnessTls>, Error> {
        let Some(ca) = &self.tls_ca else {
            return Ok(None);
        };
        let name = match &self.tls_server_name {
            Some(name) => ServerName::try_from(name.clone())
                .map_err(|e| format!("--tls-server-name {name:?}: {e}"))?,
            None => ServerName::IpAddress(addr.ip().into()),
        };
        HarnessTls::new(ca, name).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_in_any_spelling_is_accepted() {
        for ok in [
            "127.0.0.1:9180",
            "http://127.0.0.1:9180",
            "127.9.9.9:1",
            "[::1]:9180",
        ] {
            let target: LoopbackTarget = ok.parse().expect(ok);
            assert!(target.addr().ip().is_loopback(), "{ok}");
        }
        let target: LoopbackTarget = "127.0.0.1:9180".parse().expect("loopback");
        assert_eq!(target.uri(), "http://127.0.0.1:9180");
    }

    #[test]
    fn anything_else_is_refused_with_the_reason() {
        for bad in [
            "10.0.0.1:9180",
            "192.168.1.1:80",
            "8.8.8.8:53",
            "[2001:db8::1]:9180",
        ] {
            let err = bad.parse::<LoopbackTarget>().expect_err(bad);
            assert!(err.contains("not a loopback address"), "{bad}: {err}");
        }
        let err = "localhost".parse::<LoopbackTarget>().expect_err("no port");
        assert!(err.contains("host:port"), "{err}");
    }

    #[test]
    fn tls_without_a_ca_is_plaintext() {
        let addr: SocketAddr = "127.0.0.1:1".parse().expect("an address");
        let tls = TlsArgs::default().for_target(addr).expect("no error");
        assert!(tls.is_none());
    }

    #[test]
    fn an_unreadable_ca_names_the_flag() {
        let args = TlsArgs {
            tls_ca: Some("/nonexistent/ca.pem".into()),
            tls_server_name: None,
        };
        let addr: SocketAddr = "127.0.0.1:1".parse().expect("an address");
        let err = args.for_target(addr).expect_err("no such file");
        assert!(
            err.to_string()
                .starts_with("--tls-ca /nonexistent/ca.pem: cannot read it"),
            "{err}"
        );
    }
}
