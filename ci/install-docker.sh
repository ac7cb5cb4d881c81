#!/usr/bin/env bash
# Installs a Docker Engine, and builds the pinned compose v2 and buildx CLI
# plugins and the Dockerfile frontend from their Go modules, once, into a
# cache directory. Prints that directory on stdout: it holds docker-compose,
# docker-buildx and dockerfile-frontend.
#
# Why this exists: CI machines come with the Docker CLI only and can reach no
# container registry and no release download, but Debian's packages and the
# Go module proxy. Debian bookworm's docker.io brings the engine (dockerd,
# containerd, runc, docker-proxy) but no compose v2 and no buildx package.
# Readers install Docker Engine or Docker Desktop, which ship both plugins and
# pull the frontend themselves.
set -euo pipefail

COMPOSE_VERSION=v2.40.3
BUILDX_VERSION=v0.38.2
BUILDKIT_VERSION=v0.34.2 # the dockerfile frontend (ci/docker-standin-images.sh)
dir=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}/docker-compose-$COMPOSE_VERSION-buildx-$BUILDX_VERSION-buildkit-$BUILDKIT_VERSION
mkdir -p "$dir"

if ! command -v dockerd >/dev/null || ! command -v containerd >/dev/null; then
  echo "installing docker.io (dockerd, containerd, runc) from Debian" >&2
  timeout 600 apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq --no-install-recommends docker.io >&2
fi
command -v go >/dev/null || { echo "go is required: https://go.dev/doc/install" >&2; exit 2; }

# module_dir MODULE@VERSION: the module's source, downloaded through the proxy.
module_dir() {
  timeout 600 go mod download -json "$1" | jq -r .Dir
}

# compose refuses `go install` (its go.mod has exclude lines), so it is built
# inside its downloaded module. CGO off: one static binary.
if ! "$dir/docker-compose" version 2>/dev/null | grep -qF "$COMPOSE_VERSION"; then
  echo "docker compose $COMPOSE_VERSION: building from its Go module" >&2
  src=$(module_dir "github.com/docker/compose/v2@$COMPOSE_VERSION")
  (cd "$src" && CGO_ENABLED=0 timeout 1200 go build -trimpath \
    -ldflags "-X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" \
    -o "$dir/docker-compose" ./cmd)
else
  echo "docker compose $COMPOSE_VERSION: cached in $dir" >&2
fi

# buildx: `docker build` with BuildKit, and what compose delegates builds to.
if ! "$dir/docker-buildx" version 2>/dev/null | grep -qF "$BUILDX_VERSION"; then
  echo "docker buildx $BUILDX_VERSION: go install" >&2
  CGO_ENABLED=0 GOBIN="$dir" timeout 1200 go install -trimpath \
    -ldflags "-X github.com/docker/buildx/version.Version=$BUILDX_VERSION" \
    "github.com/docker/buildx/cmd/buildx@$BUILDX_VERSION"
  mv "$dir/buildx" "$dir/docker-buildx"
else
  echo "docker buildx $BUILDX_VERSION: cached in $dir" >&2
fi

# The frontend that `# syntax=docker/dockerfile:1` names; it has no version
# flag, so the file's presence in this versioned directory is the cache.
if [[ ! -x $dir/dockerfile-frontend ]]; then
  echo "dockerfile frontend (buildkit $BUILDKIT_VERSION): building from its Go module" >&2
  src=$(module_dir "github.com/moby/buildkit@$BUILDKIT_VERSION")
  (cd "$src" && CGO_ENABLED=0 timeout 1200 go build -trimpath \
    -o "$dir/dockerfile-frontend.tmp" ./frontend/dockerfile/cmd/dockerfile-frontend)
  mv "$dir/dockerfile-frontend.tmp" "$dir/dockerfile-frontend"
else
  echo "dockerfile frontend (buildkit $BUILDKIT_VERSION): cached in $dir" >&2
fi

echo "$dir"
