//! One connection's byte counts, where the kernel lists its socket, and the
//! arithmetic that turns the kernel's queue into "this response has
//! drained": bytes acknowledged, TLS overhead taken off, never too early.

use std::{
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
};

use tokio::net::TcpStream;

/// A socket as `sock_diag` finds it: its two addresses, and its inode,
/// which tells it from a later socket with the same addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketId {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    pub inode: u64,
}

/// The bytes the peer has acknowledged, at least: `written_before` (the
/// socket's write count read *before* the kernel was asked) minus its
/// `wqueue`. Bytes written between the two are in the queue but not in the
/// count, so this can only be low, never high.
pub fn acked_at_least(written_before: u64, wqueue: u32) -> u64 {
    written_before.saturating_sub(u64::from(wqueue))
}

/// Whether a response that ends at byte `end` of its connection has
/// drained, `acked` bytes of the connection being acknowledged.
pub fn is_drained(acked: u64, end: u64) -> bool {
    acked >= end
}

/// One connection's byte counts and where the kernel lists its socket.
#[derive(Debug, Default)]
pub struct SentBytes {
    /// The socket, as the kernel finds it; `None` where it cannot be
    /// watched.
    pub(super) socket: Option<SocketId>,
    /// Bytes the connection's writer accepted from h2 (some may still be
    /// in the coalescing buffer).
    accepted: AtomicU64,
    /// Bytes written to the socket.
    written: AtomicU64,
    /// Over TLS: the last moment rustls held nothing back (`None` in
    /// plaintext, where both counts are in the same units).
    tls: Option<QuietPoint>,
}

/// The last moment a TLS connection's writer held no ciphertext back:
/// `plaintext` bytes had been encrypted and written, with `overhead` bytes
/// of TLS on top (handshake, record headers and tags, tickets).
#[derive(Debug, Default)]
struct QuietPoint {
    plaintext: AtomicU64,
    overhead: AtomicU64,
}

impl SentBytes {
    /// Counts for `stream` (Linux). Elsewhere, or if its addresses or
    /// inode cannot be read, nothing is watched.
    pub fn of(stream: &TcpStream) -> Arc<Self> {
        Arc::new(Self {
            socket: socket_of(stream),
            ..Self::default()
        })
    }

    /// Bytes accepted so far: where a response released now ends.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::Acquire)
    }

    /// Counts `n` bytes the connection's writer took from h2.
    pub fn add_accepted(&self, n: usize) {
        self.accepted.fetch_add(n as u64, Ordering::AcqRel);
    }

    /// Bytes written to the socket so far.
    pub(super) fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Counts `n` bytes written to the socket ([`super::CountWrites`]).
    pub(super) fn add_written(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::AcqRel);
    }

    /// Counts for `stream`, which will carry TLS: the socket's count is
    /// then converted to plaintext ([`Self::plaintext_acked`]).
    pub fn of_tls(stream: &TcpStream) -> Arc<Self> {
        Arc::new(Self {
            socket: socket_of(stream),
            tls: Some(QuietPoint::default()),
            ..Self::default()
        })
    }

    /// Records that rustls holds nothing back: `plaintext` bytes have gone
    /// through TLS, and every byte it made of them is on the socket. Call it
    /// only at such a moment (see [`crate::connection::tls`]).
    pub fn tls_quiet(&self, plaintext: u64) {
        if let Some(point) = &self.tls {
            let overhead = self.written().saturating_sub(plaintext);
            // The overhead first: whoever reads the new plaintext count
            // (Acquire) reads this overhead or a later, larger one.
            point.overhead.fetch_max(overhead, Ordering::Relaxed);
            point.plaintext.fetch_max(plaintext, Ordering::Release);
        }
    }

    /// Plaintext bytes the peer has acknowledged, at least, when it has
    /// acknowledged `acked` bytes of the socket. In plaintext, `acked`.
    pub fn plaintext_acked(&self, acked: u64) -> u64 {
        match &self.tls {
            None => acked,
            Some(point) => {
                let plaintext = point.plaintext.load(Ordering::Acquire);
                let overhead = point.overhead.load(Ordering::Relaxed);
                tls_plaintext_acked(acked, plaintext, overhead)
            }
        }
    }
}

/// Plaintext bytes acknowledged, at least, when the peer has acknowledged
/// `acked` socket bytes and, at a quiet moment, `plaintext` bytes had gone
/// out with `overhead` bytes of TLS: each of those bytes ends at most
/// `overhead` past its plaintext offset, and nothing later is known yet.
pub fn tls_plaintext_acked(acked: u64, plaintext: u64, overhead: u64) -> u64 {
    acked.saturating_sub(overhead).min(plaintext)
}

#[cfg(target_os = "linux")]
pub(super) fn socket_of(stream: &TcpStream) -> Option<SocketId> {
    use std::os::{fd::AsRawFd, unix::fs::MetadataExt};
    let (local, peer) = (stream.local_addr().ok()?, stream.peer_addr().ok()?);
    // The link is `socket:[INODE]`; stat through it gives the inode.
    let fd = stream.as_raw_fd();
    match std::fs::metadata(format!("/proc/self/fd/{fd}")) {
        Ok(meta) => Some(SocketId {
            local,
            peer,
            inode: meta.ino(),
        }),
        Err(e) => {
            warn_unavailable(&e);
            None
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn socket_of(_: &TcpStream) -> Option<SocketId> {
    None
}

/// Logs, once per process, that responses count as sent when h2 lets go.
#[cfg(target_os = "linux")]
pub(super) fn warn_unavailable(e: &std::io::Error) {
    use std::sync::atomic::AtomicBool;
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::AcqRel) {
        tracing::warn!(
            "cannot ask the kernel for its send queues ({e}): a response counts as sent once the kernel has taken it"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given two responses on one connection, the first ending at byte
    /// 1,000 and the second at 5,000, when 6,000 bytes have been written
    /// and 3,000 are still queued, then the first has drained and the
    /// second has not, though the queue is not empty; once the queue holds
    /// only bytes after 5,000, the second has drained too.
    #[test]
    fn responses_drain_in_turn_while_the_queue_is_never_empty() {
        let (first, second) = (1_000, 5_000);
        let acked = acked_at_least(6_000, 3_000);
        assert_eq!(acked, 3_000);
        assert!(is_drained(acked, first));
        assert!(!is_drained(acked, second));
        let acked = acked_at_least(9_000, 4_000);
        assert!(is_drained(acked, second));
        assert!(is_drained(acked_at_least(5_000, 0), second), "exactly");
        assert!(
            !is_drained(acked_at_least(5_000, 1), second),
            "one byte short"
        );
    }

    /// Given a TLS connection that, at its last quiet moment, had written
    /// 10,000 plaintext bytes with 3,000 bytes of TLS on top (13,000 on the
    /// socket), when the peer has acknowledged socket bytes, then the
    /// plaintext acknowledged is never more than the socket bytes minus the
    /// overhead, nor more than the plaintext known to be out: a response
    /// ending at plaintext byte 10,000 is drained only once all 13,000 are
    /// acknowledged, and one ending at 4,000 once 7,000 are.
    #[test]
    fn over_tls_a_response_drains_only_once_its_records_are_acknowledged() {
        let (plaintext, overhead) = (10_000, 3_000);
        let acked = |socket| tls_plaintext_acked(socket, plaintext, overhead);
        assert_eq!(acked(2_000), 0, "the handshake alone");
        assert!(!is_drained(acked(6_999), 4_000));
        assert!(is_drained(acked(7_000), 4_000));
        assert!(!is_drained(acked(12_999), 10_000));
        assert!(is_drained(acked(13_000), 10_000));
        // More socket bytes than the quiet moment covers: written since,
        // not yet known to be plaintext of ours.
        assert_eq!(acked(20_000), plaintext);
    }

    /// Bytes written after the count was read but before the kernel was
    /// asked can make the queue larger than the count: that is nothing
    /// acked.
    #[test]
    fn a_queue_larger_than_the_count_acks_nothing() {
        assert_eq!(acked_at_least(100, 500), 0);
        assert!(!is_drained(acked_at_least(100, 500), 1));
        assert!(is_drained(0, 0), "a response that wrote nothing");
    }
}
