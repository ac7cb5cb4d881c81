//! `link-chart`: regenerates the figures of `docs/network.md` from a real
//! run. Against a routing-server on loopback, through the clients' emulated
//! link (`routing_clients::link`), it measures:
//!
//! - the full catalog (5.0 MB) fetched with and without gzip over `local`,
//!   `lan`, `wan` and `longhaul`: `catalog-by-link.svg`;
//! - throughput against the receive window (65,535 bytes to 16 MiB, plus
//!   tonic's default and the adaptive window) over `wan` and `longhaul`:
//!   `window-sweep.svg`.
//!
//! Each point is the median of `--runs` fetches, each on a new channel. It
//! prints every plotted point as a JSON line on stdout, with the runs
//! behind it and its physics (the identity floor bytes ÷ rate + 1 RTT, or
//! the ceiling min(window ÷ RTT, rate) in Mbit/s), and writes the SVGs into
//! `--out-dir`. The target must resolve to loopback. It takes about 7
//! minutes with `--runs 3` (each sweep fetch is sized to take about 3 s),
//! bounded by `--max-secs`.
//!
//! Run with (a server on 127.0.0.1:9180, gzip on, as `routing-server` starts):
//!
//! ```console
//! $ cargo run --release -p harness --bin link-chart -- --target 127.0.0.1:9180 --out-dir docs/figures
//! ...
//! {"figure":"window-sweep","link":"longhaul","series":"64KiB","routes":2,"wire_bytes":400524,"data_bytes":400200,"runs_s":[2.826271,2.821452,2.820805],"median_s":2.821452,"mbit_s":1.135,"physics":1.3107,"grown_stream_window":65535}
//! {"figure":"window-sweep","link":"longhaul","series":"adaptive","routes":25,"wire_bytes":5005543,"data_bytes":5002500,"runs_s":[4.898914,4.49441,5.40945],"median_s":4.898914,"mbit_s":8.169,"physics":74.0557,"grown_stream_window":3702784}
//! ...
//! ```
//!
//! (30 lines in all: 8 for the catalog figure, 22 for the sweep.) `physics`
//! is in seconds for the catalog figure and in Mbit/s for the sweep.

use std::{io::Write, path::PathBuf, process::ExitCode, time::Duration};

use clap::Parser;
use harness::{
    Error, LoopbackTarget,
    charts::draw::{draw_catalog_by_link, draw_window_sweep},
    charts::link_runs::{self, Measured},
    init_tracing,
    target::DEFAULT_TARGET,
};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Measure the catalog over emulated links and a window sweep; write docs/figures/*.svg"
)]
struct Args {
    /// The server: host:port, loopback only (127.0.0.0/8 or [::1]).
    #[arg(long, env = "ROUTING_TARGET", default_value = DEFAULT_TARGET)]
    target: LoopbackTarget,

    /// Directory the SVGs are written into (created if missing).
    #[arg(long, default_value = "docs/figures")]
    out_dir: PathBuf,

    /// Fetches per plotted point; the point is their median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=5))]
    runs: u32,

    /// Give up (exit 1, nothing written) after this many seconds.
    #[arg(long, default_value_t = 900, value_parser = clap::value_parser!(u64).range(10..=3600))]
    max_secs: u64,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    init_tracing();
    match run(Args::parse()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Error> {
    let runs = args.runs as usize;
    tracing::info!(
        target = %args.target,
        runs,
        expected = ?link_runs::expected_duration(runs),
        "measuring"
    );
    let limit = Duration::from_secs(args.max_secs);
    let measured: Measured = tokio::time::timeout(limit, link_runs::measure(args.target, runs))
        .await
        .map_err(|_| format!("not done within --max-secs {}", args.max_secs))??;

    std::fs::create_dir_all(&args.out_dir)
        .map_err(|e| format!("cannot create {}: {e}", args.out_dir.display()))?;
    let mut catalog = String::new();
    draw_catalog_by_link(&measured.bars, &mut catalog)?;
    let mut sweep = String::new();
    draw_window_sweep(&measured.sweeps, &mut sweep)?;
    for (name, svg) in [
        ("catalog-by-link.svg", catalog),
        ("window-sweep.svg", sweep),
    ] {
        let path = args.out_dir.join(name);
        std::fs::write(&path, svg).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        tracing::info!(path = %path.display(), "written");
    }

    let mut stdout = std::io::stdout().lock();
    for line in &measured.lines {
        writeln!(stdout, "{}", serde_json::to_string(line)?)?;
    }
    stdout.flush()?;
    Ok(())
}
