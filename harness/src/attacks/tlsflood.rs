//! `tlsflood`: a TLS handshake flood (issue 22). `--tlsflood-clients`
//! clients each connect, complete a full TLS handshake, send the HTTP/2
//! preface, wait for the server's SETTINGS (so the server has finished its
//! side of the handshake) and close, as fast as they can, for
//! `--tlsflood-secs`. Meanwhile the probe calls GetQuote on a connection it
//! opened before the flood: its p99 says what established connections pay
//! for the handshakes the server computes.
//!
//! A handshake costs the server a key exchange and a signature, and the
//! client a key exchange and, if it checks the certificate, two signature
//! verifications, which cost more than the signature. So the flooders check
//! nothing and resume nothing ([`h2_peer::tls::HarnessTls::flooder`];
//! `--tlsflood-resume` lets them resume): every handshake is full for the
//! server and as cheap as can be for the client.
//!
//! Measure it fairly: on one machine the flood's own CPU competes with the
//! server's. Pin them apart (the server on core 0 with one worker, this
//! process on core 1, as `docs/tls.md` does) and read `harness_cpu_pct`:
//! below 100 the flooders did not run out of CPU, so the server's rate is
//! the server's.

use std::time::Duration;

use h2_peer::procfs::{Process, USER_HZ};
use serde::Serialize;
use tokio::time::Instant;

use super::{Context, Findings, reconnect};
use crate::Error;

#[derive(Debug, Serialize)]
struct Details {
    #[serde(flatten)]
    storm: reconnect::Details,
    /// Full handshakes only (no resumption), unless `--tlsflood-resume`.
    resume: bool,
    /// This process's CPU during the flood, % of one core (flooders and probe).
    harness_cpu_pct: Option<f64>,
    /// Server CPU during the flood per handshake completed, in ms.
    server_cpu_per_handshake_ms: Option<f64>,
}

/// CPU ticks of a process over `secs` as % of one core.
fn cpu_pct(ticks: u64, secs: f64) -> Option<f64> {
    (secs > 0.0).then(|| (ticks as f64 / USER_HZ as f64 / secs * 1000.0).round() / 10.0)
}

/// Server CPU ticks per handshake, in ms.
fn per_handshake_ms(ticks: u64, handshakes: u64) -> Option<f64> {
    (handshakes > 0)
        .then(|| (ticks as f64 / USER_HZ as f64 / handshakes as f64 * 1e6).round() / 1e3)
}

pub async fn run(ctx: &Context) -> Result<Findings, Error> {
    let knobs = &ctx.knobs;
    let tls = ctx
        .tls
        .as_ref()
        .ok_or("tlsflood needs a TLS server: give --tls-ca CA.pem")?
        .flooder(knobs.tlsflood_resume)?;
    let own = Process::new(std::process::id());
    let server = ctx.server.process();
    let ticks = |p: Option<Process>| p.and_then(|p| p.sample()).map(|s| s.cpu_ticks);
    let (own_before, server_before) = (ticks(Some(own)), ticks(server));
    let started = Instant::now();
    let storm = reconnect::storm_of(
        ctx.target.addr(),
        knobs.tlsflood_clients,
        Duration::from_secs(knobs.tlsflood_secs),
        true,
        Some(tls),
    )
    .await;
    let secs = started.elapsed().as_secs_f64();
    let (own_after, server_after) = (ticks(Some(own)), ticks(server));
    let used = |before: Option<u64>, after: Option<u64>| Some(after?.saturating_sub(before?));
    let handshakes = storm.served.unwrap_or(0);
    let details = Details {
        resume: knobs.tlsflood_resume,
        harness_cpu_pct: used(own_before, own_after).and_then(|t| cpu_pct(t, secs)),
        server_cpu_per_handshake_ms: used(server_before, server_after)
            .and_then(|t| per_handshake_ms(t, handshakes)),
        storm,
    };
    let d = &details.storm;
    let mut outcome = format!(
        "{} clients making {} TLS handshakes for {:.1}s: {} completed, {:.0}/s, each p50 {} ms, p99 {} ms",
        d.clients,
        if details.resume { "resumable" } else { "full" },
        d.storm_s,
        handshakes,
        d.served_per_s.unwrap_or_default(),
        show(d.settings_p50_ms),
        show(d.settings_p99_ms),
    );
    let failed = d.connect_errors + d.tls_errors.unwrap_or(0);
    if failed > 0 {
        outcome.push_str(&format!("; {failed} failed"));
    }
    if let Some(ms) = details.server_cpu_per_handshake_ms {
        outcome.push_str(&format!("; server CPU {ms:.3} ms per handshake"));
    }
    if let Some(pct) = details.harness_cpu_pct {
        outcome.push_str(&format!("; flooders' CPU {pct:.0}% of a core"));
    }
    Ok(Findings::new(outcome, details))
}

fn show(ms: Option<f64>) -> String {
    ms.map_or("-".into(), |ms| format!("{ms:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 150 ticks (1.5 s of CPU) over 3 s is half a core; over 100
    /// handshakes it is 15 ms each.
    #[test]
    fn cpu_is_shared_out_per_second_and_per_handshake() {
        assert_eq!(cpu_pct(150, 3.0), Some(50.0));
        assert_eq!(per_handshake_ms(150, 100), Some(15.0));
        assert_eq!(cpu_pct(150, 0.0), None);
        assert_eq!(per_handshake_ms(150, 0), None);
    }
}
