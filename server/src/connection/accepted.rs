//! A connection between the accept loop and its worker: [`Accepted`] waits
//! for the client's first byte before it sets a socket option or builds
//! anything for HTTP/2 or TLS, so a client that connects and closes costs
//! the accept, one peek and the close.

use std::{io, net::SocketAddr};

use tokio::{net::TcpStream, sync::OwnedSemaphorePermit};

use crate::connection::drain::DrainWatcher;
use crate::connection::policy::ConnectionPolicy;
use crate::connection::tls::ServerTls;
use crate::connection::watched::Connection;

/// A connection accepted under the cap, not yet served: its socket belongs
/// to no runtime, so it may be sent to another thread. [`Accepted::serve`],
/// called on the thread that will serve it, registers it there, so that
/// thread's runtime alone reads, writes and wakes it for its whole life.
#[derive(Debug)]
pub struct Accepted {
    stream: std::net::TcpStream,
    peer: SocketAddr,
    slot: OwnedSemaphorePermit,
    policy: ConnectionPolicy,
}

impl Accepted {
    /// A socket the accept loop took under the cap, holding `slot` of it
    /// until the connection ends.
    pub fn new(
        stream: std::net::TcpStream,
        peer: SocketAddr,
        slot: OwnedSemaphorePermit,
        policy: ConnectionPolicy,
    ) -> Self {
        Self {
            stream,
            peer,
            slot,
            policy,
        }
    }

    /// Registers the socket with the runtime this is called on (it must be
    /// called inside one), waits for the client's first byte, and applies
    /// the connection's policies; with `tls`, then runs the TLS handshake
    /// ([`ServerTls::accept`]). The first byte, the TLS handshake and
    /// HTTP/2's share one handshake timeout. A connection closed before
    /// its first byte, or still silent when `drain` starts, ends here.
    ///
    /// The client speaks first in both protocols (the HTTP/2 preface, RFC
    /// 9113 §3.4; the TLS ClientHello), so nothing is lost by waiting for
    /// it: the server's own SETTINGS go out with the reply to the client's
    /// preface rather than before it. What it saves: a client that
    /// connects and closes (a reconnect storm without a preface, a load
    /// balancer's TCP health check, a port scan) costs no socket options,
    /// no HTTP/2 state, no write and no reset, only the accept, the
    /// registration and the close (issue 23).
    pub async fn serve(
        self,
        tls: Option<&ServerTls>,
        drain: &mut DrainWatcher,
    ) -> io::Result<Connection> {
        // accept4 (or into_std) left the socket non-blocking, as from_std
        // requires.
        let stream = TcpStream::from_std(self.stream)?;
        let deadline = tokio::time::Instant::now() + self.policy.handshake_timeout;
        tokio::select! {
            spoke = tokio::time::timeout_at(deadline, client_speaks(&stream)) => match spoke {
                Ok(spoke) => spoke?,
                Err(_) => {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "not a byte within the handshake timeout ({:?})",
                            self.policy.handshake_timeout
                        ),
                    ));
                }
            },
            () = drain.draining() => {
                return Err(io::Error::other("the server is draining: closed before the client spoke"));
            }
        }
        // TCP_NODELAY: without it, small responses can wait ~40 ms for
        // Nagle's algorithm and the peer's delayed ACK.
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(peer = %self.peer, "cannot set TCP_NODELAY: {e}");
        }
        if let Err(e) = bound_kernel_buffers(&stream, &self.policy) {
            tracing::debug!(peer = %self.peer, "cannot bound the socket's kernel buffers: {e}");
        }
        let Some(tls) = tls else {
            return Ok(Connection::new(
                stream,
                self.peer,
                self.slot,
                self.policy,
                deadline,
            ));
        };
        // Boxed: the handshake's state (rustls's session, the ClientHello)
        // lives on the heap while it runs, and is not stored in every
        // connection's task, plaintext ones included, for the task's life.
        let handshake = Box::pin(tls.accept(stream, self.peer, deadline)).await;
        self.policy.metrics.tls_handshake(handshake.is_ok());
        let (transport, sent) = handshake?;
        Ok(Connection::over(
            transport,
            sent,
            self.peer,
            self.slot,
            self.policy,
            deadline,
        ))
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }
}

/// Waits until the client has sent its first byte, without taking it;
/// `UnexpectedEof` if it closed first.
async fn client_speaks(stream: &TcpStream) -> io::Result<()> {
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte).await? {
        0 => Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "closed before its first byte",
        )),
        _ => Ok(()),
    }
}

/// Puts the kernel's buffers for an accepted socket inside the server's
/// bounds (Linux and Android; see [`ConnectionPolicy`]):
/// - `TCP_USER_TIMEOUT`: a peer that acknowledges nothing, or keeps its
///   receive window shut, is closed by the kernel itself, whatever requests
///   it keeps sending. hyper's keepalive cannot do this: it counts every
///   request as activity. grpc-go sets the same option to its keepalive
///   timeout.
/// - `TCP_NOTSENT_LOWAT`: the socket accepts more only while fewer unsent
///   bytes than this are queued, so a response bigger than that stays in
///   h2, charged to the response budget and under the send deadline, until
///   the peer really takes it. The kernel's autotuned send buffer still
///   grows for bytes in flight, so a fast, distant reader is not slowed.
///
/// On Linux a budgeted response also counts as sent only once the peer has
/// acknowledged it, read from the kernel's send queue
/// ([`crate::kernel_queue`]), so the bytes under the low-water mark stay
/// charged and under the send deadline too. These two options bound what
/// the kernel holds meanwhile, and for how long.
///
/// Elsewhere (macOS, Windows) neither option is set and the queue is not
/// read: a stalled reader is still closed by the send deadline, but the
/// last send buffer's worth of a response leaves the budget when the
/// kernel takes it.
fn bound_kernel_buffers(stream: &TcpStream, policy: &ConnectionPolicy) -> io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        let socket = socket2::SockRef::from(stream);
        socket.set_tcp_user_timeout(policy.tcp_user_timeout)?;
        if let Some(lowat) = policy.tcp_notsent_lowat {
            socket.set_tcp_notsent_lowat(lowat)?;
        }
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = (stream, policy);
    Ok(())
}
