#!/usr/bin/env bash
# verify.sh: brings the chapter's stack up, asserts every claim of the chapter
# with real grpcurl, ghz and the clients, prints PASS, and tears it down.
# Run ./verify.sh --help for the modes and every override.
# jq programs use $variables inside single quotes on purpose:
# shellcheck disable=SC2016
set -euo pipefail
# The whole script is one { ... } group: bash parses all of it before it
# runs a line. Read command by command instead, a Ctrl+C that lands while
# bash parses the next command runs the INT trap inside the parser, and
# bash 5.2 then fails that command ("unexpected EOF while looking for
# matching `)'", exit 2) instead of exiting 130.
{

# ─── Bounds: every threshold in one table. Each is overridable by env. ───────
# They are loose and relative on purpose: they must hold on a laptop, a busy
# CI runner and a container network alike.
FOOTGUN_FACTOR=${FOOTGUN_FACTOR:-1.8}     # footgun median_call_s > pooled median_call_s x this
P99_CEILING_MS=${P99_CEILING_MS:-1500}    # ghz GetQuote p99 latency < this (ms)
RPS_FLOOR=${RPS_FLOOR:-20}                # ghz GetQuote throughput > this (calls/s)
GZIP_MAX_PERCENT=${GZIP_MAX_PERCENT:-5}   # gzip wire bytes ≤ this % of identity
GZIP_RANDOM_MIN_PERCENT=${GZIP_RANDOM_MIN_PERCENT:-70} # on the random catalog, gzip wire bytes >= this % of identity: 93 printable characters carry log2(93) = 6.5 bits in 8, so gzip's Huffman codes stay near 82 %
DEAD_PEER_MAX_S=${DEAD_PEER_MAX_S:-10}    # keepalive finds the dead peer within this (s); it needs 1 s + 1 s
TIMING_ATTEMPTS=${TIMING_ATTEMPTS:-3}     # tries for timing checks (4, 9); each failure is printed
# Rows 10: each lever on an emulated link (clients/src/link.rs, in the client's
# own process). These bounds come from physics, with margin:
LINK=${LINK:-wan}                         # the link: grpc-go's WAN, 20 Mbit/s, 60 ms round trip (RTT)
FOOTGUN_MIN_RTTS=${FOOTGUN_MIN_RTTS:-1.9} # footgun median call >= this many RTTs: TCP set-up (1 RTT) + the call (1 RTT) = 2
POOLED_MAX_RTTS=${POOLED_MAX_RTTS:-1.5}   # pooled median call <= this many RTTs: the call alone (1 RTT), + 0.5 RTT for CPU
GZIP_LINK_MAX_FRACTION=${GZIP_LINK_MAX_FRACTION:-0.5} # gzip fetch < this x (identity bytes ÷ rate): its 7 KB take 0.003 s + 1 RTT + CPU, identity's 5.0 MB take 2.0 s
NAT_IDLE_SECS=${NAT_IDLE_SECS:-6}         # the NAT forgets a flow idle this long: above the 5 s keepalive, below the 8 s gap
NAT_ABANDON_SECS=${NAT_ABANDON_SECS:-3}   # the call after the gap is abandoned after this (s): 50 RTTs, no answer is merely slow
# window-client on longhaul (400 ms round trip). Physics: a receive window W lets
# at most W bytes be in flight per round trip, so throughput <= W ÷ RTT.
WINDOW_FLOOR_MARGIN=${WINDOW_FLOOR_MARGIN:-0.9} # 64 KiB fetch time >= bytes ÷ (65,535 B ÷ RTT) x this
WINDOW_SPEEDUP=${WINDOW_SPEEDUP:-5}       # tonic-default Mbit/s > 64 KiB Mbit/s x this (ceilings: 2 MiB ÷ 64 KiB = 32x)
# Rows 11: behind a load balancer (HAProxy: lb/haproxy.cfg in --local mode,
# lb/compose.cfg in compose). Shares are of the calls each of 3 replicas
# answered (routing-replica header).
PINNED_SHARE=${PINNED_SHARE:-0.95}        # L4, one channel: busiest replica's share >= this; one connection is one replica: 1.0
SPREAD_SHARE=${SPREAD_SHARE:-0.2}         # L7 and client-side: each replica >= this; round robin gives 1/3, tonic's random p2c 1/3 ± 0.03 (1 sd, 300 calls)
AGED_SHARE=${AGED_SHARE:-0.1}             # L4 to replicas aged 3 s, 10 s of calls: each >= this; ~4 connections of ~3 s, round robin gives each one
BALANCE_CALLS=${BALANCE_CALLS:-300}       # calls per balance-client phase
AGED_SECS=${AGED_SECS:-10}                # l4_aged calls for this long (s): 3 ages of 3 s, so every replica gets a turn
LB_AGE_SECS=3                             # the aged replicas' --max-connection-age-secs (±10 % jitter)
LB_GRACE_SECS=2                           # and --max-connection-age-grace-secs
# The keepalive row (11e) uses lb/haproxy.cfg's *_short frontends: 6 s idle
# timeouts, below the 8 s gap (IDLE_SECS) and above the client's 5 s keepalive.
# Rows 12: TLS (server/src/tls.rs, docs/tls.md).
# A new TLS 1.3 connection costs TCP set-up (1 RTT), then the TLS handshake
# (1 RTT: ClientHello out, the server's flight back), before its call (1 RTT).
TLS_FOOTGUN_MIN_RTTS=${TLS_FOOTGUN_MIN_RTTS:-2.7} # footgun over TLS median call >= this many RTTs: TCP + TLS 1.3 + the call = 3
TLS_POOLED_MAX_RTTS=${TLS_POOLED_MAX_RTTS:-1.5}   # pooled over TLS median call <= this many RTTs: the call alone (1 RTT), + 0.5 RTT for CPU
TLS_PLAINTEXT_MAX_S=${TLS_PLAINTEXT_MAX_S:-5}     # grpcurl -plaintext on the TLS port fails within this (s): one loopback round trip, where a closed connection has grpcurl retry for its whole 10 s
TLS_CPU_MIN_RATIO=${TLS_CPU_MIN_RATIO:-1.5}       # server CPU per footgun call, full TLS handshakes ÷ plaintext >= this: a key exchange, a signature and the key schedule (~0.25 ms) on top of TCP and HTTP/2 set-up (0.1-0.16 ms); measured x2.4 here (2 workers), x3.4-5.0 with 1 (docs/tls.md)
TLS_CPU_CALLS=${TLS_CPU_CALLS:-1000}              # footgun calls per CPU sample: ~1 s each, 1000 connections, enough /proc clock ticks (10 ms each)

# ─── Workload ────────────────────────────────────────────────────────────────
CALLS=${CALLS:-50}                        # GetQuote calls per footgun/pooled run
LINK_CALLS=${LINK_CALLS:-20}              # GetQuote calls per footgun/pooled run on the link (20 x 2 RTT = 2.4 s)
GHZ_CONCURRENCY=${GHZ_CONCURRENCY:-10}    # ghz -c
GHZ_TOTAL=${GHZ_TOTAL:-300}               # ghz -n
IDLE_SECS=${IDLE_SECS:-8}                 # keepalive-client idle gap (server/client ping every 5 s)
RAISED_CAP=8388608                        # the chapter's raised cap (8 MiB)

# ─── Time limits ─────────────────────────────────────────────────────────────
READY_TIMEOUT_S=${READY_TIMEOUT_S:-90}    # server must report SERVING within this
READY_PROBE_S=${READY_PROBE_S:-5}         # one readiness probe: grpcurl -connect-timeout and -max-time
TOOL_TIMEOUT_S=${TOOL_TIMEOUT_S:-120}     # any single grpcurl / ghz / client run
BUILD_TIMEOUT_S=${BUILD_TIMEOUT_S:-1800}  # cargo or image build

# ─── How to run ──────────────────────────────────────────────────────────────
COMPOSE=${COMPOSE:-docker compose}
ROUTING_PORT=${ROUTING_PORT:-9180}        # compose publishes 127.0.0.1:$ROUTING_PORT
# compose.yaml names the project grpc-tuning; two runs at once on one engine
# need two names (CI sets a unique one).
COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-}
SERVICE=shipping.routing.v1.RoutingService
QUOTE_JSON='{"origin":"NLRTM","destination":"SGSIN","cargo":[{"description":"machine parts","weightKg":400.4}]}'

usage() {
  cat <<EOF
Usage: ./verify.sh [--local] [--no-build] [--help]

Brings the stack up, runs grpcurl, ghz and the clients against it,
asserts the chapter's claims, prints PASS (exit 0) or the failed assertion
with its evidence (exit 1), and tears everything down. Exit 2: bad usage, a
missing host tool, no container engine, a tool that cannot run, or a stack
that would not start.

Modes:
  (default)      Docker Compose: builds the image, starts the server, runs
                 grpcurl, ghz and the clients as containers (profile "tools");
                 section 11 starts HAProxy and six replicas (profile "lb"),
                 section 12 a TLS server (profile "tls").
  COMPOSE=podman-compose ./verify.sh
                 The same with Podman. Readiness is polled by this script.
  --local        No containers: builds with cargo, starts routing-server on a
                 free loopback port, and uses grpcurl and ghz from PATH.
                 Section 11 also starts six replicas and haproxy (PATH)
                 with lb/haproxy.cfg.
                 The binaries are taken from cargo's target directory
                 (CARGO_TARGET_DIR is honoured).
  --no-build     Use images (or, with --local, release binaries) that
                 already exist.

Overrides (environment):
  Bounds     FOOTGUN_FACTOR=$FOOTGUN_FACTOR P99_CEILING_MS=$P99_CEILING_MS RPS_FLOOR=$RPS_FLOOR
             GZIP_MAX_PERCENT=$GZIP_MAX_PERCENT GZIP_RANDOM_MIN_PERCENT=$GZIP_RANDOM_MIN_PERCENT TIMING_ATTEMPTS=$TIMING_ATTEMPTS
  On a link  LINK=$LINK FOOTGUN_MIN_RTTS=$FOOTGUN_MIN_RTTS POOLED_MAX_RTTS=$POOLED_MAX_RTTS
             GZIP_LINK_MAX_FRACTION=$GZIP_LINK_MAX_FRACTION NAT_IDLE_SECS=$NAT_IDLE_SECS NAT_ABANDON_SECS=$NAT_ABANDON_SECS
  Balancer   PINNED_SHARE=$PINNED_SHARE SPREAD_SHARE=$SPREAD_SHARE AGED_SHARE=$AGED_SHARE
             BALANCE_CALLS=$BALANCE_CALLS AGED_SECS=$AGED_SECS (rows 11)
  Over TLS   TLS_FOOTGUN_MIN_RTTS=$TLS_FOOTGUN_MIN_RTTS TLS_POOLED_MAX_RTTS=$TLS_POOLED_MAX_RTTS TLS_PLAINTEXT_MAX_S=$TLS_PLAINTEXT_MAX_S
             TLS_CPU_MIN_RATIO=$TLS_CPU_MIN_RATIO TLS_CPU_CALLS=$TLS_CPU_CALLS (rows 12)
  Workload   CALLS=$CALLS LINK_CALLS=$LINK_CALLS GHZ_CONCURRENCY=$GHZ_CONCURRENCY GHZ_TOTAL=$GHZ_TOTAL IDLE_SECS=$IDLE_SECS
  Limits     READY_TIMEOUT_S=$READY_TIMEOUT_S READY_PROBE_S=$READY_PROBE_S TOOL_TIMEOUT_S=$TOOL_TIMEOUT_S
             BUILD_TIMEOUT_S=$BUILD_TIMEOUT_S
  Compose    COMPOSE="$COMPOSE" ROUTING_PORT=$ROUTING_PORT COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-grpc-tuning}
             Published on 127.0.0.1 too: ROUTING_TLS_PORT (9443), LB_L4_PORT (9280),
             LB_L7_PORT (9281), LB_STATS_PORT (9285)
             ROUTING_IMAGE, GRPCURL_IMAGE, GHZ_IMAGE, HAPROXY_IMAGE (see compose.yaml)
EOF
}

# ─── Small verbs ─────────────────────────────────────────────────────────────
say() { printf '%s\n' "$*" >&2; }
die() { say "verify.sh: $*"; exit 2; }

mode=compose
build=yes
while (($#)); do
  case $1 in
    --local) mode=local ;;
    --no-build) build=no ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done

cd "$(dirname "$0")"
scratch=$(mktemp -d)
server_pid=
tls_pid=
lb_pids=() # section 11: HAProxy first, then its replicas
compose_up=no
read -r -a compose <<<"$COMPOSE"
# Passed as -p too: every compose implementation and version takes the flag,
# not all of them read the variable.
if [[ -n $COMPOSE_PROJECT_NAME ]]; then compose+=(-p "$COMPOSE_PROJECT_NAME"); fi

# The engine behind $COMPOSE, and a service's container by the labels that
# docker compose and podman-compose both set (ps -a: stopped ones too).
engine=docker
[[ ${compose[0]} == podman-compose ]] && engine=podman
container_of() { # container_of SERVICE [-a]: the ID of the service's (first) container
  timeout 30 "$engine" ps -q ${2:+"$2"} --filter "label=com.docker.compose.project=${COMPOSE_PROJECT_NAME:-grpc-tuning}" \
    --filter "label=com.docker.compose.service=$1" 2>/dev/null | head -n 1 || true
}

need() { # need TOOL HINT
  command -v "$1" >/dev/null 2>&1 || die "$1 is required but not on PATH. Install: $2"
}
need jq "apt-get install jq | dnf install jq | brew install jq"
need timeout "coreutils (apt-get install coreutils; on macOS: brew install coreutils)"
need mktemp "coreutils"
no_engine_hint="or run without containers: ./verify.sh --local (cargo, grpcurl and ghz on PATH), or with Podman: COMPOSE=podman-compose ./verify.sh"
if [[ $mode == local ]]; then
  need cargo "https://rustup.rs"
  go_path_hint='then put the directory go installs into on PATH: export PATH="$(go env GOPATH)/bin:$PATH"'
  need grpcurl "CGO_ENABLED=0 go install -ldflags '-X main.version=v1.9.3' github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3, $go_path_hint"
  need ghz "CGO_ENABLED=0 go install -ldflags '-X main.version=v0.121.0' github.com/bojand/ghz/cmd/ghz@v0.121.0, $go_path_hint"
  need haproxy "apt-get install haproxy | dnf install haproxy | brew install haproxy"
elif [[ ${compose[0]} == podman-compose ]]; then
  need podman "apt-get install podman | dnf install podman"
  need podman-compose "pipx install podman-compose (on Debian 12 and other PEP 668 systems plain pip install is refused)"
  engine_error=$(timeout 30 podman info 2>&1 >/dev/null) ||
    die "podman does not work ('podman info': $(head -n 1 <<<"$engine_error")); $no_engine_hint"
else
  need "${compose[0]}" "Docker Engine with the compose plugin (https://docs.docker.com/engine/install/); $no_engine_hint"
  if [[ ${compose[0]} == docker ]]; then
    # `docker compose version` answers without an engine; `docker info` needs one.
    timeout 30 docker compose version >/dev/null 2>&1 ||
      die "the Docker compose plugin is missing ('docker compose version' fails): install it (https://docs.docker.com/compose/install/linux/), $no_engine_hint"
    engine_error=$(timeout 30 docker info --format '{{.ServerVersion}}' 2>&1 >/dev/null) ||
      die "no Docker engine answers ('docker info': $(head -n 1 <<<"$engine_error")): start Docker, $no_engine_hint"
  fi
fi

server_log() { # the tail of the server's log, for evidence
  if [[ $mode == local ]]; then
    tail -n 40 "$scratch/server.log" 2>/dev/null || true
  elif [[ $compose_up == yes ]]; then
    timeout 30 "${compose[@]}" logs --no-color --tail 40 server 2>&1 || true
  fi
}

stop_lb() { # section 11's processes: HAProxy first, so the replicas drain at once
  local pid
  for pid in ${lb_pids[@]+"${lb_pids[@]}"}; do
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  lb_pids=()
}

cleanup() {
  local rc=$?
  for pid in "${extra_pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  stop_lb
  if [[ -n $server_pid ]] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    # The server drains for up to 10 s; do not wait longer than that and a bit.
    for _ in $(seq 30); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  if [[ $compose_up == yes ]]; then
    say "tearing down: $COMPOSE down"
    # -v: the `tls` volume's dev certificates go too; the next run makes new ones.
    timeout 120 "${compose[@]}" --profile tools --profile lb --profile tls down --volumes --remove-orphans --timeout 15 \
      >"$scratch/down.log" 2>&1 ||
      { say "compose down failed:"; cat "$scratch/down.log" >&2; }
  fi
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT

# ─── Ctrl+C ──────────────────────────────────────────────────────────────────
# Every long command runs through `bounded`: under `timeout`, in the
# background, while the script `wait`s for it. Two reasons. bash runs a trap
# only once a foreground command has finished, and `timeout` puts its tool in
# a process group of its own, which the terminal's Ctrl+C never reaches: a
# foreground tool would keep running against a server that is already
# draining, and fail an assertion. `wait` returns at once when a trapped
# signal arrives, so the trap below stops the tool's group and exits 130
# (143 for SIGTERM) before any assertion can run; cleanup does the rest.
tool_pid=
bounded() { # bounded SECONDS CMD...: CMD under `timeout SECONDS`, interruptible
  local secs=$1 status=0
  shift
  timeout "$secs" "$@" &
  tool_pid=$!
  wait "$tool_pid" || status=$?
  tool_pid=
  return "$status"
}
interrupted() { # interrupted EXIT_CODE
  trap '' INT TERM # a second Ctrl+C must not cut the clean-up short
  if [[ -n $tool_pid ]]; then
    # timeout leads its own process group (its pid is the group's id): TERM
    # reaches it and the tool. It may not have made the group yet, hence both.
    kill -TERM -- "-$tool_pid" 2>/dev/null || kill -TERM "$tool_pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$tool_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$tool_pid" 2>/dev/null || true
    wait "$tool_pid" 2>/dev/null || true
  fi
  say "verify.sh: interrupted, stopping"
  exit "$1"
}
trap 'interrupted 130' INT
trap 'interrupted 143' TERM

# ─── Launchers: the only place local and compose differ ───────────────────
# Each runs one tool through `bounded`. Inside compose the server is server:9000.
grpcurl_() {
  if [[ $mode == local ]]; then
    bounded "$TOOL_TIMEOUT_S" grpcurl "$@"
  else
    bounded "$TOOL_TIMEOUT_S" "${compose[@]}" --profile tools run --rm -T grpcurl "$@"
  fi
}
ghz_() {
  if [[ $mode == local ]]; then
    bounded "$TOOL_TIMEOUT_S" ghz "$@"
  else
    bounded "$TOOL_TIMEOUT_S" "${compose[@]}" --profile tools run --rm -T ghz "$@"
  fi
}
client_() { client_at "$target" "$@"; } # client_ BIN ARGS...: against the server
client_at() { # client_at TARGET BIN ARGS...
  local to=$1 bin=$2
  shift 2
  if [[ $mode == local ]]; then
    bounded "$TOOL_TIMEOUT_S" "$bin_dir/$bin" --target "$to" "$@"
  else
    bounded "$TOOL_TIMEOUT_S" "${compose[@]}" --profile tools run --rm -T clients "$bin" --target "$to" "$@"
  fi
}

# capture NAME LAUNCHER ARGS...: stdout → $scratch/NAME.out, stderr → NAME.err,
# exit code → $rc and NAME.rc (the latter for the evidence a failure prints).
rc=0
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
# field NAME FILTER: reads one value from a captured JSON output (empty on error).
field() { jq -r "$2" "$scratch/$1.out" 2>/dev/null || true; }

summary=()
note() { summary+=("$(layout 36 "$1" "$2")"); }

# launch_local NAME ARGS...: `routing-server --listen 127.0.0.1:0 ARGS` in
# the background, logging to $scratch/NAME.log. Port 0: the kernel picks a
# free port, which the server logs; it is left in $launched_addr (empty if
# the server died first), the PID in $launched_pid.
launched_pid=
launched_addr=
launch_local() {
  local name=$1
  shift
  launched_addr=
  RUST_LOG=${launch_log:-info} "$bin_dir/routing-server" --listen 127.0.0.1:0 "$@" >"$scratch/$name.out" 2>"$scratch/$name.log" &
  launched_pid=$!
  for _ in $(seq 100); do
    launched_addr=$(grep -o 'local_addr=127\.0\.0\.1:[0-9]*' "$scratch/$name.log" | head -n 1 | cut -d= -f2 || true)
    [[ -n $launched_addr ]] && break
    kill -0 "$launched_pid" 2>/dev/null || break
    sleep 0.1
  done
}

# start_extra NAME SERVICE ROW ARGS...: a second routing-server for one row,
# polled until it reports SERVING (ROW fails otherwise); its address is left
# in $extra_target. --local starts `routing-server --listen 127.0.0.1:0 ARGS`
# (stopped by cleanup); compose starts SERVICE, which compose.yaml gives the
# same settings as environment variables.
extra_pids=()
extra_target=
start_extra() {
  local name=$1 service=$2 row=$3 status='' deadline
  shift 3
  extra_target=
  if [[ $mode == local ]]; then
    launch_local "$name" "$@"
    extra_pids+=("$launched_pid")
    extra_target=$launched_addr
    [[ -n $extra_target ]] || { tail -n 20 "$scratch/$name.log" >&2; die "the $name routing-server did not start"; }
  else
    bounded 300 "${compose[@]}" --profile tools up -d --no-build "$service" >"$scratch/${name}_up.log" 2>&1 ||
      { cat "$scratch/${name}_up.log" >&2; die "'$COMPOSE up $service' failed"; }
    extra_target=$service:9000
  fi
  deadline=$((SECONDS + READY_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    capture "${name}_ready" grpcurl_ -plaintext -connect-timeout "$READY_PROBE_S" -max-time "$READY_PROBE_S" \
      -d '{}' "$extra_target" grpc.health.v1.Health/Check
    status=$(field "${name}_ready" .status)
    [[ $status == SERVING ]] && return
    sleep 1
  done
  fail "$row" "${status:-no answer}" "SERVING" "${name}_ready"
}

# ─── Bring the stack up ──────────────────────────────────────────────────────
if [[ $mode == local ]]; then
  if [[ $build == yes ]]; then
    say "building: cargo build --release --locked -p routing-server -p routing-clients"
    bounded "$BUILD_TIMEOUT_S" cargo build --release --locked -p routing-server -p routing-clients >&2
  fi
  # Where cargo puts the binaries: target/ unless CARGO_TARGET_DIR or a
  # config file says otherwise.
  target_dir=$(timeout 60 cargo metadata --format-version 1 --no-deps | jq -r .target_directory) ||
    die "cannot ask cargo for its target directory (cargo metadata failed)"
  bin_dir=$target_dir/release
  for bin in routing-server footgun-client pooled-client gzip-client keepalive-client window-client balance-client; do
    if [[ ! -x $bin_dir/$bin ]]; then
      [[ $build == no ]] && die "$bin_dir/$bin is missing: run without --no-build"
      die "$bin_dir/$bin is missing after cargo build"
    fi
  done
  launch_local server
  server_pid=$launched_pid
  target=$launched_addr
  [[ -n $target ]] || { server_log >&2; die "routing-server did not start"; }
  proto_dir=contracts/proto
else
  export ROUTING_PORT
  if [[ $build == yes ]]; then
    say "building: $COMPOSE build server"
    bounded "$BUILD_TIMEOUT_S" "${compose[@]}" build server >&2
  fi
  say "starting: $COMPOSE up -d server"
  compose_up=yes
  bounded 300 "${compose[@]}" up -d --no-build server >"$scratch/up.log" 2>&1 ||
    { cat "$scratch/up.log" >&2; die "'$COMPOSE up' failed (is port $ROUTING_PORT free? set ROUTING_PORT)"; }
  target=server:9000
  proto_dir=/proto
fi
say "verify.sh: mode=$mode target=$target"

# Readiness: poll the gRPC health check, bounded. Never a fixed sleep.
# Two kinds of failure look alike and are not: a server that is not ready yet
# (grpcurl cannot dial it, or it answers UNAVAILABLE or NOT_SERVING) is polled
# again; a tool that cannot run at all (a broken binary or image, a bad flag,
# an engine error) will not get better, so it stops the script at once.
not_ready_yet() { # reads the last `ready` capture
  ((rc == 0)) || grep -qE 'Failed to dial target host|Code: Unavailable' "$scratch/ready.err"
}
deadline=$((SECONDS + READY_TIMEOUT_S))
status=
while ((SECONDS < deadline)); do
  capture ready grpcurl_ -plaintext -connect-timeout "$READY_PROBE_S" -max-time "$READY_PROBE_S" \
    -d '{}' "$target" grpc.health.v1.Health/Check
  status=$(field ready .status)
  [[ $status == SERVING ]] && break
  if ! not_ready_yet; then
    say "--- grpcurl (exit $rc) stderr:"
    tail -n 20 "$scratch/ready.err" >&2
    die "grpcurl cannot run, so the server's health cannot be checked (exit $rc, stderr above)"
  fi
  if [[ $mode == local ]] && ! kill -0 "$server_pid" 2>/dev/null; then break; fi
  sleep 1
done
row ASSERTION MEASURED BOUND RESULT
check "0 health: server reports SERVING" "${status:-no answer}" "SERVING within ${READY_TIMEOUT_S}s" \
  "$([[ $status == SERVING ]] && echo true)" ready

# ─── 1. Reflection ───────────────────────────────────────────────────────────
capture list grpcurl_ -plaintext "$target" list
found=$(grep -cx "$SERVICE" "$scratch/list.out" || true)
check "1 reflection lists RoutingService" "$(wc -l <"$scratch/list.out") services, match=$found" "lists $SERVICE" \
  "$([[ $rc == 0 && $found == 1 ]] && echo true)" list

# ─── 2. GetQuote: the formula ────────────────────────────────────────────────
capture quote grpcurl_ -plaintext -d "$QUOTE_JSON" "$target" "$SERVICE/GetQuote"
got=$(field quote '[.quote.price.amount, .quote.routeId, (.quote.legs | length | tostring) + "x" + (.quote.legs[0].carrier)] | join(" ")')
check "2 GetQuote 400.4 kg x 2.50" "${got:-no answer}" "1001.00 NLRTM-SGSIN 1xMAERSK" \
  "$([[ $got == "1001.00 NLRTM-SGSIN 1xMAERSK" ]] && echo true)" quote

capture bad_quote grpcurl_ -plaintext -d '{"origin":"rotterdam","destination":"SGSIN","cargo":[{"weightKg":1}]}' \
  "$target" "$SERVICE/GetQuote"
code=$(grep -o 'Code: [A-Za-z]*' "$scratch/bad_quote.err" | head -n 1 | cut -d' ' -f2 || true)
check "2b GetQuote bad origin is rejected" "exit $rc, ${code:-no code}" "exit 67, InvalidArgument" \
  "$([[ $rc == 67 && $code == InvalidArgument ]] && echo true)" bad_quote

# ─── 3. ListRoutes: the default page ─────────────────────────────────────────
capture page grpcurl_ -plaintext -d '{}' "$target" "$SERVICE/ListRoutes"
got=$(field page '([.routes[].id] | join(",")) + " next=" + .nextPageToken')
check "3 ListRoutes default page" "${got:-no answer}" "rte_001,rte_002,rte_003 next=3" \
  "$([[ $got == "rte_001,rte_002,rte_003 next=3" ]] && echo true)" page

# ─── 4. Channel reuse ────────────────────────────────────────────────────────
# The gate compares the median call of each client: one scheduler hiccup can
# stretch a total by half, but barely moves the median of $CALLS calls.
for try in $(seq "$TIMING_ATTEMPTS"); do
  capture footgun client_ footgun-client --calls "$CALLS"
  capture pooled client_ pooled-client --calls "$CALLS"
  footgun_s=$(field footgun .median_call_s)
  pooled_s=$(field pooled .median_call_s)
  footgun_ms=$(field footgun '.median_call_s * 1e6 | round / 1000')
  pooled_ms=$(field pooled '.median_call_s * 1e6 | round / 1000')
  footgun_conns=$(field footgun .connections)
  pooled_conns=$(field pooled .connections)
  # Connection counts are facts, not timings: a wrong count fails at once.
  [[ $footgun_conns == "$CALLS" ]] ||
    fail "4a footgun opens a connection per call" "${footgun_conns:-exit $rc} connections" "$CALLS (= calls)" footgun
  [[ $pooled_conns == 1 ]] ||
    fail "4b pooled reuses one connection" "${pooled_conns:-exit $rc} connections" "1" pooled
  ratio=$(jqn --argjson f "$footgun_s" --argjson p "$pooled_s" '$f / $p * 100 | round / 100')
  faster=$(jqn --argjson f "$footgun_s" --argjson p "$pooled_s" --argjson k "$FOOTGUN_FACTOR" '$f > $p * $k')
  [[ $faster == true ]] && break
  if ((try < TIMING_ATTEMPTS)); then
    row "4c median call, footgun vs pooled (try $try)" "$footgun_ms ms vs $pooled_ms ms (x$ratio)" "> x$FOOTGUN_FACTOR" "retry"
  fi
done
pass "4a footgun opens a connection per call" "$footgun_conns connections" "$CALLS (= calls)"
pass "4b pooled reuses one connection" "$pooled_conns connection" "1"
check "4c median call, footgun vs pooled" "$footgun_ms ms vs $pooled_ms ms (x$ratio)" "> x$FOOTGUN_FACTOR" \
  "$faster" footgun pooled
# Seconds in the clients' JSON; milliseconds here, where a person reads them.
timings() { field "$1" '"median \(.median_call_s * 1e6 | round / 1000) ms, total \(.total_s * 1e6 | round / 1000) ms"'; }
note "footgun ($CALLS calls)" "$(timings footgun), $footgun_conns connections"
note "pooled ($CALLS calls)" "$(timings pooled), $pooled_conns connection"
note "footgun / pooled, median call" "x$ratio"

# ─── 5. Message caps ─────────────────────────────────────────────────────────
capture capped grpcurl_ -plaintext -d '{"pageSize":25}' "$target" "$SERVICE/ListRoutes"
code=$(grep -o 'Code: [A-Za-z]*' "$scratch/capped.err" | head -n 1 | cut -d' ' -f2 || true)
larger=$(grep -c 'larger than max' "$scratch/capped.err" || true)
check "5a pageSize 25 at grpcurl's 4 MiB default" "exit $rc, ${code:-no code}" "exit 72, ResourceExhausted" \
  "$([[ $rc == 72 && $code == ResourceExhausted && $larger -ge 1 ]] && echo true)" capped
capped_msg=$(grep -o 'Message: .*' "$scratch/capped.err" | head -n 1 || true)

capture raised grpcurl_ -plaintext -max-msg-sz "$RAISED_CAP" -d '{"pageSize":25}' "$target" "$SERVICE/ListRoutes"
got=$(field raised '"\(.routes | length) routes \(.routes[0].id)..\(.routes[-1].id)"')
check "5b pageSize 25 with -max-msg-sz $RAISED_CAP" "${got:-exit $rc}" "25 routes rte_001..rte_025" \
  "$([[ $got == "25 routes rte_001..rte_025" ]] && echo true)" raised
note "full catalog at 4 MiB" "${capped_msg#Message: }"

# ─── 6. Shrink instead of raising ────────────────────────────────────────────
capture masked grpcurl_ -plaintext \
  -d '{"pageSize":25,"fieldMask":{"paths":["routes.id","routes.price"]}}' "$target" "$SERVICE/ListRoutes"
got=$(field masked '"\(.routes | length) routes, \([.routes[] | select(.legs)] | length) with legs"')
check "6 pageSize 25 + mask id,price at 4 MiB" "${got:-exit $rc}" "25 routes, 0 with legs" \
  "$([[ $got == "25 routes, 0 with legs" ]] && echo true)" masked

# ─── 7. gzip ─────────────────────────────────────────────────────────────────
capture gzip client_ gzip-client
got=$(field gzip '"\(.result), \(.routes) routes"')
check "7a gzip-client answers match" "${got:-exit $rc}" "MATCH, 25 routes" \
  "$(field gzip '.result == "MATCH" and .routes == 25')" gzip
identity=$(field gzip .identity_wire_bytes)
zipped=$(field gzip .gzip_wire_bytes)
percent=$(jqn --argjson i "$identity" --argjson g "$zipped" '$g / $i * 10000 | round / 100')
check "7b gzip wire bytes vs identity" "$zipped / $identity = $percent%" "<= $GZIP_MAX_PERCENT%" \
  "$(jqn --argjson p "$percent" --argjson k "$GZIP_MAX_PERCENT" '$p <= $k')" gzip
note "identity wire bytes (25 routes)" "$identity"
note "gzip wire bytes (25 routes)" "$zipped ($percent%)"
note "gzip break-even link speed" "$(field gzip 'if .gzip_not_slower then "none: the gzip fetch was not slower" else "\(.break_even_bit_s / 1e6 | round) Mbit/s (gzip is faster below it)" end')"

# 7c. The other half of the gzip lesson: bytes that do not shrink. A second
# server pads its catalog with seeded random printable characters (same sizes,
# ids and prices); gzip still costs CPU at both ends, and saves almost nothing.
start_extra random random-server "7c random-filler server reports SERVING" --filler random
capture gzip_random client_at "$extra_target" gzip-client
identity_r=$(field gzip_random .identity_wire_bytes)
zipped_r=$(field gzip_random .gzip_wire_bytes)
percent_r=$(jqn --argjson i "${identity_r:-1}" --argjson g "${zipped_r:-0}" '$g / $i * 10000 | round / 100')
check "7c gzip on random bytes vs identity" "${zipped_r:-exit $rc} / ${identity_r:-?} = $percent_r%" ">= $GZIP_RANDOM_MIN_PERCENT%, MATCH" \
  "$(jq -r --argjson k "$GZIP_RANDOM_MIN_PERCENT" '.result == "MATCH" and .gzip_wire_bytes * 100 >= .identity_wire_bytes * $k' \
    "$scratch/gzip_random.out" 2>/dev/null || true)" gzip_random
note "gzip wire bytes, random catalog" "$zipped_r of $identity_r ($percent_r%)"
note "random catalog: identity / gzip fetch" "$(field gzip_random '"\(.identity_s * 1e6 | round / 1000) ms / \(.gzip_s * 1e6 | round / 1000) ms"')"

# ─── 8. Keepalive ────────────────────────────────────────────────────────────
# One run, three phases at once, each on its own channel: an idle gap (8a); a
# dead peer, played by a relay inside the client's own process, so it works in
# a container too (8b); PINGs below the server's 5 s floor (8c).
capture keepalive client_ keepalive-client --idle-secs "$IDLE_SECS"
got=$(field keepalive '"\(.result), \(.connections) conn, \(.idle_pings_sent) PING, \(.idle_bytes_sent) B sent"')
check "8a keepalive survives ${IDLE_SECS}s idle" "${got:-exit $rc}" "SURVIVED, 1 conn, >0 PING, >0 B" \
  "$(field keepalive '.result == "SURVIVED" and .connections == 1 and .idle_pings_sent > 0 and .idle_bytes_sent > 0')" keepalive
detect_s=$(field keepalive '.dead_peer_detect_s // empty')
got=$(field keepalive '"\(.dead_peer) \(.dead_peer_detect_s // "-" | if type == "number" then . * 100 | round / 100 else . end)s, control \(.no_keepalive)"')
check "8b keepalive catches a dead peer" "${got:-exit $rc}" "DETECTED <= ${DEAD_PEER_MAX_S}s, STILL_HANGING" \
  "$(jqn --argjson d "${detect_s:-null}" --argjson k "$DEAD_PEER_MAX_S" --arg h "$(field keepalive .no_keepalive)" \
    '$d != null and $d <= $k and $h == "STILL_HANGING"')" keepalive
got=$(field keepalive '"\(.ping_floor) after \(.ping_floor_pings_sent) PINGs"')
check "8c PINGs every 1 s get too_many_pings" "${got:-exit $rc}" "TOO_MANY_PINGS" \
  "$(field keepalive '.ping_floor == "TOO_MANY_PINGS"')" keepalive
note "idle PINGs, bytes out / in (${IDLE_SECS}s)" \
  "$(field keepalive '"\(.idle_pings_sent), \(.idle_bytes_sent) B / \(.idle_pings_received), \(.idle_bytes_received) B"')"
note "dead peer found / control abandoned" "$(field keepalive '"\(.dead_peer_detect_s) s / \(.no_keepalive_waited_s) s"')"
note "ping floor: PINGs sent before GOAWAY" "$(field keepalive '"\(.ping_floor_pings_sent) in \(.ping_floor_waited_s) s"')"

# ─── 9. Load: ghz on GetQuote ────────────────────────────────────────────────
for try in $(seq "$TIMING_ATTEMPTS"); do
  capture ghz ghz_ --insecure \
    --proto "$proto_dir/shipping/routing/v1/routing_service.proto" --import-paths "$proto_dir" \
    --call "$SERVICE.GetQuote" -d "$QUOTE_JSON" \
    -c "$GHZ_CONCURRENCY" -n "$GHZ_TOTAL" --timeout 10s -O json "$target"
  # ghz exits 0 even when every call failed: read the status distribution.
  ok_count=$(field ghz '.statusCodeDistribution.OK // 0')
  codes=$(field ghz '.statusCodeDistribution | to_entries | map("\(.key)=\(.value)") | join(",")')
  count=$(field ghz .count)
  check "9a ghz GetQuote: every call OK" "${codes:-exit $rc}, count ${count:-?}" "OK=$GHZ_TOTAL, count $GHZ_TOTAL" \
    "$([[ $ok_count == "$GHZ_TOTAL" && $count == "$GHZ_TOTAL" ]] && echo true)" ghz
  # Latencies in ghz's JSON are nanoseconds.
  p50_ms=$(field ghz '.latencyDistribution[] | select(.percentage == 50) | .latency / 1e6 * 100 | round / 100')
  p99_ms=$(field ghz '.latencyDistribution[] | select(.percentage == 99) | .latency / 1e6 * 100 | round / 100')
  rps=$(field ghz '.rps | round')
  p99_ok=$(jqn --argjson p "${p99_ms:-1e9}" --argjson k "$P99_CEILING_MS" '$p < $k')
  rps_ok=$(jqn --argjson r "${rps:-0}" --argjson k "$RPS_FLOOR" '$r > $k')
  [[ $p99_ok == true && $rps_ok == true ]] && break
  if ((try < TIMING_ATTEMPTS)); then
    row "9b/c ghz timing (try $try)" "p99 ${p99_ms}ms, ${rps} rps" "< ${P99_CEILING_MS}ms, > ${RPS_FLOOR}" "retry"
  fi
done
check "9b ghz GetQuote p99 latency" "${p99_ms} ms" "< ${P99_CEILING_MS} ms" "$p99_ok" ghz
check "9c ghz GetQuote throughput" "${rps} rps" "> ${RPS_FLOOR} rps" "$rps_ok" ghz
note "ghz GetQuote (-c $GHZ_CONCURRENCY -n $GHZ_TOTAL)" "$rps rps, p50 $p50_ms ms, p99 $p99_ms ms"

# ─── 10. Each lever where it pays: on an emulated link ───────────────────────
# The clients route their channels through a link inside their own process
# (--link, clients/src/link.rs), so this works in a container as well. The
# bounds are physics, in round trips (RTT) and bytes ÷ rate: see the table.

# link_reuse PREFIX ROW FOOTGUN_MIN POOLED_MAX LAUNCHER: footgun-client and
# pooled-client on $LINK through LAUNCHER (captured as PREFIXfootgun_link and
# PREFIXpooled_link), up to TIMING_ATTEMPTS tries until the footgun's median
# call is >= FOOTGUN_MIN round trips and pooled's <= POOLED_MAX; leaves both
# medians in $footgun_rtts and $pooled_rtts for the checks.
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

# 10a/b. Channel reuse: a new connection costs a round trip before its call.
link_reuse "" "10a/b median call in RTTs" "$FOOTGUN_MIN_RTTS" "$POOLED_MAX_RTTS" client_
rtt_ms=$(field pooled_link .link.rtt_ms)
check "10a footgun on $LINK: median call" "${footgun_rtts:-exit $rc} RTT of ${rtt_ms:-?} ms" ">= $FOOTGUN_MIN_RTTS RTT" \
  "$(jqn --argjson f "${footgun_rtts:-0}" --argjson k "$FOOTGUN_MIN_RTTS" '$f >= $k')" footgun_link
check "10b pooled on $LINK: median call" "${pooled_rtts:-exit $rc} RTT of ${rtt_ms:-?} ms" "<= $POOLED_MAX_RTTS RTT" \
  "$(jqn --argjson p "${pooled_rtts:-1e9}" --argjson k "$POOLED_MAX_RTTS" '$p <= $k')" pooled_link
note "footgun / pooled on $LINK, median" \
  "$(field footgun_link '"\(.median_call_s * 1e6 | round / 1000) ms"') / $(field pooled_link '"\(.median_call_s * 1e6 | round / 1000) ms"') (${footgun_rtts} / ${pooled_rtts} RTT)"

# 10c. gzip: on a link slower than gzip, the smaller response arrives first.
capture gzip_link client_ gzip-client --link "$LINK"
identity_s=$(field gzip_link .identity_s)
gzip_s=$(field gzip_link .gzip_s)
floor_s=$(field gzip_link .identity_bytes_over_rate_s)
got=$(field gzip_link '"gzip \(.gzip_s * 100 | round / 100) s, identity \(.identity_s * 100 | round / 100) s"')
check "10c gzip on $LINK wins end to end" "${got:-exit $rc}" "gzip < $GZIP_LINK_MAX_FRACTION x ${floor_s:-?} s <= identity" \
  "$(jq -r --argjson k "$GZIP_LINK_MAX_FRACTION" '.result == "MATCH" and .faster_end_to_end == "gzip"
    and .gzip_s < $k * .identity_bytes_over_rate_s and .identity_s >= .identity_bytes_over_rate_s' \
    "$scratch/gzip_link.out" 2>/dev/null || true)" gzip_link
note "full catalog on $LINK: identity / gzip" "$identity_s s / $gzip_s s"

# 10d. Keepalive against a NAT that forgets idle flows. Either end's PINGs
# keep a NAT entry alive, and the chapter's server PINGs every 5 s, so the
# control without keepalive talks to a second, quiet server (no PINGs of its
# own); a third channel without keepalive talks to the chapter's server.
start_extra quiet quiet-server "10d quiet server reports SERVING" --keepalive-secs 3600
quiet_target=$extra_target
capture nat client_ keepalive-client --phases nat --link "$LINK" --nat-idle-secs "$NAT_IDLE_SECS" \
  --idle-secs "$IDLE_SECS" --nat-abandon-secs "$NAT_ABANDON_SECS" --quiet-target "$quiet_target"
got=$(field nat '"\(.nat_keepalive) / \(.nat_no_keepalive) / \(.nat_server_keepalive)"')
check "10d NAT ${NAT_IDLE_SECS}s: keepalive / none / server" "${got:-exit $rc}" "SURVIVED / ABANDONED|FAILED / SURVIVED" \
  "$(field nat '.nat_keepalive == "SURVIVED" and (.nat_no_keepalive == "ABANDONED" or .nat_no_keepalive == "FAILED") and .nat_server_keepalive == "SURVIVED"')" nat
note "PINGs in the ${IDLE_SECS}s NAT gap, 3 channels" \
  "$(field nat '"\(.nat_keepalive_pings_sent) sent / \(.nat_no_keepalive_pings) / \(.nat_server_keepalive_pings_received) received"')"

# 10e. The flow-control window on a long link: window-client's phases run at
# once, each on its own emulated longhaul link (400 ms RTT), whatever $LINK is.
capture window client_ window-client
small_s=$(field window '.small.s * 100 | round / 100')
window_floor_s=$(field window '.small.bytes * 8 / (.small.window_ceiling_mbit_s * 1e6) * 1000 | round / 1000')
speedup=$(field window '.tonic_default.mbit_s / .small.mbit_s * 10 | round / 10')
check "10e 64 KiB window vs tonic's default" \
  "${small_s:-exit $rc} s (floor ${window_floor_s:-?} s), default x${speedup:-?}" \
  ">= floor x$WINDOW_FLOOR_MARGIN, > x$WINDOW_SPEEDUP" \
  "$(jq -r --argjson m "$WINDOW_FLOOR_MARGIN" --argjson k "$WINDOW_SPEEDUP" \
    '.small.s >= .small.bytes * 8 / (.small.window_ceiling_mbit_s * 1e6) * $m and .tonic_default.mbit_s > .small.mbit_s * $k' \
    "$scratch/window.out" 2>/dev/null || true)" window
phase() { field window "\"\(.$1.mbit_s) Mbit/s (ceiling \(.$1.window_ceiling_mbit_s)), \(.$1.bytes) B in \(.$1.s) s\""; }
note "window 64 KiB (longhaul)" "$(phase small)"
note "window tonic default" "$(phase tonic_default)"
note "window adaptive (BDP)" "$(phase adaptive)"
note "window adaptive: start -> largest" "$(field window '"\(.adaptive.stream_window) -> \(.adaptive.grown_stream_window) B"')"
note "64 KiB: 1 channel vs N channels" "$(field window '"\(.one_channel.mbit_s) vs \(.n_channels.mbit_s) Mbit/s (\(.n_channels.channels) channels)"')"

# ─── 11. Behind a load balancer ──────────────────────────────────────────────
# HAProxy in front of three replicas, each naming itself in the
# routing-replica header, and three more that age their connections. One
# channel through L4 is pinned to one replica; L7, client-side balancing and a
# connection age spread the calls; keepalive is hop by hop through L7.
# --local: six routing-server processes on free ports and `haproxy` from PATH
# with lb/haproxy.cfg. Compose: the `lb` profile (the `replica` service
# scaled to 3, `replica-aged` to 3, `haproxy` with lb/compose.cfg, which
# finds them by DNS).
if [[ $mode == local ]]; then
  # lb_start VAR NAME ARGS...: a replica on a free port (launch_local); its
  # address goes to VAR. The connection module logs at debug, so a policy
  # that trips is seen (11f).
  lb_start() {
    local var=$1 name=$2
    shift 2
    launch_log=info,routing_server::connection=debug launch_local "lb_$name" --replica "$name" "$@"
    lb_pids+=("$launched_pid")
    [[ -n $launched_addr ]] || { tail -n 20 "$scratch/lb_$name.log" >&2; die "replica $name did not start"; }
    printf -v "$var" '%s' "$launched_addr"
  }
  lb_start REPLICA_A a
  lb_start REPLICA_B b
  lb_start REPLICA_C c
  aged=(--max-connection-age-secs "$LB_AGE_SECS" --max-connection-age-grace-secs "$LB_GRACE_SECS")
  lb_start AGED_A aged-a "${aged[@]}"
  lb_start AGED_B aged-b "${aged[@]}"
  lb_start AGED_C aged-c "${aged[@]}"
  # The *_short frontends need a replica that sends no PINGs of its own
  # (in mode tcp they would keep the tunnel open): 10d's quiet server.
  export REPLICA_A REPLICA_B REPLICA_C AGED_A AGED_B AGED_C QUIET=$quiet_target
  # HAProxy cannot take port 0 and report it, so pick six ports below Linux's
  # ephemeral range (32768 and up), where no outgoing connection holds one,
  # and try again if one is taken.
  haproxy_pid=
  for try in $(seq 5); do
    base=$((20000 + RANDOM % 12000))
    export LB_L4=127.0.0.1:$base LB_L7=127.0.0.1:$((base + 1)) LB_L4_AGED=127.0.0.1:$((base + 2))
    export LB_L4_SHORT=127.0.0.1:$((base + 3)) LB_L7_SHORT=127.0.0.1:$((base + 4)) LB_STATS=127.0.0.1:$((base + 5))
    haproxy -db -f lb/haproxy.cfg >"$scratch/lb_haproxy.out" 2>"$scratch/lb_haproxy.log" &
    haproxy_pid=$!
    # Kept first in the list: it is stopped first.
    lb_pids=("$haproxy_pid" "${lb_pids[@]}")
    sleep 0.5
    kill -0 "$haproxy_pid" 2>/dev/null && break
    grep -q 'cannot bind socket' "$scratch/lb_haproxy.log" ||
      { tail -n 20 "$scratch/lb_haproxy.log" >&2; die "haproxy -f lb/haproxy.cfg did not start"; }
    say "  (haproxy: a port of $base..$((base + 5)) is taken, try $try)"
    lb_pids=("${lb_pids[@]:1}")
    haproxy_pid=
  done
  [[ -n $haproxy_pid ]] || die "haproxy found no free ports in 5 tries"
  lb_replicas=$REPLICA_A,$REPLICA_B,$REPLICA_C
  # What the replicas logged (11f).
  lb_logs() { cat "$scratch"/lb_*.log; }
else
  say "starting: $COMPOSE --profile lb up -d haproxy (and its 3 + 3 replicas)"
  bounded 300 "${compose[@]}" --profile lb up -d --no-build haproxy >"$scratch/lb_up.log" 2>&1 ||
    { cat "$scratch/lb_up.log" >&2; die "'$COMPOSE --profile lb up haproxy' failed (are ports ${LB_L4_PORT:-9280}, ${LB_L7_PORT:-9281} and ${LB_STATS_PORT:-9285} free? set LB_L4_PORT, LB_L7_PORT, LB_STATS_PORT)"; }
  # lb/compose.cfg's frontends, and the name that resolves to each replica.
  LB_L4=haproxy:9280 LB_L7=haproxy:9281 LB_L4_AGED=haproxy:9282 LB_L4_SHORT=haproxy:9283 LB_L7_SHORT=haproxy:9284
  lb_replicas=replica:9000
  lb_logs() { timeout 60 "${compose[@]}" --profile lb logs --no-color replica replica-aged 2>&1 || true; }
fi
balance_() { client_at "$LB_L4" balance-client --calls "$BALANCE_CALLS" "$@"; }
# fieldk NAME K FILTER: field, with $k bound to the number K.
fieldk() { jq -r --argjson k "$2" "$3" "$scratch/$1.out" 2>/dev/null || true; }
share() { field "$1" ".phases.$2 | \"\(.per_replica | to_entries | map(\"\(.key)=\(.value)\") | join(\" \")), \(.failed) failed\""; }

# Readiness: HAProxy reaches all three replicas behind L4 and behind the aged
# L4 (a new connection per call, round robin: 30 calls reach each replica
# 10 times). In compose, HAProxy learns the replicas' addresses by DNS within
# a couple of seconds of their start; a row must not run before.
lb_ready=
deadline=$((SECONDS + READY_TIMEOUT_S))
while ((SECONDS < deadline)); do
  capture lb_ready client_at "$LB_L4" balance-client --phases l4_footgun --calls 30
  capture lb_ready_aged client_at "$LB_L4_AGED" balance-client --phases l4_footgun --calls 30
  lb_ready=$(field lb_ready '.phases.l4_footgun.per_replica | length')+$(field lb_ready_aged '.phases.l4_footgun.per_replica | length')
  [[ $lb_ready == 3+3 ]] && break
  sleep 1
done
check "11 HAProxy reaches 3 + 3 replicas" "${lb_ready:-no answer} replicas" "3+3" \
  "$([[ $lb_ready == 3+3 ]] && echo true)" lb_ready lb_ready_aged

capture lb_spread balance_ --phases l4_pooled,l4_footgun,l7_pooled,client_side \
  --l7 "$LB_L7" --replicas "$lb_replicas"
check "11a L4, one channel: pinned" "$(share lb_spread l4_pooled)" "top share >= $PINNED_SHARE, 0 failed" \
  "$(fieldk lb_spread "$PINNED_SHARE" '.phases.l4_pooled | .top_share >= $k and .failed == 0 and .connections == 1')" lb_spread
check "11b L7, one channel: spread" "$(share lb_spread l7_pooled)" "each >= $SPREAD_SHARE, 0 failed" \
  "$(fieldk lb_spread "$SPREAD_SHARE" '.phases.l7_pooled | .min_share >= $k and .failed == 0')" lb_spread
check "11c client-side balance_list: spread" "$(share lb_spread client_side)" "each >= $SPREAD_SHARE, 0 failed" \
  "$(fieldk lb_spread "$SPREAD_SHARE" '.phases.client_side | .min_share >= $k and .failed == 0')" lb_spread
note "L4 channel per call: spread, median" \
  "$(share lb_spread l4_footgun), $(field lb_spread '.phases.l4_footgun.median_call_s * 1e6 | round / 1000') ms"
note "L4 / L7 one channel: connections" "$(field lb_spread '"\(.phases.l4_pooled.connections) / \(.phases.l7_pooled.connections)"')"

capture lb_aged balance_ --phases l4_aged --l4-aged "$LB_L4_AGED" --aged-secs "$AGED_SECS"
# retried: calls hyper dropped unsent on a connection that had just read
# its GOAWAY, sent again on the next one (clients/src/retry.rs): tonic has
# no transparent retry of its own. A call the server saw is never retried,
# and one call at a time loses at most one per connection that ended, so
# retried <= reconnects.
check "11d L4 to replicas aged ${LB_AGE_SECS}s" "$(share lb_aged l4_aged)" "each >= $AGED_SHARE, 0 failed" \
  "$(fieldk lb_aged "$AGED_SHARE" '.phases.l4_aged | .min_share >= $k and .failed == 0 and .goaways > 0 and .retried <= .reconnects')" lb_aged
note "aged: GOAWAYs / reconnects / calls / retried" \
  "$(field lb_aged '.phases.l4_aged | "\(.goaways) / \(.reconnects) / \(.calls) / \(.retried)"')"

capture lb_idle balance_ --phases l4_idle,l7_idle --l4-short "$LB_L4_SHORT" --l7-short "$LB_L7_SHORT" \
  --idle-gap-secs "$IDLE_SECS"
got=$(field lb_idle '.phases | "L4 \(.l4_idle.keepalive.result)/\(.l4_idle.no_keepalive.result), L7 \(.l7_idle.keepalive.result)/\(.l7_idle.no_keepalive.result)"')
check "11e ${IDLE_SECS}s gap, 6 s LB timeout: keepalive/none" "${got:-exit $rc}" "SURVIVED/RECONNECTED|FAILED, both" \
  "$(field lb_idle '.phases | [.l4_idle, .l7_idle] | all(.keepalive.result == "SURVIVED" and .no_keepalive.result != "SURVIVED")')" lb_idle
note "L7 idle: server PINGs reaching the client" "$(field lb_idle '.phases.l7_idle.keepalive.pings_received') (HAProxy answers PINGs, hop by hop)"

# HAProxy's own connections to the replicas (pooled h2 in L7, idle between
# calls, PINGed by the replicas) must never trip a policy of theirs.
lb_logs >"$scratch/lb_policies.err"
tripped=$(grep -cE 'too many pings|too many control frames|ping strike|no HTTP/2 handshake in time' "$scratch/lb_policies.err" || true)
echo "$tripped" >"$scratch/lb_policies.out"
check "11f HAProxy trips no replica policy" "$tripped strikes, GOAWAYs, handshake closes" "0" \
  "$([[ $tripped == 0 ]] && echo true)" lb_policies
# Stopped before section 12, whose CPU row wants the cores to itself.
if [[ $mode == local ]]; then
  stop_lb
else
  bounded 120 "${compose[@]}" --profile lb stop haproxy replica replica-aged >"$scratch/lb_stop.log" 2>&1 ||
    { cat "$scratch/lb_stop.log" >&2; die "'$COMPOSE --profile lb stop' failed"; }
fi

# ─── 12. Over TLS ────────────────────────────────────────────────────────────
# A second routing-server with --tls-cert/--tls-key, with certificates from its
# own `dev-cert`, issuing no session tickets, so that every footgun connection
# pays a full handshake. --local: in the scratch directory, on a free port.
# Compose: the `tls` profile (`certs` writes them into the `tls` volume,
# `server-tls` serves on 9443, the tools read /certs/tls/ca.pem).
if [[ $mode == local ]]; then
  bounded 60 "$bin_dir/routing-server" dev-cert --out "$scratch/certs" 2>"$scratch/dev_cert.log" ||
    { cat "$scratch/dev_cert.log" >&2; die "routing-server dev-cert failed"; }
  ca=$scratch/certs/ca.pem
  launch_local tls --tls-session-tickets false \
    --tls-cert "$scratch/certs/server.pem" --tls-key "$scratch/certs/server.key"
  tls_pid=$launched_pid
  extra_pids+=("$tls_pid") # cleanup stops it
  [[ -n $launched_addr ]] || { tail -n 20 "$scratch/tls.log" >&2; die "the TLS routing-server did not start"; }
  # The certificate names localhost and 127.0.0.1; clients check the name.
  tls_target=localhost:${launched_addr##*:}
else
  say "starting: $COMPOSE --profile tls up -d server-tls (after certs)"
  ROUTING_TLS_SESSION_TICKETS=false bounded 300 "${compose[@]}" --profile tls up -d --no-build server-tls \
    >"$scratch/tls_up.log" 2>&1 ||
    { cat "$scratch/tls_up.log" >&2; die "'$COMPOSE --profile tls up server-tls' failed (is port ${ROUTING_TLS_PORT:-9443} free? set ROUTING_TLS_PORT)"; }
  # podman-compose starts server-tls once certs has stopped, whatever its exit code.
  certs_exit=$(container_of certs -a | xargs -r timeout 30 "$engine" inspect --format '{{.State.ExitCode}}' 2>/dev/null || true)
  [[ $certs_exit == 0 ]] || {
    timeout 60 "${compose[@]}" --profile tls logs --no-color certs >&2 || true
    die "the certs service (routing-server dev-cert) exited ${certs_exit:-?}, so server-tls has no certificate (log above)"
  }
  ca=/certs/tls/ca.pem
  # The certificate names server-tls, the service's name.
  tls_target=server-tls:9443
fi
tls_args=(--tls-ca "$ca")
tls_status=
deadline=$((SECONDS + READY_TIMEOUT_S))
while ((SECONDS < deadline)); do
  capture tls_ready grpcurl_ -cacert "$ca" -connect-timeout "$READY_PROBE_S" \
    -max-time "$READY_PROBE_S" -d '{}' "$tls_target" grpc.health.v1.Health/Check
  tls_status=$(field tls_ready .status)
  [[ $tls_status == SERVING ]] && break
  sleep 1
done
[[ $tls_status == SERVING ]] || fail "12 TLS server reports SERVING" "${tls_status:-no answer}" "SERVING" tls_ready

capture tls_list grpcurl_ -cacert "$ca" "$tls_target" list
found=$(grep -cx "$SERVICE" "$scratch/tls_list.out" || true)
check "12a TLS: reflection lists RoutingService" "$(wc -l <"$scratch/tls_list.out") services, match=$found" \
  "lists $SERVICE" "$([[ $rc == 0 && $found == 1 ]] && echo true)" tls_list

capture tls_quote grpcurl_ -cacert "$ca" -d "$QUOTE_JSON" "$tls_target" "$SERVICE/GetQuote"
got=$(field tls_quote '[.quote.price.amount, .quote.routeId] | join(" ")')
check "12b TLS: GetQuote" "${got:-no answer}" "1001.00 NLRTM-SGSIN" \
  "$([[ $got == "1001.00 NLRTM-SGSIN" ]] && echo true)" tls_quote

capture tls_catalog grpcurl_ -cacert "$ca" -max-msg-sz "$RAISED_CAP" -d '{"pageSize":25}' \
  "$tls_target" "$SERVICE/ListRoutes"
got=$(field tls_catalog '.routes | length')
check "12c TLS: full catalog, -max-msg-sz" "${got:-exit $rc} routes" "25 routes" \
  "$([[ $got == 25 ]] && echo true)" tls_catalog

# In compose, `took` includes starting grpcurl's container (about a second).
started=$SECONDS
capture tls_plaintext grpcurl_ -plaintext "$tls_target" list
took=$((SECONDS - started))
told=$(grep -c 'this port speaks TLS' "$scratch/tls_plaintext.err" || true)
check "12d grpcurl -plaintext on the TLS port" "exit $rc in ${took}s, told=$told" "fails in < ${TLS_PLAINTEXT_MAX_S}s, says TLS" \
  "$([[ $rc != 0 && $told -ge 1 && $took -lt $TLS_PLAINTEXT_MAX_S ]] && echo true)" tls_plaintext

# 12e/f. Lever 1 over TLS on the link: the footgun pays TCP and TLS.
tls_client() { client_at "$tls_target" "$1" "${tls_args[@]}" "${@:2}"; } # tls_client BIN ARGS...
link_reuse tls_ "12e/f TLS median call in RTTs" "$TLS_FOOTGUN_MIN_RTTS" "$TLS_POOLED_MAX_RTTS" tls_client
check "12e TLS footgun on $LINK: median call" "${footgun_rtts:-exit $rc} RTT, $(field tls_footgun_link .tls.version)" \
  ">= $TLS_FOOTGUN_MIN_RTTS RTT" \
  "$(jqn --argjson f "${footgun_rtts:-0}" --argjson k "$TLS_FOOTGUN_MIN_RTTS" '$f >= $k')" tls_footgun_link
check "12f TLS pooled on $LINK: median call" "${pooled_rtts:-exit $rc} RTT" "<= $TLS_POOLED_MAX_RTTS RTT" \
  "$(jqn --argjson p "${pooled_rtts:-1e9}" --argjson k "$TLS_POOLED_MAX_RTTS" '$p <= $k')" tls_pooled_link
note "TLS footgun / pooled on $LINK, median" "${footgun_rtts} / ${pooled_rtts} RTT"

# 12g. The handshake's price on loopback: the servers' own CPU time, from
# /proc (Linux), per footgun call, full TLS handshakes against plaintext. In
# compose the servers are container processes, which the host's /proc shows
# too: their PIDs come from the engine (docker or podman inspect).
service_pid() { # service_pid SERVICE: the host PID of the service's container
  container_of "$1" | xargs -r timeout 30 "$engine" inspect --format '{{.State.Pid}}' 2>/dev/null || true
}
if [[ $mode == local ]]; then
  plain_pid=$server_pid
else
  plain_pid=$(service_pid server)
  tls_pid=$(service_pid server-tls)
fi
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
if [[ -n $tls_pid && -n $plain_pid && -r /proc/$tls_pid/stat && -r /proc/$plain_pid/stat ]]; then
  for try in $(seq "$TIMING_ATTEMPTS"); do
    before=$(cpu_ticks "$plain_pid")
    capture cpu_plain client_ footgun-client --calls "$TLS_CPU_CALLS"
    plain_ticks=$(($(cpu_ticks "$plain_pid") - before))
    before=$(cpu_ticks "$tls_pid")
    capture cpu_tls tls_client footgun-client --calls "$TLS_CPU_CALLS"
    tls_ticks=$(($(cpu_ticks "$tls_pid") - before))
    ratio=$(jqn --argjson t "$tls_ticks" --argjson p "$plain_ticks" 'if $p > 0 then $t / $p * 100 | round / 100 else 0 end')
    cpu_ok=$(jqn --argjson r "$ratio" --argjson k "$TLS_CPU_MIN_RATIO" '$r >= $k')
    [[ $cpu_ok == true ]] && break
    if ((try < TIMING_ATTEMPTS)); then
      row "12g TLS handshake CPU (try $try)" "x$ratio ($tls_ticks / $plain_ticks ticks)" ">= x$TLS_CPU_MIN_RATIO" "retry"
    fi
  done
  per_call() { jqn --argjson t "$1" --argjson n "$TLS_CPU_CALLS" '$t * 10000 / $n | round'; }
  check "12g server CPU per footgun call: TLS/plain" \
    "x$ratio ($(per_call "$tls_ticks") / $(per_call "$plain_ticks") us)" ">= x$TLS_CPU_MIN_RATIO" "$cpu_ok" cpu_tls cpu_plain
  note "server CPU per conn: TLS / plain" "$(per_call "$tls_ticks") us / $(per_call "$plain_ticks") us"
else
  row "12g server CPU per footgun call: TLS/plain" "cannot read the servers' /proc/PID/stat" "(Linux; a rootless engine hides them)" skipped
fi

# 12h. What the TLS port offers, as openssl on the host sees it: ALPN h2 (the
# only protocol it offers), over TLS 1.3 (1.2 too, when a client asks). In
# compose, through the port published on the host's loopback.
if [[ $mode == local ]]; then tls_host_port=127.0.0.1:${tls_target##*:}; else tls_host_port=127.0.0.1:${ROUTING_TLS_PORT:-9443}; fi
if command -v openssl >/dev/null 2>&1; then
  capture tls_alpn bounded 30 openssl s_client -connect "$tls_host_port" -servername localhost -alpn h2
  alpn=$(grep -ao 'ALPN protocol: [^ ]*' "$scratch/tls_alpn.out" | head -n 1 | cut -d' ' -f3 || true)
  version=$(grep -aoE 'New, TLSv1\.[0-9]' "$scratch/tls_alpn.out" | head -n 1 | cut -d' ' -f2 || true)
  check "12h openssl s_client -alpn h2" "ALPN ${alpn:-none}, ${version:-no handshake}" "ALPN h2, TLSv1.3" \
    "$([[ $alpn == h2 && $version == TLSv1.3 ]] && echo true)" tls_alpn
else
  row "12h openssl s_client -alpn h2" "no openssl on PATH" "(apt-get install openssl)" skipped
fi

# ─── Summary ─────────────────────────────────────────────────────────────────
printf '\nSummary (mode=%s)\n' "$mode"
printf '%s\n' "${summary[@]}"
printf '\nPASS\n'
}
