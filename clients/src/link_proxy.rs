//! The core of `routing-link`: a TCP proxy that puts one emulated
//! [`Link`] between its clients and an upstream server, so any grpcurl or
//! ghz command can run over a WAN.
//!
//! Every connection goes through the same [`SharedLink`]: they share its
//! rate, as flows on one real link do, and each has its own NAT entry. The
//! link wraps the proxy's connection to the upstream, so set-up costs the
//! link's round trip before the first byte goes on, and every byte crosses
//! the link's delay, rate and queue both ways.

use std::{future::Future, io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::Semaphore,
    task::JoinSet,
};

use crate::link::{Link, SharedLink};

/// Connections proxied at once: 16 by default. The chapter's heaviest user,
/// ghz, opens one connection (or `--connections`, at most `-c` = 10). Each
/// connection may hold up to [`Link::max_held_bytes`] per direction when
/// its reader stalls, so this also bounds memory: 16 × 2 × that (about 4.5
/// MB on `wan`).
pub const MAX_CONNECTIONS: usize = 16;
/// After a shutdown signal, open connections get 5 s to finish; then they
/// are closed.
pub const DRAIN: Duration = Duration::from_secs(5);
/// The upstream must accept a connection within 5 s.
pub const UPSTREAM_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// What the proxy needs besides its listener.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// `host:port` of the server behind the link, resolved per connection.
    pub upstream: String,
    /// The link's settings.
    pub link: Link,
    /// Connections proxied at once; more are closed on arrival.
    pub max_connections: usize,
}

/// Proxies every connection `listener` accepts until `shutdown` completes,
/// then gives open connections [`DRAIN`] to finish.
pub async fn serve(
    listener: TcpListener,
    config: ProxyConfig,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let local_addr = listener.local_addr()?;
    tracing::info!(%local_addr, upstream = %config.upstream, link = ?config.link, max_connections = config.max_connections, "routing-link listening");
    let link = SharedLink::new(config.link);
    let slots = Arc::new(Semaphore::new(config.max_connections));
    let mut open = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let (downstream, peer) = tokio::select! {
            () = &mut shutdown => break,
            // Reap finished connections so the set stays as small as the open ones.
            Some(_) = open.join_next(), if !open.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    // Out of file descriptors and the like: wait, do not spin.
                    tracing::warn!("cannot accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!(%peer, "refused: {} connections already open", config.max_connections);
            continue; // dropping `downstream` closes it
        };
        let (link, upstream) = (link.clone(), config.upstream.clone());
        open.spawn(async move {
            let _slot = slot;
            if let Err(e) = proxy(downstream, peer, &upstream, &link).await {
                tracing::warn!(%peer, "connection ended: {e}");
            }
        });
    }
    tracing::info!(
        open = open.len(),
        "shutting down: no new connections, draining for up to {DRAIN:?}"
    );
    let drained =
        tokio::time::timeout(DRAIN, async { while open.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!(
            closed = open.len(),
            "drain time is up: closing the remaining connections"
        );
        open.shutdown().await;
    }
    Ok(())
}

/// One connection: dial the upstream, pay the link's set-up round trip, and
/// copy both ways through the link until both sides have closed.
async fn proxy(
    mut downstream: TcpStream,
    peer: SocketAddr,
    upstream: &str,
    link: &SharedLink,
) -> io::Result<()> {
    let dialled = tokio::time::timeout(UPSTREAM_CONNECT_TIMEOUT, TcpStream::connect(upstream))
        .await
        .map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{upstream} did not accept within {UPSTREAM_CONNECT_TIMEOUT:?}"),
            )
        })??;
    // Small frames (PINGs, acks, short calls) must not wait for Nagle.
    downstream.set_nodelay(true)?;
    dialled.set_nodelay(true)?;
    let mut upstream = link.connect(dialled).await;
    tracing::debug!(%peer, "connection through the link");
    let (up, down) = tokio::io::copy_bidirectional(&mut downstream, &mut upstream).await?;
    tracing::debug!(%peer, bytes_up = up, bytes_down = down, "connection closed");
    Ok(())
}

/// Completes on the first Ctrl+C or SIGTERM (what `docker compose down`
/// sends). A signal that cannot be listened for is logged and never fires.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        match tokio::signal::ctrl_c().await {
            Ok(()) => tracing::info!("received Ctrl+C"),
            Err(e) => never(format!("cannot listen for Ctrl+C: {e}")).await,
        }
    };
    #[cfg(unix)]
    let sigterm = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                terminate.recv().await;
                tracing::info!("received SIGTERM");
            }
            Err(e) => never(format!("cannot listen for SIGTERM: {e}")).await,
        }
    };
    #[cfg(not(unix))]
    let sigterm = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = sigterm => {}
    }
}

/// Logs why a signal will never come, and waits forever.
async fn never(reason: String) {
    tracing::error!("{reason}");
    std::future::pending::<()>().await;
}
