#!/usr/bin/env bash
# Builds a local stand-in for every image the repository's Docker path pulls,
# under the exact name the repository uses, in the engine DOCKER_HOST names.
#
# Why this exists: CI machines reach no container registry, yet CI must run
# the reader's own command, `./verify.sh`, with the unmodified compose.yaml
# and Dockerfile. Readers pull the real images; this script makes look-alikes
# from Debian packages, this host's Rust toolchain and `go install`ed tools.
# Run it only against a throwaway engine (ci/docker-engine.sh): there the
# stand-ins carry the public names, which would mislead anywhere else.
#
#   the Rust builder   Dockerfile `ARG RUST_IMAGE`: Debian bookworm (minbase,
#                      by debootstrap) with gcc, libc6-dev and make (jemalloc
#                      is built from C), as the official image has, plus this host's toolchain
#                      (`rustc --print sysroot`) where rustup puts it there,
#                      and the official image's ENV
#   the runtime        Dockerfile `ARG RUNTIME_IMAGE`, distroless cc: the
#                      files of libc6, libgcc-s1, libgomp1, libstdc++6 and
#                      libssl3, the CA bundle and the nonroot user; no shell
#   grpcurl, ghz       compose.yaml's GRPCURL_IMAGE and GHZ_IMAGE defaults:
#                      the static `go install`ed binaries with the published
#                      images' entrypoints (/bin/grpcurl, /ghz)
#   haproxy            compose.yaml's HAPROXY_IMAGE default, the official
#                      haproxy:2.6: this host's haproxy (Debian bookworm's
#                      2.6 package, which CI installs) and the libraries it
#                      links, run as the official image runs it for
#                      compose.yaml (haproxy -W -db -f its config, user 99)
#   prometheus         compose.yaml's PROMETHEUS_IMAGE default, the official
#                      prom/prometheus 2.x: this host's prometheus (Debian
#                      bookworm's 2.42 package, which CI installs) and the
#                      libraries it links, entrypoint /bin/prometheus, user
#                      nobody, as the official image (compose.yaml gives
#                      its whole command)
#   the frontend       the Dockerfile's `# syntax=` line: BuildKit's
#                      dockerfile frontend, built by ci/install-docker.sh
#
# Every name is read from the Dockerfile and compose.yaml, so a new pin there
# gets its stand-in without an edit here.
#
# Usage: ci/docker-standin-images.sh GO_BIN_DIR DOCKER_TOOLS_DIR
set -euo pipefail

usage="usage: ci/docker-standin-images.sh GO_BIN_DIR DOCKER_TOOLS_DIR"
go_bin_dir=${1:?$usage}
docker_tools_dir=${2:?$usage}
repo=$(cd "$(dirname "$0")/.." && pwd)
cache=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
# The packages the rootfs needs: the official slim image's compiler and libc
# headers, and the CA bundle. The runtime takes its libraries from here too.
rootfs_packages=ca-certificates,gcc,libc6-dev,make
runtime_packages=(libc6 libgcc-s1 libgomp1 libstdc++6 libssl3)

default_of() { # default_of FILE SED_EXPR: the one value SED_EXPR prints from FILE
  local value
  value=$(sed -n "$2" "$repo/$1")
  [[ -n $value && $value != *$'\n'* ]] || { echo "cannot read one image name from $1 ($2)" >&2; exit 2; }
  echo "$value"
}
rust_image=$(default_of Dockerfile 's/^ARG RUST_IMAGE=//p')
runtime_image=$(default_of Dockerfile 's/^ARG RUNTIME_IMAGE=//p')
frontend_image=$(default_of Dockerfile '1s/^# syntax=//p')
# sed, not the shell, reads these ${...}:
# shellcheck disable=SC2016
grpcurl_image=$(default_of compose.yaml 's/.*\${GRPCURL_IMAGE:-\([^}]*\)}.*/\1/p')
# shellcheck disable=SC2016
ghz_image=$(default_of compose.yaml 's/.*\${GHZ_IMAGE:-\([^}]*\)}.*/\1/p')
# shellcheck disable=SC2016
haproxy_image=$(default_of compose.yaml 's/.*\${HAPROXY_IMAGE:-\([^}]*\)}.*/\1/p')
# shellcheck disable=SC2016
prometheus_image=$(default_of compose.yaml 's/.*\${PROMETHEUS_IMAGE:-\([^}]*\)}.*/\1/p')

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# prometheus_standin DIR: this host's prometheus at /bin/prometheus in DIR,
# with every library it loads at the same paths (shared with
# ci/standin-images.sh).
# shellcheck source=ci/prometheus-standin.sh
source "$repo/ci/prometheus-standin.sh"

# import NAME DIR [docker import --change ...]: an image from a directory tree.
import() {
  local name=$1 dir=$2
  shift 2
  tar --numeric-owner -C "$dir" -c . | docker import "$@" - "$name" >/dev/null
  echo "stand-in $name" >&2
}

# ─── Debian bookworm root filesystem, cached as a tarball ────────────────────
rootfs_tar=$cache/debian-bookworm-minbase-${rootfs_packages//,/-}.tar
if [[ ! -s $rootfs_tar ]]; then
  if ! command -v debootstrap >/dev/null; then
    echo "installing debootstrap from Debian" >&2
    timeout 600 apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends debootstrap >&2
  fi
  echo "debootstrap bookworm (minbase + $rootfs_packages) from $DEBIAN_MIRROR" >&2
  mkdir -p "$cache"
  timeout 1200 debootstrap --variant=minbase --include="$rootfs_packages" bookworm "$work/debootstrap" \
    "$DEBIAN_MIRROR" >"$work/debootstrap.log" 2>&1 ||
    { tail -n 30 "$work/debootstrap.log" >&2; exit 2; }
  # Neither the downloaded packages nor device nodes belong in an image.
  rm -rf "$work/debootstrap/var/cache/apt/archives/"*.deb "$work/debootstrap/dev/"*
  tar --numeric-owner -C "$work/debootstrap" -cf "$rootfs_tar.tmp" .
  mv "$rootfs_tar.tmp" "$rootfs_tar"
  rm -rf "$work/debootstrap"
else
  echo "Debian rootfs: cached in $rootfs_tar" >&2
fi
rootfs=$work/rootfs
mkdir -p "$rootfs"
tar --numeric-owner -C "$rootfs" -xf "$rootfs_tar"

# ─── The Rust builder ────────────────────────────────────────────────────────
sysroot=$(rustc --print sysroot)
rust_version=$(rustc -vV | sed -n 's/^release: //p')
host=$(rustc -vV | sed -n 's/^host: //p')
wanted=${rust_image##*:} # 1.95-bookworm
if [[ ${wanted%%-*} != "${rust_version%.*}" && ${wanted%%-*} != "$rust_version" ]]; then
  echo "warning: $rust_image stands in with this host's Rust $rust_version" >&2
fi
toolchain=/usr/local/rustup/toolchains/$rust_version-$host
mkdir -p "$rootfs$toolchain" "$rootfs/usr/local/cargo/bin"
# bin and lib are the toolchain; share/ is documentation.
cp -a "$sysroot/bin" "$sysroot/lib" "$rootfs$toolchain/"
for tool in "$rootfs$toolchain"/bin/*; do
  ln -s "$toolchain/bin/${tool##*/}" "$rootfs/usr/local/cargo/bin/"
done
import "$rust_image" "$rootfs" \
  --change "ENV RUSTUP_HOME=/usr/local/rustup" \
  --change "ENV CARGO_HOME=/usr/local/cargo" \
  --change "ENV PATH=/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV RUST_VERSION=$rust_version" \
  --change 'CMD ["bash"]'

# ─── The runtime: distroless cc ──────────────────────────────────────────────
runtime=$work/runtime
mkdir -p "$runtime/etc/ssl/certs" "$runtime/tmp" "$runtime/home/nonroot"
for pkg in "${runtime_packages[@]}"; do
  list=$(compgen -G "$rootfs/var/lib/dpkg/info/$pkg:*.list" || compgen -G "$rootfs/var/lib/dpkg/info/$pkg.list") ||
    { echo "$pkg is not in the Debian rootfs: add it to rootfs_packages" >&2; exit 2; }
  while read -r path; do
    [[ -d $rootfs$path && ! -L $rootfs$path ]] && continue
    [[ -e $rootfs$path || -L $rootfs$path ]] || continue
    # Bookworm merges /usr: /lib is a link to usr/lib. Copy each file to its
    # real directory; the links themselves are copied below.
    parent=$(readlink -f "$rootfs$(dirname "$path")")
    mkdir -p "$runtime${parent#"$rootfs"}"
    cp -a "$rootfs$path" "$runtime${parent#"$rootfs"}/"
  done <"$list"
done
for link in bin lib lib64 sbin; do
  if [[ -L $rootfs/$link && ! -L $runtime/$link ]]; then cp -a "$rootfs/$link" "$runtime/"; fi
done
cp "$rootfs/etc/ssl/certs/ca-certificates.crt" "$runtime/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
  >"$runtime/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$runtime/etc/group"
chown 65532:65532 "$runtime/home/nonroot"
chmod 1777 "$runtime/tmp"
import "$runtime_image" "$runtime" \
  --change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
  --change "ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt" \
  --change "USER 65532" \
  --change "WORKDIR /home/nonroot"

# ─── grpcurl and ghz ─────────────────────────────────────────────────────────
mkdir -p "$work/grpcurl/bin" "$work/ghz"
cp "$go_bin_dir/grpcurl" "$work/grpcurl/bin/"
import "$grpcurl_image" "$work/grpcurl" --change 'ENTRYPOINT ["/bin/grpcurl"]'
cp "$go_bin_dir/ghz" "$work/ghz/"
import "$ghz_image" "$work/ghz" --change 'ENTRYPOINT ["/ghz"]'

# ─── haproxy ─────────────────────────────────────────────────────────────────
haproxy_bin=$(command -v haproxy) || { echo "haproxy is not on PATH: apt-get install haproxy" >&2; exit 2; }
mkdir -p "$work/haproxy/usr/sbin" "$work/haproxy/usr/local/etc/haproxy"
ldd "$haproxy_bin" | grep -o '/[^ ]*' | sort -u | while read -r lib; do
  cp --parents -L "$lib" "$work/haproxy/"
done
cp "$haproxy_bin" "$work/haproxy/usr/sbin/haproxy"
import "$haproxy_image" "$work/haproxy" \
  --change 'USER 99:99' \
  --change 'ENTRYPOINT ["/usr/sbin/haproxy", "-W", "-db"]' \
  --change 'CMD ["-f", "/usr/local/etc/haproxy/haproxy.cfg"]'

# ─── prometheus ──────────────────────────────────────────────────────────────
prometheus_standin "$work/prometheus"
import "$prometheus_image" "$work/prometheus" \
  --change 'USER 65534:65534' \
  --change 'ENTRYPOINT ["/bin/prometheus"]'

# ─── The Dockerfile frontend ─────────────────────────────────────────────────
# BuildKit runs it as a gateway; the label says it needs no network.
mkdir -p "$work/frontend/bin"
cp "$docker_tools_dir/dockerfile-frontend" "$work/frontend/bin/"
import "$frontend_image" "$work/frontend" \
  --change 'ENTRYPOINT ["/bin/dockerfile-frontend"]' \
  --change 'LABEL moby.buildkit.frontend.network.none="true"'
