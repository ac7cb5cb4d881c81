//! Thread-per-core serving: N workers, each a tokio current-thread runtime,
//! and one acceptor that hands every new connection to the worker with the
//! fewest connections. A connection stays on its worker for its whole life,
//! so its reads, its handlers and its writes all run on one thread, and a
//! response never crosses threads.
//!
//! # How the workers relate to the caller's runtime
//!
//! With two workers or more, every worker is a thread that
//! [`Workers::start`] spawns, named `worker-0`, `worker-1` and so on (short:
//! Linux keeps 15 bytes of a thread's name), each with its own
//! current-thread runtime, and [`Workers::stop`] ends and joins them. The
//! runtime that [`crate::run()`] is awaited on keeps the acceptor (with
//! health and the drain) and serves no connection, so N workers are N + 1
//! threads. With one worker, that worker is the caller's runtime: its
//! connections are tasks there, beside the acceptor, so `--worker-threads 1`
//! spawns no thread at all and serves exactly as a single-threaded server
//! does.
//!
//! # Why the acceptor has a thread of its own
//!
//! When the acceptor shared its thread with worker 0, a reconnect storm
//! (issue 23: 32 clients connecting and closing as fast as they can) put it
//! behind. Worker 0 ended its connections at once, on the acceptor's own
//! thread, while worker 1's waited for their thread to wake, so the
//! least-loaded choice sent worker 0 two connections in three (89,018 to
//! 44,699 in one 10 s storm), and the acceptor served them instead of
//! accepting. The kernel's queue then filled in 0.2 to 0.3 s, it dropped
//! the next SYNs, and every client waited a second for its retransmission,
//! in waves. On a thread that only accepts and hands off, the acceptor
//! takes each connection as it arrives, whatever the workers have to do.
//! It costs one more thread, asleep in `epoll_wait` between connections,
//! and a wake-up of a worker for every connection: 18-32 µs of server CPU
//! per connection in the storm, against 18-23 µs with the acceptor on
//! worker 0's thread, which still fell behind in 3 runs of 6; never
//! anything per call (docs/hardening.md, round three).
//!
//! # Why one acceptor, not `SO_REUSEPORT`
//!
//! With `SO_REUSEPORT` each worker would listen on the same port itself.
//! Linux then picks a listener by a hash of the connection's addresses and
//! ports, so ten connections often land 7 to 3 or worse (a third of the time
//! in 200 tries of 10 loopback connections to 2 listeners), and nothing moves
//! them later; on macOS the option lets sockets share a port but does not
//! balance connections between them as Linux does. One
//! acceptor sees every worker's load, keeps the connection cap and the accept
//! back-off in one place, and behaves the same on every OS; it costs one
//! cross-thread hand-off per *connection*, not per call.

use std::{
    future::Future,
    io,
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    thread::JoinHandle,
    time::Duration,
};

use tokio::sync::mpsc;

use crate::knobs::WORKER_THREADS_FALLBACK;

/// How long a stopping worker may take to drop the connections it still
/// serves (those the drain gave up on) before the server stops waiting for
/// it: 1 s. Dropping a connection closes a socket, which takes microseconds;
/// only a handler that blocks its thread could take longer.
pub const WORKER_STOP_BOUND: Duration = Duration::from_secs(1);

/// The number of workers: `configured` if set, otherwise the CPUs this
/// process may use. Logs the number and why.
pub fn count(configured: Option<usize>) -> usize {
    if let Some(workers) = configured {
        tracing::info!(workers, "worker threads: set by --worker-threads");
        return workers;
    }
    match std::thread::available_parallelism() {
        Ok(workers) => {
            tracing::info!(
                workers,
                "worker threads: available parallelism (the CPUs this process may use, cgroup quota and affinity included)"
            );
            workers.get()
        }
        Err(e) => {
            tracing::warn!(
                workers = WORKER_THREADS_FALLBACK,
                "worker threads: cannot read the available parallelism ({e})"
            );
            WORKER_THREADS_FALLBACK
        }
    }
}

/// The workers, as the acceptor sees them.
#[derive(Debug)]
pub struct Workers<J> {
    workers: Vec<Worker<J>>,
    /// Where the search for the least-loaded worker starts: ties go round-robin.
    next: usize,
}

#[derive(Debug)]
struct Worker<J> {
    /// Connections are handed over here. Unbounded, but bounded in practice
    /// by the connection cap: every connection in it holds a slot.
    handoff: mpsc::UnboundedSender<Handoff<J>>,
    /// Connections this worker serves now.
    live: Arc<AtomicUsize>,
    /// Connections handed to it since start, for the log.
    handed: u64,
    /// `None` for a worker alone, which runs on the caller's runtime.
    thread: Option<JoinHandle<()>>,
}

/// One connection on its way to a worker, counted as live from the moment it
/// is handed over until its task ends.
#[derive(Debug)]
struct Handoff<J> {
    job: J,
    live: Live,
}

/// Counts one connection in its worker's `live` while it exists: the
/// function that serves the connection keeps it until the connection ends.
#[derive(Debug)]
pub struct Live(Arc<AtomicUsize>);

impl Drop for Live {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl<J: Send + 'static> Workers<J> {
    /// Starts one worker per function in `serve` (at least one is needed);
    /// each calls its own on every connection handed to it, with the
    /// connection's [`Live`] count to keep until it ends, and spawns what it
    /// returns as the connection's task. One each, not one cloned: whatever
    /// a function holds stays with its worker. Must be called inside a tokio
    /// runtime, which is the worker when there is only one, and serves no
    /// connection otherwise.
    pub fn start<F, Fut>(serve: Vec<F>) -> io::Result<Self>
    where
        F: Fn(J, Live) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if serve.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "at least one worker is needed",
            ));
        }
        let alone = serve.len() == 1;
        let mut workers = Vec::with_capacity(serve.len());
        for (index, serve) in serve.into_iter().enumerate() {
            let (handoff, handed) = mpsc::unbounded_channel();
            let serving = run_worker(handed, serve);
            let thread = if alone {
                tokio::spawn(serving);
                None
            } else {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let thread = std::thread::Builder::new()
                    .name(format!("worker-{index}"))
                    .spawn(move || {
                        runtime.block_on(serving);
                        // The drain is over: drop whatever it gave up on.
                        runtime.shutdown_timeout(WORKER_STOP_BOUND);
                    })?;
                Some(thread)
            };
            workers.push(Worker {
                handoff,
                live: Arc::new(AtomicUsize::new(0)),
                handed: 0,
                thread,
            });
        }
        Ok(Self { workers, next: 0 })
    }

    pub fn len(&self) -> usize {
        self.workers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Hands `job` to the worker serving the fewest connections (the first
    /// such after the previous choice, so equal workers take turns, starting
    /// with worker 0), and returns that worker's index.
    pub fn hand_off(&mut self, job: J) -> usize {
        let index = least_loaded(&self.live(), self.next);
        self.next = (index + 1) % self.workers.len();
        let worker = &mut self.workers[index];
        worker.live.fetch_add(1, Ordering::Relaxed);
        worker.handed += 1;
        let live = Live(Arc::clone(&worker.live));
        if worker.handoff.send(Handoff { job, live }).is_err() {
            // Only if the worker's thread panicked; the connection is closed.
            tracing::error!(worker = index, "worker has stopped: connection dropped");
        }
        index
    }

    /// Connections each worker serves now.
    pub fn live(&self) -> Vec<usize> {
        self.workers
            .iter()
            .map(|w| w.live.load(Ordering::Relaxed))
            .collect()
    }

    /// Connections handed to each worker since start.
    pub fn handed(&self) -> Vec<u64> {
        self.workers.iter().map(|w| w.handed).collect()
    }

    /// Stops every worker. Worker threads drop the connections they still
    /// serve, and are joined (each within [`WORKER_STOP_BOUND`] and a little);
    /// a worker alone on the caller's runtime leaves its connections, if any
    /// are left, with that runtime.
    pub async fn stop(self) {
        tracing::info!(connections_per_worker = ?self.handed(), "stopping workers");
        let mut joins = Vec::new();
        for worker in self.workers {
            // Closing the hand-off ends the worker's loop.
            drop(worker.handoff);
            if let Some(thread) = worker.thread {
                let name = thread.thread().name().unwrap_or("worker").to_owned();
                joins.push((name, tokio::task::spawn_blocking(move || thread.join())));
            }
        }
        // Every thread stops at once, so N workers take no longer than one.
        let joined = tokio::time::timeout(WORKER_STOP_BOUND * 2, async {
            for (name, join) in joins {
                if !matches!(join.await, Ok(Ok(()))) {
                    tracing::error!(worker = name, "worker thread panicked");
                }
            }
        });
        if joined.await.is_err() {
            tracing::warn!("a worker thread did not stop in time: leaving it");
        }
    }
}

/// One worker: a task per connection handed to it, until the hand-off closes.
async fn run_worker<J, F, Fut>(mut handed: mpsc::UnboundedReceiver<Handoff<J>>, serve: F)
where
    F: Fn(J, Live) -> Fut + Send + 'static,
    J: Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    while let Some(Handoff { job, live }) = handed.recv().await {
        // The connection's future is spawned as it is, not awaited inside an
        // `async move` block that also holds `job` or `live`: such a block
        // stores what it captured beside the future it awaits, for the
        // connection's life (docs/costs.md).
        tokio::spawn(serve(job, live));
        // One new connection per turn of this worker's runtime, after its
        // other tasks and a look at the sockets: without it, a reconnect
        // storm handed over faster than the worker served, `recv` returned
        // up to 128 waiting connections at once, and the calls of the
        // worker's established connections waited behind them (another
        // client's GetQuote p99 224-773 ms during the storm, 12-241 ms with
        // this, issue 23).
        tokio::task::yield_now().await;
    }
}

/// The index of the smallest load, searching from `start` and wrapping, so
/// that among equals the first at or after `start` wins.
fn least_loaded(loads: &[usize], start: usize) -> usize {
    let n = loads.len();
    (0..n)
        .map(|i| (start + i) % n)
        .min_by_key(|&i| loads[i])
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Given equal workers, connections take turns; given one busier worker,
    /// the least busy is chosen, the first after the previous choice on a tie.
    #[test]
    fn least_loaded_takes_turns_among_equals() {
        assert_eq!(least_loaded(&[0, 0, 0], 0), 0);
        assert_eq!(least_loaded(&[0, 0, 0], 1), 1);
        assert_eq!(least_loaded(&[0, 0, 0], 2), 2);
        assert_eq!(least_loaded(&[5, 2, 2], 0), 1);
        assert_eq!(least_loaded(&[5, 2, 2], 2), 2);
        assert_eq!(least_loaded(&[1, 2, 0], 0), 2);
        assert_eq!(least_loaded(&[7], 0), 0);
    }

    /// Given two workers and ten connections that stay open, when each is
    /// handed off, then they alternate between the workers, worker 0 first,
    /// each runs on its worker's own thread (never the caller's, which
    /// accepts), and once they end, none is counted live, and stopping
    /// joins the threads.
    #[tokio::test]
    async fn connections_alternate_and_stay_on_their_worker_thread() {
        // Given: jobs that report their thread, then stay open until released.
        let (ran, mut ran_on) = mpsc::unbounded_channel::<(usize, String)>();
        let (release, released) = tokio::sync::watch::channel(false);
        let serve = move |job: usize, live: Live| {
            let (ran, mut released) = (ran.clone(), released.clone());
            async move {
                let _live = live;
                let thread = std::thread::current().name().unwrap_or("").to_owned();
                let _ = ran.send((job, thread));
                let _ = released.wait_for(|r| *r).await;
            }
        };
        let mut workers = Workers::start(vec![serve.clone(), serve]).expect("workers start");

        // When: ten are handed off.
        let chosen: Vec<usize> = (0..10).map(|job| workers.hand_off(job)).collect();

        // Then: they alternate, and each ran on its worker's thread.
        assert_eq!(chosen, [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]);
        assert_eq!(workers.handed(), [5, 5]);
        for _ in 0..10 {
            let (job, thread) = ran_on.recv().await.expect("every job runs");
            let expected = format!("worker-{}", job % 2);
            assert_eq!(thread, expected, "job {job}");
        }
        assert_eq!(workers.live(), [5, 5]);

        // And: released, they end and are no longer counted.
        release.send(true).expect("jobs listen");
        let ended = tokio::time::timeout(Duration::from_secs(5), async {
            while workers.live() != [0, 0] {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        ended.await.expect("every connection ends once released");
        tokio::time::timeout(WORKER_STOP_BOUND * 3, workers.stop())
            .await
            .expect("the worker thread is joined");
    }

    /// Given one worker, when a connection is handed off, then it runs on
    /// the caller's own thread, as in a single-threaded server, and no
    /// thread is started.
    #[tokio::test]
    async fn a_worker_alone_serves_on_the_callers_runtime() {
        let (ran, mut ran_on) = mpsc::unbounded_channel::<String>();
        let serve = move |_job: usize, live: Live| {
            let ran = ran.clone();
            async move {
                let _live = live;
                let _ = ran.send(std::thread::current().name().unwrap_or("").to_owned());
            }
        };
        let mut workers = Workers::start(vec![serve]).expect("a worker starts");
        let caller = std::thread::current().name().unwrap_or("").to_owned();

        assert_eq!(workers.hand_off(7), 0);

        let thread = ran_on.recv().await.expect("the job runs");
        assert_eq!(thread, caller);
        assert!(workers.workers.iter().all(|w| w.thread.is_none()));
        workers.stop().await;
    }
}
