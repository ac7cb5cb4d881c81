//! Where the addresses come from: a small trait, so tests can feed the
//! balancer changing sets, and its DNS implementation over hickory-resolver.

use std::{future::Future, net::SocketAddr, time::Duration};

use hickory_resolver::TokioResolver;

use crate::Error;

/// Anything that can say, now, which addresses a name has.
///
/// The balancer calls it on its interval and soon after a call fails. An
/// `Err` or an empty answer leaves the balancer's set as it was.
pub trait Resolve: Send + Sync + 'static {
    /// Every address the name has at this moment, in any order.
    fn resolve(&self) -> impl Future<Output = Result<Vec<SocketAddr>, Error>> + Send;
}

/// A DNS name and port, such as a Kubernetes headless Service
/// (`routing-headless.routing.svc.cluster.local:9180`), looked up through
/// the system's resolver configuration (`/etc/resolv.conf`: in a pod,
/// CoreDNS and the namespace's search domains).
#[derive(Clone)]
pub struct DnsName {
    host: String,
    port: u16,
    resolver: TokioResolver,
}

impl std::fmt::Debug for DnsName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DnsName({}:{})", self.host, self.port)
    }
}

impl DnsName {
    /// `target` is `dns:///HOST:PORT` (grpc-go's spelling, without an
    /// authority) or `HOST:PORT`. The port is required: a headless Service
    /// has no default one.
    pub fn from_system_conf(target: &str) -> Result<Self, Error> {
        let (host, port) = parse_target(target)?;
        let mut builder = TokioResolver::builder_tokio()
            .map_err(|e| format!("cannot read the system's DNS configuration: {e}"))?;
        let options = builder.options_mut();
        // No cache in the process: each re-resolve asks the server again, so
        // the interval alone decides how stale the set can be. A cached
        // answer would live for its TTL (CoreDNS gives 5 s by default, 30 s
        // in kubeadm's Corefile) on top of the interval. grpc-go's resolver
        // does not cache either.
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

    /// The name as given, `HOST:PORT`.
    pub fn name(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

impl Resolve for DnsName {
    async fn resolve(&self) -> Result<Vec<SocketAddr>, Error> {
        let answer = self
            .resolver
            .lookup_ip(self.host.as_str())
            .await
            .map_err(|e| format!("{}: {e}", self.host))?;
        Ok(answer
            .iter()
            .map(|ip| SocketAddr::new(ip, self.port))
            .collect())
    }
}

/// `dns:///host:port` or `host:port` into its host and port.
fn parse_target(target: &str) -> Result<(String, u16), Error> {
    let hint = "expected dns:///HOST:PORT or HOST:PORT, e.g. dns:///routing-headless.routing.svc.cluster.local:9180";
    let rest = match target.split_once("://") {
        None => target,
        Some(("dns", rest)) => rest.strip_prefix('/').ok_or_else(|| {
            format!("{target:?}: a DNS server authority is not supported; {hint}")
        })?,
        Some(_) => return Err(format!("{target:?}: unsupported scheme; {hint}").into()),
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
        return Err(format!("{target:?}: no host; {hint}").into());
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
}
