#!/usr/bin/env bash
# Builds local Podman stand-ins for the images verify.sh's container path
# uses, for CI's Podman run.
#
# Why this exists: CI machines reach no container registry, so they cannot
# pull rust, distroless, grpcurl or ghz images. Readers pull the real images;
# CI builds look-alikes locally. The Podman run takes the binaries from the
# host's release build; the Dockerfile's own build stage runs in CI's Docker
# run (ci/docker-standin-images.sh). Here:
#
#   runtime   FROM scratch + the glibc libraries our binaries link (ldd),
#             standing in for gcr.io/distroless/cc-debian12:nonroot
#   binaries  FROM scratch + host-built release binaries in /out,
#             standing in for the Dockerfile's `build` stage
#   server    the repository's real Dockerfile, final stage, built on the two above
#   grpcurl   FROM scratch + a `go install`ed grpcurl, entrypoint /bin/grpcurl
#   ghz       FROM scratch + a `go install`ed ghz, entrypoint /ghz
#   prometheus FROM scratch + this host's prometheus (Debian's package, which
#             CI installs) and the libraries it links, standing in for the
#             official prom/prometheus 2.x: entrypoint /bin/prometheus, user
#             nobody (compose.yaml gives its whole command)
#   haproxy   FROM scratch + this host's haproxy (Debian's package, which CI
#             installs) and the libraries it links, standing in for the
#             official haproxy:2.6: the same entrypoint behaviour for
#             compose.yaml's use (haproxy -W -db -f the config), user 99
#
# Usage: ci/standin-images.sh RELEASE_DIR GO_BIN_DIR
# Prints the image overrides for verify.sh as shell assignments on stdout.
# STANDIN_TAG (default "ci") tags every image: two runs on one host at once
# need two tags.
set -euo pipefail

release_dir=${1:?usage: ci/standin-images.sh RELEASE_DIR GO_BIN_DIR}
go_bin_dir=${2:?usage: ci/standin-images.sh RELEASE_DIR GO_BIN_DIR}
repo=$(cd "$(dirname "$0")/.." && pwd)
bins=(routing-server footgun-client pooled-client gzip-client keepalive-client window-client balance-client deadline-client retry-client routing-link)
tag=${STANDIN_TAG:-ci}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build() { # build NAME CONTEXT [podman build args...]
  local name=$1 context=$2
  shift 2
  podman build --quiet --tag "localhost/standin-$name:$tag" "$@" "$context" >&2
}

# runtime: every shared library the binaries load, at the same paths.
mkdir -p "$work/runtime"
for bin in "${bins[@]}"; do ldd "$release_dir/$bin"; done |
  grep -o '/[^ ]*' | sort -u | while read -r lib; do
    cp --parents -L "$lib" "$work/runtime/"
  done
# distroless's nonroot user has a home of its own (compose.yaml mounts the
# certificates volume there, and a new volume takes its owner).
mkdir -p "$work/runtime/home/nonroot"
printf 'FROM scratch\nCOPY . /\nCOPY --chown=65532:65532 home/nonroot /home/nonroot\n' >"$work/runtime/Containerfile"
build runtime "$work/runtime"

# binaries: what the Dockerfile's build stage would leave in /out.
mkdir -p "$work/binaries/out"
for bin in "${bins[@]}"; do cp "$release_dir/$bin" "$work/binaries/out/"; done
printf 'FROM scratch\nCOPY out /out\n' >"$work/binaries/Containerfile"
build binaries "$work/binaries"

# server: the real Dockerfile; only its base images are swapped.
podman build --quiet --format docker --tag "localhost/standin-routing-server:$tag" \
  --build-arg "RUNTIME_IMAGE=localhost/standin-runtime:$tag" \
  --build-arg "BINARIES=localhost/standin-binaries:$tag" \
  --file "$repo/Dockerfile" "$repo" >&2

# grpcurl and ghz: same entrypoints as the published images.
mkdir -p "$work/grpcurl" "$work/ghz"
cp "$go_bin_dir/grpcurl" "$work/grpcurl/"
printf 'FROM scratch\nCOPY grpcurl /bin/grpcurl\nENTRYPOINT ["/bin/grpcurl"]\n' >"$work/grpcurl/Containerfile"
build grpcurl "$work/grpcurl"
cp "$go_bin_dir/ghz" "$work/ghz/"
printf 'FROM scratch\nCOPY ghz /ghz\nENTRYPOINT ["/ghz"]\n' >"$work/ghz/Containerfile"
build ghz "$work/ghz"

# haproxy: the host's binary and every library it loads, at the same paths.
haproxy_bin=$(command -v haproxy) || { echo "haproxy is not on PATH: apt-get install haproxy" >&2; exit 2; }
mkdir -p "$work/haproxy/usr/sbin"
ldd "$haproxy_bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
  cp --parents -L "$lib" "$work/haproxy/"
done
cp "$haproxy_bin" "$work/haproxy/usr/sbin/haproxy"
printf '%s\n' 'FROM scratch' 'COPY . /' 'USER 99:99' \
  'ENTRYPOINT ["/usr/sbin/haproxy", "-W", "-db"]' 'CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]' \
  >"$work/haproxy/Containerfile"
build haproxy "$work/haproxy"

# prometheus: the host's binary and its libraries (ci/prometheus-standin.sh).
# shellcheck source=ci/prometheus-standin.sh
source "$repo/ci/prometheus-standin.sh"
prometheus_standin "$work/prometheus"
# Imported from a tarball, not built: a build's COPY would make /prometheus
# root's, and its user must own it.
tar --numeric-owner -C "$work/prometheus" -c . |
  podman import --change 'USER 65534:65534' --change 'ENTRYPOINT ["/bin/prometheus"]' \
    - "localhost/standin-prometheus:$tag" >/dev/null

echo "ROUTING_IMAGE=localhost/standin-routing-server:$tag"
echo "GRPCURL_IMAGE=localhost/standin-grpcurl:$tag"
echo "GHZ_IMAGE=localhost/standin-ghz:$tag"
echo "HAPROXY_IMAGE=localhost/standin-haproxy:$tag"
echo "PROMETHEUS_IMAGE=localhost/standin-prometheus:$tag"
