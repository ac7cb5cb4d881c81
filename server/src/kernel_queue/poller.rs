//! The one thread that asks the kernel about the sockets some response
//! waits on (Linux), and [`drained`], the wait itself: each socket is asked
//! at most every [`KERNEL_QUEUE_POLL`], less often while its peer
//! acknowledges nothing, and every response waiting on it shares the answer.

use std::{
    collections::HashMap,
    io,
    sync::{
        Arc, Condvar, Mutex, OnceLock,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::watch;

use super::{
    Drain, SentBytes, SocketId,
    accounting::{acked_at_least, is_drained, warn_unavailable},
    sock_diag::{Found, open_diag, query},
};
use crate::knobs::{KERNEL_QUEUE_POLL, QUIET_SOCKET_POLL};

/// Waits until the peer has acknowledged the connection's bytes up to
/// `end`, calling `progressed` whenever it has acknowledged more.
pub async fn drained(bytes: &Arc<SentBytes>, end: u64, mut progressed: impl FnMut()) -> Drain {
    let Some(id) = bytes.socket else {
        return Drain::Unknown;
    };
    let inode = id.inode;
    let poller = poller();
    let mut published = poller.published.subscribe();
    let _waiting = poller.wait_for(id, bytes);
    let mut acked = 0;
    loop {
        match poller.state_of(inode) {
            None => return Drain::Unknown,
            Some(Watched { gone: true, .. }) => return Drain::Gone,
            Some(w) if is_drained(w.plaintext_acked, end) => return Drain::Acked,
            Some(w) => {
                if w.acked > acked {
                    acked = w.acked;
                    progressed();
                }
            }
        }
        if published.changed().await.is_err() {
            return Drain::Unknown;
        }
    }
}

/// The one thread that asks the kernel, and what it found.
struct Poller {
    /// The sockets some response waits on, by inode.
    sockets: Mutex<HashMap<u64, Watched>>,
    /// Signalled when a socket starts being waited on.
    someone_waits: Condvar,
    /// Bumped after a round of questions that found a socket gone or more
    /// of it acknowledged.
    published: watch::Sender<u64>,
    /// `sock_diag` was refused: nothing is watched any more.
    unavailable: AtomicBool,
}

/// A socket some response waits on.
#[derive(Debug, Clone)]
struct Watched {
    id: SocketId,
    bytes: Arc<SentBytes>,
    /// Responses waiting on it.
    waiters: usize,
    /// Bytes acknowledged, at least, as of the last answer: of the socket
    /// (send progress), and of what h2 handed over (what a response's end
    /// counts in); the same in plaintext.
    acked: u64,
    plaintext_acked: u64,
    gone: bool,
    /// When to ask next, and how long after that: doubled while the peer
    /// acknowledges nothing, up to [`QUIET_SOCKET_POLL`].
    next: Instant,
    interval: Duration,
}

/// Removes a waiter when its wait ends (or its task is dropped).
struct Waiting<'a> {
    poller: &'a Poller,
    inode: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut sockets = self.poller.lock();
        if let Some(w) = sockets.get_mut(&self.inode) {
            w.waiters -= 1;
            if w.waiters == 0 {
                sockets.remove(&self.inode);
            }
        }
    }
}

fn poller() -> &'static Poller {
    static POLLER: OnceLock<&'static Poller> = OnceLock::new();
    POLLER.get_or_init(|| {
        let poller: &'static Poller = Box::leak(Box::new(Poller {
            sockets: Mutex::new(HashMap::new()),
            someone_waits: Condvar::new(),
            published: watch::Sender::new(0),
            unavailable: AtomicBool::new(false),
        }));
        let started = std::thread::Builder::new()
            .name("kernel-queue".into())
            .spawn(move || poller.run());
        if let Err(e) = started {
            warn_unavailable(&e);
            poller.unavailable.store(true, Ordering::Release);
        }
        poller
    })
}

impl Poller {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Watched>> {
        self.sockets.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait_for(&self, id: SocketId, bytes: &Arc<SentBytes>) -> Waiting<'_> {
        let mut sockets = self.lock();
        let mut first = false;
        sockets
            .entry(id.inode)
            .or_insert_with(|| {
                first = true;
                Watched {
                    id,
                    bytes: Arc::clone(bytes),
                    waiters: 0,
                    acked: 0,
                    plaintext_acked: 0,
                    gone: false,
                    next: Instant::now() + KERNEL_QUEUE_POLL,
                    interval: KERNEL_QUEUE_POLL,
                }
            })
            .waiters += 1;
        drop(sockets);
        if first {
            self.someone_waits.notify_one();
        }
        Waiting {
            poller: self,
            inode: id.inode,
        }
    }

    /// `None` once `sock_diag` proved unavailable.
    fn state_of(&self, inode: u64) -> Option<Watched> {
        if self.unavailable.load(Ordering::Acquire) {
            return None;
        }
        self.lock().get(&inode).cloned()
    }

    /// Asks about each waited-on socket when it is due; sleeps on the
    /// condvar until the next is due, or while no one waits.
    fn run(&self) {
        let diag = match open_diag() {
            Ok(diag) => diag,
            Err(e) => return self.give_up(&e),
        };
        let mut buf = vec![0; 4096];
        let mut seq = 0_u32;
        loop {
            let due: Vec<(u64, SocketId, u64)> = {
                let mut sockets = self.lock();
                loop {
                    let now = Instant::now();
                    match sockets.values().map(|w| w.next).min() {
                        Some(next) if next <= now => break,
                        Some(next) => {
                            sockets = self
                                .someone_waits
                                .wait_timeout(sockets, next - now)
                                .unwrap_or_else(|e| e.into_inner())
                                .0;
                        }
                        None => {
                            sockets = self
                                .someone_waits
                                .wait(sockets)
                                .unwrap_or_else(|e| e.into_inner());
                        }
                    }
                }
                let now = Instant::now();
                // Each count before the question: see `acked_at_least`.
                sockets
                    .iter()
                    .filter(|(_, w)| w.next <= now)
                    .map(|(inode, w)| (*inode, w.id, w.bytes.written()))
                    .collect()
            };
            let mut answers = Vec::with_capacity(due.len());
            for (inode, id, written_before) in due {
                seq = seq.wrapping_add(1);
                match query(&diag, &id, seq, &mut buf) {
                    Ok(found) => answers.push((inode, written_before, found)),
                    Err(e) => return self.give_up(&e),
                }
            }
            let mut sockets = self.lock();
            let now = Instant::now();
            let mut changed = false;
            for (inode, written_before, found) in answers {
                let Some(w) = sockets.get_mut(&inode) else {
                    continue;
                };
                match found {
                    Found::Queue(wqueue) => {
                        let acked = acked_at_least(written_before, wqueue);
                        // Over TLS this can grow with no new acknowledgement:
                        // the writer became quiet after the count was read.
                        let plaintext_acked = w.bytes.plaintext_acked(w.acked.max(acked));
                        if plaintext_acked > w.plaintext_acked {
                            changed = true;
                            w.plaintext_acked = plaintext_acked;
                        }
                        w.interval = if acked > w.acked {
                            changed = true;
                            KERNEL_QUEUE_POLL
                        } else {
                            (w.interval * 2).min(QUIET_SOCKET_POLL)
                        };
                        w.acked = w.acked.max(acked);
                        w.next = now + w.interval;
                    }
                    Found::Gone => {
                        changed = true;
                        w.gone = true;
                    }
                }
            }
            drop(sockets);
            // Every waiting response looks again, so only when one may be
            // done or has progressed.
            if changed {
                self.published.send_modify(|n| *n += 1);
            }
        }
    }

    /// `sock_diag` failed: from now on every response counts as sent when
    /// h2 lets go of it.
    fn give_up(&self, e: &io::Error) {
        warn_unavailable(e);
        self.unavailable.store(true, Ordering::Release);
        self.published.send_modify(|n| *n += 1);
    }
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpStream;

    use super::*;
    use crate::kernel_queue::CountWrites;

    /// Given a loopback connection whose server side wrote 100 kB, when
    /// the kernel is asked before the client reads, then the socket is
    /// found by the addresses and inode taken at accept, with bytes queued;
    /// once the client has read them, the wait ends with every byte
    /// acknowledged; once the socket is closed, the kernel has it no more.
    #[tokio::test]
    async fn a_socket_is_found_and_its_queue_drains() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let mut client = TcpStream::connect(listener.local_addr().expect("addr"))
            .await
            .expect("connect");
        let (server, _) = listener.accept().await.expect("accept");
        let bytes = SentBytes::of(&server);
        let id = bytes.socket.expect("Linux lists the socket");
        let diag = open_diag().expect("sock_diag");
        let mut buf = vec![0; 4096];
        assert_eq!(
            query(&diag, &id, 1, &mut buf).expect("answered"),
            Found::Queue(0)
        );
        let mut server = CountWrites::new(server, Arc::clone(&bytes));
        server.write_all(&[7; 100_000]).await.expect("write");
        let mut read = vec![0; 100_000];
        client.read_exact(&mut read).await.expect("read");
        let drain = tokio::time::timeout(Duration::from_secs(10), drained(&bytes, 100_000, || {}))
            .await
            .expect("drained in time");
        assert_eq!(drain, Drain::Acked);
        drop((server, client));
        // Closed first, the server's side is in FIN_WAIT or TIME_WAIT: the
        // kernel still finds the addresses, but with no inode.
        assert_eq!(
            query(&diag, &id, 2, &mut buf).expect("answered"),
            Found::Gone
        );
    }
}
