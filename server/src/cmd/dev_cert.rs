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

use std::{fs, io, path::Path};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

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

/// A new CA and a server certificate for `names`, signed by it.
pub fn generate(names: &[&str]) -> Result<DevCert, rcgen::Error> {
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "routing-server dev CA");
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate()?)?;

    let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
    let mut server = CertificateParams::new(names)?;
    server
        .distinguished_name
        .push(DnType::CommonName, "routing-server");
    server.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
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
