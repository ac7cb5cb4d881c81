#!/usr/bin/env python3
"""A real grpc-core client (Python grpcio) against routing-server's ping floor.

Two clients, each in a child process of its own, because grpc-core writes its
log from C++ straight to the process's stderr, where Python cannot catch it:

eager   pings every 1 s (grpc.keepalive_time_ms=1000), with no call in flight
        (grpc.keepalive_permit_without_calls=1, and
        grpc.http2.max_pings_without_data=0: by default grpc-core stops
        after two PINGs without data and would never be told off). The
        server's floor is 5 s, so it answers with GOAWAY ENHANCE_YOUR_CALM
        "too_many_pings". grpc-core logs that GOAWAY and, as gRFC A8 says,
        doubles its keepalive time: the second round, at 2 s, takes longer
        to be told off. (A third, at 4 s, would not be: the server's own
        PING every 5 s restarts grpc-core's keepalive timer, so the client's
        PINGs would arrive 5 s apart, at the floor.)
polite  pings every 5 s, at the floor, for 25 s, and is never told off.

Needs no generated code: both call grpc.health.v1.Health/Check with raw bytes
(an empty HealthCheckRequest is zero bytes; SERVING is b"\\x08\\x01").

Run it through ci/interop-grpcio.sh, which installs the pinned grpcio, starts
the servers on loopback and passes their addresses:

    python3 interop/grpcio_keepalive.py --eager-target HOST:PORT --polite-target HOST:PORT

Prints one line per check and "N passed, M failed"; exits 1 if any failed.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
SERVING = b"\x08\x01"
# Each call has a deadline; a round waits at most this long for the GOAWAY.
CALL_TIMEOUT_S = 5
ROUND_LIMIT_S = 30
# eager: two rounds show the doubling (1 s, then 2 s).
EAGER_PING_MS = 1000
EAGER_ROUNDS = 2
# polite: five PINGs' worth of idle time at the 5 s floor.
POLITE_PING_MS = 5000
POLITE_IDLE_S = 25
# Bounds every child process: the rounds (about 3 + 7 s) or the idle time, with room.
CHILD_LIMIT_S = 120

GOAWAY_LOG = re.compile(
    r'Received a GOAWAY with error code ENHANCE_YOUR_CALM and debug data equal to "too_many_pings"\. '
    r"Current keepalive time \(before throttling\): (\d+)ms"
)
# With GRPC_TRACE=http_keepalive, one line per keepalive PING the peer acked.
KEEPALIVE_ACKED_LOG = re.compile(r"Finish keepalive ping")


def channel(target, ping_ms):
    import grpc  # only the child processes need grpcio

    options = [
        ("grpc.keepalive_time_ms", ping_ms),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]
    return grpc.insecure_channel(target, options=options)


class States:
    """The channel's connectivity states, as grpc-core reports them."""

    def __init__(self, chan):
        self.seen = []
        self.changed = threading.Condition()
        chan.subscribe(self._on_change, try_to_connect=False)

    def _on_change(self, state):
        with self.changed:
            self.seen.append(state.name)
            self.changed.notify_all()

    def since_ready(self, mark):
        """The states after the first READY at or after index `mark`."""
        later = self.seen[mark:]
        return later[later.index("READY") + 1 :] if "READY" in later else None

    def wait_until_not_ready(self, mark, limit_s):
        """Waits until the channel, READY since `mark`, leaves READY."""
        with self.changed:
            return self.changed.wait_for(
                lambda: any(s != "READY" for s in self.since_ready(mark) or []), timeout=limit_s
            )


def check_serving(chan):
    answer = chan.unary_unary(HEALTH_CHECK)(b"", timeout=CALL_TIMEOUT_S)
    if answer != SERVING:
        raise SystemExit(f"Health/Check answered {answer!r}, not SERVING")


def eager(target):
    """Rounds of: a call (which connects), then idle until the GOAWAY ends the connection."""
    chan = channel(target, EAGER_PING_MS)
    states = States(chan)
    rounds = []
    for _ in range(EAGER_ROUNDS):
        mark = len(states.seen)
        check_serving(chan)
        started = time.monotonic()
        told_off = states.wait_until_not_ready(mark, ROUND_LIMIT_S)
        rounds.append(round(time.monotonic() - started, 2) if told_off else None)
        if not told_off:
            break
    chan.close()
    return {"round_s": rounds}


def polite(target):
    """One call, POLITE_IDLE_S of idle PINGs at the floor, another call."""
    chan = channel(target, POLITE_PING_MS)
    states = States(chan)
    check_serving(chan)
    time.sleep(POLITE_IDLE_S)
    with states.changed:
        while_idle = states.since_ready(0)
    check_serving(chan)
    chan.close()
    return {"states_while_idle": while_idle}


def run_child(role, target, trace):
    env = dict(os.environ)
    if trace:
        env.update(GRPC_TRACE="http_keepalive", GRPC_VERBOSITY="DEBUG")
    return subprocess.Popen(
        [sys.executable, __file__, "--child", role, "--eager-target", target, "--polite-target", target],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish_child(role, child):
    try:
        out, err = child.communicate(timeout=CHILD_LIMIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        raise SystemExit(f"{role} client did not finish within {CHILD_LIMIT_S}s:\n{err[-3000:]}")
    if child.returncode != 0 or not out.strip():
        raise SystemExit(f"{role} client failed (exit {child.returncode}):\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1]), err


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--eager-target", required=True, help="host:port of a server with the default floor")
    parser.add_argument(
        "--polite-target",
        required=True,
        help="host:port of a server with the default floor and its own PINGs off "
        "(its PINGs would reset grpc-core's keepalive timer, and the polite client would never ping)",
    )
    parser.add_argument("--child", choices=["eager", "polite"], help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.child == "eager":
        print(json.dumps(eager(args.eager_target)), flush=True)
        return 0
    if args.child == "polite":
        print(json.dumps(polite(args.polite_target)), flush=True)
        return 0

    # Both clients at once: the whole check takes as long as the longer one.
    eager_child = run_child("eager", args.eager_target, trace=False)
    polite_child = run_child("polite", args.polite_target, trace=True)
    eager_report, eager_log = finish_child("eager", eager_child)
    polite_report, polite_log = finish_child("polite", polite_child)

    results = []

    def check(name, measured, ok):
        results.append(ok)
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {measured}", flush=True)

    throttled_from = [int(ms) for ms in GOAWAY_LOG.findall(eager_log)]
    rounds = eager_report["round_s"]
    check(
        f"eager ({EAGER_PING_MS} ms) gets GOAWAY too_many_pings in every round",
        f"{len(throttled_from)} GOAWAYs logged by grpc-core in {len(rounds)} rounds, round_s={rounds}",
        len(throttled_from) == EAGER_ROUNDS and None not in rounds,
    )
    doubled = [EAGER_PING_MS * 2**i for i in range(EAGER_ROUNDS)]
    check(
        "eager doubles its keepalive time after each GOAWAY (gRFC A8)",
        f"keepalive time before each GOAWAY: {throttled_from} ms",
        throttled_from == doubled,
    )
    check(
        "eager is told off later each round",
        f"round_s={rounds}",
        None not in rounds and all(b > a for a, b in zip(rounds, rounds[1:])),
    )
    acked = len(KEEPALIVE_ACKED_LOG.findall(polite_log))
    told_off = len(GOAWAY_LOG.findall(polite_log))
    states = polite_report["states_while_idle"]
    check(
        f"polite ({POLITE_PING_MS} ms) is never told off in {POLITE_IDLE_S} s",
        f"{acked} keepalive PINGs acked, {told_off} GOAWAYs, states while idle {states}",
        acked >= 3 and told_off == 0 and states == [],
    )

    failed = results.count(False)
    print(f"{len(results) - failed} passed, {failed} failed")
    if failed:
        print("--- eager grpc-core log (tail):\n" + eager_log[-3000:], file=sys.stderr)
        print("--- polite grpc-core log (tail):\n" + polite_log[-3000:], file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
