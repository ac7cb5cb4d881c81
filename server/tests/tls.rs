//! TLS on routing-server (`--tls-cert`, `--tls-key`): bad input refused at
//! start-up with the flag named, real calls over TLS, clients that stall in
//! the handshake or speak plaintext to the TLS port, and the send deadline
//! and kernel-queue accounting over TLS. Certificates come from
//! `routing_server::cmd::dev_cert`, made fresh in a temporary directory for each
//! test. No test asserts timing: knobs are small, and `BOUND` only catches
//! a hang.

mod support;

use std::{
    future::Future,
    io,
    path::{Path, PathBuf},
    pin::Pin,
    process::Command,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
    time::Duration,
};

use http::Uri;
use hyper_util::rt::TokioIo;
use routing_clients::sample_quote_request;
use routing_contracts::routing::{ListRoutesRequest, routing_service_client::RoutingServiceClient};
use routing_server::{Config, LocalServer, cmd::dev_cert, connection::tls::ServerTls};
use rustls::{
    ClientConfig, RootCertStore,
    crypto::ring,
    pki_types::{CertificateDer, ServerName, pem::PemObject},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
    time::Instant,
};
use tokio_rustls::{TlsConnector, client::TlsStream};
use tonic::transport::{Channel, Endpoint};

use support::{MIB, start_with};

/// Long enough for anything that should happen; only a hang takes this long.
const BOUND: Duration = Duration::from_secs(10);

/// A fresh CA and server certificate in a directory of its own.
struct Certs {
    dir: PathBuf,
    ca_pem: String,
}

impl Certs {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("routing-tls-{test}-{}", std::process::id()));
        let made = dev_cert::generate(&dev_cert::SERVER_NAMES).expect("certificates made");
        made.write_to(&dir).expect("certificates written");
        Self {
            dir,
            ca_pem: made.ca_pem,
        }
    }

    fn cert(&self) -> PathBuf {
        self.dir.join("server.pem")
    }

    fn key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// The chapter's settings, over TLS with these certificates.
    fn config(&self) -> Config {
        Config {
            tls_cert: Some(self.cert()),
            tls_key: Some(self.key()),
            ..Config::default()
        }
    }

    /// What a client that trusts this CA dials with: ALPN h2.
    fn client_config(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            roots.add(cert.expect("a PEM certificate")).expect("a CA");
        }
        let mut config = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Dials TLS for tonic: TCP (with a small receive buffer if asked), then
/// the TLS handshake for `localhost`, then a stream whose reads stop while
/// `stalled` is set.
#[derive(Clone)]
struct TlsDialer {
    config: Arc<ClientConfig>,
    receive_buffer: Option<usize>,
    stalled: Arc<AtomicBool>,
}

impl TlsDialer {
    fn new(certs: &Certs) -> Self {
        Self {
            config: certs.client_config(),
            receive_buffer: None,
            stalled: Arc::default(),
        }
    }

    async fn channel(&self, server: &LocalServer) -> Channel {
        Endpoint::from_shared(format!("http://localhost:{}", server.addr().port()))
            .expect("valid url")
            .connect_with_connector(self.clone())
            .await
            .expect("connects over TLS")
    }

    async fn client(&self, server: &LocalServer) -> RoutingServiceClient<Channel> {
        RoutingServiceClient::new(self.channel(server).await).max_decoding_message_size(16 * MIB)
    }
}

impl tower::Service<Uri> for TlsDialer {
    type Response = TokioIo<Stallable<TlsStream<TcpStream>>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move {
            let port = uri.port_u16().expect("a port");
            let socket = tokio::net::TcpSocket::new_v4()?;
            if let Some(size) = this.receive_buffer {
                socket.set_recv_buffer_size(size as u32)?;
            }
            let tcp = socket.connect(([127, 0, 0, 1], port).into()).await?;
            let name = ServerName::try_from("localhost").expect("a name");
            let tls = TlsConnector::from(this.config).connect(name, tcp).await?;
            Ok(TokioIo::new(Stallable {
                inner: tls,
                stalled: this.stalled,
            }))
        })
    }
}

/// A stream that stops reading, at the TCP level, while `stalled` is set:
/// the client's kernel buffer fills and its window closes, as a client
/// that stopped reading its socket does.
struct Stallable<T> {
    inner: T,
    stalled: Arc<AtomicBool>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Stallable<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.stalled.load(Ordering::Acquire) {
            // Look again soon: the test may let it read again.
            let waker = cx.waker().clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                waker.wake();
            });
            return Poll::Pending;
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Stallable<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

fn full_page() -> ListRoutesRequest {
    ListRoutesRequest {
        page_size: 25,
        ..Default::default()
    }
}

/// Runs `routing-server` with `args` and returns its exit code and stderr.
fn run_server(args: &[&str]) -> (Option<i32>, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_routing-server"))
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env_remove("ROUTING_TLS_CERT")
        .env_remove("ROUTING_TLS_KEY")
        .output()
        .expect("routing-server runs");
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn text(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

/// Each bad input is refused at start-up, before serving, with exit 2 and
/// a message that names the flag: a missing file, a directory where a file
/// should be, a file with no PEM in it, a key that is not the
/// certificate's, and one flag without the other.
#[test]
fn bad_tls_input_is_refused_naming_the_flag() {
    // Given two sets of certificates, and a file that holds no PEM...
    let certs = Certs::new("bad-input");
    let other = Certs::new("bad-input-other");
    let garbage = certs.dir.join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").expect("written");
    let missing = certs.dir.join("missing.pem");
    let (cert, key, other_key) = (certs.cert(), certs.key(), other.key());
    let cases: [(&[&str], &str, &str); 7] = [
        (
            &["--tls-cert", text(&missing), "--tls-key", text(&key)],
            "--tls-cert",
            "cannot read it",
        ),
        (
            &["--tls-cert", text(&cert), "--tls-key", text(&certs.dir)],
            "--tls-key",
            "cannot read it",
        ),
        (
            &["--tls-cert", text(&garbage), "--tls-key", text(&key)],
            "--tls-cert",
            "no PEM certificate",
        ),
        (
            &["--tls-cert", text(&cert), "--tls-key", text(&garbage)],
            "--tls-key",
            "no PEM private key",
        ),
        (
            &["--tls-cert", text(&cert), "--tls-key", text(&other_key)],
            "--tls-key",
            "is not the key of the certificate",
        ),
        (&["--tls-cert", text(&cert)], "--tls-key", "required"),
        (&["--tls-key", text(&key)], "--tls-cert", "required"),
    ];
    for (args, flag, reason) in cases {
        // When the server starts with them, then it exits 2 and says why.
        let (code, stderr) = run_server(args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(flag) && stderr.contains(reason),
            "{args:?} should name {flag} ({reason}): {stderr}"
        );
    }
    // The library answers the same for a Config built by hand.
    let one_flag = Config {
        tls_cert: Some(cert),
        ..Config::default()
    };
    let refused = ServerTls::from_config(&one_flag).expect_err("one flag alone");
    assert_eq!(refused.flag, "--tls-cert");
}

/// `dev-cert --keep` keeps a complete set (compose runs it before every
/// start of `server-tls`, and clients hold its ca.pem); without `--keep`,
/// or with a file missing, a new CA is written.
#[test]
fn dev_cert_keep_keeps_a_complete_set() {
    let dir = std::env::temp_dir().join(format!("dev-cert-keep-{}", std::process::id()));
    let run = |keep: bool| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_routing-server"));
        command.args(["dev-cert", "--out", text(&dir)]);
        if keep {
            command.arg("--keep");
        }
        let status = command.status().expect("routing-server runs");
        assert!(status.success(), "dev-cert keep={keep}: {status}");
        std::fs::read_to_string(dir.join("ca.pem")).expect("ca.pem written")
    };
    let first = run(true);
    assert_eq!(run(true), first, "--keep replaced a complete set");
    std::fs::remove_file(dir.join("server.key")).expect("removed");
    let second = run(true);
    assert_ne!(second, first, "--keep kept an incomplete set");
    assert!(dir.join("server.key").is_file());
    assert_ne!(run(false), second, "without --keep the CA is new");
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

/// Given a TLS server, when a tonic client that trusts the dev CA calls
/// GetQuote and asks for the full 25-route page, then both are served as
/// in plaintext: the quote's price, and all 25 routes (about 5 MB).
#[tokio::test]
async fn a_tls_client_gets_a_quote_and_a_full_page() {
    let certs = Certs::new("calls");
    let server = start_with(certs.config()).await;
    let mut client = TlsDialer::new(&certs).client(&server).await;

    let quote = tokio::time::timeout(BOUND, client.get_quote(sample_quote_request()))
        .await
        .expect("in time")
        .expect("a quote")
        .into_inner();
    let price = quote.quote.and_then(|q| q.price).expect("a price");
    assert_eq!(price.amount, "1001.00");

    let page = tokio::time::timeout(BOUND, client.list_routes(full_page()))
        .await
        .expect("in time")
        .expect("a full page")
        .into_inner();
    assert_eq!(page.routes.len(), 25);
    server.shutdown().await.expect("clean shutdown");
}

/// Reads from `tcp` until the server closes it (EOF or reset); panics if
/// it is still open after `BOUND`. Returns the bytes the server sent.
async fn read_until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut received = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + BOUND;
    loop {
        match tokio::time::timeout_at(deadline, tcp.read(&mut buf)).await {
            Err(_) => panic!("the connection is still open after {BOUND:?}"),
            Ok(Ok(0) | Err(_)) => return received,
            Ok(Ok(n)) => received.extend_from_slice(&buf[..n]),
        }
    }
}

/// Clients that stop in the middle of the handshake are closed by the
/// handshake timeout (1 s here): one that sends nothing, one that sends
/// half a ClientHello, and one that sends a whole ClientHello and never
/// answers the server's flight. Meanwhile a real client is served.
#[tokio::test]
async fn clients_that_stop_mid_handshake_are_closed() {
    let certs = Certs::new("stall");
    let server = start_with(Config {
        handshake_timeout_secs: 1,
        ..certs.config()
    })
    .await;

    // Given a whole ClientHello, as rustls's client writes it...
    let mut hello = Vec::new();
    let name = ServerName::try_from("localhost").expect("a name");
    let mut session = rustls::ClientConnection::new(certs.client_config(), name).expect("session");
    session.write_tls(&mut hello).expect("a ClientHello");
    let half = hello[..hello.len() / 2].to_vec();

    for (what, sent) in [
        ("nothing", Vec::new()),
        ("half a ClientHello", half),
        ("a ClientHello, then nothing", hello),
    ] {
        // When a client sends that and stops...
        let mut tcp = TcpStream::connect(server.addr()).await.expect("connects");
        tcp.write_all(&sent).await.expect("sent");
        // ...then the server closes the connection.
        let received = read_until_closed(&mut tcp).await;
        if what.starts_with("a ClientHello") {
            assert_eq!(
                received.first(),
                Some(&0x16),
                "the server's flight came first"
            );
        }
    }

    let mut client = TlsDialer::new(&certs).client(&server).await;
    client
        .get_quote(sample_quote_request())
        .await
        .expect("served meanwhile");
}

/// Given a TLS server, when a plaintext HTTP/2 client (tonic without TLS,
/// as `grpcurl -plaintext`) calls GetQuote on its port, then the call fails
/// at once with UNAVAILABLE saying the port speaks TLS, rather than
/// waiting for a deadline; and a raw HTTP/2 connection left open is closed
/// by the handshake timeout.
#[tokio::test]
async fn a_plaintext_client_on_the_tls_port_is_told_and_closed() {
    let certs = Certs::new("plaintext");
    let server = start_with(Config {
        handshake_timeout_secs: 1,
        ..certs.config()
    })
    .await;

    let mut plaintext = support::client(&server).await;
    let refused = tokio::time::timeout(BOUND, plaintext.get_quote(sample_quote_request()))
        .await
        .expect("answered, not left to time out")
        .expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable);
    assert!(
        refused.message().contains("this port speaks TLS"),
        "{refused:?}"
    );

    let mut raw = TcpStream::connect(server.addr()).await.expect("connects");
    raw.write_all(h2_frames::PREFACE)
        .await
        .expect("preface sent");
    read_until_closed(&mut raw).await;
}

/// The response budget and the send deadline still see through TLS, where
/// the socket carries more bytes than h2 handed over (records, handshake).
///
/// Given a 6 MiB budget, a TLS client that stops reading at the TCP level
/// (4 KiB receive buffer) after asking for a full page (about 4.8 MB),
/// then: while its page sits in the server's buffers, another client's
/// full page is refused (the page stays charged); once the first client
/// reads again, its page arrives whole, and the other client is served
/// (the charge ends when the peer has acknowledged the page's records, not
/// at a deadline: the send deadline here is 10 minutes). Then a client that
/// stalls for good is closed by a 2 s send deadline, and its budget freed.
#[tokio::test]
async fn a_stalled_tls_reader_stays_charged_and_is_cut_off() {
    let certs = Certs::new("stalled");
    let budget = Config {
        response_budget_bytes: 6 * MIB,
        response_share_percent: 100,
        stalled_holder_secs: 600,
        ..certs.config()
    };
    let server = start_with(Config {
        send_deadline_secs: 600,
        ..budget.clone()
    })
    .await;

    // Given a client that stalls after asking for a full page...
    let mut stalling = TlsDialer::new(&certs);
    stalling.receive_buffer = Some(4096);
    let mut stalled = stalling.client(&server).await;
    // Kept open to the end: a connection that closed would free its page
    // whatever the accounting said.
    let _kept_open = stalled.clone();
    stalling.stalled.store(true, Ordering::Release);
    let page = tokio::spawn(async move { stalled.list_routes(full_page()).await });

    // ...then another client's full page is refused while it is held.
    let mut other = TlsDialer::new(&certs).client(&server).await;
    let refused = wait_for_refusal(&mut other).await;
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );

    // When the stalled client reads again, its whole page arrives...
    stalling.stalled.store(false, Ordering::Release);
    let page = tokio::time::timeout(BOUND, page)
        .await
        .expect("the page arrives once read")
        .expect("task")
        .expect("a full page");
    assert_eq!(page.into_inner().routes.len(), 25);
    // ...and the other client is served: the page left the budget.
    served_within_bound(&mut other).await;
    server.shutdown().await.expect("clean shutdown");

    // Given a 2 s send deadline and a client that stalls for good...
    let server = start_with(Config {
        send_deadline_secs: 2,
        ..budget
    })
    .await;
    let mut stalling = TlsDialer::new(&certs);
    stalling.receive_buffer = Some(4096);
    let mut stalled = stalling.client(&server).await;
    stalling.stalled.store(true, Ordering::Release);
    let _held = tokio::spawn(async move { stalled.list_routes(full_page()).await });
    let mut other = TlsDialer::new(&certs).client(&server).await;
    wait_for_refusal(&mut other).await;
    // ...then the deadline closes it, and the budget is free again.
    served_within_bound(&mut other).await;
}

/// Asks for full pages until one is refused (the stalled client's page may
/// not be charged yet), and returns the refusal.
async fn wait_for_refusal(client: &mut RoutingServiceClient<Channel>) -> tonic::Status {
    let deadline = Instant::now() + BOUND;
    loop {
        match client.list_routes(full_page()).await {
            Err(status) => return status,
            Ok(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(_) => panic!("no page was refused within {BOUND:?}"),
        }
    }
}

/// Asks for full pages until one is served, within `BOUND`.
async fn served_within_bound(client: &mut RoutingServiceClient<Channel>) {
    let deadline = Instant::now() + BOUND;
    loop {
        match client.list_routes(full_page()).await {
            Ok(page) => {
                assert_eq!(page.into_inner().routes.len(), 25);
                return;
            }
            Err(status) if Instant::now() < deadline => {
                assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(status) => panic!("still refused after {BOUND:?}: {status:?}"),
        }
    }
}

/// The conversion behind the last test, exactly: given a TLS connection
/// whose server writes 100,000 plaintext bytes through its transport and
/// then nothing, when the client has read them all, then the server's
/// count turns the socket bytes the client received (the handshake,
/// tickets, records) back into all 100,000 plaintext bytes, and one socket
/// byte fewer into fewer: a response is never counted as acknowledged
/// before its last record is.
#[tokio::test]
async fn socket_bytes_turn_back_into_plaintext_never_early() {
    use routing_clients::{
        CountingConnector,
        tls::{ClientTls, tls_ca, tls_server_name},
    };
    use tower::ServiceExt;
    const PLAINTEXT: usize = 100_000;

    // Given a server side that writes the bytes and keeps the connection...
    let certs = Certs::new("quiet");
    let tls = ServerTls::from_config(&certs.config())
        .expect("valid files")
        .expect("TLS asked for");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let server = tokio::spawn(async move {
        let (tcp, peer) = listener.accept().await.expect("accept");
        let (mut transport, sent) = tls
            .accept(tcp, peer, Instant::now() + BOUND)
            .await
            .expect("handshake");
        transport.write_all(&[0; PLAINTEXT]).await.expect("written");
        transport.flush().await.expect("flushed");
        (transport, sent)
    });

    // ...and a client whose connector counts the socket's bytes below TLS.
    let ca = tls_ca(certs.dir.join("ca.pem").to_str().expect("UTF-8")).expect("the CA");
    let client_tls = ClientTls::new(&ca, tls_server_name("localhost"), Arc::default());
    let connector = CountingConnector::new().with_tls(Some(client_tls));
    let uri: Uri = format!("http://{addr}").parse().expect("uri");
    let mut io = connector
        .clone()
        .oneshot(uri)
        .await
        .expect("connects over TLS")
        .into_inner();
    let mut read = vec![1; PLAINTEXT];
    tokio::time::timeout(BOUND, io.read_exact(&mut read))
        .await
        .expect("in time")
        .expect("all of it");
    let (_transport, sent) = server.await.expect("server side");

    // When every socket byte the client received is acknowledged...
    let socket = connector.snapshot().bytes_read;
    assert!(socket > PLAINTEXT as u64, "TLS adds bytes: {socket}");
    // ...then all the plaintext is, and one byte short, not all of it.
    assert_eq!(sent.plaintext_acked(socket), PLAINTEXT as u64);
    assert!(sent.plaintext_acked(socket - 1) < PLAINTEXT as u64);
}

/// The connection cap holds over TLS: it is applied at accept, before any
/// handshake. Given a cap of one and a TLS client holding it, when a
/// second connection arrives, then it is closed at once, with no TLS
/// handshake (no byte from the server); the first client is still served.
#[tokio::test]
async fn the_connection_cap_holds_over_tls() {
    let certs = Certs::new("cap");
    let server = start_with(Config {
        max_connections: Some(1),
        // Longer than BOUND: only the cap can close the second connection.
        handshake_timeout_secs: 60,
        ..certs.config()
    })
    .await;
    let mut first = TlsDialer::new(&certs).client(&server).await;
    first
        .get_quote(sample_quote_request())
        .await
        .expect("the first client is served");

    let mut second = TcpStream::connect(server.addr())
        .await
        .expect("TCP connects");
    let received = read_until_closed(&mut second).await;
    assert!(
        received.is_empty(),
        "no handshake over the cap: {received:?}"
    );
    first
        .get_quote(sample_quote_request())
        .await
        .expect("still served");
}

/// The connection's policies sit above TLS and see plaintext frames: given
/// a TLS client that sends its preface and SETTINGS, then PINGs far faster
/// than the 5 s floor, when the server reads them, then it answers with a
/// GOAWAY ENHANCE_YOUR_CALM `too_many_pings` inside the TLS session, and
/// closes the connection.
#[tokio::test]
async fn the_ping_floor_holds_over_tls() {
    use h2_frames::{FrameTracker, GoAway, PREFACE, encode_frame, kind};

    let certs = Certs::new("pings");
    let server = start_with(certs.config()).await;
    let tcp = TcpStream::connect(server.addr()).await.expect("connects");
    let name = ServerName::try_from("localhost").expect("a name");
    let mut tls = TlsConnector::from(certs.client_config())
        .connect(name, tcp)
        .await
        .expect("TLS handshake");

    // Given a preface, SETTINGS and five PINGs at once...
    let mut opening = PREFACE.to_vec();
    opening.extend(encode_frame(kind::SETTINGS, 0, 0, &[]));
    for i in 0..5u8 {
        opening.extend(encode_frame(kind::PING, 0, 0, &[i; 8]));
    }
    tls.write_all(&opening).await.expect("sent");

    // ...then the plaintext the server sends back holds the GOAWAY.
    let mut frames = FrameTracker::server_to_client().keeping(kind::GOAWAY, 264);
    let mut goaway = None;
    let mut buf = [0u8; 4096];
    let deadline = Instant::now() + BOUND;
    loop {
        match tokio::time::timeout_at(deadline, tls.read(&mut buf)).await {
            Err(_) => panic!("still open after {BOUND:?}, GOAWAY {goaway:?}"),
            Ok(Ok(0) | Err(_)) => break,
            Ok(Ok(n)) => frames.feed(&buf[..n], |frame| {
                if frame.header.kind == kind::GOAWAY {
                    goaway = GoAway::parse(frame.kept);
                }
            }),
        }
    }
    let goaway = goaway.expect("a GOAWAY before the end");
    assert!(goaway.is_too_many_pings(), "{goaway:?}");
}
