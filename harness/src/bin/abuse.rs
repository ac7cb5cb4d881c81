//! `abuse`: tries a running gRPC server of the RoutingService contract the
//! way an attacker would, and shows what it costs the server and its other
//! clients. Each attack is bounded in count and time, stops by itself, and
//! sends traffic only to `--target`, which must resolve to loopback
//! (127.0.0.0/8 or [::1]); anything else is refused before a packet leaves.
//!
//! Run with (a server listening on 127.0.0.1:9180, e.g.
//! `cargo run --release -p routing-server`):
//!
//! ```console
//! $ cargo run --release -p harness --bin abuse -- --target 127.0.0.1:9180 pingflood
//! {"attack":"pingflood","outcome":"no GOAWAY: 20000000 of 20000000 PINGs acked in 4.8s","rss_peak_mib":11.2,"probe_p99_ms":30.409,"probe_errors":0,"probe_calls":137,"server_cpu_pct":49.4,"rss_start_mib":11.1,"rss_end_mib":11.2,"secs":6.82,"target":"127.0.0.1:29180","server_pid":6022,"details":{"closed_by_server_after_s":null,"flood_s":4.815,"goaway":null,"pings_acked":20000000,"pings_sent":20000000}}
//! $ cargo run --release -p harness --bin abuse -- --target 127.0.0.1:9180 all
//! $ cargo run --release -p harness --bin abuse -- --target 127.0.0.1:9180 --compare 127.0.0.1:9181 pingflood
//! ```
//!
//! (That line is tonic's defaults, from a real run on a shared 2-core VM;
//! this server answers with GOAWAY ENHANCE_YOUR_CALM "too_many_pings".)
//!
//! It prints one JSON line per attack on stdout (per attack and server, with
//! `--compare`: each attack runs on the target, then on each compared server). `outcome` says what the
//! server did. `rss_peak_mib` and `server_cpu_pct` (% of one core) are read
//! from `/proc` of the process listening on the target, when it runs on this
//! machine (null otherwise; `--server-pid` names it, e.g. behind a container
//! port proxy). `probe_p99_ms`, `probe_p50_ms` and `probe_errors` come from
//! a separate, well-behaved client calling GetQuote 20 times a second with a
//! 1 s deadline during the attack. `details` holds the counts behind the
//! outcome, and `note` anything that qualifies the numbers (e.g. the memory
//! guard ended the attack early). Progress logs go to stderr. Exit status 1
//! if an attack could not run, 2 for a usage error.
//!
//! Over TLS: `--tls-ca CA.pem` (e.g. `routing-server dev-cert`'s) makes
//! every connection, the probe's too, complete a TLS handshake with ALPN
//! `h2` first; each attack then misbehaves inside the TLS session as it
//! does in plaintext. `nopreface` sends half a ClientHello (and, as many
//! again, a whole one and then nothing) instead of half a preface, and
//! `tlsflood` floods the server with full handshakes. For a fair
//! `tlsflood` on one machine, pin the server and this process to
//! different cores (`docs/tls.md` has the commands and the figures):
//!
//! ```console
//! $ taskset -c 0 target/release/routing-server --listen 127.0.0.1:9443 --worker-threads 1 \
//!     --tls-cert certs/server.pem --tls-key certs/server.key &
//! $ taskset -c 1 cargo run --release -p harness --bin abuse -- --target 127.0.0.1:9443 \
//!     --tls-ca certs/ca.pem tlsflood
//! ```

use std::{io::Write, process::ExitCode, time::Duration};

use clap::Parser;
use harness::target::TlsArgs;
use harness::{
    Error, LoopbackTarget,
    attacks::{self, Attack, Context, Knobs},
    init_tracing,
    measure::monitor::ServerProcess,
    target::DEFAULT_TARGET,
};

#[derive(Debug, Parser)]
#[command(
    version,
    about = "Run bounded attacks against a gRPC server on loopback; one JSON line per attack",
    after_help = "ATTACKS: all, stall, madeyoureset, fdflood, nopreface, slowbody, contenttype, pingflood, bigframes, wuflood, tcpstall, lockout, reconnect, tlsflood (with --tls-ca; `all` leaves it out without), badtimeout, nodeadline, metricsidle (with --metrics-target)"
)]
struct Args {
    /// The server: host:port, loopback only (127.0.0.0/8 or [::1]).
    #[arg(long, env = "ROUTING_TARGET", default_value = DEFAULT_TARGET)]
    target: LoopbackTarget,

    /// Read RSS and CPU of this PID instead of the one found listening on the target.
    #[arg(long)]
    server_pid: Option<u32>,

    /// Another server to run each attack against, right after the target (repeatable),
    /// e.g. the stock tonic example and the grpc-go peer: one line per server.
    #[arg(long)]
    compare: Vec<LoopbackTarget>,

    /// Seconds to pause between attacks in `all`, so each starts on a quiet server.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(0..=600))]
    pause_secs: u64,

    #[command(flatten)]
    knobs: Knobs,

    #[command(flatten)]
    tls: TlsArgs,

    /// The attacks to run, in order, or `all` for each in turn.
    #[arg(value_parser = parse_attacks, required = true)]
    attack: Vec<Selection>,
}

/// One word of the command line: an attack, or `all` of them.
#[derive(Debug, Clone)]
struct Selection(Vec<Attack>);

impl Selection {
    /// The attacks to run: `all` in plaintext leaves out the TLS-only ones.
    fn attacks(&self, tls: bool) -> impl Iterator<Item = Attack> + '_ {
        let all = self.0.len() > 1;
        self.0
            .iter()
            .copied()
            .filter(move |a| tls || !all || !a.needs_tls())
    }
}

fn parse_attacks(input: &str) -> Result<Selection, String> {
    if input == "all" {
        return Ok(Selection(Attack::ALL.to_vec()));
    }
    Attack::ALL
        .iter()
        .find(|a| a.name() == input)
        .map(|a| Selection(vec![*a]))
        .ok_or_else(|| {
            let names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
            format!("unknown attack {input:?}; choose all, {}", names.join(", "))
        })
}

#[tokio::main]
async fn main() -> ExitCode {
    init_tracing();
    let args = Args::parse();
    let tls = args.tls.tls_ca.is_some();
    let attacks: Vec<Attack> = args.attack.iter().flat_map(|s| s.attacks(tls)).collect();
    if attacks.is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "error: name an attack, or `all` (see --help)"
        );
        return ExitCode::from(2);
    }
    let mut servers = vec![(args.target, args.server_pid)];
    servers.extend(args.compare.iter().map(|t| (*t, None)));
    let mut contexts = Vec::new();
    for (target, pid) in servers {
        if let Err(e) = listening(&target).await {
            let _ = writeln!(std::io::stderr(), "error: {e}");
            return ExitCode::FAILURE;
        }
        let tls = match args.tls.for_target(target.addr()) {
            Ok(tls) => tls,
            Err(e) => {
                let _ = writeln!(std::io::stderr(), "error: {e}");
                return ExitCode::from(2);
            }
        };
        let ctx = Context {
            target,
            server: ServerProcess::locate(target.addr(), pid),
            knobs: args.knobs.clone(),
            tls,
        };
        if let ServerProcess::Unknown(why) = &ctx.server {
            tracing::warn!(%target, "server RSS and CPU will be null: {why}");
        }
        contexts.push(ctx);
    }
    let mut failed = false;
    let runs = attacks
        .iter()
        .flat_map(|attack| contexts.iter().map(move |ctx| (*attack, ctx)));
    for (i, (attack, ctx)) in runs.enumerate() {
        if i > 0 {
            tokio::time::sleep(Duration::from_secs(args.pause_secs)).await;
        }
        if let Err(e) = run_one(attack, ctx).await {
            let _ = writeln!(
                std::io::stderr(),
                "error: {} against {}: {e}",
                attack.name(),
                ctx.target
            );
            failed = true;
        }
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// How long the first connection to the target may take: 2 s.
const CONNECT_CHECK: Duration = Duration::from_secs(2);

/// Something must accept connections on the target before the first attack.
/// A refused connection is reported at once rather than waited for: the
/// `--recovery-secs` wait is for a server that is recovering from the
/// previous attack, not for one that was never started.
async fn listening(target: &LoopbackTarget) -> Result<(), Error> {
    match tokio::time::timeout(CONNECT_CHECK, tokio::net::TcpStream::connect(target.addr())).await {
        Ok(Err(e)) => Err(format!(
            "nothing accepts connections on {target} ({e}): start the server first, \
             e.g. `cargo run --release -p routing-server`, or pass --target"
        )
        .into()),
        // Connected, or slow to accept: the probe's bounded wait takes over.
        Ok(Ok(_)) | Err(_) => Ok(()),
    }
}

/// Runs one attack and prints its line.
async fn run_one(attack: Attack, ctx: &Context) -> Result<(), Error> {
    let report = attacks::run(attack, ctx).await?;
    let line = serde_json::to_string(&report)?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `all` in plaintext leaves out the TLS-only attacks; named on its
    /// own, a TLS-only attack stays (and says what it needs when it runs).
    #[test]
    fn all_leaves_out_tls_only_attacks_in_plaintext() {
        let all = parse_attacks("all").expect("all");
        let plain: Vec<Attack> = all.attacks(false).collect();
        assert!(!plain.contains(&Attack::Tlsflood));
        assert_eq!(plain.len(), Attack::ALL.len() - 1);
        assert!(all.attacks(true).any(|a| a == Attack::Tlsflood));
        let named = parse_attacks("tlsflood").expect("tlsflood");
        assert_eq!(named.attacks(false).collect::<Vec<_>>(), [Attack::Tlsflood]);
    }
}
