#!/usr/bin/env bash
# Installs the pinned real grpcurl and ghz with `go install`, once, into a
# cache directory, and prints that directory (for PATH) on stdout.
#
# Why this exists: CI machines cannot pull the published grpcurl and ghz
# images or release binaries, but they can reach the Go module proxy. Readers
# use the images (compose) or the same `go install` lines (README, --local).
set -euo pipefail

GRPCURL_VERSION=v1.9.3
GHZ_VERSION=v0.121.0
tools_dir=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}
bin_dir="$tools_dir/grpcurl-$GRPCURL_VERSION-ghz-$GHZ_VERSION"
mkdir -p "$bin_dir"

install() { # install NAME MODULE_PATH VERSION VERSION_FLAG
  local name=$1 module=$2 version=$3 flag=$4
  if "$bin_dir/$name" "$flag" 2>&1 | grep -qF "${version#v}"; then
    echo "$name $version: cached in $bin_dir" >&2
    return
  fi
  echo "$name $version: go install $module@$version" >&2
  # CGO off: static binaries that also run in a FROM scratch image. The
  # version is stamped the way the upstream release builds do it.
  CGO_ENABLED=0 GOBIN="$bin_dir" timeout 900 \
    go install -ldflags "-X main.version=$version" "$module@$version"
}

command -v go >/dev/null || { echo "go is required: https://go.dev/doc/install" >&2; exit 2; }
install grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl "$GRPCURL_VERSION" -version
install ghz github.com/bojand/ghz/cmd/ghz "$GHZ_VERSION" --version
echo "$bin_dir"
