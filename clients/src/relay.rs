//! A TCP relay that can be told to go silent: it keeps both sockets open but
//! stops forwarding in either direction. To the client this looks exactly
//! like a peer that vanished behind a NAT or a crashed load balancer: no FIN,
//! no RST, just nothing.
//!
//! It runs inside the client's own process, on a loopback port, so the dead
//! peer can be shown anywhere the client runs, a container included, without
//! touching the network or the server.

use std::{
    io,
    net::{Ipv4Addr, SocketAddr},
    sync::Arc,
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream, tcp::OwnedReadHalf, tcp::OwnedWriteHalf},
    sync::{Semaphore, watch},
};

/// Connections relayed at once: 8. The keepalive client needs one per
/// channel, plus a reconnect or two; more are refused (closed at once).
pub const MAX_RELAYED_CONNECTIONS: usize = 8;
/// Bytes read in one go, per direction and connection: 64 KiB.
const PUMP_BUFFER: usize = 64 * 1024;

/// A relay on `127.0.0.1:PORT` to one upstream server. Dropping it closes
/// every socket it holds.
#[derive(Debug)]
pub struct SilentRelay {
    addr: SocketAddr,
    /// `true` once silent. Dropping the sender is the signal to close all.
    silent: watch::Sender<bool>,
}

impl SilentRelay {
    /// Listens on a free loopback port and relays each connection to
    /// `upstream` (`host:port`, resolved per connection), which must answer
    /// within `connect_timeout`.
    pub async fn start(upstream: String, connect_timeout: Duration) -> io::Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (silent, state) = watch::channel(false);
        tokio::spawn(accept_loop(listener, upstream, connect_timeout, state));
        Ok(Self { addr, silent })
    }

    /// The relay's own address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, ready for `Endpoint::from_shared`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, forward nothing and close nothing, on the connections
    /// open now and on any opened later.
    pub fn go_silent(&self) {
        self.silent.send_replace(true);
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: String,
    connect_timeout: Duration,
    state: watch::Receiver<bool>,
) {
    let slots = Arc::new(Semaphore::new(MAX_RELAYED_CONNECTIONS));
    loop {
        let downstream = tokio::select! {
            () = closed(state.clone()) => return,
            accepted = listener.accept() => match accepted {
                Ok((downstream, _)) => downstream,
                Err(e) => {
                    tracing::warn!("relay cannot accept: {e}");
                    return;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("relay refused a connection: {MAX_RELAYED_CONNECTIONS} already open");
            continue;
        };
        let (upstream, state) = (upstream.clone(), state.clone());
        tokio::spawn(async move {
            let _slot = slot;
            relay(downstream, &upstream, connect_timeout, state).await;
        });
    }
}

/// Relays one connection until either side closes it, or holds it open
/// without a word once the relay is silent, until the relay is dropped.
async fn relay(
    downstream: TcpStream,
    upstream: &str,
    connect_timeout: Duration,
    state: watch::Receiver<bool>,
) {
    if *state.borrow() {
        // A dead peer answers no new connection either.
        let _held = downstream;
        return closed(state).await;
    }
    let upstream = match tokio::time::timeout(connect_timeout, TcpStream::connect(upstream)).await {
        Ok(Ok(stream)) => stream,
        Ok(Err(e)) => return tracing::warn!("relay cannot reach {upstream}: {e}"),
        Err(_) => {
            return tracing::warn!("relay cannot reach {upstream} within {connect_timeout:?}");
        }
    };
    // Small frames (PINGs, acks) must not wait for Nagle's algorithm.
    for stream in [&downstream, &upstream] {
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!("relay cannot set TCP_NODELAY: {e}");
        }
    }
    let (down_read, down_write) = downstream.into_split();
    let (up_read, up_write) = upstream.into_split();
    tokio::join!(
        pump(down_read, up_write, state.clone()),
        pump(up_read, down_write, state),
    );
}

/// Copies bytes one way until the source closes or the relay goes silent;
/// once silent, holds both halves open, sending nothing, until the relay is
/// dropped.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, state: watch::Receiver<bool>) {
    let mut silence = state.clone();
    let mut buf = vec![0u8; PUMP_BUFFER];
    loop {
        let n = tokio::select! {
            _ = silence.wait_for(|silent| *silent) => break,
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return, // dropping `to` passes the close on
                Ok(n) => n,
            },
        };
        let forwarded = tokio::select! {
            _ = silence.wait_for(|silent| *silent) => break,
            written = to.write_all(&buf[..n]) => written,
        };
        if forwarded.is_err() {
            return;
        }
    }
    let _held = (from, to);
    closed(state).await;
}

/// Completes when the relay is dropped.
async fn closed(mut state: watch::Receiver<bool>) {
    while state.changed().await.is_ok() {}
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;
    use crate::wire::tests::echo_server;

    const LIMIT: Duration = Duration::from_secs(10);

    /// Given a relay to an echo server, bytes go through both ways; once the
    /// relay is silent, nothing comes back, yet the connection stays open;
    /// and when the relay is dropped, the client finally sees the close.
    #[tokio::test]
    async fn forwards_then_goes_silent_then_closes_when_dropped() {
        let relay = SilentRelay::start(echo_server().await.to_string(), LIMIT)
            .await
            .expect("relay starts");
        let mut client = TcpStream::connect(relay.addr()).await.expect("connect");
        let mut echoed = [0u8; 5];

        client.write_all(b"hello").await.expect("write");
        tokio::time::timeout(LIMIT, client.read_exact(&mut echoed))
            .await
            .expect("echo arrives")
            .expect("read");
        assert_eq!(&echoed, b"hello");

        relay.go_silent();
        client
            .write_all(b"again")
            .await
            .expect("the socket still takes bytes");
        let quiet =
            tokio::time::timeout(Duration::from_millis(300), client.read(&mut echoed)).await;
        assert!(quiet.is_err(), "a silent relay sends nothing: {quiet:?}");

        drop(relay);
        let closed = tokio::time::timeout(LIMIT, client.read(&mut echoed))
            .await
            .expect("the close arrives");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    }

    /// An upstream that is not there: the relay closes the client's
    /// connection instead of holding it.
    #[tokio::test]
    async fn closes_a_connection_it_cannot_relay() {
        let unused = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let gone = unused.local_addr().expect("addr").to_string();
        drop(unused);
        let relay = SilentRelay::start(gone, LIMIT).await.expect("relay starts");

        let mut client = TcpStream::connect(relay.addr()).await.expect("connect");
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(LIMIT, client.read(&mut byte))
            .await
            .expect("the close arrives");
        assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    }
}
