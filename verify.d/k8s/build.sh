#!/usr/bin/env bash
# Builds the single-node cluster's binaries from the Go module proxy, once:
# kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and
# kube-proxy (Kubernetes v1.37.2), and CoreDNS v1.15.0.
#
#   verify.d/k8s/build.sh            # prints the directory that holds them
#
# Nothing is downloaded but Go modules, and nothing is installed outside
# K8S_BIN_DIR. A second run finds the binaries and returns at once. A cold
# build takes about 6.5 to 8 minutes on 2 cores and leaves about 4 GB in Go's
# build cache and 0.7 GB of modules (docs/kubernetes.md).
#
# Why a wrapper module: k8s.io/kubernetes replaces its 33 staging modules
# (k8s.io/api, k8s.io/client-go, ...) with ./staging paths that its module
# zip does not carry, so `go install k8s.io/kubernetes/cmd/...@v1.37.2` is
# refused. A module that requires it and points each staging module at its
# own published version (v0.37.2) builds the same code.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.37.2}
COREDNS_VERSION=${COREDNS_VERSION:-v1.15.0}
K8S_BIN_DIR=${K8S_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/routing-k8s/$K8S_VERSION}
components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)

say() { printf 'k8s build: %s\n' "$*" >&2; }
command -v go >/dev/null || { say "needs go (1.26 builds Kubernetes $K8S_VERSION)"; exit 2; }

have_all() {
  local c
  for c in "${components[@]}" coredns; do [[ -x $K8S_BIN_DIR/$c ]] || return 1; done
}
if have_all; then echo "$K8S_BIN_DIR"; exit 0; fi
mkdir -p "$K8S_BIN_DIR"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if ! have_k8s=$(for c in "${components[@]}"; do [[ -x $K8S_BIN_DIR/$c ]] || echo missing; done) || [[ -n $have_k8s ]]; then
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  staging_version=v0.${K8S_VERSION#v1.}
  say "Kubernetes $K8S_VERSION: the staging modules at $staging_version"
  mod_file=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f $mod_file ]] || { say "go mod download k8s.io/kubernetes@$K8S_VERSION gave no go.mod"; exit 1; }
  {
    echo "module routing.local/k8s-build"
    echo
    echo "go 1.26.0"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    # Each `k8s.io/x => ./staging/src/k8s.io/x` becomes `k8s.io/x => k8s.io/x v0.37.2`.
    sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*$|replace \1 => \1 '"$staging_version"'|p' "$mod_file"
  } >"$work/go.mod"
  grep -q '^replace k8s.io/api ' "$work/go.mod" || { say "no staging replacements found in $mod_file"; exit 1; }
  pkgs=()
  for c in "${components[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c"); done
  ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  say "go build ${components[*]} (cold: about 6.5 min on 2 cores)"
  (cd "$work" && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$K8S_BIN_DIR/" "${pkgs[@]}")
fi

if [[ ! -x $K8S_BIN_DIR/coredns ]]; then
  say "CoreDNS $COREDNS_VERSION (cold: about 2 min)"
  CGO_ENABLED=0 GOBIN=$K8S_BIN_DIR go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@$COREDNS_VERSION"
fi
have_all || { say "a binary is missing in $K8S_BIN_DIR"; exit 1; }
echo "$K8S_BIN_DIR"
