//! When a response's bytes have really reached the client: the kernel's
//! send queue of each connection, asked of the kernel by `sock_diag`.
//!
//! h2 lets go of a response's last chunk when it has handed the bytes to
//! the connection's writer, and the socket takes them into its send queue.
//! From there a client that stopped reading at the TCP level never takes
//! them: the bytes are still in this machine, in kernel memory. So a
//! budgeted response ([`crate::call::response_hold`]) counts as sent only when the peer
//! has *acknowledged* it: the kernel's unsent and unacknowledged bytes for
//! the connection cover none of it. That is what `ioctl(SIOCOUTQ)` (also
//! called `TIOCOUTQ`) reports, `write_seq - snd_una`.
//!
//! Why netlink and not the ioctl: no crate in this workspace's lock file
//! wraps `SIOCOUTQ` or `TCP_INFO` safely (socket2 0.6, rustix 1.1 and nix
//! 0.32 do not), and the workspace forbids `unsafe`. A `NETLINK_SOCK_DIAG`
//! socket (what `ss` uses) is opened and read with socket2's safe calls,
//! its messages are laid out by the rust-netlink crates
//! (`netlink-packet-sock-diag`, `netlink-packet-core`), and its answer for
//! one TCP socket carries the same number: `idiag_wqueue` is
//! `write_seq - snd_una` (`tcp_diag_get_info`), as `tcp_ioctl` returns for
//! `SIOCOUTQ`. Each query names one socket by its addresses, so the kernel
//! looks it up in its hash table: about 10 µs (see
//! [`crate::knobs::KERNEL_QUEUE_POLL`]). `/proc/net/tcp` has the same
//! number, but reading it walks every socket of the namespace, about 5 ms
//! a read even with a dozen sockets: the first version of this module read
//! it, and it cost each ListRoutes call 1.5 ms more server CPU.
//!
//! Why acknowledged, not "left this machine" (unsent bytes only, what
//! `SIOCOUTQNSD` reports): acknowledged is the stronger promise. A byte in
//! flight to a peer whose receive buffer is full is not read either; the
//! peer's kernel acknowledges only what fits its receive buffer.
//!
//! Per response, not per connection: several responses can be in flight on
//! one connection, so its queue may never be empty. Each connection counts
//! the bytes it accepted from h2 ([`SentBytes::accepted`], above the
//! write-coalescing buffer) and the bytes it wrote to the socket
//! (`SentBytes::written`, below it). A response ends at the first count
//! when it is released; it has drained once `written - wqueue` (bytes the
//! peer has acknowledged) reaches that end ([`is_drained`]).
//!
//! Cost: one thread asks, only while some response waits to drain, at most
//! every [`crate::knobs::KERNEL_QUEUE_POLL`] for each waited-on socket, and
//! less often for a socket whose peer acknowledges nothing (the interval
//! doubles up to [`crate::knobs::QUIET_SOCKET_POLL`]); every response waiting on one
//! socket shares its answer.
//!
//! Over TLS the socket carries more than h2 handed over: the handshake,
//! each record's header and tag (22 bytes per record of up to 16 KiB in
//! TLS 1.3), session tickets, alerts. So the two counts are in different
//! units, ciphertext at the socket and plaintext above TLS, and comparing
//! them directly would call a response drained up to that overhead too
//! early. [`SentBytes::plaintext_acked`] converts, never too early: at each
//! moment rustls holds no ciphertext back ([`crate::connection::tls`] records it), the
//! socket has been given exactly the plaintext so far plus the overhead so
//! far. A plaintext byte up to that point sits at most that overhead past
//! its own offset on the socket, so once the peer has acknowledged `acked`
//! socket bytes, it has every plaintext byte up to `acked - overhead`.
//!
//! Elsewhere than Linux, or when the kernel refuses `sock_diag` (logged
//! once, at warn), a response counts as sent when h2 releases it, as before:
//! the send queue is then bounded only by `TCP_NOTSENT_LOWAT` and
//! `TCP_USER_TIMEOUT` ([`crate::connection::accepted`]).
//!
//! # Layout
//! - `accounting`: one connection's byte counts ([`SentBytes`]), where the
//!   kernel lists its socket ([`SocketId`]), and the arithmetic that says a
//!   response has drained, TLS overhead included (pure).
//! - `io`: [`CountWrites`], the socket under the coalescing buffer, which
//!   counts the bytes written to it.
//! - `sock_diag` (Linux): the one question asked of the kernel, by a
//!   socket's addresses, and its answer.
//! - `poller` (Linux): the thread that asks while some response waits, and
//!   [`drained`], the wait itself.

mod accounting;
mod io;
#[cfg(target_os = "linux")]
mod poller;
#[cfg(target_os = "linux")]
mod sock_diag;

pub use accounting::{SentBytes, SocketId, acked_at_least, is_drained, tls_plaintext_acked};
pub use io::CountWrites;
#[cfg(target_os = "linux")]
pub use poller::drained;
/// For `listen`'s test of the kernel's backlog, which asks `sock_diag` too.
#[cfg(all(test, target_os = "linux"))]
pub(crate) use sock_diag::open_diag;
#[cfg(target_os = "linux")]
pub use sock_diag::{Reply, parse_reply, request};

/// How the wait for a response to drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drain {
    /// The peer acknowledged every byte of it.
    Acked,
    /// The kernel no longer has the socket: closed.
    Gone,
    /// Not watched: not Linux, or `sock_diag` refused. Sent, as before.
    Unknown,
}

/// Elsewhere than Linux no socket is watched: every response counts as
/// sent when h2 lets go of it.
#[cfg(not(target_os = "linux"))]
pub async fn drained(_: &std::sync::Arc<SentBytes>, _: u64, _: impl FnMut()) -> Drain {
    Drain::Unknown
}
