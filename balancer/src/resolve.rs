//! Where the addresses come from: the [`Resolve`] trait (tests feed the
//! balancer changing sets through it) and [`DnsName`], a name looked up
//! through the system's resolver configuration with hickory-resolver.
//!
//! A resolve that fails says how ([`ResolveError`]): the name does not
//! exist (NXDOMAIN), it exists with no address, or no answer came in time.
//! Each keeps the last good set, as grpc-go does, and is logged and counted
//! apart: a deleted Service and a slow DNS server call for different fixes.

use std::{fmt, future::Future, net::SocketAddr, time::Duration};

use hickory_resolver::{
    TokioResolver,
    net::{DnsError, NetError},
    proto::op::ResponseCode,
};

/// Why a resolve gave no address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// The name does not exist (NXDOMAIN): a typo, or a deleted Service.
    NxDomain(String),
    /// The name exists with no A or AAAA record: a headless Service with
    /// no Ready pod.
    Empty,
    /// No answer within the resolve timeout.
    Timeout,
    /// Anything else (no server reachable, a malformed answer).
    Other(String),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NxDomain(name) => write!(f, "{name}: no such name (NXDOMAIN)"),
            Self::Empty => write!(f, "the name has no address"),
            Self::Timeout => write!(f, "no answer in time"),
            Self::Other(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ResolveError {}

/// Anything that can say, now, which addresses a name has.
pub trait Resolve: Send + Sync + 'static {
    /// Every address the name has at this moment, in any order. An empty
    /// `Ok` is taken as [`ResolveError::Empty`].
    fn resolve(&self) -> impl Future<Output = Result<Vec<SocketAddr>, ResolveError>> + Send;
}

/// A fixed set of addresses: no DNS at all (tests, benchmarks, a static list).
#[derive(Debug, Clone)]
pub struct Fixed(pub Vec<SocketAddr>);

impl Resolve for Fixed {
    async fn resolve(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        Ok(self.0.clone())
    }
}

/// A DNS name and port, such as a Kubernetes headless Service
/// (`routing-headless.routing.svc.cluster.local:9180`), looked up through
/// `/etc/resolv.conf` (in a pod: CoreDNS and the namespace's search
/// domains). A and AAAA records both count: IPv6 pods work.
#[derive(Clone)]
pub struct DnsName {
    host: String,
    port: u16,
    resolver: TokioResolver,
}

impl fmt::Debug for DnsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DnsName({}:{})", self.host, self.port)
    }
}

impl DnsName {
    /// `target` is `dns:///HOST:PORT` (grpc-go's spelling, without an
    /// authority) or `HOST:PORT`. The port is required: a headless Service
    /// has no default one.
    pub fn from_system_conf(target: &str) -> Result<Self, String> {
        let (host, port) = parse_target(target)?;
        let mut builder = TokioResolver::builder_tokio()
            .map_err(|e| format!("cannot read the system's DNS configuration: {e}"))?;
        let options = builder.options_mut();
        // No cache in the process: each resolve asks the server again, so
        // the interval alone decides how stale the set is here. grpc-go's
        // resolver does not cache either.
        options.positive_max_ttl = Some(Duration::ZERO);
        options.negative_max_ttl = Some(Duration::ZERO);
        let resolver = builder
            .build()
            .map_err(|e| format!("cannot build the DNS resolver: {e}"))?;
        Ok(Self {
            host,
            port,
            resolver,
        })
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port
    }
}

impl Resolve for DnsName {
    async fn resolve(&self) -> Result<Vec<SocketAddr>, ResolveError> {
        match self.resolver.lookup_ip(self.host.as_str()).await {
            Ok(answer) => Ok(answer
                .iter()
                .map(|ip| SocketAddr::new(ip, self.port))
                .collect()),
            Err(NetError::Dns(DnsError::NoRecordsFound(none))) => match none.response_code {
                ResponseCode::NXDomain => Err(ResolveError::NxDomain(self.host.clone())),
                _ => Err(ResolveError::Empty),
            },
            Err(NetError::Timeout) => Err(ResolveError::Timeout),
            Err(e) => Err(ResolveError::Other(format!("{}: {e}", self.host))),
        }
    }
}

/// `dns:///host:port` or `host:port` into its host and port.
pub fn parse_target(target: &str) -> Result<(String, u16), String> {
    let hint = "expected dns:///HOST:PORT or HOST:PORT, e.g. dns:///routing-headless.routing.svc.cluster.local:9180";
    let rest = match target.split_once("://") {
        None => target,
        Some(("dns", rest)) => rest.strip_prefix('/').ok_or_else(|| {
            format!("{target:?}: a DNS server authority is not supported; {hint}")
        })?,
        Some(_) => return Err(format!("{target:?}: unsupported scheme; {hint}")),
    };
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| format!("{target:?}: no port; {hint}"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port
        .parse()
        .ok()
        .filter(|&p| p > 0)
        .ok_or_else(|| format!("{target:?}: bad port; {hint}"))?;
    if host.is_empty() || host.contains('/') {
        return Err(format!("{target:?}: no host; {hint}"));
    }
    Ok((host.to_owned(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(target: &str) -> Option<(String, u16)> {
        parse_target(target).ok()
    }

    #[test]
    fn takes_grpc_go_spelling_or_host_port() {
        let name = "routing-headless.routing.svc.cluster.local";
        assert_eq!(
            parsed(&format!("dns:///{name}:9180")),
            Some((name.to_owned(), 9180))
        );
        assert_eq!(parsed("localhost:80"), Some(("localhost".to_owned(), 80)));
        assert_eq!(parsed("[::1]:9180"), Some(("::1".to_owned(), 9180)));
    }

    #[test]
    fn refuses_what_it_cannot_resolve() {
        for bad in [
            "dns://8.8.8.8/name:9180",
            "http://name:9180",
            "name",
            "name:0",
            "name:http",
            ":9180",
            "dns:///:9180",
        ] {
            assert!(parse_target(bad).is_err(), "{bad} was accepted");
        }
    }

    /// An IPv6 literal resolves to itself, with no DNS server asked.
    #[tokio::test]
    async fn an_ipv6_address_resolves_to_itself() {
        let name = DnsName::from_system_conf("dns:///[::1]:9180").expect("parses");
        assert_eq!(
            name.resolve().await,
            Ok(vec!["[::1]:9180".parse().expect("address")])
        );
    }
}
