//! The listening socket, with the kernel's own listen backlog
//! ([`crate::knobs::LISTEN_BACKLOG`]).
//!
//! The backlog is how many connections the kernel completes and queues
//! for the server before `accept()` takes them. When it is full, the
//! kernel drops the next client's SYN, and that client's connect waits for
//! a retransmission, a second or more. Rust's std listener asks for 128;
//! Go asks for what `/proc/sys/net/core/somaxconn` says (4,096 on Linux
//! since 5.4), and so does this server, unless `--listen-backlog` says
//! otherwise. The kernel caps whatever is asked at `somaxconn`.

use std::{io, net::SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use crate::knobs::{Config, LISTEN_BACKLOG_FALLBACK, SOMAXCONN_PATH};
use crate::metrics::endpoint::MetricsBindError;
use crate::server::error::Error;

/// The backlog to ask for: `configured` if set, otherwise the kernel's
/// `somaxconn` (read from [`SOMAXCONN_PATH`]), otherwise
/// [`LISTEN_BACKLOG_FALLBACK`]. Logs which, and why.
pub fn backlog(configured: Option<u32>) -> u32 {
    if let Some(backlog) = configured {
        tracing::info!(backlog, "listen backlog: set by --listen-backlog");
        return backlog;
    }
    let somaxconn = std::fs::read_to_string(SOMAXCONN_PATH).ok();
    let backlog = backlog_from(None, somaxconn.as_deref());
    tracing::info!(
        backlog,
        somaxconn = somaxconn.as_deref().map(str::trim),
        "listen backlog: the kernel's somaxconn ({SOMAXCONN_PATH}), or {LISTEN_BACKLOG_FALLBACK} if it cannot be read"
    );
    backlog
}

/// [`backlog`] without the file: `configured`, else `somaxconn_text` as
/// the kernel writes it (`"4096\n"`), else the fallback (also for 0 or
/// text that is not a number).
pub fn backlog_from(configured: Option<u32>, somaxconn_text: Option<&str>) -> u32 {
    configured
        .or_else(|| {
            somaxconn_text
                .and_then(|text| text.trim().parse::<u32>().ok())
                .filter(|&n| n > 0)
        })
        .unwrap_or(LISTEN_BACKLOG_FALLBACK)
}

/// A non-blocking listener on `addr` with `backlog`, ready for
/// `tokio::net::TcpListener::from_std`. `SO_REUSEADDR` is set, as tokio's
/// own `bind` does on Unix, so a restarted server can listen again at
/// once while its old connections sit in TIME_WAIT.
pub fn bind_std(addr: SocketAddr, backlog: u32) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(i32::try_from(backlog).unwrap_or(i32::MAX))?;
    Ok(socket.into())
}

/// Binds the listening socket as tokio does (mio asks for std's backlog,
/// 128), for the stock tonic example. When the port is taken,
/// the error says how to choose another.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| cannot_listen(addr, e))
}

/// Binds the listening socket with `config`'s listen backlog
/// ([`backlog`]), as `routing-server` does.
pub fn bind_with_backlog(addr: SocketAddr, config: &Config) -> Result<TcpListener, Error> {
    bind_std(addr, backlog(config.listen_backlog))
        .and_then(TcpListener::from_std)
        .map_err(|e| cannot_listen(addr, e))
}

/// The gRPC address could not be bound (taken, not this host's, no
/// permission): a configuration error, so `routing-server` exits 2, as for
/// `--metrics-listen` and clap's own errors.
#[derive(Debug)]
pub struct ListenError {
    pub addr: SocketAddr,
    pub source: io::Error,
}

impl std::fmt::Display for ListenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cannot listen on {}: {}", self.addr, self.source)?;
        // When the port is taken, say how to choose another.
        if self.source.kind() == io::ErrorKind::AddrInUse {
            f.write_str(": another process listens there; choose another address with --listen HOST:PORT or ROUTING_LISTEN")?;
        }
        Ok(())
    }
}

impl std::error::Error for ListenError {}

/// The error for a socket that cannot listen on `addr`.
fn cannot_listen(addr: SocketAddr, source: io::Error) -> Error {
    Box::new(ListenError { addr, source })
}

/// Binds `--metrics-listen` with the same backlog as the gRPC port
/// (`configured`, else `somaxconn`; see [`backlog`]). The metrics port
/// needs it as much: under a flood of idle sockets, each reconnecting as
/// the listener closes it, thousands of connects wait in its queue, and
/// with tokio's 1,024 the kernel dropped a scrape's SYN, which then waited
/// a second for its retransmission (docs/hardening.md, `metricsidle`).
pub fn bind_metrics(
    addr: SocketAddr,
    configured: Option<u32>,
) -> Result<TcpListener, MetricsBindError> {
    // The value the gRPC port's bind has just logged; not logged twice.
    let somaxconn = std::fs::read_to_string(SOMAXCONN_PATH).ok();
    bind_std(addr, backlog_from(configured, somaxconn.as_deref()))
        .and_then(TcpListener::from_std)
        .map_err(|source| MetricsBindError { addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configured backlog wins; otherwise the kernel's number; otherwise
    /// (no file, 0, not a number) 4,096, as Go falls back.
    #[test]
    fn the_backlog_is_configured_else_somaxconn_else_4096() {
        assert_eq!(backlog_from(Some(64), Some("4096\n")), 64);
        assert_eq!(backlog_from(None, Some("4096\n")), 4096);
        assert_eq!(backlog_from(None, Some(" 65535 ")), 65535);
        assert_eq!(backlog_from(None, None), 4096);
        assert_eq!(backlog_from(None, Some("0")), 4096);
        assert_eq!(backlog_from(None, Some("lots")), 4096);
    }

    /// What the kernel holds as a listening socket's backlog
    /// (`sk_max_ack_backlog`, the `Send-Q` that `ss -l` shows): `sock_diag`
    /// reports it as the socket's `idiag_wqueue`.
    #[cfg(target_os = "linux")]
    fn kernel_backlog(listener: &std::net::TcpListener) -> u32 {
        use crate::kernel_queue::{Reply, SocketId, parse_reply, request};
        use std::io::Read;
        let local = listener.local_addr().expect("local address");
        let any: SocketAddr = "0.0.0.0:0".parse().expect("address");
        let id = SocketId {
            local,
            peer: any,
            inode: 0,
        };
        let diag = crate::kernel_queue::open_diag().expect("sock_diag opens");
        diag.send(&request(&id, 7)).expect("asks");
        let mut buf = [0u8; 1024];
        let mut reader: &Socket = &diag;
        let n = reader.read(&mut buf).expect("an answer");
        match parse_reply(&buf[..n]) {
            Reply::Queue { wqueue, .. } => wqueue,
            other => panic!("no listener found: {other:?}"),
        }
    }

    /// Given a backlog of 7 and one of 100, when each listener is bound,
    /// then the kernel holds exactly that backlog for it (both are under
    /// any `somaxconn` there has been, which would cap them).
    #[cfg(target_os = "linux")]
    #[test]
    fn the_kernel_holds_the_backlog_asked_for() {
        let loopback: SocketAddr = "127.0.0.1:0".parse().expect("address");
        for asked in [7, 100] {
            let listener = bind_std(loopback, asked).expect("binds");
            assert_eq!(kernel_backlog(&listener), asked);
        }
    }
}
