#!/usr/bin/env bash
# ci/k8s-context-run.sh: `./verify.sh --k8s` on a cluster it is given
# (K8S_CONTEXT) changes nothing but its own namespace (issue 52, item 4).
#
# It brings up the cluster verify.sh would (verify.d/k8s/cluster.sh),
# imports the images into it, and adds a namespace that is not the run's:
# `bystander`, with a Deployment of two pods, a Service and a ConfigMap, as
# a reader's own work would be. Then, as a reader with a cluster runs it:
#
#   KUBECONFIG=<that cluster's> K8S_CONTEXT=routing-test ./verify.sh --k8s
#
# and compares, before and after the run:
#   - every object in `bystander`, of every namespaced kind the API server
#     lists (events aside): kind, name, uid and resourceVersion, which any
#     write changes; for a pod, its spec, labels, annotations, restarts and
#     container IDs instead of its resourceVersion, which moves when the
#     pod's status is written (both pods' moved in this script's first CI
#     run, on d7c1c4e, with the same containers and no restart); the pods
#     whose version moved are listed, not failed;
#   - the cluster's namespaces: the run's own is gone again, no other is;
#   - the cluster's cluster-wide objects (roles, bindings, CRDs, nodes'
#     names and uids): the run makes none;
#   - the Corefile CoreDNS runs on: only a local cluster's rows switch it.
# Then it tears the cluster down.
#
# The rows: K8S_ROWS, by default k2,k3,k9,k8 (k0 and k1 always run). They
# make each kind of write the run makes: the namespace, the stack's objects
# (k0), a bare pod (k2), Jobs (k3, k9), a rollout restart (k9) and a change
# of a Deployment's spec (k8), then the namespace's deletion. All of them
# (K8S_ROWS=) take about 13 minutes, which CI's 90 cannot spare; k12's runs
# may then be shortened (K8S_K12_SECS=30 K8S_K12_SIDE_SECS=3): what is
# checked here is what the run leaves, not its figures.
#
# Needs root and what `./verify.sh --k8s` needs; ROUTING_IMAGE,
# K8S_PROMETHEUS_IMAGE, GHZ_IMAGE and K8S_IMAGE_ENGINE as for it.
# Exit 0 when the run passed and all of it is unchanged, 1 otherwise, 2 when
# the cluster could not be set up.
set -euo pipefail
cd "$(dirname "$0")/.."

engine=${K8S_IMAGE_ENGINE:-podman}
images=("${ROUTING_IMAGE:?the routing-server image}" "${K8S_PROMETHEUS_IMAGE:?a Prometheus image with Kubernetes discovery}" "${GHZ_IMAGE:?the ghz image}")
CONTEXT=routing-test # the context cluster.sh writes into its kubeconfig
rows=${K8S_ROWS-k2,k3,k9,k8} # set and empty: every row

say() { printf 'k8s-context-run: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }

bins=$(verify.d/k8s/build.sh) || die "the cluster's binaries did not build"
scratch=$(mktemp -d)
S=$scratch/cluster
up=no
cleanup() {
  local rc=$?
  if [[ $up == yes ]]; then K8S_BIN_DIR=$bins timeout 180 verify.d/k8s/cluster.sh down "$S" >&2 || rc=1; fi
  rm -rf "$scratch"
  exit "$rc"
}
trap cleanup EXIT

say "a local cluster, as a reader's"
up=yes
K8S_BIN_DIR=$bins K8S_IMAGE_ENGINE=$engine timeout 300 verify.d/k8s/cluster.sh up "$S" >/dev/null ||
  die "the cluster did not come up (logs: $S/logs)"
export KUBECONFIG=$S/kubeconfig
archives=()
for image in "${images[@]}"; do
  "$engine" save -o "$scratch/image-${#archives[@]}.tar" "$image" >&2 || die "$engine has no image $image"
  archives+=("$scratch/image-${#archives[@]}.tar")
done
K8S_BIN_DIR=$bins timeout 300 verify.d/k8s/cluster.sh load "$S" "${archives[@]}" || die "importing the images failed"
rm -f "${archives[@]}"

say "namespace bystander: a Deployment of two pods, a Service, a ConfigMap"
# The pods run the cluster's pause image: it is on the node already, and a
# process that only sleeps gives the pod no reason to change by itself.
kubectl apply -f - >&2 <<'EOF'
apiVersion: v1
kind: Namespace
metadata: { name: bystander }
---
apiVersion: v1
kind: ConfigMap
metadata: { name: settings, namespace: bystander }
data: { owner: "not verify.sh" }
---
apiVersion: apps/v1
kind: Deployment
metadata: { name: sleeper, namespace: bystander }
spec:
  replicas: 2
  selector: { matchLabels: { app: sleeper } }
  template:
    metadata: { labels: { app: sleeper } }
    spec:
      terminationGracePeriodSeconds: 1
      containers:
        - name: sleeper
          image: localhost/routing-pause:1
          imagePullPolicy: Never # on the node already; nothing can be pulled
---
apiVersion: v1
kind: Service
metadata: { name: sleeper, namespace: bystander }
spec:
  selector: { app: sleeper }
  ports: [{ port: 9, targetPort: 9 }]
EOF
timeout 200 kubectl -n bystander rollout status deployment/sleeper --timeout=180s >&2 ||
  die "the bystander Deployment did not become ready"

# state: the cluster as this run must leave it, one line per object.
state() {
  local kinds
  kinds=$(kubectl api-resources --namespaced --verbs=list -o name | grep -vE '^events(\.events\.k8s\.io)?$' | paste -sd, -)
  kubectl -n bystander get "$kinds" -o json | jq -r '.items[] |
    "bystander \(.kind)/\(.metadata.name) uid=\(.metadata.uid) " +
    (if .kind == "Pod" then
      "spec=\(.spec | tojson) labels=\(.metadata.labels // {} | tojson)" +
      " annotations=\(.metadata.annotations // {} | tojson) " +
      ([.status.containerStatuses[]? | "restarts=\(.restartCount) id=\(.containerID)"] | join(" "))
    else "rv=\(.metadata.resourceVersion)" end)' | sort
  kubectl get namespaces -o json | jq -r '.items[] | "namespace \(.metadata.name) uid=\(.metadata.uid)"' | sort
  kinds=$(kubectl api-resources --namespaced=false --verbs=list -o name |
    grep -vE '^(namespaces|nodes|componentstatuses|.*reviews.*|apiservices\.apiregistration\.k8s\.io)$' | paste -sd, -)
  kubectl get "$kinds" -o json | jq -r '.items[] | "cluster \(.kind)/\(.metadata.name) uid=\(.metadata.uid) rv=\(.metadata.resourceVersion)"' | sort
  kubectl get nodes -o json | jq -r '.items[] | "node \(.metadata.name) uid=\(.metadata.uid)"'
  echo "Corefile sha256=$(sha256sum <"$S/Corefile" | cut -d' ' -f1)"
}
state >"$scratch/before"
pod_versions() { kubectl -n bystander get pods -o json | jq -r '.items[] | "\(.metadata.name) rv=\(.metadata.resourceVersion)"' | sort; }
pod_versions >"$scratch/pods-before"

say "KUBECONFIG=$KUBECONFIG K8S_ROWS=$rows K8S_CONTEXT=$CONTEXT ./verify.sh --k8s"
rc=0
K8S_ROWS=$rows K8S_CONTEXT=$CONTEXT ./verify.sh --k8s || rc=$?
state >"$scratch/after"
if ! diff -q "$scratch/pods-before" <(pod_versions) >/dev/null; then
  say "pods whose status their kubelet wrote during the run (resourceVersion before, after):"
  join "$scratch/pods-before" <(pod_versions) | awk '$2 != $3' >&2 || true
fi

if ((rc != 0)); then
  echo "FAIL ./verify.sh --k8s with K8S_CONTEXT exited $rc"
  exit 1
fi
if ! diff -u "$scratch/before" "$scratch/after"; then
  echo "FAIL the run changed what is not its own (diff above: - before, + after)"
  exit 1
fi
echo "ok   K8S_CONTEXT=$CONTEXT: bystander and the cluster as before ($(grep -c '^bystander ' "$scratch/after") objects in bystander, $(grep -c . "$scratch/after") lines compared)"
