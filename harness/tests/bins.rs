//! The two binaries as a reader first meets them: `--help`, and a clear
//! refusal, before any packet leaves, of a target that is not loopback.

use std::process::Command;

fn run(bin: &str, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(bin).args(args).output().expect("binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

const ABUSE: &str = env!("CARGO_BIN_EXE_abuse");
const BENCH: &str = env!("CARGO_BIN_EXE_bench");

/// `--help` names every attack and the bounds, and exits 0.
#[test]
fn abuse_help_lists_the_attacks_and_bounds() {
    let (code, stdout, _) = run(ABUSE, &["--help"]);
    assert_eq!(code, 0);
    for word in [
        "stall",
        "madeyoureset",
        "fdflood",
        "nopreface",
        "slowbody",
        "contenttype",
        "pingflood",
        "--hold-secs",
        "--rss-guard-mib",
        "loopback",
    ] {
        assert!(stdout.contains(word), "--help lacks {word}:\n{stdout}");
    }
}

#[test]
fn bench_help_names_compare() {
    let (code, stdout, _) = run(BENCH, &["--help"]);
    assert_eq!(code, 0);
    assert!(
        stdout.contains("--compare") && stdout.contains("--max-secs"),
        "{stdout}"
    );
}

/// Given a private or public address, both tools exit with a usage error
/// that says why, and print nothing on stdout.
#[test]
fn non_loopback_targets_are_refused() {
    for (bin, args) in [
        (ABUSE, vec!["--target", "10.0.0.1:9180", "stall"]),
        (ABUSE, vec!["--target", "192.168.1.10:9180", "all"]),
        (BENCH, vec!["--target", "8.8.8.8:443"]),
        (BENCH, vec!["--compare", "172.16.0.1:9190"]),
    ] {
        let (code, stdout, stderr) = run(bin, &args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert!(
            stderr.contains("not a loopback address"),
            "{args:?}: {stderr}"
        );
    }
}

/// An unknown attack, or none at all, is a usage error naming the choices.
#[test]
fn attacks_are_checked() {
    let (code, _, stderr) = run(ABUSE, &["--target", "127.0.0.1:9", "rapidreset"]);
    assert_eq!(code, 2);
    assert!(stderr.contains("choose all, stall"), "{stderr}");
    let (code, _, stderr) = run(ABUSE, &["--target", "127.0.0.1:9"]);
    assert_eq!(code, 2, "{stderr}");
}

/// Given nothing listening on the target, `abuse` says so and how to start
/// a server, and exits 1 at once instead of waiting `--recovery-secs` (30 s
/// by default) for a server that was never started.
#[test]
fn a_missing_server_is_an_error_not_a_hang() {
    // Given a port with nothing on it (bound, then dropped).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let target = format!("127.0.0.1:{port}");
    // When an attack is aimed at it, with the default recovery wait.
    let (code, stdout, stderr) = run(ABUSE, &["--target", &target, "contenttype"]);
    // Then it fails with the reason and the command, and never waited.
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(stderr.contains("nothing accepts connections"), "{stderr}");
    assert!(
        stderr.contains("cargo run --release -p routing-server"),
        "{stderr}"
    );
    assert!(!stderr.contains("waiting for the server"), "{stderr}");
}
