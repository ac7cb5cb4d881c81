//! [`LocalServer`]: the whole server on a free loopback port, in the
//! background, for integration tests and examples.

use std::net::SocketAddr;

use tokio::{sync::oneshot, task::JoinHandle};

use crate::knobs::Config;
use crate::server::error::Error;
use crate::server::listen::bind_with_backlog;
use crate::server::serving::run;

/// A server running in the background on a free loopback port. Integration
/// tests and examples use it; `routing-server` itself calls [`run`].
#[derive(Debug)]
pub struct LocalServer {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
}

impl LocalServer {
    /// Binds `127.0.0.1:0` (ignoring `config.listen`) and starts serving.
    pub async fn start(config: Config) -> Result<Self, Error> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = bind_with_backlog(loopback, &config)?;
        let addr = listener.local_addr()?;
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(run(listener, config, async {
            // A dropped sender also means "stop".
            let _ = stop.await;
        }));
        Ok(Self {
            addr,
            shutdown,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, ready for `Endpoint::from_shared`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts a graceful shutdown and waits for [`run`] to return.
    pub async fn shutdown(self) -> Result<(), Error> {
        let _ = self.shutdown.send(());
        self.task.await?
    }
}
