//! Watching a local server while it is attacked or loaded: peak resident
//! memory, CPU used, and a guard that ends an attack early once the server's
//! memory passes a bound, so measuring an unprotected server cannot take
//! the whole machine down with it.

use std::{future::Future, net::SocketAddr, time::Duration};

use h2_peer::procfs::{Process, USER_HZ};
use serde::Serialize;
use tokio::{sync::watch, task::JoinHandle, time::Instant};

/// How often the server's `/proc/PID/status` is read: 20 times a second.
/// Fast enough to catch a peak that lasts a fraction of a second, cheap
/// enough (two small reads) not to disturb the measurement.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// The server the numbers are about, or why there are none.
#[derive(Debug, Clone)]
pub enum ServerProcess {
    Local(Process),
    /// Not measurable from here; the reason goes into the report.
    Unknown(String),
}

impl ServerProcess {
    /// Finds the process listening on `target`, or uses `pid` if given.
    pub fn locate(target: SocketAddr, pid: Option<u32>) -> Self {
        let process = match pid.or_else(|| h2_peer::procfs::listening_pid(target)) {
            Some(pid) => Process::new(pid),
            None => {
                return Self::Unknown(format!(
                    "no process on this machine listens on {target} in this network namespace"
                ));
            }
        };
        if pid.is_none() && process.is_port_proxy() {
            return Self::Unknown(format!(
                "{target} is owned by {} (pid {}), a container port proxy: pass --server-pid",
                process.name().unwrap_or_default(),
                process.pid
            ));
        }
        if process.sample().is_none() {
            return Self::Unknown(format!("cannot read /proc/{}", process.pid));
        }
        tracing::info!(
            %target,
            pid = process.pid,
            name = process.name().unwrap_or_default(),
            "measuring the server process listening on the target"
        );
        Self::Local(process)
    }

    pub fn process(&self) -> Option<Process> {
        match self {
            Self::Local(p) => Some(*p),
            Self::Unknown(_) => None,
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.process().map(|p| p.pid)
    }
}

/// What the server used while a [`Monitor`] ran. Memory in MiB, CPU as a
/// percentage of one core.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Usage {
    pub rss_start_mib: f64,
    pub rss_peak_mib: f64,
    pub rss_end_mib: f64,
    pub cpu_pct: f64,
    /// True if the memory guard ended the attack early.
    pub guard_tripped: bool,
}

/// Samples one process in the background until stopped.
#[derive(Debug)]
pub struct Monitor {
    stop: watch::Sender<bool>,
    tripped: watch::Receiver<bool>,
    task: Option<JoinHandle<Option<Usage>>>,
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / (1024.0 * 1024.0) * 10.0).round() / 10.0
}

impl Monitor {
    /// Starts sampling `server`. Once its RSS has grown by more than
    /// `rss_guard_bytes` since the start, [`Monitor::tripped`] resolves. Growth,
    /// not the absolute size, because some servers (Go's) keep memory they
    /// no longer use, and the next attack must still run. Without a local process there is
    /// nothing to sample and the guard never trips.
    pub fn start(server: &ServerProcess, rss_guard_bytes: u64) -> Self {
        let (stop, mut stopped) = watch::channel(false);
        let (trip, tripped) = watch::channel(false);
        let task = server.process().map(|process| {
            tokio::spawn(async move {
                let first = process.sample()?;
                let started = Instant::now();
                let (mut peak, mut last) = (first.rss, first);
                let mut ticker = tokio::time::interval(SAMPLE_EVERY);
                ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                loop {
                    tokio::select! {
                        _ = ticker.tick() => {}
                        _ = stopped.changed() => break,
                    }
                    let Some(now) = process.sample() else { break };
                    peak = peak.max(now.rss);
                    last = now;
                    let growth = now.rss.saturating_sub(first.rss);
                    if growth > rss_guard_bytes && !*trip.borrow() {
                        tracing::warn!(
                            rss_mib = mib(now.rss),
                            growth_mib = mib(growth),
                            guard_mib = mib(rss_guard_bytes),
                            "server RSS grew past the guard: ending the attack early"
                        );
                        let _ = trip.send(true);
                    }
                }
                let wall = started.elapsed().as_secs_f64().max(1e-3);
                let cpu_secs =
                    last.cpu_ticks.saturating_sub(first.cpu_ticks) as f64 / USER_HZ as f64;
                Some(Usage {
                    rss_start_mib: mib(first.rss),
                    rss_peak_mib: mib(peak),
                    rss_end_mib: mib(last.rss),
                    cpu_pct: (cpu_secs / wall * 1000.0).round() / 10.0,
                    guard_tripped: *trip.borrow(),
                })
            })
        });
        Self {
            stop,
            tripped,
            task,
        }
    }

    /// Resolves once the memory guard trips; never, if it does not.
    pub fn tripped(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut tripped = self.tripped.clone();
        async move {
            if tripped.wait_for(|t| *t).await.is_err() {
                // The sampler ended without tripping: wait forever.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Stops sampling and returns what the server used, if it was local.
    pub async fn stop(mut self) -> Option<Usage> {
        let _ = self.stop.send(true);
        self.task.take()?.await.ok().flatten()
    }
}
