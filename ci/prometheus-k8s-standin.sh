#!/usr/bin/env bash
# Builds a Podman stand-in for docker.io/prom/prometheus:v2.55.1, the image
# deploy/k8s runs, for CI's `./verify.sh --k8s`, and prints its name.
#
# Why not Debian's package, as compose's stand-in (ci/prometheus-standin.sh):
# Debian builds Prometheus without Kubernetes service discovery, and the
# in-cluster Prometheus finds the pods through it ("field
# kubernetes_sd_configs not found in type config.ScrapeConfig"). So this
# builds Prometheus itself from its Go module at the image's version (about
# 4 min cold on 2 cores), once per machine, static (CGO off), into a
# FROM-scratch image with the official image's entrypoint and user.
#
# Usage: ci/prometheus-k8s-standin.sh    (STANDIN_TAG tags the image)
set -euo pipefail

version=${PROMETHEUS_K8S_VERSION:-2.55.1}
tag=${STANDIN_TAG:-ci}
image=localhost/standin-prometheus-k8s:$tag
dir=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}/prometheus-v$version

if [[ ! -x $dir/prometheus ]]; then
  echo "building Prometheus $version from its Go module (once)" >&2
  mkdir -p "$dir"
  # Prometheus 2.x is published as module version v0.x (2.55.1: v0.55.1).
  mod=$(go mod download -json "github.com/prometheus/prometheus@v0.${version#2.}" | jq -r .Dir)
  # `go install` refuses a module whose go.mod has exclude directives, as
  # Prometheus's has: build inside the downloaded module instead.
  (cd "$mod" && CGO_ENABLED=0 go build -trimpath \
    -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
    -o "$dir/prometheus.tmp" ./cmd/prometheus)
  mv "$dir/prometheus.tmp" "$dir/prometheus"
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bin" "$work/prometheus" "$work/etc/prometheus"
cp "$dir/prometheus" "$work/bin/prometheus"
# Owned by the image's user, as in the official image.
chown 65534:65534 "$work/prometheus"
tar --numeric-owner -C "$work" -c . |
  podman import --change 'USER 65534:65534' --change 'ENTRYPOINT ["/bin/prometheus"]' - "$image" >/dev/null
echo "$image"
