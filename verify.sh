#!/usr/bin/env bash
# verify.sh: brings the chapter's stack up, asserts every claim of the chapter
# with real grpcurl, ghz and the clients, prints PASS, and tears it down.
# Here: the bounds and the chapter's rows 0 to 9. In verify.d/: the
# launchers (the only place --local and compose differ), the verbs (capture,
# check, ...), the verbs that read the servers' metrics through Prometheus,
# and sections 10 to 13 (an emulated link, a load balancer, TLS, deadlines
# and retries) and the --k8s rows, each with its bounds.
# Run ./verify.sh --help for the modes and every override.
# jq programs use $variables inside single quotes on purpose:
# shellcheck disable=SC2016
set -euo pipefail
# The whole script is one { ... } group: bash parses all of it before it
# runs a line. Read command by command instead, a Ctrl+C that lands while
# bash parses the next command runs the INT trap inside the parser, and
# bash 5.2 then fails that command ("unexpected EOF while looking for
# matching `)'", exit 2) instead of exiting 130. `source` reads a file command
# by command too, so each file in verify.d/ is one { ... } group that only
# defines (bounds, verbs, a function of rows), and is sourced before any trap.
{

# ─── Bounds: every threshold of rows 0 to 9. Each is overridable by env. ─────
# They are loose and relative on purpose: they must hold on a laptop, a busy
# CI runner and a container network alike. Sections 10 to 13 keep theirs at
# the top of their files in verify.d/.
FOOTGUN_FACTOR=${FOOTGUN_FACTOR:-1.8}     # footgun median_call_s > pooled median_call_s x this
P99_CEILING_MS=${P99_CEILING_MS:-1500}    # ghz GetQuote p99 latency < this (ms)
RPS_FLOOR=${RPS_FLOOR:-20}                # ghz GetQuote throughput > this (calls/s)
GZIP_MAX_PERCENT=${GZIP_MAX_PERCENT:-5}   # gzip wire bytes ≤ this % of identity
GZIP_RANDOM_MIN_PERCENT=${GZIP_RANDOM_MIN_PERCENT:-70} # on the random catalog, gzip wire bytes >= this % of identity: 93 printable characters carry log2(93) = 6.5 bits in 8, so gzip's Huffman codes stay near 82 %
DEAD_PEER_MAX_S=${DEAD_PEER_MAX_S:-10}    # keepalive finds the dead peer within this (s); it needs 1 s + 1 s
TIMING_ATTEMPTS=${TIMING_ATTEMPTS:-3}     # tries for timing checks (4, 9, 10a/b, 12e-g); each failure is printed
GZIP_SERVER_MAX_PERCENT=${GZIP_SERVER_MAX_PERCENT:-1} # the server's own count: gzip page's message bytes <= this % of identity's (the repeated filler shrinks ~700x)
PROBE_CONNS=${PROBE_CONNS:-1}             # connections the engine's healthcheck (routing-server probe, every 5 s, compose only) may add to a count of the server's (row 4d)
PROM_FRESH_S=${PROM_FRESH_S:-30}          # a scrape of a server must begin after a step within this (s): a new target is found within 5 s (Prometheus batches discovery), then scraped every 1 s

# ─── Workload ────────────────────────────────────────────────────────────────
CALLS=${CALLS:-50}                        # GetQuote calls per footgun/pooled run
LINK=${LINK:-wan}                         # sections 10 and 12's emulated link: grpc-go's WAN, 20 Mbit/s, 60 ms round trip (RTT)
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

# ─── The launchers, the verbs, and the sections ──────────────────────────────
# Read from the repository, like lb/*.cfg and contracts/proto.
cd "$(dirname "$0")"
# shellcheck source=verify.d/launchers.sh
source verify.d/launchers.sh
# shellcheck source=verify.d/verbs.sh
source verify.d/verbs.sh
# shellcheck source=verify.d/metrics.sh
source verify.d/metrics.sh
# shellcheck source=verify.d/10-network.sh
source verify.d/10-network.sh
# shellcheck source=verify.d/11-balancer.sh
source verify.d/11-balancer.sh
# shellcheck source=verify.d/12-tls.sh
source verify.d/12-tls.sh
# shellcheck source=verify.d/13-deadlines.sh
source verify.d/13-deadlines.sh
# shellcheck source=verify.d/20-kubernetes.sh
source verify.d/20-kubernetes.sh
# shellcheck source=verify.d/21-k8s-balancer.sh
source verify.d/21-k8s-balancer.sh

usage() {
  cat <<EOF
Usage: ./verify.sh [--local | --k8s] [--no-build] [--help]

Brings the stack up, runs grpcurl, ghz and the clients against it,
asserts the chapter's claims, prints PASS (exit 0) or the failed assertion
with its evidence (exit 1), and tears everything down. Exit 2: bad usage, a
missing host tool, no container engine, a tool that cannot run, or a stack
that would not start.

Modes:
  (default)      Docker Compose: builds the image, starts the server, runs
                 grpcurl, ghz and the clients as containers (profile "tools");
                 section 11 starts HAProxy and six replicas (profile "lb"),
                 section 12 a TLS server (profile "tls"), section 13 three
                 servers with faults and metrics (profile "faults").
  COMPOSE=podman-compose ./verify.sh
                 The same with Podman. Readiness is polled by this script.
  --local        No containers: builds with cargo, starts routing-server on a
                 free loopback port, and uses grpcurl and ghz from PATH.
                 Section 11 also starts six replicas and haproxy (PATH)
                 with lb/haproxy.cfg; prometheus (PATH) scrapes them all.
                 The binaries are taken from cargo's target directory
                 (CARGO_TARGET_DIR is honoured).
  --k8s          On Kubernetes (docs/kubernetes.md): deploy/k8s in a namespace
                 of its own, the lesson clients and ghz as Jobs, every row
                 read from the pods' metrics through the Prometheus in the
                 cluster. K8S_CONTEXT names the cluster (kind, minikube, ...),
                 whose nodes must have ROUTING_IMAGE, K8S_PROMETHEUS_IMAGE and
                 GHZ_IMAGE; without it, as root, a single-node cluster is
                 built (once, about 8 min) and brought up on this machine,
                 the images imported from podman or docker, and torn down.
  --no-build     Use images (or, with --local, release binaries) that
                 already exist.

Overrides (environment):
  Bounds     FOOTGUN_FACTOR=$FOOTGUN_FACTOR P99_CEILING_MS=$P99_CEILING_MS RPS_FLOOR=$RPS_FLOOR
             GZIP_MAX_PERCENT=$GZIP_MAX_PERCENT GZIP_RANDOM_MIN_PERCENT=$GZIP_RANDOM_MIN_PERCENT TIMING_ATTEMPTS=$TIMING_ATTEMPTS
  Metrics    GZIP_SERVER_MAX_PERCENT=$GZIP_SERVER_MAX_PERCENT PROBE_CONNS=$PROBE_CONNS PROM_FRESH_S=$PROM_FRESH_S
  On a link  LINK=$LINK FOOTGUN_MIN_RTTS=$FOOTGUN_MIN_RTTS POOLED_MAX_RTTS=$POOLED_MAX_RTTS
             GZIP_LINK_MAX_FRACTION=$GZIP_LINK_MAX_FRACTION NAT_IDLE_SECS=$NAT_IDLE_SECS NAT_ABANDON_SECS=$NAT_ABANDON_SECS
  Balancer   PINNED_SHARE=$PINNED_SHARE SPREAD_SHARE=$SPREAD_SHARE AGED_SHARE=$AGED_SHARE
             BALANCE_CALLS=$BALANCE_CALLS AGED_SECS=$AGED_SECS GHZ_AGED_SECS=$GHZ_AGED_SECS GHZ_AGED_FAILED_MAX=$GHZ_AGED_FAILED_MAX (rows 11)
  Over TLS   TLS_FOOTGUN_MIN_RTTS=$TLS_FOOTGUN_MIN_RTTS TLS_POOLED_MAX_RTTS=$TLS_POOLED_MAX_RTTS TLS_PLAINTEXT_MAX_S=$TLS_PLAINTEXT_MAX_S
             TLS_CPU_MIN_RATIO=$TLS_CPU_MIN_RATIO TLS_CPU_CALLS=$TLS_CPU_CALLS (rows 12)
  Deadlines  DEADLINE_MS=$DEADLINE_MS DEADLINE_MARGIN_MS=$DEADLINE_MARGIN_MS DEADLINE_RATE=$DEADLINE_RATE CANCEL_SEEN=$CANCEL_SEEN
             NAIVE_MIN=$NAIVE_MIN THROTTLED_MAX=$THROTTLED_MAX RETRY_CALLS=$RETRY_CALLS (rows 13)
  Workload   CALLS=$CALLS LINK_CALLS=$LINK_CALLS GHZ_CONCURRENCY=$GHZ_CONCURRENCY GHZ_TOTAL=$GHZ_TOTAL IDLE_SECS=$IDLE_SECS
  Limits     READY_TIMEOUT_S=$READY_TIMEOUT_S READY_PROBE_S=$READY_PROBE_S TOOL_TIMEOUT_S=$TOOL_TIMEOUT_S
             BUILD_TIMEOUT_S=$BUILD_TIMEOUT_S
  Kubernetes K8S_CONTEXT=${K8S_CONTEXT:-(a local cluster)} K8S_NAMESPACE=$K8S_NAMESPACE K8S_IMAGE_ENGINE=${K8S_IMAGE_ENGINE:-(podman, else docker)}
             K8S_ROWS=${K8S_ROWS:-(all)} (some rows only, e.g. K8S_ROWS=k3,k9; k0 and k1 always run)
             K8S_PINNED_SHARE=$K8S_PINNED_SHARE K8S_SPREAD_SHARE=$K8S_SPREAD_SHARE K8S_K9_RUNS=$K8S_K9_RUNS
             K8S_SLOW_P99_OF_DELAY=$K8S_SLOW_P99_OF_DELAY K8S_SLOW_SHARE_MAX=$K8S_SLOW_SHARE_MAX (k5's bound: from the Corefile)
             K8S_WORKERS_1CPU=$K8S_WORKERS_1CPU K8S_WORKERS_2CPU=$K8S_WORKERS_2CPU K8S_READY_S=$K8S_READY_S K8S_JOB_S=$K8S_JOB_S
  Compose    COMPOSE="$COMPOSE" ROUTING_PORT=$ROUTING_PORT COMPOSE_PROJECT_NAME=${COMPOSE_PROJECT_NAME:-grpc-tuning}
             Published on 127.0.0.1 too: ROUTING_TLS_PORT (9443), LB_L4_PORT (9280),
             LB_L7_PORT (9281), LB_STATS_PORT (9285), ROUTING_METRICS_PORT (9464),
             PROMETHEUS_PORT (9090)
             ROUTING_IMAGE, GRPCURL_IMAGE, GHZ_IMAGE, HAPROXY_IMAGE, PROMETHEUS_IMAGE (see compose.yaml)
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
    --k8s) mode=k8s ;;
    --no-build) build=no ;;
    -h | --help) usage; exit 0 ;;
    *) usage >&2; die "unknown argument: $1" ;;
  esac
  shift
done

if [[ $mode == k8s ]]; then k8s_need_tools; else need_tools; fi
scratch=$(mktemp -d)
trap cleanup EXIT
# Ctrl+C stops the tool in flight and exits 130, SIGTERM 143: see `bounded`.
trap 'interrupted 130' INT
trap 'interrupted 143' TERM

# capture, the assertion verbs, wait_serving and link_reuse are in
# verify.d/verbs.sh. Their state:
rc=0       # the last captured tool's exit code
summary=() # the summary's lines (note)
status=    # the last health answer (wait_serving)

# ─── On Kubernetes: its own rows (verify.d/20-kubernetes.sh) ──────────────────
if [[ $mode == k8s ]]; then
  row ASSERTION MEASURED BOUND RESULT
  kubernetes_rows
  printf '\nSummary (mode=%s)\n' "$mode"
  printf '%s\n' "${summary[@]}"
  printf '\nPASS\n'
  exit 0
fi

# ─── Bring the stack up ──────────────────────────────────────────────────────
start_server
say "verify.sh: mode=$mode target=$target"
# Started after that line on purpose: ci/verify-interrupt.sh's first Ctrl+C
# lands just after it, and must find a command it can interrupt (Prometheus's
# start-up waits), as before Prometheus came. In rows 1 and 2, a Ctrl+C can
# land while bash 5.2 parses a $(...), which fails that parse (exit 2).
start_prometheus
say "verify.sh: prometheus=$prom_url"
wait_serving ready "$target" "$server_pid" -plaintext
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
# The server counts the same connections itself (4d), read through Prometheus.
accepted='sum(routing_server_connections_accepted_total{service="server"})'
for try in $(seq "$TIMING_ATTEMPTS"); do
  conns0=$(counted server "$accepted")
  capture footgun client_ footgun-client --calls "$CALLS"
  conns1=$(counted server "$accepted")
  capture pooled client_ pooled-client --calls "$CALLS"
  conns2=$(counted server "$accepted")
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
server_footgun=$(delta "$conns0" "$conns1")
server_pooled=$(delta "$conns1" "$conns2")
check "4d server's count: footgun / pooled conns" "$server_footgun / $server_pooled" \
  "$CALLS..$((CALLS + PROBE_CONNS)) / 1..$((1 + PROBE_CONNS))" \
  "$(jqn --argjson f "$server_footgun" --argjson p "$server_pooled" --argjson n "$CALLS" --argjson k "$PROBE_CONNS" \
    '$f >= $n and $f <= $n + $k and $p >= 1 and $p <= 1 + $k')" footgun pooled
note "footgun ($CALLS calls)" "$(timings footgun), $footgun_conns connections"
note "pooled ($CALLS calls)" "$(timings pooled), $pooled_conns connection"
note "footgun / pooled, median call" "x$ratio"

# ─── 5. Message caps ─────────────────────────────────────────────────────────
# page_calls STATUS / page_bytes: the server's own ListRoutes counts (gRFC
# A66), as of the last scrape: call `fresh server` first.
page_calls() { value "sum(grpc_server_call_duration_seconds_count{service=\"server\",grpc_method=\"$SERVICE/ListRoutes\",grpc_status=\"$1\"})"; }
page_bytes() { value "sum(grpc_server_call_sent_total_compressed_message_size_bytes_sum{service=\"server\",grpc_method=\"$SERVICE/ListRoutes\"})"; }
fresh server
ok0=$(page_calls OK)
exhausted0=$(page_calls RESOURCE_EXHAUSTED)
capture capped grpcurl_ -plaintext -d '{"pageSize":25}' "$target" "$SERVICE/ListRoutes"
code=$(grep -o 'Code: [A-Za-z]*' "$scratch/capped.err" | head -n 1 | cut -d' ' -f2 || true)
larger=$(grep -c 'larger than max' "$scratch/capped.err" || true)
check "5a pageSize 25 at grpcurl's 4 MiB default" "exit $rc, ${code:-no code}" "exit 72, ResourceExhausted" \
  "$([[ $rc == 72 && $code == ResourceExhausted && $larger -ge 1 ]] && echo true)" capped
capped_msg=$(grep -o 'Message: .*' "$scratch/capped.err" | head -n 1 || true)
# The cap that fired is the client's: the server sent the page, and counts an OK.
fresh server
ok1=$(page_calls OK)
server_saw="OK +$(delta "$ok0" "$ok1"), RESOURCE_EXHAUSTED +$(delta "$exhausted0" "$(page_calls RESOURCE_EXHAUSTED)")"
check "5c the server's count of that call" "$server_saw" "OK +1, RESOURCE_EXHAUSTED +0" \
  "$([[ $server_saw == "OK +1, RESOURCE_EXHAUSTED +0" ]] && echo true)" capped
bytes0=$(page_bytes)

capture raised grpcurl_ -plaintext -max-msg-sz "$RAISED_CAP" -d '{"pageSize":25}' "$target" "$SERVICE/ListRoutes"
got=$(field raised '"\(.routes | length) routes \(.routes[0].id)..\(.routes[-1].id)"')
check "5b pageSize 25 with -max-msg-sz $RAISED_CAP" "${got:-exit $rc}" "25 routes rte_001..rte_025" \
  "$([[ $got == "25 routes rte_001..rte_025" ]] && echo true)" raised
# The page's size as the server counted it, for 7d: gzipped, since grpcurl,
# as every grpc-go client, asks for gzip (5a's 5002495 bytes are what it
# decompressed, which its cap then refused).
fresh server
gzip_page=$(delta "$bytes0" "$(page_bytes)")
note "full catalog at 4 MiB" "${capped_msg#Message: }"

# ─── 6. Shrink instead of raising ────────────────────────────────────────────
capture masked grpcurl_ -plaintext \
  -d '{"pageSize":25,"fieldMask":{"paths":["routes.id","routes.price"]}}' "$target" "$SERVICE/ListRoutes"
got=$(field masked '"\(.routes | length) routes, \([.routes[] | select(.legs)] | length) with legs"')
check "6 pageSize 25 + mask id,price at 4 MiB" "${got:-exit $rc}" "25 routes, 0 with legs" \
  "$([[ $got == "25 routes, 0 with legs" ]] && echo true)" masked

# ─── 7. gzip ─────────────────────────────────────────────────────────────────
fresh server
bytes0=$(page_bytes)
capture gzip client_ gzip-client
got=$(field gzip '"\(.result), \(.routes) routes"')
check "7a gzip-client answers match" "${got:-exit $rc}" "MATCH, 25 routes" \
  "$(field gzip '.result == "MATCH" and .routes == 25')" gzip
identity=$(field gzip .identity_wire_bytes)
zipped=$(field gzip .gzip_wire_bytes)
percent=$(jqn --argjson i "$identity" --argjson g "$zipped" '$g / $i * 10000 | round / 100')
check "7b gzip wire bytes vs identity" "$zipped / $identity = $percent%" "<= $GZIP_MAX_PERCENT%" \
  "$(jqn --argjson p "$percent" --argjson k "$GZIP_MAX_PERCENT" '$p <= $k')" gzip
# The server's count of the same two fetches: identity + gzip (5b's size).
fresh server
identity_page=$(delta "$gzip_page" "$(delta "$bytes0" "$(page_bytes)")")
server_percent=$(jqn --argjson i "$identity_page" --argjson g "$gzip_page" 'if $i > 0 then $g / $i * 10000 | round / 100 else 100 end')
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
check "7d server's count: gzip page vs identity" "$gzip_page / $identity_page B = $server_percent%" "<= $GZIP_SERVER_MAX_PERCENT%" \
  "$(jqn --argjson p "$server_percent" --argjson k "$GZIP_SERVER_MAX_PERCENT" '$p <= $k')" gzip
note "gzip wire bytes, random catalog" "$zipped_r of $identity_r ($percent_r%)"
note "random catalog: identity / gzip fetch" "$(field gzip_random '"\(.identity_s * 1e6 | round / 1000) ms / \(.gzip_s * 1e6 | round / 1000) ms"')"

# ─── 8. Keepalive ────────────────────────────────────────────────────────────
# One run, three phases at once, each on its own channel: an idle gap (8a); a
# dead peer, played by a relay inside the client's own process, so it works in
# a container too (8b); PINGs below the server's 5 s floor (8c).
pings_goaway='sum(routing_server_goaways_sent_total{service="server",reason="too_many_pings"})'
goaways0=$(counted server "$pings_goaway")
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
server_goaways=$(delta "$goaways0" "$(counted server "$pings_goaway")")
check "8d server's count: too_many_pings GOAWAYs" "+$server_goaways" "+1 (8c's channel)" \
  "$([[ $server_goaways == 1 ]] && echo true)" keepalive
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
  codes=$(status_codes ghz)
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

# ─── 10 to 13: on an emulated link, behind a load balancer, over TLS, deadlines
network_rows  # verify.d/10-network.sh
balancer_rows # verify.d/11-balancer.sh
tls_rows      # verify.d/12-tls.sh
deadline_rows # verify.d/13-deadlines.sh

# ─── Summary ─────────────────────────────────────────────────────────────────
printf '\nSummary (mode=%s)\n' "$mode"
printf '%s\n' "${summary[@]}"
printf '\nPASS\n'
}
