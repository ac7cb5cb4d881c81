#!/usr/bin/env bash
# Starts or stops a throwaway Docker Engine, without systemd.
#
#   ci/docker-engine.sh start STATE_DIR   prints DOCKER_HOST=unix://... on stdout
#   ci/docker-engine.sh stop STATE_DIR    stops it and deletes STATE_DIR
#
# Why this exists: CI machines have no init system to start dockerd, and a CI
# run must leave nothing running. This engine keeps everything under
# STATE_DIR (images, build cache, containers, its socket, its own containerd),
# so it shares no state with another engine on the host, and is gone once
# stopped. Readers run their own Docker Engine or Docker Desktop.
set -euo pipefail

usage="usage: ci/docker-engine.sh start|stop STATE_DIR"
action=${1:?$usage}
dir=${2:?$usage}

start() {
  mkdir -p "$dir"
  dir=$(cd "$dir" && pwd)
  local socket=unix://$dir/docker.sock
  # --exec-opt native.cgroupdriver=cgroupfs: there is no systemd to ask.
  # --iptables/--ip6tables/--ip-forward/--ip-masq=false: leave the host's
  #   firewall and forwarding alone (Podman shares them). Containers then
  #   have no route out, which CI does not need: nothing is pulled.
  # The default bridge stays on: with --bridge=none every BuildKit RUN fails
  #   with "network bridge not found".
  dockerd --data-root "$dir/data" --exec-root "$dir/exec" --pidfile "$dir/dockerd.pid" \
    --host "$socket" --storage-driver overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \
    >"$dir/dockerd.log" 2>&1 </dev/null &
  echo $! >"$dir/dockerd.launched"
  for _ in $(seq 120); do
    if DOCKER_HOST=$socket timeout 5 docker version >/dev/null 2>&1; then
      echo "dockerd $(DOCKER_HOST=$socket docker version --format '{{.Server.Version}}') answers on $socket" >&2
      echo "DOCKER_HOST=$socket"
      return
    fi
    kill -0 "$(cat "$dir/dockerd.launched")" 2>/dev/null || break
    sleep 0.5
  done
  tail -n 30 "$dir/dockerd.log" >&2
  echo "dockerd did not start (log above)" >&2
  exit 2
}

stop() {
  [[ -d $dir ]] || return 0
  dir=$(cd "$dir" && pwd)
  local pid
  pid=$(cat "$dir/dockerd.pid" 2>/dev/null || cat "$dir/dockerd.launched" 2>/dev/null || true)
  if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
    # SIGTERM to this engine's own PID, never by name: dockerd then stops its
    # containers and its containerd (about 3 s).
    kill -TERM "$pid"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "dockerd $pid ignored SIGTERM for 30 s: SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  # Its containerd exits with it; after a SIGKILL it may not have.
  local containerd
  containerd=$(cat "$dir/exec/containerd/containerd.pid" 2>/dev/null || true)
  if [[ -n $containerd ]] && kill -0 "$containerd" 2>/dev/null; then kill -TERM "$containerd" || true; fi
  # dockerd creates the docker0 bridge and leaves it behind.
  if ip link show docker0 >/dev/null 2>&1; then ip link del docker0; fi
  # Anything still mounted below STATE_DIR would be deleted through the mount.
  findmnt -rn -o TARGET | { grep -F "$dir/" || true; } | sort -r | while read -r mount; do umount -l "$mount" || true; done
  rm -rf "$dir"
  echo "dockerd stopped, $dir removed" >&2
}

case $action in
  start) start ;;
  stop) stop ;;
  *) echo "$usage" >&2; exit 2 ;;
esac
