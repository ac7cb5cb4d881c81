//! The servers `bench folklore` compares, found, started on free loopback
//! ports and stopped again: a [`Running`] server is killed when it is
//! dropped, so an error, a panic or Ctrl+C (which ends the run's future)
//! stops every server the run started.

use std::{
    ffi::OsString,
    fs::File,
    net::{Ipv4Addr, SocketAddr, TcpListener},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use h2_peer::procfs;
use tokio::time::Instant;

use super::report::Stack;
use crate::{
    Error,
    bench::Server,
    measure::{monitor::ServerProcess, probe},
};

/// How long a server may take to listen and answer a GetQuote: 15 s.
pub const READY_WITHIN: Duration = Duration::from_secs(15);

/// Tries at a free port: a port found free can be taken by another
/// process before the server binds it; then the server exits and the next
/// port is tried.
const PORT_ATTEMPTS: u32 = 3;

/// What `go build` makes of the peer's source, from the workspace root.
pub const PEER_BUILD_HINT: &str = "cd ../shared/peers/go && go build -o routing-peer .";

/// Where the peer is looked for when `--peer` is not given, relative to the
/// workspace root: where [`PEER_BUILD_HINT`] puts it, and a shared `bin/`
/// beside the repository.
const PEER_CANDIDATES: [&str; 2] = ["../shared/peers/go/routing-peer", "../bin/routing-peer"];

/// The workspace root, as this crate was built from.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The directory of this executable (`<target>/release`), where the
/// servers' release binaries are too. A debug build is refused: it would
/// measure the compiler's debug code, not the servers.
pub fn profile_dir() -> Result<PathBuf, Error> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or("cannot tell where this executable lives")?;
    if dir.file_name().and_then(|n| n.to_str()) != Some("release") {
        return Err(format!(
            "{} is not a release build: run `cargo run --release -p harness --bin bench -- folklore`",
            exe.display()
        )
        .into());
    }
    Ok(dir.to_path_buf())
}

/// Builds routing-server and the tonic example into the same target
/// directory, if this process was started by `cargo run` (which says so
/// in `CARGO`); cargo does nothing when they are up to date. Its progress
/// goes to stderr.
pub fn build_servers(profile_dir: &Path) -> Result<(), Error> {
    let Some(cargo) = std::env::var_os("CARGO") else {
        tracing::info!("not started by cargo: using the server binaries as they are");
        return Ok(());
    };
    let target_dir = profile_dir
        .parent()
        .ok_or("the release directory has no parent")?;
    tracing::info!("building routing-server and the tonic_server example (release)");
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "routing-server"])
        .args(["--bin", "routing-server", "--example", "tonic_server"])
        .arg("--manifest-path")
        .arg(workspace_root().join("Cargo.toml"))
        .arg("--target-dir")
        .arg(target_dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run cargo to build the servers: {e}"))?;
    if !status.success() {
        return Err(format!("building the servers failed ({status})").into());
    }
    Ok(())
}

/// A binary that must exist, or an error that says how to build it.
pub fn require(path: PathBuf, build: &str) -> Result<PathBuf, Error> {
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!("{} not found: build it with `{build}`", path.display()).into())
    }
}

/// The grpc-go peer: `given` if set (it must exist), else the first of the
/// usual places, else `None` (its column is skipped, with the build hint).
pub fn find_peer(given: Option<PathBuf>) -> Result<Option<PathBuf>, Error> {
    if let Some(path) = given {
        return require(path, PEER_BUILD_HINT).map(Some);
    }
    let root = workspace_root();
    Ok(PEER_CANDIDATES
        .iter()
        .map(|candidate| root.join(candidate))
        .find(|path| path.is_file()))
}

/// A server this run started. Dropping it kills the process and reaps it.
#[derive(Debug)]
pub struct Running {
    pub stack: Stack,
    pub server: Server,
    child: Child,
    /// The server's stderr, kept for when it fails.
    pub log: PathBuf,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        tracing::debug!(server = self.stack.name(), pid = self.child.id(), "stopped");
    }
}

/// A loopback port that was free a moment ago.
fn free_port() -> Result<SocketAddr, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    Ok(listener.local_addr()?)
}

/// The last lines of a server's log, for an error message.
fn log_tail(log: &Path) -> String {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Starts `program` with the arguments `args` gives for a listen address,
/// on a free loopback port, and waits until it listens and answers a
/// GetQuote.
pub async fn start(
    stack: Stack,
    program: &Path,
    args: impl Fn(SocketAddr) -> Vec<OsString>,
) -> Result<Running, Error> {
    let mut last_error = String::new();
    for attempt in 1..=PORT_ATTEMPTS {
        let addr = free_port()?;
        let log = std::env::temp_dir().join(format!(
            "folklore-{}-{}-{}.log",
            stack.name().replace(' ', "-"),
            std::process::id(),
            addr.port()
        ));
        let child = Command::new(program)
            .args(args(addr))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(File::create(&log)?)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
        let pid = child.id();
        let server = Server {
            target: addr.to_string().parse()?,
            process: ServerProcess::Unknown("starting".into()),
        };
        let mut running = Running {
            stack,
            server,
            child,
            log,
        };
        match wait_ready(&mut running, addr).await {
            Ok(()) => {
                running.server.process = ServerProcess::locate(addr, Some(pid));
                tracing::info!(server = stack.name(), %addr, pid, log = %running.log.display(), "started");
                return Ok(running);
            }
            Err(e) => {
                last_error = format!(
                    "{} (attempt {attempt}): {e}; its log {}:\n{}",
                    stack.name(),
                    running.log.display(),
                    log_tail(&running.log)
                );
                tracing::warn!("{last_error}");
            }
        }
    }
    Err(last_error.into())
}

/// Polls until the process listens on `addr` and a GetQuote succeeds, or
/// it exits, or [`READY_WITHIN`] passes.
async fn wait_ready(running: &mut Running, addr: SocketAddr) -> Result<(), Error> {
    let deadline = Instant::now() + READY_WITHIN;
    let pid = running.child.id();
    loop {
        if let Some(status) = running.child.try_wait()? {
            return Err(format!("exited ({status}) before it listened").into());
        }
        if procfs::listening_pid(addr) == Some(pid) {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("not listening on {addr} within {READY_WITHIN:?}").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = deadline.saturating_duration_since(Instant::now());
    let channel = probe::connect(&running.server.target, left, left).await?;
    probe::get_quote(channel)
        .await
        .map_err(|s| format!("listens, but its first GetQuote failed: {s}"))?;
    Ok(())
}
