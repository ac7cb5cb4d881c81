//! [`LocalServer`]: the whole server on a free loopback port, in the
//! background, for integration tests and examples.

use std::net::SocketAddr;

use tokio::{sync::oneshot, task::JoinHandle};

use crate::knobs::Config;
use crate::metrics::endpoint;
use crate::server::error::Error;
use crate::server::listen::{bind_metrics, bind_with_backlog};
use crate::server::serving::run_with;

/// A server running in the background on a free loopback port. Integration
/// tests and examples use it; `routing-server` itself calls [`run`].
#[derive(Debug)]
pub struct LocalServer {
    addr: SocketAddr,
    /// Where `GET /metrics` is served, if `config.metrics_listen` was set
    /// (to any loopback port: the server takes a free one).
    metrics_addr: Option<SocketAddr>,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<Result<(), Error>>,
}

impl LocalServer {
    /// Binds `127.0.0.1:0` (ignoring `config.listen`) and starts serving;
    /// with `config.metrics_listen` set, serves metrics on another free
    /// loopback port ([`Self::metrics_url`]).
    pub async fn start(config: Config) -> Result<Self, Error> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let listener = bind_with_backlog(loopback, &config)?;
        let addr = listener.local_addr()?;
        let metrics_listener = match config.metrics_listen {
            Some(_) => Some(bind_metrics(loopback, config.listen_backlog)?),
            None => None,
        };
        let metrics_addr = match &metrics_listener {
            Some(listener) => Some(listener.local_addr()?),
            None => None,
        };
        let (shutdown, stop) = oneshot::channel::<()>();
        let task = tokio::spawn(run_with(listener, metrics_listener, config, async {
            // A dropped sender also means "stop".
            let _ = stop.await;
        }));
        Ok(Self {
            addr,
            metrics_addr,
            shutdown,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, ready for `Endpoint::from_shared`.
    /// `http://ADDR/metrics`, if the server serves metrics.
    pub fn metrics_url(&self) -> Option<String> {
        self.metrics_addr
            .map(|addr| format!("http://{addr}{}", endpoint::PATH))
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Starts a graceful shutdown and waits for [`run`] to return.
    pub async fn shutdown(self) -> Result<(), Error> {
        let _ = self.shutdown.send(());
        self.task.await?
    }
}
