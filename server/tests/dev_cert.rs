//! `routing-server dev-cert` makes certificates strict verifiers accept:
//! the profile read back with `x509-parser` (key identifiers, key usages,
//! basic constraints, names), `openssl verify -x509_strict` when `openssl`
//! is on PATH, lifetimes within their bounds, and `--keep` remaking a set
//! that has expired or soon will. Then the server started with them: a
//! client that sends an IP address as SNI is served, and the binary logs no
//! warning for it.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpStream,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, mpsc},
    time::Duration,
};

use routing_server::cmd::dev_cert::{
    self, BACKDATE, CA_LIFETIME, DevCert, RENEW_BEFORE, SERVER_LIFETIME, SERVER_NAMES,
};
use rustls::{ClientConfig, ClientConnection, RootCertStore, crypto::ring, pki_types::ServerName};
use time::OffsetDateTime;
use x509_parser::{
    certificate::X509Certificate,
    extensions::{GeneralName, ParsedExtension},
    pem::{Pem, parse_x509_pem},
};

/// Long enough for anything that should happen; only a hang takes this long.
const BOUND: Duration = Duration::from_secs(10);

/// A directory of its own for one test, removed when the test ends.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("dev-cert-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("scratch directory made");
        Self(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name)).expect("file read")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The PEM block of one certificate, to parse with `x509-parser`.
fn pem(text: &str) -> Pem {
    parse_x509_pem(text.as_bytes()).expect("a PEM block").1
}

fn subject_key_id<'a>(cert: &'a X509Certificate<'_>) -> &'a [u8] {
    cert.iter_extensions()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::SubjectKeyIdentifier(id) => Some(id.0),
            _ => None,
        })
        .expect("a Subject Key Identifier")
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 60 * 60)
}

/// Given a fresh set, then the CA is a CA for one level (pathlen 0) that
/// signs certificates and CRLs, with a Subject Key Identifier; and the
/// server certificate is no CA, signs handshakes only, serves TLS for the
/// chapter's four names, and carries its own Subject Key Identifier and an
/// Authority Key Identifier equal to the CA's.
#[test]
fn the_profile_has_key_identifiers_usages_and_constraints() {
    let made = dev_cert::generate(&SERVER_NAMES).expect("generated");
    let (ca_pem, server_pem) = (pem(&made.ca_pem), pem(&made.cert_pem));
    let ca = ca_pem.parse_x509().expect("ca.pem parses");
    let server = server_pem.parse_x509().expect("server.pem parses");

    // The CA.
    let constraints = ca.basic_constraints().expect("one").expect("present");
    assert!(constraints.critical && constraints.value.ca);
    assert_eq!(constraints.value.path_len_constraint, Some(0));
    let usage = ca.key_usage().expect("one").expect("present");
    assert!(usage.critical && usage.value.key_cert_sign() && usage.value.crl_sign());
    assert!(!usage.value.digital_signature());
    let ca_key_id = subject_key_id(&ca);

    // The server certificate.
    let constraints = server.basic_constraints().expect("one").expect("present");
    assert!(
        constraints.critical && !constraints.value.ca,
        "CA:FALSE, critical"
    );
    let usage = server.key_usage().expect("one").expect("present");
    assert!(usage.critical && usage.value.digital_signature());
    assert!(!usage.value.key_cert_sign() && !usage.value.crl_sign());
    let extended = server.extended_key_usage().expect("one").expect("present");
    assert!(extended.value.server_auth && !extended.value.client_auth);
    let server_key_id = subject_key_id(&server);
    assert_ne!(server_key_id, ca_key_id, "its own key, its own identifier");
    let authority = server
        .iter_extensions()
        .find_map(|ext| match ext.parsed_extension() {
            ParsedExtension::AuthorityKeyIdentifier(aki) => Some(aki),
            _ => None,
        })
        .expect("an Authority Key Identifier");
    let names_key = authority.key_identifier.as_ref().expect("by key id");
    assert_eq!(names_key.0, ca_key_id, "the AKI is the CA's SKI");
    assert_eq!(server.issuer(), ca.subject());

    // Its names: the four of SERVER_NAMES, the address as an IP entry.
    let names = server
        .subject_alternative_name()
        .expect("one")
        .expect("present");
    let names: Vec<String> = names
        .value
        .general_names
        .iter()
        .map(|name| match name {
            GeneralName::DNSName(dns) => (*dns).to_owned(),
            GeneralName::IPAddress(ip) => format!("{:?}", ip),
            other => format!("unexpected {other:?}"),
        })
        .collect();
    assert_eq!(
        names,
        ["localhost", "[127, 0, 0, 1]", "server", "server-tls"],
        "the names of SERVER_NAMES"
    );
}

/// Given a fresh set written to disk, when `openssl verify -x509_strict`
/// checks the server certificate (and the CA) against `ca.pem`, then both
/// verify. Skipped, saying so, where `openssl` is not on PATH; the profile
/// test above checks the same extensions without it.
#[test]
fn openssl_x509_strict_accepts_the_set() {
    let scratch = Scratch::new("strict");
    write_set_made_ago(&scratch.0, Duration::ZERO);
    let ca = scratch.file("ca.pem");
    for cert in ["server.pem", "ca.pem"] {
        let run = Command::new("openssl")
            .args(["verify", "-x509_strict", "-CAfile"])
            .arg(&ca)
            .arg(scratch.file(cert))
            .output();
        let Ok(output) = run else {
            eprintln!("openssl is not on PATH: -x509_strict not checked");
            return;
        };
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success() && stdout.trim_end().ends_with(": OK"),
            "{cert}: {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Given a set made now, then each certificate starts BACKDATE before now
/// and lasts its lifetime, at most 825 days for the server and 10 years for
/// the CA, and the CA outlives the certificate it signed.
#[test]
fn lifetimes_are_within_their_bounds() {
    // The bounds themselves.
    assert!(SERVER_LIFETIME <= days(825));
    assert!(CA_LIFETIME <= days(3650));
    assert!(BACKDATE > Duration::ZERO && BACKDATE <= days(1));

    let before = OffsetDateTime::now_utc();
    let made = dev_cert::generate(&SERVER_NAMES).expect("generated");
    let after = OffsetDateTime::now_utc();
    let (ca_pem, server_pem) = (pem(&made.ca_pem), pem(&made.cert_pem));
    let mut ends = Vec::new();
    for (pem, lifetime) in [(&ca_pem, CA_LIFETIME), (&server_pem, SERVER_LIFETIME)] {
        let cert = pem.parse_x509().expect("parses");
        let (start, end) = (
            cert.validity().not_before.to_datetime(),
            cert.validity().not_after.to_datetime(),
        );
        // X.509 times are whole seconds: allow one either side.
        let second = Duration::from_secs(1);
        assert!(start >= before - BACKDATE - second && start <= after - BACKDATE + second);
        assert_eq!(end - start, lifetime, "lasts exactly its lifetime");
        ends.push(end);
    }
    assert!(ends[0] > ends[1], "the CA outlives the server certificate");
}

/// Runs `routing-server dev-cert --out DIR --keep` and returns its log.
fn dev_cert_keep(dir: &Path) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_routing-server"))
        .args(["dev-cert", "--keep", "--out"])
        .arg(dir)
        .env_remove("RUST_LOG")
        .output()
        .expect("routing-server runs");
    let log = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{log}");
    log
}

/// A set as `dev-cert` would have made it `age` ago (zero: a fresh one),
/// written into `dir`.
fn write_set_made_ago(dir: &Path, age: Duration) -> DevCert {
    let made =
        dev_cert::generate_at(&SERVER_NAMES, OffsetDateTime::now_utc() - age).expect("generated");
    made.write_to(dir).expect("written");
    made
}

/// `--keep` keeps a set with time left, and remakes, saying why, one that
/// has expired, one within RENEW_BEFORE of its end, and one whose
/// certificate cannot be read. (`server/tests/tls.rs` checks that it keeps a
/// complete set and remakes an incomplete one.)
#[test]
fn keep_remakes_a_set_near_its_end_and_keeps_a_fresh_one() {
    let scratch = Scratch::new("keep");

    // Given a set made a year ago, when --keep runs, then it is kept.
    let kept = write_set_made_ago(&scratch.0, days(365));
    let log = dev_cert_keep(&scratch.0);
    assert!(log.contains("kept the ca.pem"), "{log}");
    assert_eq!(scratch.read("ca.pem"), kept.ca_pem);

    // Given sets whose server certificate has ended, or ends within the
    // margin, when --keep runs, then each is remade and the log says why.
    let near = SERVER_LIFETIME - RENEW_BEFORE + days(2);
    for (age, why) in [
        (SERVER_LIFETIME + days(10), "server.pem expired on"),
        (near, "server.pem expires on"),
    ] {
        let old = write_set_made_ago(&scratch.0, age);
        let log = dev_cert_keep(&scratch.0);
        assert!(log.contains("remade ca.pem") && log.contains(why), "{log}");
        assert_ne!(scratch.read("ca.pem"), old.ca_pem, "{why}: a new CA");
        // And the new set is one --keep keeps.
        assert!(dev_cert_keep(&scratch.0).contains("kept the ca.pem"));
    }

    // Given a server.pem that holds no certificate, then the set is remade.
    std::fs::write(scratch.file("server.pem"), "not a certificate\n").expect("written");
    let log = dev_cert_keep(&scratch.0);
    assert!(log.contains("cannot read the dates of server.pem"), "{log}");
    assert!(scratch.read("server.pem").contains("BEGIN CERTIFICATE"));
}

/// `routing-server` over TLS, run as a process: its stderr, line by line.
struct ServerProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
    port: u16,
}

impl ServerProcess {
    /// Starts the binary on 127.0.0.1:0 with the set in `dir` and `RUST_LOG`
    /// as given (unset for `None`), and reads its port from its log.
    fn start(dir: &Path, rust_log: Option<&str>) -> Self {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routing-server"));
        command
            .args(["--listen", "127.0.0.1:0", "--tls-cert"])
            .arg(dir.join("server.pem"))
            .arg("--tls-key")
            .arg(dir.join("server.key"))
            .env_remove("ROUTING_TLS_CERT")
            .env_remove("ROUTING_TLS_KEY")
            .stderr(Stdio::piped());
        match rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = command.spawn().expect("routing-server starts");
        let stderr = child.stderr.take().expect("stderr piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        let port = loop {
            let line = lines
                .recv_timeout(BOUND)
                .expect("the server logs its address");
            if let Some((_, rest)) = line.split_once("local_addr=127.0.0.1:") {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                break digits.parse().expect("a port");
            }
        };
        Self { child, lines, port }
    }

    /// Stops the server (by its PID) and returns what it logged after it
    /// started serving.
    fn stop(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut logged = Vec::new();
        while let Ok(line) = self.lines.recv_timeout(BOUND) {
            logged.push(line);
        }
        logged
    }
}

/// A ClientHello whose SNI is the IP address `127.0.0.1`, as grpc-js and
/// grpc++ send it. rustls's client never sends an IP as SNI, so this is its
/// ClientHello for `localhost` with the name swapped for the address: both
/// are 9 bytes, so every length in the record stays right.
fn client_hello_with_ip_sni() -> Vec<u8> {
    let mut config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(RootCertStore::empty())
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from("localhost").expect("a name");
    let mut client = ClientConnection::new(Arc::new(config), name).expect("a client");
    let mut hello = Vec::new();
    client.write_tls(&mut hello).expect("a ClientHello");
    let at = hello
        .windows(9)
        .position(|w| w == b"localhost")
        .expect("the SNI name in the ClientHello");
    hello[at..at + 9].copy_from_slice(b"127.0.0.1");
    hello
}

/// Sends [`client_hello_with_ip_sni`] to `port` and returns the first byte
/// of the answer: 0x16 is the ServerHello's record, the handshake going on.
fn answer_to_ip_sni(port: u16) -> u8 {
    let mut tcp = TcpStream::connect(("127.0.0.1", port)).expect("connects");
    tcp.set_read_timeout(Some(BOUND)).expect("a timeout");
    tcp.write_all(&client_hello_with_ip_sni()).expect("sent");
    let mut first = [0u8; 1];
    tcp.read_exact(&mut first).expect("an answer");
    first[0]
}

/// A whole handshake with SNI `127.0.0.1` by `openssl s_client`, ALPN h2,
/// verifying against the CA; `None` where openssl is not on PATH.
fn openssl_handshake_with_ip_sni(port: u16, ca: &Path) -> Option<String> {
    let mut child = Command::new("openssl")
        .args(["s_client", "-connect"])
        .arg(format!("127.0.0.1:{port}"))
        .args([
            "-servername",
            "127.0.0.1",
            "-alpn",
            "h2",
            "-verify_return_error",
        ])
        .arg("-CAfile")
        .arg(ca)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // No input: s_client completes the handshake, prints it and quits.
    drop(child.stdin.take());
    let started = std::time::Instant::now();
    while child.try_wait().ok()?.is_none() {
        if started.elapsed() > BOUND {
            let _ = child.kill();
            panic!("openssl s_client did not finish");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut out = String::new();
    child.stdout.take()?.read_to_string(&mut out).ok()?;
    Some(out)
}

/// Given the server over TLS with its default log filter, when a client
/// sends 127.0.0.1 as SNI (a ClientHello, then a whole handshake with
/// openssl when it is on PATH), then the client is served and the server
/// logs no WARN line. The same client against a server whose RUST_LOG names
/// rustls's module gets the warning back: the client did send an IP as SNI.
#[test]
fn an_ip_as_sni_is_served_without_a_warning() {
    let scratch = Scratch::new("ip-sni");
    write_set_made_ago(&scratch.0, Duration::ZERO);

    // Given the server with the default filter, and then with RUST_LOG=info.
    for rust_log in [None, Some("info")] {
        let server = ServerProcess::start(&scratch.0, rust_log);
        // When a ClientHello with an IP as SNI arrives, then the handshake
        // goes on: a TLS handshake record comes back.
        assert_eq!(answer_to_ip_sni(server.port), 0x16, "{rust_log:?}");
        // And a whole handshake completes, verified, with ALPN h2.
        let openssl = openssl_handshake_with_ip_sni(server.port, &scratch.file("ca.pem"));
        match &openssl {
            Some(out) => assert!(
                out.contains("Verify return code: 0 (ok)") && out.contains("ALPN protocol: h2"),
                "{out}"
            ),
            None => eprintln!("openssl is not on PATH: whole handshake not run"),
        }
        // Then nothing was logged above INFO once the server was serving.
        let logged = server.stop();
        let warnings: Vec<&String> = logged
            .iter()
            .filter(|line| line.contains(" WARN ") || line.contains("Illegal SNI"))
            .collect();
        assert!(warnings.is_empty(), "{rust_log:?}: {warnings:#?}");
    }

    // Given RUST_LOG that names rustls's module, then the warning shows:
    // the test's client really sent an IP address as SNI.
    let server = ServerProcess::start(&scratch.0, Some("info,rustls::msgs::handshake=warn"));
    assert_eq!(answer_to_ip_sni(server.port), 0x16);
    let logged = server.stop();
    assert!(
        logged
            .iter()
            .any(|line| line.contains(" WARN ") && line.contains("ignoring IP address")),
        "{logged:#?}"
    );
}
