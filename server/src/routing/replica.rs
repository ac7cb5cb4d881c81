//! Which replica answered: the `routing-replica` response header, named by
//! `--replica` or `--replica-hostname`, so a client behind a load balancer
//! sees where each call went (`docs/balancing.md`). The connection's
//! service wrapper ([`crate::connection::age::Tracked`]) adds it to every
//! response, in the same wrapper that counts streams, so it costs no layer
//! of its own.

use crate::knobs::Config;

/// The header every response carries when `--replica NAME` is set: named
/// once, in the contract crate, for the server and its clients alike.
pub use routing_contracts::REPLICA_HEADER;

/// Where `--replica-hostname` reads this host's name: the kernel's, as
/// `hostname` prints it, which is each container's (or pod's) own.
const HOSTNAME_FILE: &str = "/proc/sys/kernel/hostname";

/// The replica's name: `--replica`, or with `--replica-hostname` this
/// host's name, checked as `--replica` is (1 to 64 visible ASCII characters).
pub fn replica_name(config: &Config) -> Result<Option<String>, String> {
    if !config.replica_hostname {
        return Ok(config.replica.clone());
    }
    let text = std::fs::read_to_string(HOSTNAME_FILE)
        .map_err(|e| format!("--replica-hostname: cannot read {HOSTNAME_FILE}: {e}"))?;
    crate::knobs::replica_name(&text)
        .map(Some)
        .map_err(|e| format!("--replica-hostname: this host's name {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given --replica-hostname, then the replica is named by the kernel's
    /// host name, trimmed; given --replica alone, by that name.
    #[test]
    fn replica_hostname_names_the_replica_by_this_hosts_name() {
        let by_host = Config {
            replica_hostname: true,
            ..Config::default()
        };
        match std::fs::read_to_string(HOSTNAME_FILE) {
            Ok(host) => assert_eq!(
                replica_name(&by_host).expect("a host name").as_deref(),
                Some(host.trim())
            ),
            Err(_) => assert!(replica_name(&by_host).is_err(), "no {HOSTNAME_FILE} here"),
        }
        let named = Config {
            replica: Some("replica-a".into()),
            ..Config::default()
        };
        assert_eq!(replica_name(&named), Ok(Some("replica-a".into())));
    }
}
