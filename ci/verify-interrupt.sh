#!/usr/bin/env bash
# ci/verify-interrupt.sh [--local | --k8s]: Ctrl+C during `./verify.sh --local`
# (the default) or `./verify.sh --k8s` exits 130, prints no FAIL line and
# leaves no process behind; with --k8s, also the host as it was
# (ci/host-snapshot.sh before and after each point, issue 52).
#
# A terminal's Ctrl+C is SIGINT to the foreground process group, so that is
# what this sends: `./verify.sh --local --no-build` runs as the leader of a
# session and process group of its own (setsid), and `kill -INT -- -PGID`
# interrupts it at four points:
#
#   start      as soon as it has started the server (readiness and the first
#              grpcurl calls, which take under a second here)
#   keepalive  3 s into keepalive-client's 8 s idle gap
#   ghz        2 s into a ghz run made long on purpose (GHZ_TOTAL)
#   balancer   3 s into section 11's 10 s aged phase, with HAProxy and six
#              replicas running (about 2.5 min in: sections 1 to 10 run first)
#
# With --k8s, at three points (a local cluster, as `./verify.sh --k8s`
# makes; K8S_* and image variables pass through):
#
#   cluster    2 s after the cluster has started coming up (its daemons
#              starting, the host's sysctls already changed)
#   row        2 s after row k0, with the stack's pods running
#   teardown   a first Ctrl+C at the same row, then a second one 1 s into
#              the teardown it starts (a reader who presses twice)
#
# Each point must end with exit 130, no FAIL line, and no live process left in the
# session: every process verify.sh started (the server, timeout, the tool)
# belongs to it, whatever its process group. Processes are found by session
# id, never by name. A pod's processes are not in the session (containerd
# starts them); the host snapshot's process list covers them.
#
# Needs the release binaries (run `./verify.sh --local` first) and grpcurl
# and ghz on PATH; --k8s needs what `./verify.sh --k8s` needs, and root.
# Exit 0 when every point passed, 1 otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."

VERIFY=${VERIFY:-./verify.sh}         # the script under test (relative to the repository root)
MODE=${1:---local}
case $MODE in
  --local) args=(--local --no-build) ;;
  --k8s) args=(--k8s) ;;
  *) echo "usage: ci/verify-interrupt.sh [--local | --k8s]" >&2; exit 2 ;;
esac
MARK_TIMEOUT_S=${MARK_TIMEOUT_S:-120} # the point must be reached within this
# verify.sh must exit within this of the signal: the server drains up to
# 10 s; a cluster's teardown deletes its namespace (up to 60 s) and stops
# its daemons (5 s each at most).
EXIT_TIMEOUT_S=${EXIT_TIMEOUT_S:-40}
if [[ $MODE == --k8s ]]; then EXIT_TIMEOUT_S=${K8S_EXIT_TIMEOUT_S:-240}; fi

scratch=$(mktemp -d)
running=
cleanup() {
  local rc=$?
  # Only if a check below failed half-way: stop what this script started.
  if [[ -n $running ]] && kill -0 "$running" 2>/dev/null; then kill -KILL -- "-$running" 2>/dev/null || true; fi
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT

in_session() { # in_session SID: "PID ARGS" of every live process in that session
  ps -e -o sid=,stat=,pid=,args= | awk -v sid="$1" '$1 == sid && $2 !~ /^Z/ { $1 = $2 = ""; sub(/^ +/, ""); print }'
}
# exited_in_session SID: "PID ARGS" of the session's zombies. A zombie has
# exited and holds nothing but its process-table entry; once verify.sh has
# gone, reaping it is its new parent's job (PID 1 or a subreaper), which in a
# container may come late or never. A Ctrl+C that lands while bash reads a
# command substitution leaves one: bash runs the trap and exits before it
# reaps the substitution's child, which the same SIGINT has already killed.
exited_in_session() {
  ps -e -o sid=,stat=,pid=,args= | awk -v sid="$1" '$1 == sid && $2 ~ /^Z/ { $1 = $2 = ""; sub(/^ +/, ""); print }'
}

failures=0
# point NAME MARK DELAY_S [ENV=VALUE...]: run verify.sh, wait for a line
# matching MARK in its output, then DELAY_S more, then send SIGINT to its
# group. With SECOND_MARK set, a second SIGINT 1 s after a line matching it.
point() {
  local name=$1 mark=$2 delay=$3 log="$scratch/$1.log"
  shift 3
  if [[ $MODE == --k8s ]]; then ci/host-snapshot.sh >"$scratch/$name.host-before"; fi
  # env resets SIGINT to its default: a background job of a script starts
  # with it ignored, and bash cannot trap a signal ignored on entry.
  env --default-signal=INT "$@" setsid "$VERIFY" "${args[@]}" >"$log" 2>&1 &
  running=$!
  local deadline=$((SECONDS + MARK_TIMEOUT_S))
  until grep -qsE "$mark" "$log"; do
    if ((SECONDS >= deadline)) || ! kill -0 "$running" 2>/dev/null; then
      printf 'FAIL %-10s never reached /%s/ (log below)\n' "$name" "$mark"
      cat "$log"
      failures=$((failures + 1))
      kill -KILL -- "-$running" 2>/dev/null || true
      running=
      return
    fi
    sleep 0.1
  done
  sleep "$delay"
  local before
  before=$(in_session "$running")
  kill -INT -- "-$running"
  if [[ -n ${SECOND_MARK:-} ]]; then
    local until=$((SECONDS + EXIT_TIMEOUT_S))
    until grep -qsE "$SECOND_MARK" "$log" || ((SECONDS >= until)) || ! kill -0 "$running" 2>/dev/null; do sleep 0.1; done
    sleep 1
    kill -INT -- "-$running" 2>/dev/null || true
  fi
  local rc=0 waited=0 line
  while kill -0 "$running" 2>/dev/null && ((waited < EXIT_TIMEOUT_S * 10)); do
    sleep 0.1
    waited=$((waited + 1))
  done
  if kill -0 "$running" 2>/dev/null; then
    rc=timeout
  else
    wait "$running" || rc=$?
  fi
  local left fails exited host=same
  left=$(in_session "$running")
  exited=$(exited_in_session "$running")
  # A failed row ends in FAIL, and fail() prints "FAIL: ..."; a bound may say FAILED.
  fails=$(grep -cE '^FAIL|[[:space:]]FAIL$' "$log" || true)
  if [[ $MODE == --k8s ]]; then
    ci/host-snapshot.sh >"$scratch/$name.host-after"
    diff -u "$scratch/$name.host-before" "$scratch/$name.host-after" >"$scratch/$name.host-diff" || host=changed
  fi
  if [[ $rc == 130 && $fails == 0 && -z $left && $host == same ]]; then
    printf 'ok   %-10s exit 130 after %.1f s, 0 FAIL lines, 0 processes left%s; running at the signal:\n' \
      "$name" "$(jq -rn --argjson t "$waited" '$t / 10')" "$([[ $MODE == --k8s ]] && echo ', the host as before')"
  else
    printf 'FAIL %-10s exit %s (want 130), %s FAIL lines (want 0), processes left: %s, host %s\n' \
      "$name" "$rc" "$fails" "${left:-none}" "$host"
    sed 's/^/     log: /' "$log"
    if [[ $host == changed ]]; then sed 's/^/     host: /' "$scratch/$name.host-diff"; fi
    failures=$((failures + 1))
  fi
  while IFS= read -r line; do printf '       %s\n' "$line"; done <<<"$before"
  if [[ -n $exited ]]; then
    while IFS= read -r line; do printf '       exited, not yet reaped by its new parent: %s\n' "$line"; done <<<"$exited"
  fi
  kill -KILL -- "-$running" 2>/dev/null || true
  running=
}

if [[ $MODE == --local ]]; then
  points=4
  point start '^verify.sh: mode=local' 0
  point keepalive '^7b gzip' 3
  point ghz '^8c ' 2 GHZ_TOTAL=500000
  # Section 11 starts after every other section: a later mark, a longer wait.
  MARK_TIMEOUT_S=${BALANCER_MARK_TIMEOUT_S:-420} point balancer '^11c ' 3
else
  # The cluster's binaries are built once (cached), then each point starts
  # a cluster and imports the images: minutes, not seconds.
  points=3
  MARK_TIMEOUT_S=${K8S_MARK_TIMEOUT_S:-900}
  point cluster '^cluster: node ' 2
  point row '^k0 3 replicas Ready' 2
  SECOND_MARK='^cluster: stopping' point teardown '^k0 3 replicas Ready' 2
fi

if ((failures > 0)); then
  echo "$failures of $points interrupt points failed"
  exit 1
fi
echo "$points of $points interrupt points passed"
