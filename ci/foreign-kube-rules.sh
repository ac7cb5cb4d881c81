#!/usr/bin/env bash
# ci/foreign-kube-rules.sh add|remove: KUBE-* rules and chains of "another
# cluster" on this host, as its kube-proxy and kubelet would leave them, so
# that CI can check that `./verify.sh --k8s` leaves them unchanged (issue 52;
# ci/host-snapshot.sh compares them). They match only 192.0.2.10, 192.0.2.11
# and 2001:db8::11, documentation addresses (RFC 5737, RFC 3849) that no
# process here uses (CI's machine may sit in 192.0.2.0/24 itself), so they
# change nothing while they exist.
#   add     puts them in (iptables and ip6tables)
#   remove  takes them out again
set -euo pipefail

add() {
  # nat: a Service portal chain and one Service, and the jump to it with
  # the comment kube-proxy writes (this cluster's kube-proxy writes the same
  # jump; it must find it, not add a second, and leave it).
  iptables -t nat -N KUBE-SERVICES
  iptables -t nat -N KUBE-SVC-FOREIGNTEST0001
  iptables -t nat -A KUBE-SVC-FOREIGNTEST0001 -m comment --comment "foreign/test" -j RETURN
  iptables -t nat -A KUBE-SERVICES -d 192.0.2.10/32 -p tcp --dport 9 -m comment --comment "foreign/test" -j KUBE-SVC-FOREIGNTEST0001
  iptables -t nat -A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
  # filter and IPv6: a chain of the other kubelet's.
  iptables -N KUBE-FOREIGN-CANARY
  iptables -A KUBE-FOREIGN-CANARY -s 192.0.2.11/32 -m comment --comment "foreign/test" -j RETURN
  ip6tables -N KUBE-FOREIGN-CANARY
  ip6tables -A KUBE-FOREIGN-CANARY -s 2001:db8::11/128 -m comment --comment "foreign/test" -j RETURN
}

remove() {
  iptables -t nat -D PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
  iptables -t nat -F KUBE-SERVICES
  iptables -t nat -X KUBE-SERVICES
  iptables -t nat -F KUBE-SVC-FOREIGNTEST0001
  iptables -t nat -X KUBE-SVC-FOREIGNTEST0001
  iptables -F KUBE-FOREIGN-CANARY
  iptables -X KUBE-FOREIGN-CANARY
  ip6tables -F KUBE-FOREIGN-CANARY
  ip6tables -X KUBE-FOREIGN-CANARY
}

case ${1:-} in
  add) add ;;
  remove) remove ;;
  *) echo "usage: ci/foreign-kube-rules.sh add|remove" >&2; exit 2 ;;
esac
