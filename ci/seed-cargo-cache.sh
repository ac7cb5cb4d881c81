#!/usr/bin/env bash
# Fills the Dockerfile's cargo registry cache mount with every crate that
# Cargo.lock names, so that the real image build needs no network.
#
# Why this exists: containers on CI machines have no route out (CI's engine
# runs without NAT), so `cargo build` inside `docker compose build` cannot
# reach crates.io. A small Dockerfile on the same base image runs
# `cargo fetch --locked` on the host's network, into a cache mount with the
# same target as the Dockerfile's. BuildKit keys a cache mount by its target
# unless it is given an id, so the real build then finds every crate there.
# Readers' builds fetch their crates themselves: none of this is needed there,
# and the repository's Dockerfile and compose.yaml stay as readers get them.
#
# The host's outbound TLS is re-signed by a CA that only the host trusts, so
# cargo in the container is handed the host's CA bundle.
#
# Usage: ci/seed-cargo-cache.sh   (DOCKER_HOST names CI's throwaway engine)
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
host_ca=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
rust_image=$(sed -n 's/^ARG RUST_IMAGE=//p' "$repo/Dockerfile")
# The Dockerfile's own mount option, id and sharing included if it has them.
registry_mount=$(grep -o -- '--mount=[^ ]*target=/usr/local/cargo/registry[^ ]*' "$repo/Dockerfile" | head -n 1 || true)
[[ -n $rust_image ]] || { echo "no ARG RUST_IMAGE in the Dockerfile" >&2; exit 2; }
[[ -n $registry_mount ]] ||
  { echo "the Dockerfile has no cache mount on /usr/local/cargo/registry: nothing to seed" >&2; exit 2; }

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
# The workspace as the Dockerfile sees it: its own .dockerignore still applies.
tar -C "$repo" --exclude=./target --exclude=./.git -c . | tar -C "$context" -x
cp "$host_ca" "$context/host-ca.crt"
cat >"$context/Dockerfile.seed" <<EOF
# syntax=docker/dockerfile:1
FROM $rust_image
WORKDIR /src
COPY . .
RUN $registry_mount \\
    CARGO_HTTP_CAINFO=/src/host-ca.crt cargo fetch --locked
EOF

echo "seeding the cargo registry cache mount: cargo fetch --locked on the host network" >&2
timeout 1200 docker buildx build --progress plain --network host \
  --file "$context/Dockerfile.seed" --tag grpc-tuning-ci/cargo-seed "$context" >&2
