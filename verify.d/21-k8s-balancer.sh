# shellcheck shell=bash
# verify.d/21-k8s-balancer.sh: `./verify.sh --k8s`'s rows for the
# client-side balancer (balancer/, the ready-balance crate) on the headless
# Service: k5 and k9 on both Corefiles, k10 to k12. Each row prints the
# client's own counts; where a pod can say, its A66 counts too.
#
# The two Corefiles (verify.d/k8s/cluster.sh's `corefile`): kubeadm's
# today (`ttl 30`, cluster names not cached) and its older one (`cache 30`
# on every name). Only the local cluster can switch: with K8S_CONTEXT the
# rows run once, on the cluster's own DNS, and say so.
#
# Sourced by verify.sh, whose verbs it uses (say, die, check, note, field,
# jqn) with 20-kubernetes.sh's (kc, apply_file, job_wait, calls_by_pod, ...).
# shellcheck disable=SC2016,SC2034,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds, each derived from the Corefile ─────────────────────────────────
# A change reaches the balancer within: CoreDNS sees it (1 s, it watches the
# API) + its cache on cluster names (0 s kubeadm, 30 s cached) + the
# balancer's resolve period (ready_balance::knobs::RESOLVE_INTERVAL, 10 s
# + 20 % jitter = 12 s).
K8S_DNS_CACHE_S_KUBEADM=0
K8S_DNS_CACHE_S_CACHED=30
K8S_RESOLVE_S=12
# k5, from `kubectl scale` to the new pod's first call in the client's own
# count: the pod is created, started and Ready (5 s: a second or two to
# start, then the 2 s readiness period), the change reaches the balancer
# (above), and it connects (1 s).
k8s_new_pod_bound() { # MODE -> seconds
  local cache=$K8S_DNS_CACHE_S_CACHED
  [[ $1 == kubeadm ]] && cache=$K8S_DNS_CACHE_S_KUBEADM
  echo $((5 + 1 + cache + K8S_RESOLVE_S + 1))
}
K8S_K9_RUNS=${K8S_K9_RUNS:-1}              # k9 rollouts per Corefile (the issue's proof ran 3)
K8S_KILL_FAILED_MAX=8                      # k10: the most calls the client can have in flight (--dns-concurrency)
# k12: p99 with one slow pod <= this share of its delay. Below a tenth of
# 100 ms, fewer than 1 % of the calls waited on it; the other clients' p99
# is the delay itself. Not a ratio to the healthy run's p99: two
# sub-millisecond p99s on a 2-core node swung from 0.4x to 1.45x between runs.
K8S_SLOW_P99_OF_DELAY=${K8S_SLOW_P99_OF_DELAY:-0.1}
K8S_SLOW_DELAY_MS=$(sed -n 's/.*ROUTING_FAULT_DELAY_MS, value: "\([0-9]*\)".*/\1/p' deploy/k8s/jobs/slow-replica.yaml)
K8S_SLOW_SHARE_MAX=${K8S_SLOW_SHARE_MAX:-0.02}  # k12: the slow pod's share of the calls <= this
K8S_K12_SECS=${K8S_K12_SECS:-60}           # k12: seconds per measured run (the bound's two)
K8S_K12_SIDE_SECS=${K8S_K12_SIDE_SECS:-20} # k12: seconds per run beside it (printed, not bound)

# ─── Jobs made here: the image's balance-client, or ghz ──────────────────────
# client_job NAME IMAGE ARG...: a Job like deploy/k8s/jobs' (non-root,
# read-only, no service account), running ARG... in IMAGE; applied at once.
client_job() {
  local name=$1 image=$2 cmd
  shift 2
  cmd=$(printf '%s\n' "$@" | jq -R . | jq -sc .)
  kc delete job "$name" --ignore-not-found --wait=true >&2
  cat >"$scratch/k8s/$name.yaml" <<EOF
apiVersion: batch/v1
kind: Job
metadata: { name: $name }
spec:
  backoffLimit: 0
  activeDeadlineSeconds: 300
  template:
    metadata: { labels: { app.kubernetes.io/name: lesson-client } }
    spec:
      restartPolicy: Never
      automountServiceAccountToken: false
      securityContext: { runAsNonRoot: true, runAsUser: 65532, seccompProfile: { type: RuntimeDefault } }
      containers:
        - name: client
          image: $image
          $([[ $image == "$GHZ_IMAGE" ]] && echo args || echo command): $cmd
          resources: { requests: { cpu: 100m, memory: 32Mi }, limits: { cpu: "1", memory: 256Mi } }
          securityContext: { allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: { drop: [ALL] } }
EOF
  kc apply -f "$scratch/k8s/$name.yaml" >&2
}
# balancer_job NAME SECS RATE CALLERS [ARG...]: the dns phase, an open loop.
balancer_job() {
  local name=$1 secs=$2 rate=$3 callers=$4
  shift 4
  client_job "$name" "$ROUTING_IMAGE" balance-client --phases dns --resolve "dns:///routing-headless:9000" \
    --dns-secs "$secs" --dns-rate "$rate" --dns-concurrency "$callers" --report-secs 0 "$@"
}
# ghz_job NAME SECS RATE CALLERS TARGET [ARG...]
ghz_job() {
  local name=$1 secs=$2 rate=$3 callers=$4 target=$5
  shift 5
  client_job "$name" "$GHZ_IMAGE" --insecure --call=shipping.routing.v1.RoutingService.GetQuote \
    '--data={"origin":"NLRTM","destination":"SGSIN","cargo":[{"description":"machine parts","weightKg":400.4}]}' \
    "--rps=$rate" "--concurrency=$callers" "--duration=${secs}s" --timeout=5s --format=json "$@" "$target"
}
# job_calling NAME: waits until Job NAME's pod runs, then 5 s more, so that
# its client is calling.
job_calling() {
  kc wait --for=condition=Ready pod -l "job-name=$1" --timeout="${K8S_READY_S}s" >&2 || true
  sleep 5
}
# dns_of NAME: the dns phase's report of Job NAME's output.
dns_of() { field "$1" "${2:-.phases.dns}"; }
# ghz_line NAME: "codes, p50 X ms, p99 Y ms" of ghz's JSON.
ghz_line() {
  field "$1" '"\(.statusCodeDistribution | to_entries | map("\(.key)=\(.value)") | join(",")), p50 \(.latencyDistribution[]? | select(.percentage == 50) | .latency / 1e4 | round / 100) ms, p99 \(.latencyDistribution[]? | select(.percentage == 99) | .latency / 1e4 | round / 100) ms"'
}
# pod_pid POD: its server's host PID (local cluster only).
pod_pid() {
  local id
  id=$(kc get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
  K8S_BIN_DIR=${K8S_BIN_DIR:-$(verify.d/k8s/build.sh 2>/dev/null)} verify.d/k8s/cluster.sh pid "$K8S_STATE" "${id#containerd://}"
}
# a_server_pod: the name of one Running server pod of `routing`.
a_server_pod() {
  kc get pods -l app.kubernetes.io/name=routing-server,'!routing-variant' --field-selector=status.phase=Running \
    -o jsonpath='{.items[0].metadata.name}'
}

# victim JOB SECS TIMEOUT_S: starts the balancer as Job JOB (100 calls/s
# from 8 callers for SECS, each call's deadline TIMEOUT_S) and, once it is
# calling, picks one server pod: its name, address and host PID in $pod,
# $ip and $pid.
pod='' ip='' pid=''
victim() {
  balancer_job "$1" "$2" 100 8 --call-timeout-secs "$3"
  job_calling "$1"
  sleep 3
  pod=$(a_server_pod)
  ip=$(kc get pod "$pod" -o jsonpath='{.status.podIP}')
  pid=$(pod_pid "$pod")
  [[ -n $pid ]] || die "$1: no host PID for pod $pod"
}

# ─── The rows ────────────────────────────────────────────────────────────────
# k8s_corefile MODE: CoreDNS on MODE's Corefile (local cluster only).
k8s_corefile() {
  [[ -n $K8S_CONTEXT ]] && return 0
  K8S_BIN_DIR=${K8S_BIN_DIR:-$(verify.d/k8s/build.sh 2>/dev/null)} verify.d/k8s/cluster.sh dns "$K8S_STATE" "$1" ||
    die "CoreDNS did not restart on the $1 Corefile"
}

# k9 MODE: `kubectl rollout restart` under three clients of the headless
# Service at once: the balancer (bound), tonic's balancer and grpc-go's
# round_robin (printed).
k9_rollout() {
  local corefile=$1 run=$2 d failed calls not_ready retried pods_before pods_after
  pods_before=$(failed_calls)
  kc delete job balancer-rollout tonic-rollout ghz-rollout --ignore-not-found --wait=true >&2
  apply_file rollout-clients
  job_calling balancer-rollout
  kc rollout restart deployment/routing >&2
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
  job_wait balancer-rollout
  job_wait tonic-rollout
  job_wait ghz-rollout
  d=$(dns_of balancer-rollout)
  failed=$(jq -r '.failed // empty' <<<"$d" 2>/dev/null || true)
  calls=$(jq -r '.calls // empty' <<<"$d" 2>/dev/null || true)
  not_ready=$(jq -r '.balancer.calls_not_ready // empty' <<<"$d" 2>/dev/null || true)
  retried=$(jq -r '.retried // empty' <<<"$d" 2>/dev/null || true)
  k8s_fresh 3
  pods_after=$(failed_calls)
  check "k9 rollout, balancer ($corefile, run $run)" \
    "failed ${failed:-?} of ${calls:-?}, sent to a not-ready pod ${not_ready:-?}, resent unsent ${retried:-?}, pods' errors $(delta "$pods_before" "$pods_after")" \
    "0 and 0" "$([[ $failed == 0 && $not_ready == 0 && -n $calls && $calls != 0 ]] && echo true)" balancer-rollout
  note "k9 $corefile: tonic's balance_channel" "$(dns_of tonic-rollout '.phases.dns | "failed \(.failed) of \(.calls)\(if .first_error then " (\(.first_error))" else "" end)"')"
  note "k9 $corefile: grpc-go round_robin (ghz)" "$(ghz_line ghz-rollout)"
}

# k5 and k9 on the Corefile in force (MODE), after k4's first pass.
kubernetes_balancer_dns_rows() {
  local corefile=$1 run
  if [[ $corefile == cached ]]; then
    k8s_corefile cached
    kubernetes_dns_rows cached
  fi
  for run in $(seq "$K8S_K9_RUNS"); do k9_rollout "$corefile" "$run"; done
}

# k10: a pod's process killed with SIGKILL from the node, under the balancer.
k10_kill() {
  local t d started late n
  if [[ -n $K8S_CONTEXT ]]; then
    note "k10 SIGKILL a pod's process" "not run: needs the node's shell (local cluster only)"
    return 0
  fi
  victim kill-client 30 5
  t=$(date +%s.%N)
  kill -KILL "$pid"
  job_wait kill-client
  d=$(dns_of kill-client)
  started=$(jq -r '.started_unix_s // 0' <<<"$d")
  n=$(jq -r '.failed // empty' <<<"$d")
  # Failures that ended more than 1 s after the kill: calls sent after it.
  late=$(jq -r --argjson k "$t" --argjson s "$started" '[.failed_at_s[]? | select($s + . > $k + 1)] | length' <<<"$d")
  check "k10 SIGKILL: failed <= calls in flight, none after" \
    "failed ${n:-?} ($(jq -r --argjson k "$t" --argjson s "$started" '[.failed_at_s[]? | ($s + . - $k) * 1000 | round / 1000] | map("+\(.) s") | join(", ")' <<<"$d")), ${late:-?} after 1 s, not-ready sends $(jq -r '.balancer.calls_not_ready' <<<"$d")" \
    "<= $K8S_KILL_FAILED_MAX, 0 after" \
    "$([[ -n $n && -n $late ]] && ((n <= K8S_KILL_FAILED_MAX && late == 0)) && echo true)" kill-client
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
}

# k11: a pod's process stopped with SIGSTOP (frozen, its connections open):
# calls in flight on it end at their deadline (2 s); new calls avoid it once
# keepalive or the readiness probe finds it, whichever is first.
k11_stop() {
  local t d started n events out_t out_to late
  if [[ -n $K8S_CONTEXT ]]; then
    note "k11 SIGSTOP a pod's process" "not run: needs the node's shell (local cluster only)"
    return 0
  fi
  victim stop-client 45 2
  t=$(date +%s.%N)
  kill -STOP "$pid"
  # Past the readiness probe (2 x 2 s), the DNS and a resolve, short of
  # liveness (3 x 10 s), which would restart the container.
  sleep 24
  kill -CONT "$pid"
  job_wait stop-client
  d=$(dns_of stop-client)
  started=$(jq -r '.started_unix_s // 0' <<<"$d")
  n=$(jq -r '.failed // empty' <<<"$d")
  # The pod's first change of state after the stop: `removed` (the probe
  # failed, the DNS answer lost it) or `connecting` (keepalive closed it).
  events=$(jq -c --arg a "$ip:9000" --argjson k "$t" '[.balancer.events[]? | select(.addr == $a and .at_unix_s > $k)]' <<<"$d")
  out_t=$(jq -r --argjson k "$t" '.[0].at_unix_s // empty | . - $k | . * 10 | round / 10' <<<"$events")
  out_to=$(jq -r '.[0].to // empty' <<<"$events")
  # Failures after detection + the 2 s deadline + 1 s: calls still sent to it.
  late=$(jq -r --argjson k "$t" --argjson s "$started" --argjson o "${out_t:-1e9}" \
    '[.failed_at_s[]? | select($s + . > $k + $o + 3)] | length' <<<"$d")
  check "k11 SIGSTOP: avoided once found, no failure after" \
    "out after ${out_t:-?} s by $([[ $out_to == removed ]] && echo "the readiness probe (DNS)" || echo "keepalive (${out_to:-?})"); failed ${n:-?}, ${late:-?} after; not-ready sends $(jq -r '.balancer.calls_not_ready' <<<"$d")" \
    "found, 0 failures after it + 2 s" \
    "$([[ -n $out_t && $late == 0 ]] && echo true)" stop-client
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
}

# A dns phase's p50, p99 and the slow pod's share of its calls.
K12_LINE='.phases.dns | "p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, slow share \((.per_replica | to_entries | map(select(.key | startswith("routing-slow"))) | map(.value) | add // 0) / (.per_replica | map(.) | add) * 1000 | round / 10)%"'

# k12: one slow pod of three (100 ms a call), 200 calls/s for 60 s, each
# sent on time: p99 against the slow pod's delay (the same client's p99
# with three healthy pods printed beside it), and the slow pod's share;
# today's random pick, least request, ClusterIP and grpc-go's round_robin
# beside it.
k12_slow() {
  local healthy slow p99h p99s share old before after sh name line
  balancer_job k12-healthy "$K8S_K12_SECS" 200 16
  job_wait k12-healthy
  p99h=$(dns_of k12-healthy '.phases.dns.p99_ms // empty')

  # Two fast pods and the slow one: the third fast pod leaves, drained.
  kc scale deployment/routing --replicas=2 >&2
  apply_file slow-replica
  kc rollout status deployment/routing-slow --timeout="${K8S_READY_S}s" >&2 || true
  old=$(kc get pods -l app.kubernetes.io/name=routing-server -o json |
    jq -r '[.items[] | select(.metadata.deletionTimestamp) | .metadata.name] | join(" ")')
  for name in $old; do kc wait --for=delete "pod/$name" --timeout=120s >&2 || true; done
  # The slow pod in the balancer's DNS answer: one resolve period.
  sleep "$K8S_RESOLVE_S"

  balancer_job k12-slow "$K8S_K12_SECS" 200 16
  job_wait k12-slow
  slow=$(dns_of k12-slow)
  p99s=$(jq -r '.p99_ms // empty' <<<"$slow")
  share=$(jq -r '(.per_replica | to_entries | map(select(.key | startswith("routing-slow"))) | map(.value) | add // 0) / ((.per_replica | map(.) | add) // 1) | . * 1000 | round / 1000' <<<"$slow")
  check "k12 one slow pod ($K8S_SLOW_DELAY_MS ms): p99" "${p99s:-?} ms (${p99h:-?} ms with none), slow share $(pct "${share:-1}")%, failed $(jq -r '.failed' <<<"$slow"), not-ready sends $(jq -r '.balancer.calls_not_ready' <<<"$slow")" \
    "<= $(jqn --argjson d "$K8S_SLOW_DELAY_MS" --argjson r "$K8S_SLOW_P99_OF_DELAY" '$d * $r') ms, share <= $(pct "$K8S_SLOW_SHARE_MAX")%" \
    "$([[ -n $p99s && -n $share ]] && jqn --argjson s "$p99s" --argjson d "$K8S_SLOW_DELAY_MS" --argjson r "$K8S_SLOW_P99_OF_DELAY" --argjson f "$share" --argjson m "$K8S_SLOW_SHARE_MAX" '$s <= $d * $r and $f <= $m')" k12-slow k12-healthy

  # Beside it, shorter, printed.
  for name in least_request random; do
    balancer_job "k12-${name/_/-}" "$K8S_K12_SIDE_SECS" 200 16 --dns-pick "$name"
    job_wait "k12-${name/_/-}"
    note "k12 balancer, $name pick" "$(dns_of "k12-${name/_/-}" "$K12_LINE")"
  done
  balancer_job k12-tonic "$K8S_K12_SIDE_SECS" 200 16 --dns-balancer tonic
  job_wait k12-tonic
  note "k12 tonic's balance_channel" "$(dns_of k12-tonic "$K12_LINE")"
  for line in "clusterip routing:9000 --connections=4" "round-robin dns:///routing-headless:9000 --lb-strategy=round_robin"; do
    read -r name target extra <<<"$line"
    before=$(calls_by_pod)
    ghz_job "k12-$name" "$K8S_K12_SIDE_SECS" 200 16 "$target" "$extra"
    job_wait "k12-$name"
    k8s_fresh 3
    after=$(calls_by_pod)
    sh=$(shares "$before" "$after")
    note "k12 $name (ghz)" "$(ghz_line "k12-$name"), slow share $(pct "$(jq -r '[to_entries[] | select(.key | startswith("routing-slow")) | .value] | add // 0' <<<"$sh")")%"
  done
  kc delete deployment routing-slow --wait=false >&2
  kc scale deployment/routing --replicas=3 >&2
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
}

}
