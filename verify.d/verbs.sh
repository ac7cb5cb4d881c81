# shellcheck shell=bash
# verify.d/verbs.sh: the verbs every row of verify.sh uses: capture a tool's
# output, lay out and check a row, read a captured JSON, wait for a server's
# health, and the link-reuse retry of rows 10a/b and 12e/f.
# verify.sh sources this file before it runs a line; the variables the verbs
# set or read ($rc, $status, $summary, $scratch, the bounds) are verify.sh's,
# and server_log and grpcurl_ are launchers.sh's.
# jq programs use $variables inside single quotes on purpose:
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# capture NAME LAUNCHER ARGS...: stdout → $scratch/NAME.out, stderr → NAME.err,
# exit code → $rc and NAME.rc (the latter for the evidence a failure prints).
capture() {
  local name=$1
  shift
  rc=0
  "$@" >"$scratch/$name.out" 2>"$scratch/$name.err" || rc=$?
  echo "$rc" >"$scratch/$name.rc"
  if ((rc == 124)); then say "  ($name timed out after ${TOOL_TIMEOUT_S}s)"; fi
}

# ─── Assertion verbs ─────────────────────────────────────────────────────────
# layout WIDTHS CELL...: one table row, each cell starting at its column. A
# cell longer than its column does not push the rest out of line: the row
# goes on below, each remaining cell still under its own column.
layout() {
  local -a widths
  read -r -a widths <<<"$1"
  shift
  local out='' used=0 start=0 i=0 cell
  for cell in "$@"; do
    if ((i > 0)); then
      if ((used >= start)); then
        out+=$'\n'
        used=0
      fi
      out+=$(printf '%*s' $((start - used)) '')
      used=$start
    fi
    out+=$cell
    used=$((used + ${#cell}))
    start=$((start + ${widths[i]:-0} + 1))
    i=$((i + 1))
  done
  printf '%s\n' "$out"
}
row() { layout "42 40 40" "$@"; }
pass() { row "$1" "$2" "$3" ok; }
fail() { # fail NAME MEASURED BOUND [EVIDENCE_NAME...]
  local name=$1 measured=$2 bound=$3 evidence
  shift 3
  row "$name" "$measured" "$bound" FAIL
  for evidence in "$@"; do
    say "--- $evidence (exit $(cat "$scratch/$evidence.rc" 2>/dev/null || echo "?")) stdout:"
    head -c 2000 "$scratch/$evidence.out" >&2 2>/dev/null || true
    say "--- $evidence stderr:"
    tail -n 20 "$scratch/$evidence.err" >&2 2>/dev/null || true
  done
  say "--- server log (tail):"
  server_log >&2
  say "FAIL: $name: measured $measured, expected $bound"
  exit 1
}
# check NAME MEASURED BOUND CONDITION EVIDENCE...: CONDITION is "true" or not.
check() {
  local name=$1 measured=$2 bound=$3 condition=$4
  shift 4
  if [[ $condition == true ]]; then pass "$name" "$measured" "$bound"; else fail "$name" "$measured" "$bound" "$@"; fi
}
# jqn EXPR: evaluates a jq expression over no input (numbers, comparisons).
jqn() { jq -rn "$@"; }
# field NAME [JQ_ARGS...] FILTER: reads one value from a captured JSON output (empty on error).
field() { local name=$1; shift; jq -r "$@" "$scratch/$name.out" 2>/dev/null || true; }
# status_codes NAME: a captured ghz report's status distribution, "OK=n,Unavailable=m".
status_codes() { field "$1" '.statusCodeDistribution | to_entries | map("\(.key)=\(.value)") | join(",")'; }

note() { summary+=("$(layout 36 "$1" "$2")"); }
# timings NAME: a client's median and total call times. Seconds in the
# clients' JSON; milliseconds here, where a person reads them.
timings() { field "$1" '"median \(.median_call_s * 1e6 | round / 1000) ms, total \(.total_s * 1e6 | round / 1000) ms"'; }

# wait_serving NAME TARGET PID GRPCURL_ARGS...: polls TARGET's gRPC health
# check (grpcurl GRPCURL_ARGS, captured as NAME) once a second until it
# answers SERVING, for at most READY_TIMEOUT_S or until process PID (if
# given) has died, and leaves the last answer in $status. Never a fixed
# sleep. Two kinds of failure look alike and are not: a server that is not
# ready yet (grpcurl cannot dial it, or it answers UNAVAILABLE or
# NOT_SERVING) is polled again; a tool that cannot run at all (a broken
# binary or image, a bad flag, an engine error) will not get better, so it
# stops the script at once.
wait_serving() {
  local name=$1 to=$2 pid=$3 deadline=$((SECONDS + READY_TIMEOUT_S))
  shift 3
  status=
  while ((SECONDS < deadline)); do
    capture "$name" grpcurl_ "$@" -connect-timeout "$READY_PROBE_S" -max-time "$READY_PROBE_S" \
      -d '{}' "$to" grpc.health.v1.Health/Check
    status=$(field "$name" .status)
    [[ $status == SERVING ]] && return 0
    if ((rc != 0)) && ! grep -qE 'Failed to dial target host|Code: Unavailable' "$scratch/$name.err"; then
      say "--- grpcurl (exit $rc) stderr:"
      tail -n 20 "$scratch/$name.err" >&2
      die "grpcurl cannot run, so the server's health cannot be checked (exit $rc, stderr above)"
    fi
    if [[ -n $pid ]] && ! kill -0 "$pid" 2>/dev/null; then return 0; fi
    sleep 1
  done
}

# link_reuse PREFIX ROW FOOTGUN_MIN POOLED_MAX LAUNCHER: footgun-client and
# pooled-client on $LINK through LAUNCHER (captured as PREFIXfootgun_link and
# PREFIXpooled_link), up to TIMING_ATTEMPTS tries until the footgun's median
# call is >= FOOTGUN_MIN round trips and pooled's <= POOLED_MAX; leaves both
# medians in $footgun_rtts and $pooled_rtts for the checks (10a/b, 12e/f).
link_reuse() {
  local prefix=$1 name=$2 footgun_min=$3 pooled_max=$4 launcher=$5 try reuse_ok
  for try in $(seq "$TIMING_ATTEMPTS"); do
    capture "${prefix}footgun_link" "$launcher" footgun-client --calls "$LINK_CALLS" --link "$LINK"
    capture "${prefix}pooled_link" "$launcher" pooled-client --calls "$LINK_CALLS" --link "$LINK"
    footgun_rtts=$(field "${prefix}footgun_link" .median_call_rtts)
    pooled_rtts=$(field "${prefix}pooled_link" .median_call_rtts)
    reuse_ok=$(jqn --argjson f "${footgun_rtts:-0}" --argjson p "${pooled_rtts:-1e9}" \
      --argjson fk "$footgun_min" --argjson pk "$pooled_max" '$f >= $fk and $p <= $pk')
    [[ $reuse_ok == true ]] && return
    if ((try < TIMING_ATTEMPTS)); then
      row "$name (try $try)" "footgun ${footgun_rtts:-?}, pooled ${pooled_rtts:-?}" \
        ">= $footgun_min, <= $pooled_max" "retry"
    fi
  done
}

}
