//! `balance-chart`: draws README "Behind a load balancer"'s figure from a
//! real `balance-client` run: calls each replica answered per second
//! through HAProxy L4 on one channel, without a connection age (pinned)
//! and with one (spread).
//!
//! Run with (replicas and HAProxy up as `verify.sh --local` starts them;
//! `lb/haproxy.cfg` has the commands):
//!
//! ```console
//! $ balance-client --target $LB_L4 --l4-aged $LB_L4_AGED --phases l4_pooled,l4_aged --pooled-secs 10 --aged-secs 10 > run.json
//! $ cargo run --release -p harness --bin balance-chart -- --input run.json --out docs/figures/balance-over-time.svg
//! {"figure":"balance-over-time","panels":2,"seconds":10}
//! ```
//!
//! Prints one JSON line on stdout; exit 1 when the input lacks either phase.

use std::{io::Write, path::PathBuf, process::ExitCode};

use clap::Parser;
use harness::{
    Error,
    charts::balance::{Panel, TimedPhase, draw_calls_over_time},
    init_tracing,
};
use serde::Deserialize;

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Draw calls per replica over time, L4 pinned vs L4 with a connection age"
)]
struct Args {
    /// balance-client's JSON line, with timed l4_pooled and l4_aged phases.
    #[arg(long)]
    input: PathBuf,
    /// The SVG to write.
    #[arg(long, default_value = "docs/figures/balance-over-time.svg")]
    out: PathBuf,
}

#[derive(Debug, Deserialize)]
struct Run {
    phases: Phases,
}

#[derive(Debug, Deserialize)]
struct Phases {
    l4_pooled: TimedPhase,
    l4_aged: TimedPhase,
}

fn main() -> ExitCode {
    init_tracing();
    match run(Args::parse()) {
        Ok(line) => {
            let mut stdout = std::io::stdout().lock();
            match writeln!(stdout, "{line}").and_then(|()| stdout.flush()) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    let _ = writeln!(std::io::stderr(), "error: cannot write the result: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Args) -> Result<String, Error> {
    let text = std::fs::read_to_string(&args.input)
        .map_err(|e| format!("cannot read {}: {e}", args.input.display()))?;
    let run: Run = serde_json::from_str(text.trim()).map_err(|e| {
        format!(
            "{}: not a balance-client line with timed l4_pooled and l4_aged phases ({e}); run it with --phases l4_pooled,l4_aged --pooled-secs N",
            args.input.display()
        )
    })?;
    let Phases { l4_pooled, l4_aged } = run.phases;
    let aged_title = format!(
        "L4, one channel, replicas with --max-connection-age-secs 3: {} reconnects, {} failed",
        l4_aged.reconnects.unwrap_or(0),
        l4_aged.failed
    );
    let replicas = |phase: &TimedPhase| {
        let mut names: Vec<&str> = phase.timeline.iter().map(|(_, r, _)| r.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        names.len()
    };
    let pooled_title = format!(
        "L4 (HAProxy mode tcp), one channel, no connection age: {} of 3 replicas served, {} failed",
        replicas(&l4_pooled),
        l4_pooled.failed
    );
    let seconds = [&l4_pooled, &l4_aged]
        .iter()
        .flat_map(|p| p.timeline.iter().map(|(s, _, _)| s + 1))
        .max()
        .unwrap_or(0);
    let panels = [
        Panel {
            title: pooled_title,
            phase: l4_pooled,
        },
        Panel {
            title: aged_title,
            phase: l4_aged,
        },
    ];
    let mut svg = String::new();
    draw_calls_over_time(&panels, &mut svg)?;
    std::fs::write(&args.out, svg)
        .map_err(|e| format!("cannot write {}: {e}", args.out.display()))?;
    Ok(format!(
        r#"{{"figure":"balance-over-time","panels":2,"seconds":{seconds}}}"#
    ))
}
