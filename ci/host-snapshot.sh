#!/usr/bin/env bash
# ci/host-snapshot.sh: the host state that `./verify.sh --k8s` must leave as
# it found it (issue 52), on stdout, one section per kind. Two snapshots of
# an untouched host are identical: what moves by itself is left out by name
# below. CI takes one before `./verify.sh --k8s` and one after, and fails
# on any difference (`diff`).
#
#   ci/host-snapshot.sh > before.txt; ...; ci/host-snapshot.sh > after.txt
#   diff before.txt after.txt
#
# Needs root (iptables-save). A tool that is missing prints one line saying
# so, the same both times.
set -euo pipefail

section() { printf '\n## %s\n' "$1"; }
# or_missing TOOL: runs "$@" if TOOL exists, else says it is missing.
or_missing() {
  local tool=$1
  shift
  if command -v "$tool" >/dev/null; then "$@"; else echo "($tool not installed)"; fi
}

# Sysctls that move by themselves: the count of tracked connections.
MOVING_SYSCTLS='^net\.netfilter\.nf_conntrack_count '

section "sysctl: net.*, kernel.panic*, vm.overcommit_memory, vm.panic_on_oom, kernel.keys.*"
sysctl -a 2>/dev/null |
  grep -E '^(net\.|kernel\.panic|vm\.overcommit_memory |vm\.panic_on_oom |kernel\.keys\.)' |
  grep -vE "$MOVING_SYSCTLS" | sort

# Rules without their packet counters, and without the save's dated comments.
# A host with no table of a kind makes its save exit non-zero: that is
# "no rules", not a failed snapshot.
for v in iptables ip6tables; do
  section "$v-save"
  { or_missing "$v-save" "$v-save" 2>/dev/null || true; } | grep -v '^#' | sed -E 's/\[[0-9]+:[0-9]+\]$/[-]/' || true
done
section "nft list ruleset"
{ or_missing nft nft list ruleset 2>/dev/null || true; } | sed -E 's/counter packets [0-9]+ bytes [0-9]+/counter/'

# nfacct counters by name (kube-proxy makes one), without their counts.
section "nfacct counters"
{ or_missing nfacct nfacct list 2>/dev/null || true; } | sed -n 's/^.* = \([^;]*\);$/\1/p' | sort

section "podman images"
or_missing podman podman images --format '{{.Repository}}:{{.Tag}} {{.ID}}' 2>/dev/null | sort
section "docker images"
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
  docker images --format '{{.Repository}}:{{.Tag}} {{.ID}}' | sort
else
  echo "(no Docker daemon)"
fi

section "mounts"
awk '{ print $2, $3, $1 }' /proc/self/mounts | sort

# Links and addresses by name, without counters or interface indexes.
section "links"
ip -br link show | awk '{ print $1, $3 }' | sort
section "addresses"
ip -br addr show | awk '{ $2 = ""; print }' | sort

section "listening sockets (protocol, address)"
ss -Hltn | awk '{ print "tcp", $4 }' | sort -u
ss -Hlun | awk '{ print "udp", $4 }' | sort -u

# Processes by name: user space only (not kthreadd's children), and not the
# shells and tools that run CI and this script.
section "processes"
ps -e -o ppid=,pid=,comm= |
  awk '$1 != 2 && $2 != 2 { print $3 }' |
  grep -vxE 'bash|sh|sleep|ps|awk|mawk|gawk|grep|sort|sed|tee|timeout|cat|head|tail|diff|sudo|python3?|ci-run|run|host-snapshot.s' |
  sort -u
