//! The server's drain on shutdown: [`ServerDrain`], which the runtime
//! holds and starts ([`crate::server`]), and [`DrainWatcher`], which every
//! connection holds until it ends. It lives here, below the runtime,
//! because the connection watches it ([`crate::connection::accepted`],
//! [`crate::connection::age`]): a type two layers need lives below both.
//! (Not to be confused with [`crate::kernel_queue::Drain`], how a
//! response's bytes left the kernel's send queue.)

use tokio::sync::watch;

/// The server-wide drain: [`ServerDrain::shutdown`] sends every connection the
/// graceful GOAWAY, then waits until each has ended. It does what
/// hyper-util's `GracefulShutdown` does, which can only watch hyper's own
/// connection types, so a connection could not also be sent away on its
/// own, by age or idleness.
#[derive(Debug)]
pub struct ServerDrain {
    tx: watch::Sender<()>,
}

/// One connection's view of the [`ServerDrain`]; held until the connection ends.
#[derive(Debug)]
pub struct DrainWatcher {
    pub(crate) rx: watch::Receiver<()>,
}

impl Default for ServerDrain {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerDrain {
    pub fn new() -> Self {
        Self {
            tx: watch::Sender::new(()),
        }
    }

    /// A watcher for one more connection. Made before the connection is
    /// handed to its worker, so the drain also waits for it on its way.
    pub fn watcher(&self) -> DrainWatcher {
        DrainWatcher {
            rx: self.tx.subscribe(),
        }
    }

    /// Signals every connection, then waits until every watcher is gone.
    pub async fn shutdown(self) {
        let _ = self.tx.send(());
        self.tx.closed().await;
    }
}

impl DrainWatcher {
    /// Completes once the drain has started: for a connection that has no
    /// HTTP/2 connection yet to send a GOAWAY on.
    pub async fn draining(&mut self) {
        let _ = self.rx.changed().await;
    }
}
