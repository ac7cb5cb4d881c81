#!/usr/bin/env bash
# Makes Podman and a pinned podman-compose usable on a CI machine, and prints
# the directory holding podman-compose (for PATH) on stdout. Idempotent.
#
# Why this exists: CI runs verify.sh on Podman too, and CI machines run it in
# a sandbox where Debian's Podman fails twice before any container starts:
#   - `podman run` sets each container's open-files limit, which needs
#     CAP_SYS_RESOURCE, which the sandbox lacks: "setrlimit RLIMIT_NOFILE:
#     Operation not permitted". Default ulimits at or below the sandbox's own
#     (`ulimit -n`, `ulimit -u`) need no capability.
#   - the default runtime, crun, then stops at "cgroups in hybrid mode not
#     supported" (the sandbox mounts cgroup v1 controllers beside a v2 tree).
#     runc runs there.
# Both settings go into /etc/containers/containers.conf. Readers' Podman
# needs neither. Podman without systemd also never runs healthchecks on its
# own, which is why verify.sh polls readiness itself.
set -euo pipefail

PODMAN_COMPOSE_VERSION=1.6.0
venv=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}/podman-compose-$PODMAN_COMPOSE_VERSION
conf=/etc/containers/containers.conf

if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
  echo "installing podman and runc from Debian" >&2
  timeout 600 apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -qq podman runc >&2
fi

cap() { # cap LIMIT MAX: the sandbox's own limit, or MAX if that is lower
  if [[ $1 == unlimited ]] || (($1 > $2)); then echo "$2"; else echo "$1"; fi
}
nofile=$(cap "$(ulimit -n)" 20000)
nproc=$(cap "$(ulimit -u)" 1000)
wanted=$(printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n[engine]\nruntime = "runc"\n' \
  "$nofile" "$nofile" "$nproc" "$nproc")
if [[ ! -f $conf || $(cat "$conf") != "$wanted" ]]; then
  echo "writing $conf (runc, ulimits nofile=$nofile nproc=$nproc)" >&2
  mkdir -p "$(dirname "$conf")"
  if [[ -f $conf ]]; then cp "$conf" "$conf.bak"; fi
  printf '%s\n' "$wanted" >"$conf"
fi

if ! "$venv/bin/podman-compose" --version 2>/dev/null | grep -qF "$PODMAN_COMPOSE_VERSION"; then
  echo "installing podman-compose==$PODMAN_COMPOSE_VERSION into $venv" >&2
  python3 -m venv "$venv"
  timeout 600 "$venv/bin/pip" install --quiet "podman-compose==$PODMAN_COMPOSE_VERSION" >&2
fi

echo "$venv/bin"
