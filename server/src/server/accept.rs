//! The accept loop: it caps connections served at once (above the cap a
//! new connection is closed at once) and backs off on accept errors such
//! as `EMFILE` instead of spinning. It yields each connection as
//! [`Accepted`], a socket bound to no runtime yet, so the server can hand it
//! to the worker that will serve it ([`crate::server::workers`]); on Linux
//! it costs one `accept4` and nothing else.

use std::{io, net::SocketAddr, sync::Arc, time::Duration};

use tokio::{
    net::{TcpListener, TcpStream},
    sync::{Semaphore, mpsc},
};

use crate::connection::accepted::Accepted;
use crate::connection::policy::ConnectionPolicy;
use crate::knobs::{ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN};

/// Accepts connections on `listener` in a task of its own and yields them,
/// at most `slots`' permits alive at once (see [`connection_slots`]). The
/// task ends when the receiver is dropped, which closes the listening
/// socket.
pub fn incoming(
    listener: TcpListener,
    slots: Arc<Semaphore>,
    policy: ConnectionPolicy,
) -> io::Result<mpsc::Receiver<Accepted>> {
    let listening = Listening::new(listener)?;
    let (tx, rx) = mpsc::channel(1);
    tokio::spawn(accept_loop(listening, slots, policy, tx));
    Ok(rx)
}

/// One permit per connection the server may serve at once: each accepted
/// connection holds one until it ends, so the permits in use are the
/// connections open.
pub fn connection_slots(max_connections: u64) -> (Arc<Semaphore>, usize) {
    let slots = usize::try_from(max_connections)
        .unwrap_or(usize::MAX)
        .min(Semaphore::MAX_PERMITS);
    (Arc::new(Semaphore::new(slots)), slots)
}

async fn accept_loop(
    listening: Listening,
    slots: Arc<Semaphore>,
    policy: ConnectionPolicy,
    tx: mpsc::Sender<Accepted>,
) {
    let mut backoff: Option<Duration> = None;
    let mut at_cap = false;
    loop {
        let accepted = tokio::select! {
            () = tx.closed() => return,
            accepted = listening.accept() => accepted,
        };
        match accepted {
            Ok((stream, peer)) => {
                backoff = None;
                // Over the cap: close at once (dropping the stream). The
                // client sees its connection end; the server does no work.
                let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
                    policy.metrics.cap_refusals.increment(1);
                    if !at_cap {
                        tracing::warn!(%peer, "connection cap reached: closing new connections until one ends");
                        at_cap = true;
                    }
                    continue;
                };
                at_cap = false;
                policy.metrics.accepted.increment(1);
                let connection = Accepted::new(stream, peer, slot, policy);
                if tx.send(connection).await.is_err() {
                    return;
                }
            }
            // These concern one connection that died in the backlog: next.
            Err(e) if is_per_connection(&e) => {}
            Err(e) => {
                // EMFILE, ENFILE, ENOBUFS, ENOMEM...: retrying at once would
                // spin a core, so wait 5 ms, doubling up to 1 s.
                let delay = next_backoff(backoff);
                backoff = Some(delay);
                tracing::warn!(?delay, "accept failed, backing off: {e}");
                tokio::select! {
                    () = tx.closed() => return,
                    () = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

/// The listening socket, as the accept loop uses it: each
/// [`Listening::accept`] yields a socket registered with no runtime, ready
/// to be sent to the worker that will serve it.
///
/// On Linux the socket is watched for readiness alone, and accepted with
/// one `accept4` that makes the new socket non-blocking and close-on-exec.
/// tokio's `TcpListener::accept` registers every socket it accepts with
/// the accepting runtime, and the hand-off then takes it out again: two
/// `epoll_ctl` calls per connection, on the acceptor's thread, for nothing
/// (issue 23). tokio reports the readiness of a stream, not of a listener,
/// so the listening socket is held as a `TcpStream`: a listening socket is
/// readable when a connection waits in its queue. Elsewhere, tokio's
/// `accept`, and the socket taken out of the runtime.
#[derive(Debug)]
enum Listening {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Watched(TcpStream),
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    Tokio(TcpListener),
}

impl Listening {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn new(listener: TcpListener) -> io::Result<Self> {
        let fd = std::os::fd::OwnedFd::from(listener.into_std()?);
        TcpStream::from_std(std::net::TcpStream::from(fd)).map(Self::Watched)
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn new(listener: TcpListener) -> io::Result<Self> {
        Ok(Self::Tokio(listener))
    }

    /// The next connection in the queue, waiting for one if there is none.
    async fn accept(&self) -> io::Result<(std::net::TcpStream, SocketAddr)> {
        match self {
            #[cfg(any(target_os = "linux", target_os = "android"))]
            Self::Watched(socket) => {
                let flags = libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
                let (accepted, addr) = socket
                    .async_io(tokio::io::Interest::READABLE, || {
                        socket2::SockRef::from(socket).accept4(flags)
                    })
                    .await?;
                // A TCP listener's peer is always an IP address.
                let peer = addr
                    .as_socket()
                    .ok_or_else(|| io::Error::other("accepted a peer that is not an IP address"))?;
                Ok((accepted.into(), peer))
            }
            #[cfg(not(any(target_os = "linux", target_os = "android")))]
            Self::Tokio(listener) => {
                let (stream, peer) = listener.accept().await?;
                Ok((stream.into_std()?, peer))
            }
        }
    }
}

/// 5 ms after the first failure, then twice the previous wait, at most 1 s.
fn next_backoff(previous: Option<Duration>) -> Duration {
    previous.map_or(ACCEPT_BACKOFF_MIN, |d| (d * 2).min(ACCEPT_BACKOFF_MAX))
}

fn is_per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given a listener with two clients waiting in its queue, when the
    /// accept loop's listener takes them, then each comes with its client's
    /// address, non-blocking (as a runtime needs it) and registered with no
    /// runtime, so a worker's runtime can take it; the second waits in the
    /// queue until asked for.
    #[tokio::test]
    async fn accepted_sockets_come_non_blocking_with_their_peer() {
        // Given: two clients connected before anything is accepted.
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let first = TcpStream::connect(addr).await.expect("connects");
        let second = TcpStream::connect(addr).await.expect("connects");
        let listening = Listening::new(listener).expect("watched");

        for client in [first, second] {
            // When: one is accepted.
            let (accepted, peer) = tokio::time::timeout(Duration::from_secs(5), listening.accept())
                .await
                .expect("a queued connection is taken at once")
                .expect("accepted");

            // Then: it is the client's, non-blocking, and a runtime takes it.
            assert_eq!(peer, client.local_addr().expect("client address"));
            assert!(
                socket2::SockRef::from(&accepted)
                    .nonblocking()
                    .expect("flags")
            );
            let stream = TcpStream::from_std(accepted).expect("registers with this runtime");
            assert_eq!(stream.peer_addr().expect("peer"), peer);
        }
    }

    #[test]
    fn accept_backoff_doubles_from_5_ms_to_1_s() {
        let mut waits = Vec::new();
        let mut previous = None;
        for _ in 0..10 {
            let next = next_backoff(previous);
            waits.push(next.as_millis());
            previous = Some(next);
        }
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    }
}
