//! A TCP proxy that can be told to go silent: it keeps both sockets open but
//! stops forwarding in either direction. To the client this looks exactly
//! like a peer that vanished behind a NAT or a crashed load balancer: no FIN,
//! no RST, just nothing.

use std::net::SocketAddr;

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream, tcp::OwnedReadHalf, tcp::OwnedWriteHalf},
    sync::watch,
};

#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    silent: watch::Sender<bool>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy addr");
        let (silent, watcher) = watch::channel(false);
        tokio::spawn(async move {
            while let Ok((downstream, _)) = listener.accept().await {
                let Ok(upstream) = TcpStream::connect(upstream).await else {
                    continue;
                };
                let (down_read, down_write) = downstream.into_split();
                let (up_read, up_write) = upstream.into_split();
                tokio::spawn(pump(down_read, up_write, watcher.clone()));
                tokio::spawn(pump(up_read, down_write, watcher.clone()));
            }
        });
        Self { addr, silent }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// From now on, forward nothing, and close nothing.
    pub fn go_silent(&self) {
        self.silent.send_replace(true);
    }
}

/// Copies bytes one way until the proxy goes silent; then holds both halves
/// open forever, so neither side learns anything.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, mut silent: watch::Receiver<bool>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = tokio::select! {
            _ = silent.wait_for(|s| *s) => break,
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
        };
        if *silent.borrow() || to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    // Silent: keep the sockets, send nothing.
    let _held = (from, to);
    std::future::pending::<()>().await;
}
