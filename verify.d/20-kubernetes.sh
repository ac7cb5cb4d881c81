# shellcheck shell=bash
# verify.d/20-kubernetes.sh: `./verify.sh --k8s`. The stack of deploy/k8s on
# a real cluster, and the rows where Kubernetes changes a lesson, each read
# from the pods' own metrics through the Prometheus in the cluster (which
# finds the pods through the Kubernetes API), and from the clients' output.
#
# The cluster: the one K8S_CONTEXT names (a reader's: kind, minikube, ...),
# or, without it, a single-node cluster that verify.d/k8s/cluster.sh brings
# up on this machine (root) and tears down after. Everything the run makes
# is in one namespace, deleted at the end.
#
# verify.sh sources this file before it runs a line; the verbs it uses
# (say, die, capture, check, note, field, jqn, bounded) are verify.sh's.
# shellcheck disable=SC2016,SC2034,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds ──────────────────────────────────────────────────────────────────
K8S_PINNED_SHARE=${K8S_PINNED_SHARE:-0.95}   # through ClusterIP, one channel: the busiest pod's share >= this
K8S_SPREAD_SHARE=${K8S_SPREAD_SHARE:-0.20}   # headless + the balancer: every pod's share >= this (an even share is 0.33)
K8S_WORKERS_1CPU=${K8S_WORKERS_1CPU:-1}      # workers a pod with a 1-CPU limit runs
K8S_WORKERS_2CPU=${K8S_WORKERS_2CPU:-2}      # ... and with a 2-CPU limit (on a node of at least 2 CPUs)

# ─── Where, and with what ────────────────────────────────────────────────────
K8S_CONTEXT=${K8S_CONTEXT:-}                 # a kube context: use that cluster; empty: bring one up here
K8S_NAMESPACE=${K8S_NAMESPACE:-grpc-tuning-verify-$$}
K8S_STATE=${K8S_STATE:-}                     # the local cluster's state folder (default: in the scratch folder)
K8S_IMAGE_ENGINE=${K8S_IMAGE_ENGINE:-}       # the local cluster: podman or docker, whose images it imports
K8S_READY_S=${K8S_READY_S:-180}              # a rollout or a Job start must finish within this (s)
K8S_JOB_S=${K8S_JOB_S:-240}                  # a Job must complete within this (s)
K8S_ROWS=${K8S_ROWS:-}                       # only these rows, e.g. k3,k9 (k0 and k1 set up the rest: always); empty: all
ROUTING_IMAGE=${ROUTING_IMAGE:-grpc-tuning/routing-server:dev}
K8S_PROMETHEUS_IMAGE=${K8S_PROMETHEUS_IMAGE:-docker.io/prom/prometheus:v2.55.1} # not compose's PROMETHEUS_IMAGE: it needs kubernetes_sd_configs
GHZ_IMAGE=${GHZ_IMAGE:-ghcr.io/bojand/ghz:0.121.0}
GET_QUOTE=shipping.routing.v1.RoutingService/GetQuote

k8s_up=no     # a local cluster was brought up
k8s_ns_made=no
kube_args=()

kc() { bounded "$TOOL_TIMEOUT_S" kubectl "${kube_args[@]}" -n "$K8S_NAMESPACE" "$@"; }

# k8s_row ROW...: run these rows? Yes without K8S_ROWS, or when it names one.
K8S_ROW_NAMES=" k2 k3 k4 k5 k6 k7 k8 k9 k10 k11 k12 "
k8s_row() {
  local row
  [[ -z $K8S_ROWS ]] && return 0
  for row; do [[ ",$K8S_ROWS," == *",$row,"* ]] && return 0; done
  return 1
}
# k8s_rows_valid: K8S_ROWS names rows that exist; checked before a cluster is touched.
k8s_rows_valid() {
  local row
  [[ -z $K8S_ROWS ]] && return 0
  for row in ${K8S_ROWS//,/ }; do
    [[ $K8S_ROW_NAMES == *" $row "* ]] || die "K8S_ROWS=$K8S_ROWS: no row $row (rows:${K8S_ROW_NAMES% }; k0 and k1 always run)"
  done
  note "rows (K8S_ROWS)" "k0 k1 ${K8S_ROWS//,/ } only"
}

# split_image NAME[:TAG] -> "NAME TAG"
split_image() {
  local image=$1 name tag=latest
  name=${image%:*}
  if [[ $name != "$image" && $name != *:*/* && ${image##*:} != */* ]]; then tag=${image##*:}; else name=$image; fi
  echo "$name $tag"
}

# overlay DIR RESOURCE...: a kustomization in DIR over the resources (paths
# relative to the repository), with this run's namespace and images.
overlay() {
  local dir=$1 res r name tag
  shift
  mkdir -p "$dir"
  {
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "namespace: $K8S_NAMESPACE"
    echo "resources:"
    for res in "$@"; do
      r=$(realpath --relative-to="$dir" "$repo_root/$res")
      echo "  - $r"
    done
    echo "images:"
    read -r name tag <<<"$(split_image "$ROUTING_IMAGE")"
    printf '  - name: grpc-tuning/routing-server\n    newName: %s\n    newTag: "%s"\n' "$name" "$tag"
    read -r name tag <<<"$(split_image "$K8S_PROMETHEUS_IMAGE")"
    printf '  - name: docker.io/prom/prometheus\n    newName: %s\n    newTag: "%s"\n' "$name" "$tag"
    read -r name tag <<<"$(split_image "$GHZ_IMAGE")"
    printf '  - name: ghcr.io/bojand/ghz\n    newName: %s\n    newTag: "%s"\n' "$name" "$tag"
    # Marked, so the local cluster's teardown finds it.
    printf '%s\n' "patches:" "  - target: { kind: Namespace }" "    patch: |-" "      - op: add" \
      "        path: /metadata/labels" '        value: { routing-test: "true" }'
  } >"$dir/kustomization.yaml"
}

# job NAME [DEADLINE_S]: applies deploy/k8s/jobs/NAME.yaml (this run's
# namespace and images), and leaves its name in $job.
apply_file() { # apply_file FILE (under deploy/k8s/jobs)
  local name=$1
  overlay "$scratch/k8s/$name" "deploy/k8s/jobs/$name.yaml"
  kubectl kustomize --load-restrictor LoadRestrictionsNone "$scratch/k8s/$name" >"$scratch/k8s/$name.yaml"
  kc apply -f "$scratch/k8s/$name.yaml" >&2
}
# job_wait NAME: waits for Job NAME to complete (or fail), leaves its log
# in $scratch/NAME.out, and its pod's restart count in $restarts.
restarts=
job_wait() {
  local name=$1 state deadline=$((SECONDS + K8S_JOB_S))
  while ((SECONDS < deadline)); do
    state=$(kc get job "$name" -o jsonpath='{.status.succeeded}/{.status.failed}' 2>/dev/null || true)
    [[ $state == 1/* || $state == */1 ]] && break
    sleep 1
  done
  # The Job's log has its stdout and stderr in one stream: the JSON line
  # (the last line that opens with `{`) is the output, the log the evidence.
  kc logs "job/$name" >"$scratch/$name.err" 2>&1 || true
  grep '^{' "$scratch/$name.err" | tail -n 1 >"$scratch/$name.out" || true
  echo 0 >"$scratch/$name.rc"
  restarts=$(kc get pods -l "job-name=$name" -o jsonpath='{.items[0].status.containerStatuses[0].restartCount}' 2>/dev/null || true)
  [[ $state == 1/* ]] || { echo 1 >"$scratch/$name.rc"; say "  (job $name: $state after $((SECONDS - deadline + K8S_JOB_S))s)"; }
}

# promq EXPR: Prometheus's JSON answer to the instant query EXPR, through
# the API server's service proxy (no port-forward, works on any cluster).
promq() {
  local q
  q=$(jq -rn --arg q "$1" '$q | @uri')
  kc get --raw "/api/v1/namespaces/$K8S_NAMESPACE/services/prometheus:web/proxy/api/v1/query?query=$q" 2>/dev/null || true
}
# prom1 EXPR: the first value, or empty.
prom1() { promq "$1" | jq -r '.data.result[0].value[1] // empty' 2>/dev/null || true; }
# per_pod EXPR: {"pod": value, ...} of EXPR by pod.
per_pod() { promq "$1" | jq -c '[.data.result[] | {(.metric.pod): (.value[1] | tonumber)}] | add // {}' 2>/dev/null || echo '{}'; }
# k8s_fresh N: waits until N server pods are up in scrapes that began after this call.
k8s_fresh() {
  local want=$1 since got deadline=$((SECONDS + PROM_FRESH_S))
  since=$(date +%s.%N)
  while ((SECONDS < deadline)); do
    got=$(prom1 "count(timestamp(up{job=\"routing-server\"}) > $since and up{job=\"routing-server\"} == 1)")
    [[ ${got:-0} -ge $want ]] && return 0
    sleep 0.5
  done
  say "  (Prometheus: fewer than $want fresh scrapes after ${PROM_FRESH_S}s)"
}
# calls_by_pod: GetQuote calls each pod has served, from its A66 counter.
calls_by_pod() { per_pod "sum by (pod) (grpc_server_call_duration_seconds_count{grpc_method=\"$GET_QUOTE\"})"; }
# shares BEFORE AFTER: {"pod": share of the calls between the two snapshots}.
shares() {
  jqn -c --argjson a "$1" --argjson b "$2" \
    '($b | to_entries | map({key, value: (.value - ($a[.key] // 0))}) | map(select(.value > 0))) as $d
     | ($d | map(.value) | add // 0) as $t | $d | map({key, value: (if $t > 0 then .value / $t else 0 end)}) | from_entries'
}
# job_shares NAME: runs Job NAME, and leaves the pods' GetQuote counts
# before and after it in $before and $after, and each pod's share of the
# calls between them in $sh.
job_shares() {
  before=$(calls_by_pod)
  apply_file "$1"
  job_wait "$1"
  k8s_fresh 3
  after=$(calls_by_pod)
  sh=$(shares "$before" "$after")
}
# pct SHARE: a share as a percentage with one decimal.
pct() { jqn --argjson t "${1:-0}" '$t * 1000 | round / 10'; }
# failed_calls: GetQuote calls that ended other than OK, on any pod, ever
# (pods that are gone included: their series stay in Prometheus).
failed_calls() {
  local got
  got=$(prom1 "sum(max_over_time(grpc_server_call_duration_seconds_count{grpc_method=\"$GET_QUOTE\",grpc_status!=\"OK\"}[30m]))")
  echo "${got:-0}"
}
k8s_log() { # evidence: the server pods' logs and the namespace's events
  kc get pods -o wide 2>&1 | head -n 20 || true
  kc get events --sort-by=.lastTimestamp 2>&1 | tail -n 20 || true
  kc logs -l app.kubernetes.io/name=routing-server --tail 10 --prefix 2>&1 | tail -n 40 || true
}

# ─── The cluster ─────────────────────────────────────────────────────────────
k8s_need_tools() {
  need jq "apt-get install jq | dnf install jq | brew install jq"
  need timeout "coreutils"
  need kubectl "https://kubernetes.io/docs/tasks/tools/ (1.27 or later: native gRPC probes)"
  need realpath "coreutils"
}

# k8s_start: the cluster (a context, or a local one), the images, the stack.
k8s_start() {
  repo_root=$(pwd)
  k8s_rows_valid
  if [[ -n $K8S_CONTEXT ]]; then
    kube_args=(--context "$K8S_CONTEXT")
    say "cluster: context $K8S_CONTEXT, namespace $K8S_NAMESPACE, image $ROUTING_IMAGE"
  else
    [[ $EUID -eq 0 ]] || die "a local cluster needs root; or point at a cluster: K8S_CONTEXT=kind-kind ./verify.sh --k8s"
    local bins engine image archives=() started=$SECONDS
    say "cluster: building its binaries once (verify.d/k8s/build.sh)"
    bins=$(bounded "$BUILD_TIMEOUT_S" verify.d/k8s/build.sh) || die "the cluster's binaries did not build"
    K8S_STATE=${K8S_STATE:-$scratch/cluster}
    engine=$K8S_IMAGE_ENGINE
    if [[ -z $engine ]]; then
      if command -v podman >/dev/null && podman image exists "$ROUTING_IMAGE" 2>/dev/null; then engine=podman; else engine=docker; fi
    fi
    k8s_up=yes
    K8S_BIN_DIR=$bins K8S_IMAGE_ENGINE=$engine bounded 300 verify.d/k8s/cluster.sh up "$K8S_STATE" >"$scratch/cluster.env" ||
      die "the local cluster did not come up (logs: $K8S_STATE/logs)"
    kube_args=(--kubeconfig "$K8S_STATE/kubeconfig")
    for image in "$ROUTING_IMAGE" "$K8S_PROMETHEUS_IMAGE" "$GHZ_IMAGE"; do
      "$engine" save -o "$scratch/image-${#archives[@]}.tar" "$image" >&2 ||
        die "$engine has no image $image: build it (docker build -t $ROUTING_IMAGE .) or set ROUTING_IMAGE, K8S_PROMETHEUS_IMAGE, GHZ_IMAGE"
      archives+=("$scratch/image-${#archives[@]}.tar")
    done
    K8S_BIN_DIR=$bins bounded 300 verify.d/k8s/cluster.sh load "$K8S_STATE" "${archives[@]}" || die "importing the images failed"
    rm -f "${archives[@]}"
    note "local cluster up, images loaded" "$((SECONDS - started)) s"
  fi
  kubectl "${kube_args[@]}" version -o json >"$scratch/k8s_version.json" 2>/dev/null ||
    die "kubectl cannot reach the cluster (${K8S_CONTEXT:-local})"
  note "Kubernetes" "$(jq -r .serverVersion.gitVersion "$scratch/k8s_version.json")"
}

k8s_stop() {
  if [[ $k8s_ns_made == yes && $k8s_up == no ]]; then
    timeout 120 kubectl "${kube_args[@]}" delete namespace "$K8S_NAMESPACE" --wait=true >/dev/null 2>&1 ||
      say "could not delete namespace $K8S_NAMESPACE"
  fi
  if [[ $k8s_up == yes ]]; then
    K8S_BIN_DIR=${K8S_BIN_DIR:-$(verify.d/k8s/build.sh 2>/dev/null)} timeout 180 verify.d/k8s/cluster.sh down "$K8S_STATE" >&2 ||
      say "the local cluster's teardown failed: see $K8S_STATE"
  fi
}

# ─── The rows ────────────────────────────────────────────────────────────────
kubernetes_rows() {
  local dry
  k8s_start

  # k0: the manifests, against the API server's own validation first. A
  # server-side dry run validates each object alone, so the namespace must
  # exist before the objects in it can be checked (kubernetes#83562).
  overlay "$scratch/k8s/stack" deploy/k8s
  kubectl "${kube_args[@]}" create namespace "$K8S_NAMESPACE" >&2 || die "cannot create namespace $K8S_NAMESPACE"
  k8s_ns_made=yes
  kubectl "${kube_args[@]}" label namespace "$K8S_NAMESPACE" routing-test=true >&2
  capture k8s_dry kubectl "${kube_args[@]}" apply --dry-run=server -k "$scratch/k8s/stack"
  dry=$(grep -c . "$scratch/k8s_dry.out" || true)
  check "k0 apply --dry-run=server -k deploy/k8s" "exit $rc, $dry objects" "exit 0" \
    "$([[ $rc == 0 ]] && echo true)" k8s_dry
  kubectl "${kube_args[@]}" apply -k "$scratch/k8s/stack" >&2 || die "kubectl apply -k failed"
  capture k8s_rollout kc rollout status deployment/routing --timeout="${K8S_READY_S}s"
  check "k0 3 replicas Ready" "exit $rc" "rollout complete" "$([[ $rc == 0 ]] && echo true)" k8s_rollout
  kc rollout status deployment/prometheus --timeout="${K8S_READY_S}s" >&2 || { k8s_log >&2; die "Prometheus did not start"; }

  # k1: Prometheus finds the pods through the Kubernetes API.
  k8s_fresh 3
  n=$(prom1 'count(up{job="routing-server"} == 1)')
  check "k1 Prometheus discovers the pods" "up == 1 on ${n:-0}" "3 of 3" "$([[ ${n:-0} == 3 ]] && echo true)"

  # The other rows, each where it changes a lesson (K8S_ROWS picks some).
  if k8s_row k2; then k2_workers; fi
  if k8s_row k3; then k3_clusterip; fi
  # k4/k5: headless Service and the balancer, then a fourth pod; k9: a
  # rollout under it (verify.d/21-k8s-balancer.sh). On kubeadm's Corefile,
  # the cluster's own from the start.
  if k8s_row k4 k5; then kubernetes_dns_rows kubeadm; fi
  if k8s_row k9; then kubernetes_balancer_dns_rows kubeadm; fi

  # k6/k7: a rolling restart under a steady load, and the order of a drain.
  if k8s_row k6 k7; then kubernetes_rollout_rows; fi

  # k10-k12: a killed pod, a frozen pod, a slow pod, under the balancer;
  # then k5 and k9 again on the older, cached Corefile.
  if k8s_row k10; then k10_kill; fi
  if k8s_row k11; then k11_stop; fi
  if k8s_row k12; then k12_slow; fi
  if [[ -z $K8S_CONTEXT ]] && k8s_row k5 k9; then kubernetes_balancer_dns_rows cached; fi

  if k8s_row k8; then k8_aged; fi
}

# k2: what a CPU limit gives the server's workers.
k2_workers() {
  local n
  n=$(per_pod 'routing_server_worker_threads' | jq -c '[.[]] | unique')
  check "k2 workers under a 1-CPU limit" "$n" "[$K8S_WORKERS_1CPU]" "$([[ $n == "[$K8S_WORKERS_1CPU]" ]] && echo true)"
  apply_file cpu-limit-2
  kc wait --for=condition=Ready pod/cpu-limit-2 --timeout="${K8S_READY_S}s" >&2 || true
  n=$(kc get --raw "/api/v1/namespaces/$K8S_NAMESPACE/pods/cpu-limit-2:9464/proxy/metrics" 2>/dev/null |
    awk '$1 == "routing_server_worker_threads" { print $2 }')
  check "k2 workers under a 2-CPU limit" "${n:-none}" "$K8S_WORKERS_2CPU" "$([[ ${n:-} == "$K8S_WORKERS_2CPU" ]] && echo true)"
  kc delete pod cpu-limit-2 --wait=false >&2
}

# k3: one pooled channel through the ClusterIP Service.
k3_clusterip() {
  local before after sh top n count
  job_shares pinned-client
  top=$(jq -r '[.[]] | max // 0' <<<"$sh")
  check "k3 ClusterIP, one channel: one pod" "busiest pod $(pct "$top")% $sh" \
    ">= $(jqn "$K8S_PINNED_SHARE * 100")%" "$(jqn --argjson t "$top" --argjson k "$K8S_PINNED_SHARE" '$t >= $k')" pinned-client
  n=$(jqn --argjson a "$before" --argjson b "$after" '[$b | to_entries[] | .value - ($a[.key] // 0)] | add // 0')
  count=$(field pinned-client '.phases.l4_pooled.calls - .phases.l4_pooled.failed')
  check "k3 the pods' A66 counts sum to the calls" "$n" "$count (the client's OK calls)" \
    "$([[ -n $count && $n == "$count" ]] && echo true)" pinned-client
  note "ClusterIP, one channel (calls per pod)" "$(jqn -c --argjson a "$before" --argjson b "$after" '$b | with_entries(.value -= ($a[.key] // 0)) | with_entries(select(.value > 0))')"
}

# k8: connection age through the ClusterIP Service.
k8_aged() {
  local n sh pods min count after
  capture k8s_age kc set env deployment/routing ROUTING_MAX_CONNECTION_AGE_SECS=3 ROUTING_MAX_CONNECTION_AGE_GRACE_SECS=2
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || { k8s_log >&2; die "the rollout to connection age did not finish"; }
  k8s_fresh 3
  n=$(failed_calls)
  job_shares aged-client
  pods=$(jq 'length' <<<"$sh")
  min=$(jq -r '[.[]] | min // 0' <<<"$sh")
  check "k8 ClusterIP + connection age: every pod" "$pods pods, smallest share $(pct "$min")%" \
    "3 pods" "$([[ $pods == 3 ]] && echo true)" aged-client
  count=$(field aged-client '.phases.l4_aged.failed')
  after=$(failed_calls)
  check "k8 ... and no call fails" "client ${count:-?}, pods $(delta "$n" "$after")" "0 and 0" \
    "$([[ $count == 0 && $(delta "$n" "$after") == 0 ]] && echo true)" aged-client
  note "ClusterIP + age 3 s (share per pod)" "$sh"
}

# kubernetes_dns_rows COREFILE: k4 (on kubeadm's Corefile) and k5 (on COREFILE's,
# with the bound derived from it; a reader's cluster: the cached bound).
kubernetes_dns_rows() {
  local corefile=$1 before mid sh min pods t0 new_pod n waited deadline bound
  bound=$(k8s_new_pod_bound "$([[ -n $K8S_CONTEXT ]] && echo cached || echo "$corefile")")
  before=$(calls_by_pod)
  kc delete job dns-client --ignore-not-found --wait=true >&2
  apply_file dns-client
  # The client is calling once a pod's counter moves.
  deadline=$((SECONDS + K8S_READY_S))
  while ((SECONDS < deadline)); do
    mid=$(calls_by_pod)
    [[ $(jqn --argjson a "$before" --argjson b "$mid" '[$b | to_entries[] | .value - ($a[.key] // 0)] | add // 0') != 0 ]] && break
    sleep 1
  done
  before=$(calls_by_pod)
  sleep 15
  k8s_fresh 3
  mid=$(calls_by_pod)
  sh=$(shares "$before" "$mid")
  pods=$(jq 'length' <<<"$sh")
  min=$(jq -r '[.[]] | min // 0' <<<"$sh")
  if [[ $corefile == kubeadm ]]; then
    check "k4 headless + the balancer" "$pods pods, smallest share $(pct "$min")%" \
      "3 pods, each >= $(jqn "$K8S_SPREAD_SHARE * 100")%" \
      "$([[ $pods == 3 ]] && jqn --argjson t "$min" --argjson k "$K8S_SPREAD_SHARE" '$t >= $k')" dns-client
    note "headless + balancer (share per pod)" "$sh"
  fi

  # Scale while the client runs: the new pod is the one not in $mid, seen
  # in the pods' counters; when it served its first call is the client's
  # own count (first_served_s), free of Prometheus's discovery delay.
  t0=$(date +%s.%N)
  kc scale deployment/routing --replicas=4 >&2
  new_pod=
  deadline=$((SECONDS + bound + 30))
  while ((SECONDS < deadline)); do
    n=$(calls_by_pod)
    new_pod=$(jqn --argjson a "$mid" --argjson b "$n" -r '[$b | to_entries[] | select(.key as $k | ($a | has($k) | not) and .value > 0) | .key][0] // empty')
    [[ -n $new_pod ]] && break
    sleep 1
  done
  job_wait dns-client
  waited=$(field dns-client --arg p "${new_pod:-none}" --argjson t "$t0" \
    '.phases.dns | (.first_served_s[$p] // empty) + .started_unix_s - $t | . * 10 | round / 10')
  check "k5 scaled to 4: the new pod serves ($corefile)" "${new_pod:-none} after ${waited:-?} s" "within $bound s" \
    "$([[ -n $waited ]] && jqn --argjson w "$waited" --argjson b "$bound" '$w <= $b')" dns-client
  check "k5 ... with no restart of the client ($corefile)" "restarts ${restarts:-?}, exit $(cat "$scratch/dns-client.rc")" "0, job complete" \
    "$([[ $restarts == 0 && $(cat "$scratch/dns-client.rc") == 0 ]] && echo true)" dns-client
  kc scale deployment/routing --replicas=3 >&2
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
}

kubernetes_rollout_rows() {
  local failed_before failed_after codes ok_count count pod ip ep_t listen_t line
  failed_before=$(failed_calls)
  apply_file steady-load
  kc wait --for=condition=Ready pod -l job-name=steady-load --timeout="${K8S_READY_S}s" >&2 || true
  sleep 5
  capture k8s_restart kc rollout restart deployment/routing
  capture k8s_restart_status kc rollout status deployment/routing --timeout="${K8S_READY_S}s"
  job_wait steady-load
  ok_count=$(field steady-load '.statusCodeDistribution.OK // 0')
  codes=$(status_codes steady-load)
  count=$(field steady-load .count)
  check "k6 rollout restart under ghz: every call OK" "${codes:-none}, count ${count:-?}" "OK = count > 0" \
    "$([[ -n $count && $count != 0 && $ok_count == "$count" ]] && echo true)" steady-load k8s_restart_status
  k8s_fresh 3
  failed_after=$(failed_calls)
  check "k6 ... and the pods ended none in error" "$(delta "$failed_before" "$failed_after")" "0" \
    "$([[ $(delta "$failed_before" "$failed_after") == 0 ]] && echo true)" steady-load
  note "rollout restart under ghz" "$(field steady-load '"\(.count) calls, \(.rps | round) rps, p99 \(.latencyDistribution[] | select(.percentage == 99) | .latency / 1e6 | round) ms"')"

  # k7: delete one pod; note when its address leaves the Service's
  # endpoints (a watch, stamped as each event arrives) and when its server
  # closes its listener (its own log line, stamped by the container runtime).
  pod=$(kc get pods -l app.kubernetes.io/name=routing-server --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}')
  ip=$(kc get pod "$pod" -o jsonpath='{.status.podIP}')
  # -o json, not jsonpath: kubectl 1.32's watch ends at the first event
  # with a jsonpath template. Under `timeout`, which leads a process group
  # of its own: one kill stops kubectl, jq and the loop together.
  timeout "$K8S_READY_S" bash -c 'kubectl "$@" get endpointslices -l kubernetes.io/service-name=routing --watch -o json 2>/dev/null |
      jq --unbuffered -r "[.endpoints[]? | \"\\(.addresses[0])=\\(.conditions.ready)\"] | join(\" \")" |
      while IFS= read -r line; do printf "%s %s\n" "$(date +%s.%N)" "$line"; done' \
    _ "${kube_args[@]}" -n "$K8S_NAMESPACE" >"$scratch/k8s_endpoints.log" &
  local watch_pid=$!
  timeout "$K8S_READY_S" kubectl "${kube_args[@]}" -n "$K8S_NAMESPACE" logs -f --timestamps "$pod" >"$scratch/k8s_drain.log" 2>&1 &
  local logs_pid=$!
  sleep 2
  kc delete pod "$pod" --wait=true --timeout="${K8S_READY_S}s" >&2 || true
  kill -TERM -- "-$watch_pid" "-$logs_pid" 2>/dev/null || true
  wait "$watch_pid" "$logs_pid" 2>/dev/null || true
  # The first event in which the address is not ready, or gone.
  ep_t=$(awk -v ip="$ip" 'NR > 1 && index($0, ip "=true") == 0 { print $1; exit }' "$scratch/k8s_endpoints.log")
  line=$(grep -m1 'shutdown requested' "$scratch/k8s_drain.log" || true)
  listen_t=$(date -d "${line%% *}" +%s.%N 2>/dev/null || true)
  cp "$scratch/k8s_endpoints.log" "$scratch/k8s_drain.out"
  check "k7 a draining pod leaves the endpoints first" \
    "endpoints at ${ep_t:-?}, listener closed $(jqn --argjson a "${ep_t:-0}" --argjson b "${listen_t:-0}" '($b - $a) * 10 | round / 10') s later" \
    "> 0 s later" "$([[ -n $ep_t && -n $listen_t ]] && jqn --argjson a "$ep_t" --argjson b "$listen_t" '$b > $a')" k8s_drain
  kc rollout status deployment/routing --timeout="${K8S_READY_S}s" >&2 || true
}

}
