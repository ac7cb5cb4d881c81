#!/usr/bin/env bash
# A throwaway single-node Kubernetes cluster on this machine, for
# `./verify.sh --k8s` when no cluster is given.
#
#   verify.d/k8s/cluster.sh up STATE_DIR      # prints KUBECONFIG=... on stdout
#   verify.d/k8s/cluster.sh load STATE_DIR IMAGE_ARCHIVE...   # docker/podman save archives
#   verify.d/k8s/cluster.sh dns STATE_DIR kubeadm|cached   # CoreDNS on that Corefile (see corefile)
#   verify.d/k8s/cluster.sh pid STATE_DIR CONTAINER_ID   # a container's process, as the host sees it
#   verify.d/k8s/cluster.sh down STATE_DIR    # stops everything it started, removes STATE_DIR
#
# What runs, all as processes of this machine, each started here and
# stopped by the PID recorded in STATE_DIR/pids (never by name):
#   etcd (Debian's), kube-apiserver, kube-controller-manager,
#   kube-scheduler, containerd (Debian's, with a config and socket of its
#   own), kubelet, kube-proxy (iptables mode) and CoreDNS, bound to the
#   node's address. Binaries: verify.d/k8s/build.sh.
#
# The network: a CNI bridge with host-local addresses (POD_CIDR) and the
# Service range (SERVICE_CIDR). Both exist only on this machine, in the
# pods' network namespaces that this cluster creates. The node address is
# the machine's own (eth0's by default).
#
# This is a test cluster, not a secure one: every component authenticates
# with one client certificate in system:masters, and the kubelet allows any
# caller the cluster's CA signed. It lives as long as one verify.sh run.
# Start to Ready takes a few seconds once the binaries exist.
#
# Needs root, and Debian's etcd-server, containerd, runc,
# containernetworking-plugins, iptables, conntrack and openssl.
set -euo pipefail

K8S_BIN_DIR=${K8S_BIN_DIR:-}
POD_CIDR=${POD_CIDR:-10.244.0.0/24}            # one node, one /24
SERVICE_CIDR=${SERVICE_CIDR:-10.96.0.0/16}
API_SERVICE_IP=${API_SERVICE_IP:-10.96.0.1}    # the first address of SERVICE_CIDR: the `kubernetes` Service
NODE_IP=${NODE_IP:-}
ETCD_PORT=${ETCD_PORT:-2379}
API_PORT=${API_PORT:-6443}
CNI_BIN_DIR=${CNI_BIN_DIR:-/usr/lib/cni}
BRIDGE=${BRIDGE:-cni-routing0}
UP_TIMEOUT_S=${UP_TIMEOUT_S:-120}

say() { printf 'cluster: %s\n' "$*" >&2; }
die() { say "$*"; exit 2; }
# host_save and host_restore: what the cluster changes on the host, put back.
# shellcheck source=verify.d/k8s/host.sh
source "$(dirname "$0")/host.sh"

usage() {
  sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

node_ip() {
  [[ -n $NODE_IP ]] && { echo "$NODE_IP"; return; }
  ip -4 -o addr show dev eth0 2>/dev/null | awk '{ split($4, a, "/"); print a[1]; exit }'
}

# start NAME COMMAND...: runs COMMAND in the background, its output in
# logs/NAME.log, and records its PID.
start() {
  local name=$1
  shift
  "$@" >"$S/logs/$name.log" 2>&1 &
  echo "$name $!" >>"$S/pids"
}

# wait_for WHAT SECONDS COMMAND...: polls COMMAND every 0.5 s.
wait_for() {
  local what=$1 deadline=$((SECONDS + $2))
  shift 2
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || die "$what not ready within ${UP_TIMEOUT_S}s; logs in $S/logs"
    sleep 0.5
  done
}

pki() {
  local d=$S/pki ip=$1
  mkdir -p "$d"
  (
    cd "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 2 -subj /CN=routing-test-ca 2>/dev/null
    # sign NAME SUBJECT [SAN]: a key and a certificate signed by the CA.
    sign() {
      openssl req -newkey rsa:2048 -nodes -keyout "$1.key" -out "$1.csr" -subj "$2" 2>/dev/null
      local ext=()
      if [[ -n ${3:-} ]]; then
        printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$3" >"$1.ext"
        ext=(-extfile "$1.ext")
      fi
      openssl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -out "$1.crt" -days 2 "${ext[@]}" 2>/dev/null
    }
    sign apiserver /CN=kube-apiserver \
      "IP:$ip,IP:127.0.0.1,IP:$API_SERVICE_IP,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost"
    # One identity for every component and for kubectl: system:masters.
    sign admin "/O=system:masters/CN=routing-test-admin"
    openssl genrsa -out sa.key 2048 2>/dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
  )
  local k=$S/kubeconfig
  cat >"$k" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: routing-test
  cluster:
    server: https://$ip:$API_PORT
    certificate-authority: $d/ca.crt
users:
- name: admin
  user:
    client-certificate: $d/admin.crt
    client-key: $d/admin.key
contexts:
- name: routing-test
  context: {cluster: routing-test, user: admin}
current-context: routing-test
EOF
}

containerd_config() {
  mkdir -p "$S/containerd/root" "$S/containerd/state" "$S/cni/net.d" "$S/cni/ipam"
  cat >"$S/containerd/config.toml" <<EOF
version = 2
root = "$S/containerd/root"
state = "$S/containerd/state"
[grpc]
  address = "$S/containerd/containerd.sock"
[ttrpc]
  address = "$S/containerd/containerd.sock.ttrpc"
[plugins."io.containerd.grpc.v1.cri"]
  # The pause container: a local image, since nothing can be pulled.
  sandbox_image = "localhost/routing-pause:1"
  # The pause container asks for oom_score_adj -998, which root without
  # CAP_SYS_RESOURCE may not set: every sandbox would fail to start.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # No systemd on this machine: cgroupfs, as the kubelet's cgroupDriver.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN_DIR"
    conf_dir = "$S/cni/net.d"
EOF
  cat >"$S/cni/net.d/10-routing.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "routing-test",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": { "type": "host-local", "ranges": [[{ "subnet": "$POD_CIDR" }]],
                "routes": [{ "dst": "0.0.0.0/0" }], "dataDir": "$S/cni/ipam" }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } },
    { "type": "loopback" }
  ]
}
EOF
}

kubelet_config() {
  mkdir -p "$S/kubelet"
  cat >"$S/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This machine's cgroups are v1, which the kubelet refuses unless told.
failCgroupV1: false
cgroupDriver: cgroupfs
failSwapOn: false
containerRuntimeEndpoint: unix://$S/containerd/containerd.sock
authentication:
  anonymous: { enabled: false }
  webhook: { enabled: false }
  x509: { clientCAFile: $S/pki/ca.crt }
authorization: { mode: AlwaysAllow }
clusterDNS: [$1]
clusterDomain: cluster.local
readOnlyPort: 0
# The disk is shared with builds: never evict or collect images for it.
imageGCHighThresholdPercent: 100
evictionHard: { memory.available: 100Mi, nodefs.available: "1%", imagefs.available: "1%" }
serializeImagePulls: false
EOF
  cat >"$S/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
# No IPVS in this kernel.
mode: iptables
clientConnection: { kubeconfig: $S/kubeconfig }
clusterCIDR: $POD_CIDR
# It cannot set the kernel's conntrack table size here: leave it.
conntrack: { maxPerCore: 0 }
# Loopback only; the defaults bind every address.
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# No NodePort on 127.0.0.1: kube-proxy would set route_localnet=1 on the
# host, which lets the local network reach services bound to loopback
# (CVE-2020-8558). Nothing here uses a NodePort.
iptables: { localhostNodePorts: false }
EOF
  corefile "$1" kubeadm
}

# corefile IP MODE: CoreDNS's configuration, as kubeadm v1.37.2 writes it
# for the cluster zone (its upstream, health and metrics plugins left out:
# nothing here needs them). MODE picks the cache on cluster names:
#   kubeadm  `ttl 30`, cluster names not cached (kubeadm since
#            kubernetes#128359): an answer is as fresh as the API's view;
#   cached   `ttl 30` and `cache 30` over every name, as kubeadm wrote it
#            before, and many clusters still run: an answer can be 30 s old.
# docs/kubernetes.md derives the rows' bounds and the pods' preStop from these.
corefile() {
  local cache
  case $2 in
    kubeadm) cache="cache 30 {
        disable success cluster.local
        disable denial cluster.local
    }" ;;
    cached) cache="cache 30" ;;
    *) die "unknown Corefile $2 (kubeadm or cached)" ;;
  esac
  cat >"$S/Corefile" <<EOF
.:53 {
    bind $1
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $S/kubeconfig routing-test
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    $cache
}
EOF
}

# dns MODE: CoreDNS again, on the Corefile MODE names (see corefile).
dns() {
  local ip b=$K8S_BIN_DIR
  ip=$(node_ip)
  corefile "$ip" "$1"
  stop_pid coredns
  start coredns "$b/coredns" -conf "$S/Corefile"
  wait_for "CoreDNS" 20 bash -c "exec 3<>/dev/tcp/$ip/53"
  say "CoreDNS on the $1 Corefile"
}

# The pause image: a static binary that sleeps until it is signalled, in a
# FROM scratch image, built with Go and saved by podman or docker.
pause_image() {
  local engine=$1 d=$S/pause
  mkdir -p "$d"
  cat >"$d/main.go" <<'EOF'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGTERM, syscall.SIGINT)
	<-c
}
EOF
  (cd "$d" && printf 'module pause\n\ngo 1.21\n' >go.mod && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o pause .)
  printf 'FROM scratch\nCOPY pause /pause\nENTRYPOINT ["/pause"]\n' >"$d/Containerfile"
  # Removed at `down` if this run made it; a reader's own copy stays.
  "$engine" image inspect localhost/routing-pause:1 >/dev/null 2>&1 || echo "$engine" >"$S/pause-built-by"
  "$engine" build --quiet -t localhost/routing-pause:1 -f "$d/Containerfile" "$d" >/dev/null
  "$engine" save -o "$d/pause.tar" localhost/routing-pause:1
  ctr_ images import "$d/pause.tar" >/dev/null
}

ctr_() { ctr -a "$S/containerd/containerd.sock" -n k8s.io "$@"; }

up() {
  [[ $EUID -eq 0 ]] || die "needs root (containerd, kubelet and iptables)"
  local c
  for c in etcd containerd runc iptables conntrack openssl ctr go; do
    command -v "$c" >/dev/null || die "needs $c: apt-get install etcd-server containerd runc containernetworking-plugins iptables conntrack openssl"
  done
  [[ -x $CNI_BIN_DIR/bridge ]] || die "no CNI plugins in $CNI_BIN_DIR: apt-get install containernetworking-plugins"
  [[ -n $K8S_BIN_DIR && -x $K8S_BIN_DIR/kube-apiserver ]] || die "K8S_BIN_DIR must hold the cluster's binaries (verify.d/k8s/build.sh)"
  local engine=${K8S_IMAGE_ENGINE:-}
  if [[ -z $engine ]]; then
    if command -v podman >/dev/null; then engine=podman; elif command -v docker >/dev/null; then engine=docker; fi
  fi
  [[ -n $engine ]] || die "needs podman or docker to build the pause image"
  local ip
  ip=$(node_ip)
  [[ -n $ip ]] || die "no node address: set NODE_IP"
  mkdir -p "$S/logs"
  : >"$S/pids"
  compgen -G '/var/run/netns/cni-*' >"$S/netns-before" || true
  echo "$ip" >"$S/node-ip"
  say "node $ip, pods $POD_CIDR, services $SERVICE_CIDR, state in $S"

  # Pods reach each other and Services through the bridge: forwarding on,
  # and bridged traffic through iptables (kube-proxy's rules). A FORWARD
  # policy of DROP (left by a Docker engine) would silently drop it all.
  # All of it, and what the kubelet and kube-proxy change, is saved first
  # and put back by `down` (host.sh).
  host_save "$S/host"
  sysctl -qw net.ipv4.ip_forward=1
  sysctl -qw net.bridge.bridge-nf-call-iptables=1 2>/dev/null || true
  iptables -P FORWARD ACCEPT

  pki "$ip"
  containerd_config
  kubelet_config "$ip"
  local k=$S/kubeconfig b=$K8S_BIN_DIR node
  # The node's name, as the kubelet would make it from the host name.
  node=$(hostname | tr '[:upper:]' '[:lower:]')

  start etcd etcd --name routing-test --data-dir "$S/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:0 --initial-cluster-state new
  start containerd containerd --config "$S/containerd/config.toml"
  start kube-apiserver "$b/kube-apiserver" --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address 0.0.0.0 --secure-port "$API_PORT" --advertise-address "$ip" \
    --service-cluster-ip-range "$SERVICE_CIDR" --authorization-mode RBAC \
    --client-ca-file "$S/pki/ca.crt" --tls-cert-file "$S/pki/apiserver.crt" --tls-private-key-file "$S/pki/apiserver.key" \
    --kubelet-client-certificate "$S/pki/admin.crt" --kubelet-client-key "$S/pki/admin.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$S/pki/sa.pub" --service-account-signing-key-file "$S/pki/sa.key"
  wait_for "the apiserver" "$UP_TIMEOUT_S" kubectl --kubeconfig "$k" get --raw /readyz
  start kube-controller-manager "$b/kube-controller-manager" --kubeconfig "$k" --leader-elect=false \
    --service-account-private-key-file "$S/pki/sa.key" --root-ca-file "$S/pki/ca.crt" \
    --cluster-signing-cert-file "$S/pki/ca.crt" --cluster-signing-key-file "$S/pki/ca.key" \
    --service-cluster-ip-range "$SERVICE_CIDR"
  start kube-scheduler "$b/kube-scheduler" --kubeconfig "$k" --leader-elect=false
  wait_for "containerd" "$UP_TIMEOUT_S" ctr_ version
  pause_image "$engine"
  start kubelet "$b/kubelet" --config "$S/kubelet/config.yaml" --kubeconfig "$k" \
    --root-dir "$S/kubelet/root" --cert-dir "$S/kubelet/pki" --node-ip "$ip" --hostname-override "$node"
  start kube-proxy "$b/kube-proxy" --config "$S/kube-proxy.yaml" --hostname-override "$node"
  start coredns "$b/coredns" -conf "$S/Corefile"

  wait_for "the node" "$UP_TIMEOUT_S" kubectl --kubeconfig "$k" wait --for=condition=Ready node --all --timeout=1s
  # The default ServiceAccount exists once the controller-manager has made it.
  wait_for "the default service account" "$UP_TIMEOUT_S" kubectl --kubeconfig "$k" get serviceaccount default
  say "ready in ${SECONDS}s"
  echo "KUBECONFIG=$k"
}

load() {
  local archive
  for archive in "$@"; do
    say "importing $(basename "$archive") into containerd"
    ctr_ images import "$archive" >/dev/null
  done
}

# stop_pid NAME: SIGTERM, then SIGKILL after a few seconds (the apiserver
# does not exit on SIGTERM within 30 s).
stop_pid() {
  local name=$1 pid
  pid=$(awk -v n="$name" '$1 == n { print $2 }' "$S/pids" 2>/dev/null | tail -n 1)
  [[ -n $pid ]] || return 0
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.25; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}

down() {
  [[ -d $S ]] || return 0
  say "stopping: the run's namespaces, its processes, then the host as it was"
  local k=$S/kubeconfig
  if [[ -f $k ]] && kubectl --kubeconfig "$k" get --raw /readyz >/dev/null 2>&1; then
    # Every namespace the run made, so the kubelet stops each pod itself
    # (its network namespace and address are then given back by CNI). Its
    # pods first, with 1 s of grace: deployment.yaml's 45 s preStop is for
    # clients, and a teardown has none.
    local ns
    for ns in $(kubectl --kubeconfig "$k" get namespace -l routing-test=true -o name 2>/dev/null); do
      kubectl --kubeconfig "$k" -n "${ns#namespace/}" delete pods --all --grace-period=1 --wait=false >/dev/null 2>&1 || true
    done
    kubectl --kubeconfig "$k" delete namespace -l routing-test=true --wait=true --timeout=60s >/dev/null 2>&1 || true
  fi
  stop_pid coredns
  # Not `kube-proxy --cleanup`: it deletes every KUBE-* chain, another
  # cluster's too. host_restore, below, removes this run's.
  stop_pid kube-proxy
  stop_pid kubelet
  # Any container still running: its task, then its container.
  if [[ -S $S/containerd/containerd.sock ]]; then
    local id
    for id in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$id" >/dev/null 2>&1 || true
    done
    sleep 1
    for id in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$id" >/dev/null 2>&1 || true; done
    for id in $(ctr_ containers ls -q 2>/dev/null); do ctr_ containers delete "$id" >/dev/null 2>&1 || true; done
  fi
  stop_pid containerd
  stop_pid kube-scheduler
  stop_pid kube-controller-manager
  stop_pid kube-apiserver
  stop_pid etcd
  # What outlives the processes: mounts under the state folder (the
  # kubelet's volumes, containerd's snapshots), the pods' network
  # namespaces, the bridge.
  local m
  awk -v s="$S" 'index($2, s) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
    umount -l "$m" 2>/dev/null || true
  done
  for m in /var/run/netns/cni-*; do
    [[ -e $m ]] || continue
    # Only the namespaces that appeared while this cluster ran.
    grep -qxF "$m" "$S/netns-before" 2>/dev/null || ip netns delete "$(basename "$m")" 2>/dev/null || true
  done
  ip link delete "$BRIDGE" 2>/dev/null || true
  # The rules and chains this run added, its sysctls (host.sh), and the
  # pause image if this run built it.
  host_restore "$S/host"
  local engine
  engine=$(cat "$S/pause-built-by" 2>/dev/null || true)
  if [[ -n $engine ]] && "$engine" image inspect localhost/routing-pause:1 >/dev/null 2>&1; then
    "$engine" rmi localhost/routing-pause:1 >/dev/null 2>&1 || say "could not remove localhost/routing-pause:1"
  fi
  rm -rf "$S"
  say "down"
}

cmd=${1:-}
S=${2:-}
[[ -n $cmd && -n $S ]] || usage
S=$(mkdir -p "$S" && cd "$S" && pwd)
case $cmd in
  up) up ;;
  load) shift 2; load "$@" ;;
  dns) dns "${3:?kubeadm or cached}" ;;
  # The host PID of a pod's container (its ID without containerd://), for
  # rows that signal a pod's process from the node, as a dead node would.
  pid) ctr_ tasks ls | awk -v id="${3:?a container ID}" '$1 == id { print $2 }' ;;
  down) down ;;
  *) usage ;;
esac
