#!/usr/bin/env bash
# Interop: real grpc-core clients (Python grpcio, pinned) against
# routing-server's keepalive ping floor. An eager client pinging every 1 s is
# told off with GOAWAY too_many_pings and backs off as gRFC A8 says; a polite
# one pinging every 5 s is never told off. See interop/grpcio_keepalive.py.
#
#   ci/interop-grpcio.sh [ROUTING_SERVER_BIN]    default: target/release/routing-server
#
# Installs grpcio into a cached virtualenv once, starts two servers on free
# loopback ports, runs the check (about 25 s), and stops the servers.
set -euo pipefail
cd "$(dirname "$0")/.."

GRPCIO_VERSION=1.85.1
CHECK_TIMEOUT_S=${CHECK_TIMEOUT_S:-180}   # the whole Python check, servers running
server_bin=${1:-target/release/routing-server}
[[ -x $server_bin ]] || { echo "interop: $server_bin is missing: cargo build --release -p routing-server" >&2; exit 2; }

venv=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}/grpcio-$GRPCIO_VERSION
if [[ $("$venv/bin/python" -c 'import grpc; print(grpc.__version__)' 2>/dev/null) != "$GRPCIO_VERSION" ]]; then
  echo "installing grpcio==$GRPCIO_VERSION into $venv" >&2
  python3 -m venv "$venv"
  timeout 600 "$venv/bin/pip" install --quiet "grpcio==$GRPCIO_VERSION" >&2
fi

scratch=$(mktemp -d)
pids=()
# shellcheck disable=SC2317  # called by the EXIT trap, which shellcheck 0.9 does not follow
cleanup() {
  local rc=$? pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT

# start_server NAME FLAGS...: starts routing-server on a free loopback port,
# records its PID, and sets $addr to the address it logs.
addr=
start_server() {
  local name=$1
  shift
  addr=
  RUST_LOG=info "$server_bin" --listen 127.0.0.1:0 "$@" >/dev/null 2>"$scratch/$name.log" &
  pids+=("$!")
  for _ in $(seq 100); do
    addr=$(grep -o 'local_addr=127\.0\.0\.1:[0-9]*' "$scratch/$name.log" | head -n 1 | cut -d= -f2 || true)
    [[ -n $addr ]] && return 0
    sleep 0.1
  done
  cat "$scratch/$name.log" >&2
  echo "interop: routing-server ($name) did not start" >&2
  exit 2
}

# The chapter's server as shipped: floor 5 s, PINGs without calls permitted.
start_server eager
eager_target=$addr
# The same floor, but no PINGs of its own: grpc-core resets its keepalive
# timer on every PING it receives, so against the server's 5 s PINGs a 5 s
# client would never ping at all, and the check would prove nothing.
start_server polite --keepalive-secs 3600
polite_target=$addr

echo "interop: grpcio $GRPCIO_VERSION vs $server_bin (eager -> $eager_target, polite -> $polite_target)"
status=0
timeout "$CHECK_TIMEOUT_S" "$venv/bin/python" interop/grpcio_keepalive.py \
  --eager-target "$eager_target" --polite-target "$polite_target" || status=$?
if ((status != 0)); then
  echo "--- server log (eager, tail):" >&2
  tail -n 20 "$scratch/eager.log" >&2
fi
exit "$status"
