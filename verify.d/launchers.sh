# shellcheck shell=bash
# verify.d/launchers.sh: how verify.sh runs each tool and server, in each
# mode: the tools a mode needs, `bounded` and Ctrl+C, the launchers, and the
# clean-up. The launchers are the only place where --local (processes on
# loopback) and compose (containers) differ: rows call them and never test
# $mode. verify.sh sources this file before it runs a line; the verbs it
# uses (say, die, capture, fail, wait_serving) are verify.sh's.
# verify.sh assigns the variables this file reads ($COMPOSE too), and its rows
# read what the launchers leave ($proto_dir, $lb_replicas, $ca):
# shellcheck disable=SC2034,SC2153,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── What the launchers started ──────────────────────────────────────────────
server_pid=   # --local: the chapter's server
prom_pid=     # --local: Prometheus
extra_pids=() # --local: start_extra's servers and the TLS server
lb_pids=()    # --local: HAProxy first, then its replicas (section 11)
compose_up=no
read -r -a compose <<<"$COMPOSE"
# Passed as -p too: every compose implementation and version takes the flag,
# not all of them read the variable.
if [[ -n $COMPOSE_PROJECT_NAME ]]; then compose+=(-p "$COMPOSE_PROJECT_NAME"); fi
# The engine behind $COMPOSE.
engine=docker
[[ ${compose[0]} == podman-compose ]] && engine=podman

# ─── Tools and clean-up ──────────────────────────────────────────────────────
need() { # need TOOL HINT
  command -v "$1" >/dev/null 2>&1 || die "$1 is required but not on PATH. Install: $2"
}
# need_tools: every tool this mode needs is on PATH and works, or exit 2 with
# an install hint.
need_tools() {
  local no_engine_hint go_path_hint engine_error
  need jq "apt-get install jq | dnf install jq | brew install jq"
  need timeout "coreutils (apt-get install coreutils; on macOS: brew install coreutils)"
  need mktemp "coreutils"
  need curl "apt-get install curl | dnf install curl" # Prometheus's HTTP API, in every mode
  no_engine_hint="or run without containers: ./verify.sh --local (cargo, grpcurl and ghz on PATH), or with Podman: COMPOSE=podman-compose ./verify.sh"
  if [[ $mode == local ]]; then
    need cargo "https://rustup.rs"
    # shellcheck disable=SC2016 # the reader runs $(go env GOPATH)
    go_path_hint='then put the directory go installs into on PATH: export PATH="$(go env GOPATH)/bin:$PATH"'
    need grpcurl "CGO_ENABLED=0 go install -ldflags '-X main.version=v1.9.3' github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3, $go_path_hint"
    need ghz "CGO_ENABLED=0 go install -ldflags '-X main.version=v0.121.0' github.com/bojand/ghz/cmd/ghz@v0.121.0, $go_path_hint"
    need haproxy "apt-get install haproxy | dnf install haproxy | brew install haproxy"
    need prometheus "apt-get install prometheus | dnf install golang-github-prometheus | brew install prometheus"
  elif [[ $engine == podman ]]; then
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
}

stop_processes() { # stop_processes PID...: one at a time, SIGTERM, then up to 15 s to drain (10 s), then SIGKILL
  local pid
  for pid in "$@"; do
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 30); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
  done
}

cleanup() {
  local rc=$? pid
  for pid in ${extra_pids[@]+"${extra_pids[@]}"}; do kill -TERM "$pid" 2>/dev/null || true; done
  # HAProxy first, so the replicas drain at once; the server last.
  stop_processes ${lb_pids[@]+"${lb_pids[@]}"} ${server_pid:+"$server_pid"} ${prom_pid:+"$prom_pid"}
  if [[ $mode == k8s ]]; then k8s_stop; fi
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
server_log() { # the tail of the server's log, for evidence
  if [[ $mode == k8s ]]; then
    k8s_log
  elif [[ $mode == local ]]; then
    tail -n 40 "$scratch/server.log" 2>/dev/null || true
  elif [[ $compose_up == yes ]]; then
    timeout 30 "${compose[@]}" logs --no-color --tail 40 server 2>&1 || true
  fi
}

# launch_local NAME SERVICE ARGS...: `routing-server --listen 127.0.0.1:0
# --metrics-listen 127.0.0.1:0 ARGS` in the background, logging to
# $scratch/NAME.log. Port 0: the kernel picks free ports, which the server
# logs; the gRPC address is left in $launched_addr (empty if the server died
# first), the PID in $launched_pid. Its metrics address goes to Prometheus
# (prometheus/local.yml) with the label service=SERVICE, the compose service
# it stands for.
launched_pid=
launched_addr=
launch_local() {
  local name=$1 service=$2 metrics_addr=
  shift 2
  launched_addr=
  RUST_LOG=${launch_log:-info} "$bin_dir/routing-server" --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 "$@" \
    >"$scratch/$name.out" 2>"$scratch/$name.log" &
  launched_pid=$!
  for _ in $(seq 100); do
    launched_addr=$(grep -o 'local_addr=127\.0\.0\.1:[0-9]*' "$scratch/$name.log" | head -n 1 | cut -d= -f2 || true)
    [[ -n $launched_addr ]] && break
    kill -0 "$launched_pid" 2>/dev/null || break
    sleep 0.1
  done
  metrics_addr=$(grep -o 'metrics_addr=127\.0\.0\.1:[0-9]*' "$scratch/$name.log" | head -n 1 | cut -d= -f2 || true)
  if [[ -n $metrics_addr ]]; then
    mkdir -p "$scratch/prometheus/targets"
    jq -n --arg t "$metrics_addr" --arg s "$service" --arg n "$name" \
      '[{targets: [$t], labels: {service: $s, verify_name: $n}}]' >"$scratch/prometheus/targets/$name.json.tmp"
    # Renamed into place: Prometheus never reads a half-written file.
    mv "$scratch/prometheus/targets/$name.json.tmp" "$scratch/prometheus/targets/$name.json"
  fi
}

# start_server: builds (unless --no-build) and starts the chapter's server.
# Leaves its address for the tools in $target, its PID in $server_pid
# (--local; compose: empty), and the protos' folder for ghz in $proto_dir.
start_server() {
  local bin
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
    for bin in routing-server footgun-client pooled-client gzip-client keepalive-client window-client balance-client \
      deadline-client retry-client; do
      if [[ ! -x $bin_dir/$bin ]]; then
        [[ $build == no ]] && die "$bin_dir/$bin is missing: run without --no-build"
        die "$bin_dir/$bin is missing after cargo build"
      fi
    done
    launch_local server server
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
}

# start_prometheus: a real Prometheus that scrapes every server this script
# starts, and the address of its HTTP API in $prom_url. --local:
# `prometheus` from PATH with prometheus/local.yml, on a free port, its data
# in the scratch folder; compose: the `prometheus` service with
# prometheus/prometheus.yml, published on 127.0.0.1:$PROMETHEUS_PORT.
prom_url=
start_prometheus() {
  local try port
  if [[ $mode == local ]]; then
    mkdir -p "$scratch/prometheus/targets"
    cp prometheus/local.yml "$scratch/prometheus/prometheus.yml"
    # Prometheus cannot take port 0 and report it: as for HAProxy, a port
    # below Linux's ephemeral range, tried again if it is taken.
    for try in $(seq 5); do
      port=$((20000 + RANDOM % 12000))
      prometheus --config.file="$scratch/prometheus/prometheus.yml" --storage.tsdb.path="$scratch/prometheus/data" \
        --web.listen-address="127.0.0.1:$port" --storage.tsdb.retention.time=1h \
        >"$scratch/prometheus.out" 2>"$scratch/prometheus.log" &
      prom_pid=$!
      sleep 0.5
      kill -0 "$prom_pid" 2>/dev/null && break
      grep -q 'address already in use' "$scratch/prometheus.log" ||
        { tail -n 20 "$scratch/prometheus.log" >&2; die "prometheus did not start (log above)"; }
      say "  (prometheus: port $port is taken, try $try)"
      prom_pid=
    done
    [[ -n $prom_pid ]] || die "prometheus found no free port in 5 tries"
    prom_url=http://127.0.0.1:$port
  else
    say "starting: $COMPOSE up -d prometheus"
    bounded 300 "${compose[@]}" up -d --no-build prometheus >"$scratch/prom_up.log" 2>&1 ||
      { cat "$scratch/prom_up.log" >&2; die "'$COMPOSE up prometheus' failed (is port ${PROMETHEUS_PORT:-9090} free? set PROMETHEUS_PORT)"; }
    prom_url=http://127.0.0.1:${PROMETHEUS_PORT:-9090}
  fi
  for _ in $(seq 60); do
    curl -fs --max-time 2 "$prom_url/-/ready" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  prom_log >&2
  die "Prometheus at $prom_url is not ready after 30 s (log above)"
}
prom_log() { # what Prometheus logged, for evidence
  if [[ $mode == local ]]; then
    tail -n 20 "$scratch/prometheus.log" 2>/dev/null || true
  else
    timeout 30 "${compose[@]}" logs --no-color --tail 20 prometheus 2>&1 || true
  fi
}

# start_extra NAME SERVICE ROW ARGS...: a second routing-server for one row,
# polled until it reports SERVING (ROW fails otherwise); its address is left
# in $extra_target. --local starts `routing-server --listen 127.0.0.1:0 ARGS`
# (stopped by cleanup); compose starts SERVICE, which compose.yaml gives the
# same settings as environment variables.
extra_target=
start_extra() {
  local name=$1 service=$2 row=$3 pid=
  shift 3
  extra_target=
  if [[ $mode == local ]]; then
    launch_local "$name" "$service" "$@"
    pid=$launched_pid
    extra_pids+=("$pid")
    extra_target=$launched_addr
    [[ -n $extra_target ]] || { tail -n 20 "$scratch/$name.log" >&2; die "the $name routing-server did not start"; }
  else
    bounded 300 "${compose[@]}" --profile tools up -d --no-build "$service" >"$scratch/${name}_up.log" 2>&1 ||
      { cat "$scratch/${name}_up.log" >&2; die "'$COMPOSE up $service' failed"; }
    extra_target=$service:9000
  fi
  wait_serving "${name}_ready" "$extra_target" "$pid" -plaintext
  [[ $status == SERVING ]] || fail "$row" "${status:-no answer}" "SERVING" "${name}_ready"
}

# metrics_of NAME SERVICE: the /metrics URL of a server start_extra started
# as NAME (section 13), for a client to read itself: --local, the address
# the server logged (launch_local's --metrics-listen 127.0.0.1:0); compose,
# SERVICE's port 9464 (ROUTING_METRICS_LISTEN in compose.yaml), by name from
# the clients' container.
metrics_of() {
  local addr
  if [[ $mode == local ]]; then
    addr=$(grep -o 'metrics_addr=127\.0\.0\.1:[0-9]*' "$scratch/$1.log" | head -n 1 | cut -d= -f2 || true)
    echo "http://$addr/metrics"
  else
    echo "http://$2:9464/metrics"
  fi
}

# ─── Launchers: HAProxy and its replicas ─────────────────────────────────────
# lb_start VAR NAME ARGS...: --local, a replica on a free port (launch_local);
# its address goes to VAR. The connection module logs at debug, so a policy
# that trips is seen (11f).
lb_start() {
  local var=$1 name=$2
  shift 2
  # The aged replicas stand for compose's replica-aged, the others for replica.
  local service=replica
  [[ $name == aged-* ]] && service=replica-aged
  launch_log=info,routing_server::connection=debug launch_local "lb_$name" "$service" --replica "$name" "$@"
  lb_pids+=("$launched_pid")
  [[ -n $launched_addr ]] || { tail -n 20 "$scratch/lb_$name.log" >&2; die "replica $name did not start"; }
  printf -v "$var" '%s' "$launched_addr"
}

# start_lb AGED_ARGS...: HAProxy and its 3 + 3 replicas, the last three
# started with AGED_ARGS (compose.yaml gives `replica-aged` the same settings).
# Leaves HAProxy's frontends in $LB_L4, $LB_L7, $LB_L4_AGED, $LB_L4_SHORT and
# $LB_L7_SHORT, and the three replicas for client-side balancing in
# $lb_replicas.
start_lb() {
  local try base haproxy_pid=
  if [[ $mode == local ]]; then
    lb_start REPLICA_A a
    lb_start REPLICA_B b
    lb_start REPLICA_C c
    lb_start AGED_A aged-a "$@"
    lb_start AGED_B aged-b "$@"
    lb_start AGED_C aged-c "$@"
    # The *_short frontends need a replica that sends no PINGs of its own
    # (in mode tcp they would keep the tunnel open): 10d's quiet server.
    export REPLICA_A REPLICA_B REPLICA_C AGED_A AGED_B AGED_C QUIET=$quiet_target
    # HAProxy cannot take port 0 and report it, so pick six ports below Linux's
    # ephemeral range (32768 and up), where no outgoing connection holds one,
    # and try again if one is taken.
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
  else
    say "starting: $COMPOSE --profile lb up -d haproxy (and its 3 + 3 replicas)"
    bounded 300 "${compose[@]}" --profile lb up -d --no-build haproxy >"$scratch/lb_up.log" 2>&1 ||
      { cat "$scratch/lb_up.log" >&2; die "'$COMPOSE --profile lb up haproxy' failed (are ports ${LB_L4_PORT:-9280}, ${LB_L7_PORT:-9281} and ${LB_STATS_PORT:-9285} free? set LB_L4_PORT, LB_L7_PORT, LB_STATS_PORT)"; }
    # lb/compose.cfg's frontends, and the name that resolves to each replica.
    LB_L4=haproxy:9280 LB_L7=haproxy:9281 LB_L4_AGED=haproxy:9282 LB_L4_SHORT=haproxy:9283 LB_L7_SHORT=haproxy:9284
    lb_replicas=replica:9000
  fi
}

lb_logs() { # what the replicas logged (11f)
  if [[ $mode == local ]]; then
    cat "$scratch"/lb_*.log
  else
    timeout 60 "${compose[@]}" --profile lb logs --no-color replica replica-aged 2>&1 || true
  fi
}

stop_lb() { # HAProxy first, so the replicas drain at once
  if [[ $mode == local ]]; then
    stop_processes ${lb_pids[@]+"${lb_pids[@]}"}
    lb_pids=()
  else
    bounded 120 "${compose[@]}" --profile lb stop haproxy replica replica-aged >"$scratch/lb_stop.log" 2>&1 ||
      { cat "$scratch/lb_stop.log" >&2; die "'$COMPOSE --profile lb stop' failed"; }
  fi
}

# ─── Launchers: the TLS server, and what the host sees of it ─────────────────
container_of() { # container_of SERVICE [-a]: compose, the ID of the service's (first) container
  # By the labels that docker compose and podman-compose both set (ps -a: stopped ones too).
  timeout 30 "$engine" ps -q ${2:+"$2"} --filter "label=com.docker.compose.project=${COMPOSE_PROJECT_NAME:-grpc-tuning}" \
    --filter "label=com.docker.compose.service=$1" 2>/dev/null | head -n 1 || true
}

# start_tls: the TLS server, with new dev certificates. Leaves its address
# in $tls_target (the certificate's name: clients check it), the CA for the
# tools in $ca, and its PID in $tls_pid (--local; compose: empty).
tls_pid=
start_tls() {
  local certs_exit
  if [[ $mode == local ]]; then
    bounded 60 "$bin_dir/routing-server" dev-cert --out "$scratch/certs" 2>"$scratch/dev_cert.log" ||
      { cat "$scratch/dev_cert.log" >&2; die "routing-server dev-cert failed"; }
    ca=$scratch/certs/ca.pem
    launch_local tls server-tls --tls-session-tickets false \
      --tls-cert "$scratch/certs/server.pem" --tls-key "$scratch/certs/server.key"
    tls_pid=$launched_pid
    extra_pids+=("$tls_pid") # cleanup stops it
    [[ -n $launched_addr ]] || { tail -n 20 "$scratch/tls.log" >&2; die "the TLS routing-server did not start"; }
    # The certificate names localhost and 127.0.0.1.
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
}

# host_pid SERVICE: the host PID of the process serving SERVICE (server or
# server-tls), for its /proc/PID/stat (12g). In compose the servers are
# container processes, which the host's /proc shows too: their PIDs come
# from the engine (docker or podman inspect).
host_pid() {
  if [[ $mode == local ]]; then
    case $1 in
      server) echo "$server_pid" ;;
      server-tls) echo "$tls_pid" ;;
    esac
  else
    container_of "$1" | xargs -r timeout 30 "$engine" inspect --format '{{.State.Pid}}' 2>/dev/null || true
  fi
}

tls_host_port() { # the TLS listener as the host reaches it (12h); compose: its published port
  if [[ $mode == local ]]; then
    echo "127.0.0.1:${tls_target##*:}"
  else
    echo "127.0.0.1:${ROUTING_TLS_PORT:-9443}"
  fi
}

}
