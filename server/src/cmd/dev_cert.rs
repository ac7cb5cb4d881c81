//! Certificates a reader can make: `routing-server dev-cert --out DIR`
//! writes a local certificate authority and a server certificate it signed,
//! with [`rcgen`] (ECDSA P-256 keys, signed with ring):
//!
//! - `ca.pem`: the CA's certificate, what clients trust
//!   (`grpcurl -cacert DIR/ca.pem`, `ghz --cacert`, the clients' `--tls-ca`);
//! - `server.pem` and `server.key`: the server's certificate and its key
//!   (`routing-server --tls-cert DIR/server.pem --tls-key DIR/server.key`),
//!   valid for [`SERVER_NAMES`].
//!
//! The CA's own key is not written: nothing more can be signed with it, so a
//! copied `ca.pem` trusts these certificates and no others. To make new
//! ones, run the command again and hand out the new `ca.pem`. The `openssl`
//! commands that make the same files are in docs/tls.md.
//!
//! The profile is one strict verifiers accept (`openssl verify
//! -x509_strict`, Python's `ssl` with `VERIFY_X509_STRICT`): the server
//! certificate names its issuer's key (Authority Key Identifier, RFC 5280
//! §4.2.1.1) and its own (Subject Key Identifier), and both certificates
//! have lifetimes a reader can copy ([`SERVER_LIFETIME`], [`CA_LIFETIME`]).
//! [`check_kept`] is what `dev-cert --keep` asks before it keeps a set.

use std::{fmt, fs, io, path::Path, time::Duration};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use time::{Date, OffsetDateTime};

/// One day, the unit of the lifetimes below.
const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// The server certificate's lifetime, from its start to its end: 825 days.
/// It is the longest Apple's platforms accept for a TLS server certificate
/// from any CA, private ones included, and mkcert's leaf lifetime. (Public
/// CAs must stop at 398 days, a CA/Browser Forum rule for publicly trusted
/// certificates; a local CA is not bound by it, and a shorter life would only
/// make readers hand out a new `ca.pem` more often.)
pub const SERVER_LIFETIME: Duration = Duration::from_secs(825 * DAY.as_secs());

/// The CA's lifetime: 10 years (3,650 days), mkcert's for its root. The CA
/// signs one certificate and its key is dropped, so this only has to outlive
/// [`SERVER_LIFETIME`]; it is not the two thousand years of rcgen's default.
pub const CA_LIFETIME: Duration = Duration::from_secs(3650 * DAY.as_secs());

/// How long before "now" both certificates start: 1 day. A client whose clock
/// is behind the clock that made them would otherwise reject them as not yet
/// valid; a day covers a clock kept in local time instead of UTC (up to 14
/// hours off) and a VM or container that lags after a suspend. It counts in
/// the lifetimes above, so the end dates are 824 days and about 10 years
/// from now.
pub const BACKDATE: Duration = DAY;

/// `dev-cert --keep` remakes a set that expires within 30 days. Compose runs
/// `dev-cert --keep` before each start of `server-tls`, and a server started
/// on a set with less left could run past its end; 30 days is when certbot
/// renews, and leaves a month to hand clients the new `ca.pem`.
pub const RENEW_BEFORE: Duration = Duration::from_secs(30 * DAY.as_secs());

/// The names the server certificate is valid for: the chapter's `localhost`
/// and `127.0.0.1`, and the compose services' names, so a client in another
/// container can check it (`server`, `server-tls`).
pub const SERVER_NAMES: [&str; 4] = ["localhost", "127.0.0.1", "server", "server-tls"];

/// The names of the three files `dev-cert` writes into its directory.
pub const FILES: [&str; 3] = ["ca.pem", "server.pem", "server.key"];

/// The three files `dev-cert` writes, as PEM text.
#[derive(Debug, Clone)]
pub struct DevCert {
    /// The CA's certificate (`ca.pem`).
    pub ca_pem: String,
    /// The server's certificate (`server.pem`).
    pub cert_pem: String,
    /// The server's private key, PKCS#8 (`server.key`).
    pub key_pem: String,
}

/// A new CA and a server certificate for `names`, signed by it, valid from
/// [`BACKDATE`] ago.
pub fn generate(names: &[&str]) -> Result<DevCert, rcgen::Error> {
    generate_at(names, OffsetDateTime::now_utc())
}

/// The set [`generate`] makes when the clock reads `now`. Tests pass a time
/// in the past to get a set that has expired, or is about to.
pub fn generate_at(names: &[&str], now: OffsetDateTime) -> Result<DevCert, rcgen::Error> {
    let not_before = now - BACKDATE;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    // `Ca` also writes the CA's Subject Key Identifier, which the server
    // certificate's Authority Key Identifier repeats.
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "routing-server dev CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    ca.not_before = not_before;
    ca.not_after = not_before + CA_LIFETIME;
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut server = CertificateParams::new(names)?;
    server
        .distinguished_name
        .push(DnType::CommonName, "routing-server");
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    // Basic constraints CA:FALSE, stated: rcgen writes a Subject Key
    // Identifier only with it (or for a CA), and strict verifiers want one.
    server.is_ca = IsCa::ExplicitNoCa;
    // The Authority Key Identifier, the CA's Subject Key Identifier: without
    // it `openssl verify -x509_strict` fails with "Missing Authority Key
    // Identifier", and so does Python's ssl since 3.13.
    server.use_authority_key_identifier_extension = true;
    server.not_before = not_before;
    server.not_after = not_before + SERVER_LIFETIME;
    let key = KeyPair::generate()?;
    let cert = server.signed_by(&key, &ca)?;
    Ok(DevCert {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl DevCert {
    /// Writes `ca.pem`, `server.pem` and `server.key` into `dir` (made if
    /// missing), replacing any there.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        fs::create_dir_all(dir)?;
        fs::write(dir.join("ca.pem"), &self.ca_pem)?;
        fs::write(dir.join("server.pem"), &self.cert_pem)?;
        write_private(&dir.join("server.key"), &self.key_pem)
    }
}

/// What `dev-cert --keep` finds in its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeptSet {
    /// All three files, both certificates valid now and for longer than
    /// [`RENEW_BEFORE`]: keep them. `until` is the first of their end dates.
    Fresh { until: Date },
    /// A file is missing: a new set is made, as for a first run.
    Incomplete { missing: &'static str },
    /// A certificate's dates cannot be read (not PEM, not a certificate).
    Unreadable { file: &'static str, reason: String },
    /// A certificate has ended.
    Expired { file: &'static str, not_after: Date },
    /// A certificate ends within [`RENEW_BEFORE`].
    EndsSoon { file: &'static str, not_after: Date },
    /// A certificate starts after now: it was made by a clock that ran ahead.
    NotYetValid {
        file: &'static str,
        not_before: Date,
    },
}

impl fmt::Display for KeptSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Fresh { until } => write!(f, "valid until {until}"),
            Self::Incomplete { missing } => write!(f, "{missing} is missing"),
            Self::Unreadable { file, reason } => {
                write!(f, "cannot read the dates of {file}: {reason}")
            }
            Self::Expired { file, not_after } => write!(f, "{file} expired on {not_after}"),
            Self::EndsSoon { file, not_after } => write!(
                f,
                "{file} expires on {not_after}, within the {} days kept in hand",
                RENEW_BEFORE.as_secs() / DAY.as_secs()
            ),
            Self::NotYetValid { file, not_before } => {
                write!(f, "{file} is valid only from {not_before}")
            }
        }
    }
}

/// Whether the set in `dir` can be kept at `now`: all of [`FILES`] there,
/// and `ca.pem` and `server.pem` valid from before `now` until after
/// `now` + [`RENEW_BEFORE`]. Only dates are read: the key is not matched
/// to the certificate here (the server does that when it starts).
pub fn check_kept(dir: &Path, now: OffsetDateTime) -> KeptSet {
    if let Some(missing) = FILES.iter().copied().find(|f| !dir.join(f).is_file()) {
        return KeptSet::Incomplete { missing };
    }
    let ca_until = match usable_until(dir, "ca.pem", now) {
        Ok(until) => until,
        Err(why) => return why,
    };
    match usable_until(dir, "server.pem", now) {
        Ok(until) => KeptSet::Fresh {
            until: until.min(ca_until),
        },
        Err(why) => why,
    }
}

/// The end date of `file` in `dir` if it can be kept at `now`, or why not.
fn usable_until(dir: &Path, file: &'static str, now: OffsetDateTime) -> Result<Date, KeptSet> {
    let (not_before, not_after) =
        validity(&dir.join(file)).map_err(|reason| KeptSet::Unreadable { file, reason })?;
    let (start, end) = (not_before.date(), not_after.date());
    if not_before > now {
        Err(KeptSet::NotYetValid {
            file,
            not_before: start,
        })
    } else if not_after <= now {
        Err(KeptSet::Expired {
            file,
            not_after: end,
        })
    } else if not_after <= now + RENEW_BEFORE {
        Err(KeptSet::EndsSoon {
            file,
            not_after: end,
        })
    } else {
        Ok(end)
    }
}

/// The first certificate in the PEM file at `path`: its start and end.
fn validity(path: &Path) -> Result<(OffsetDateTime, OffsetDateTime), String> {
    let text = fs::read(path).map_err(|e| e.to_string())?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text).map_err(|e| format!("no PEM: {e}"))?;
    let cert = pem
        .parse_x509()
        .map_err(|e| format!("not a certificate: {e}"))?;
    let validity = cert.validity();
    Ok((
        validity.not_before.to_datetime(),
        validity.not_after.to_datetime(),
    ))
}

/// The key is readable by its owner only, where the platform says so.
/// (compose.yaml's `certs` service runs as the same user as `server-tls`,
/// 65532, so the key needs no wider mode there.)
fn write_private(path: &Path, text: &str) -> io::Result<()> {
    fs::write(path, text)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a fresh dev certificate, then the server's configuration
    /// accepts its certificate and key (the key is the certificate's), and
    /// the CA file holds exactly one certificate.
    #[test]
    fn the_server_certificate_and_key_belong_together() {
        let dir = std::env::temp_dir().join(format!("dev-cert-test-{}", std::process::id()));
        let made = generate(&SERVER_NAMES).expect("generated");
        made.write_to(&dir).expect("written");
        let config = crate::connection::tls::server_config(
            &dir.join("server.pem"),
            &dir.join("server.key"),
            true,
        );
        assert!(config.is_ok(), "{config:?}");
        assert_eq!(made.ca_pem.matches("BEGIN CERTIFICATE").count(), 1);
        fs::remove_dir_all(&dir).expect("cleaned up");
    }
}
