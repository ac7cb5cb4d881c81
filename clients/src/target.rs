//! Parsing the server address a client connects to.

use std::{fmt, str::FromStr};

use http::uri::Authority;

/// Where the clients connect unless `--target` / `ROUTING_TARGET` says otherwise.
pub const DEFAULT_TARGET: &str = "127.0.0.1:9180";

/// A plaintext gRPC server address: `host:port` or `http://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    authority: Authority,
}

impl Target {
    /// The URI tonic's `Endpoint` expects, e.g. `http://127.0.0.1:9180`.
    pub fn uri(&self) -> String {
        format!("http://{}", self.authority)
    }

    /// The host, without its port (IPv6 literals without brackets): the
    /// name TLS checks unless `--tls-server-name` says otherwise.
    pub fn host(&self) -> &str {
        let host = self.authority.host();
        host.trim_start_matches('[').trim_end_matches(']')
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.authority.as_str())
    }
}

impl FromStr for Target {
    type Err = String;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let hint = "expected host:port or http://host:port, e.g. 127.0.0.1:9180";
        let rest = match input.trim().split_once("://") {
            None => input.trim(),
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(format!(
                    "{input:?}: give host:port, and --tls-ca CA.pem for TLS; {hint}"
                ));
            }
            Some(_) => return Err(format!("{input:?}: unsupported scheme; {hint}")),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        let authority: Authority = rest.parse().map_err(|_| format!("{input:?}: {hint}"))?;
        let valid = authority.port_u16().is_some_and(|p| p > 0)
            && !authority.host().is_empty()
            && !authority.as_str().contains('@');
        if valid {
            Ok(Self { authority })
        } else {
            Err(format!("{input:?}: {hint}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn uri(input: &str) -> Result<String, String> {
        input.parse::<Target>().map(|t| t.uri())
    }

    #[test]
    fn accepts_host_port_with_or_without_http() {
        assert_eq!(
            uri("127.0.0.1:9180").as_deref(),
            Ok("http://127.0.0.1:9180")
        );
        assert_eq!(
            uri("http://server:9000").as_deref(),
            Ok("http://server:9000")
        );
        assert_eq!(
            uri("http://localhost:9180/").as_deref(),
            Ok("http://localhost:9180")
        );
        assert_eq!(uri("[::1]:9180").as_deref(), Ok("http://[::1]:9180"));
        assert_eq!(uri(DEFAULT_TARGET).as_deref(), Ok("http://127.0.0.1:9180"));
    }

    #[test]
    fn rejects_what_tonic_could_not_dial_with_a_hint() {
        for bad in [
            "",
            "localhost",
            "localhost:",
            ":9180",
            "localhost:0",
            "localhost:99999",
            "https://localhost:443",
            "ftp://x:1",
            "http://host:1/path",
            "user@host:1",
        ] {
            let err = uri(bad).expect_err(bad);
            assert!(err.contains("host:port"), "{bad}: {err}");
        }
    }
}
