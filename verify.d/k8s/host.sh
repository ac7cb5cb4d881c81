# shellcheck shell=bash
# verify.d/k8s/host.sh: what the local cluster changes on the host, saved
# before `cluster.sh up` and put back by `cluster.sh down` (issue 52).
# Sourced by cluster.sh; uses its `say`.
#
# Saved and put back, because the cluster's programs change them on the
# host and none has a switch not to:
#   - sysctls: net.* (forwarding on every interface and net.ipv4.ip_forward,
#     which the bridge and kube-proxy need; accept_redirects, which the
#     kernel turns off with forwarding; route_localnet if anything sets it),
#     kernel.panic, kernel.panic_on_oops, vm.overcommit_memory and
#     vm.panic_on_oom, which the kubelet sets on the host (it has no
#     option to leave them: protectKernelDefaults only makes it refuse to
#     start when they differ). Each one the run changed gets its old value
#     back; a key whose interface is gone is skipped.
#   - iptables and ip6tables: the cluster's own chains (KUBE-*, CNI-*) and
#     the rules that name them, as they were (rules_undo), a built-in
#     chain's policy, and a table or built-in chain the run made, once
#     empty. Nothing else is rewritten: another program's rules, added
#     before or during the run, stay.
#   - nfacct counters (kube-proxy's ct_state_invalid_dropped_pkts): those
#     the run made are deleted once no rule uses them. The kernel lists them
#     only to the `nfacct` tool (Debian's nfacct); without it they stay,
#     counting nothing, and teardown says so.
# A KUBE-* chain that existed before (another cluster's, on this host) is
# put back as it was; while the run lasts, this cluster's kube-proxy owns
# it. Only a network namespace of its own would keep two apart.
#
# host_save DIR: saves the state into DIR (created).
# host_restore DIR: puts it back; a no-op if DIR holds no saved state.

# The sysctls saved: the host snapshot's (ci/host-snapshot.sh) less
# kernel.keys.*, which nothing here writes.
HOST_SYSCTLS='^(net\.|kernel\.panic |kernel\.panic_on_oops |vm\.overcommit_memory |vm\.panic_on_oom )'

host_save() {
  local d=$1 v
  mkdir -p "$d"
  sysctl -a 2>/dev/null | grep -E "$HOST_SYSCTLS" >"$d/sysctl" || true
  for v in iptables ip6tables; do
    command -v "$v-save" >/dev/null || continue
    # No table yet (no IPv6 rules on this host, say): nothing was there.
    "$v-save" >"$d/$v" 2>/dev/null || : >"$d/$v"
  done
  if command -v nft >/dev/null; then
    nft_chains >"$d/nft-chains"
    nft list tables 2>/dev/null | awk '{ print $2, $3 }' >"$d/nft-tables" || true
  fi
  if command -v nfacct >/dev/null; then nfacct_names >"$d/nfacct"; fi
}

# nfacct_names: the nfacct counters the kernel holds, one name per line.
nfacct_names() {
  nfacct list 2>/dev/null | sed -n 's/^.* = \([^;]*\);$/\1/p' | sort || true
}

# rules_undo BEFORE AFTER: an `iptables-restore --noflush` input that takes
# the rules from AFTER back to BEFORE for the cluster's own chains only:
# those named KUBE-* (kube-proxy's, the kubelet's) or CNI-* (the bridge
# plugin's), and the rules elsewhere that name one.
#   - A KUBE-*/CNI-* chain that BEFORE has and the run changed or removed
#     (kube-proxy rewrites its chains, and deletes KUBE-SVC-* ones it does
#     not know): declared again, which creates or empties it, and refilled
#     with BEFORE's rules, in order.
#   - A rule AFTER has and BEFORE has not, in any other chain, that names a
#     KUBE-*/CNI-* chain: deleted (counted, so a duplicate the run added
#     goes and the one that was there stays). Docker's or anyone's rules
#     added meanwhile stay.
#   - A KUBE-*/CNI-* chain that AFTER has and BEFORE has not: emptied, and
#     once all of them are, deleted.
# A built-in chain's policy the run changed comes as a comment line
# `# policy TABLE CHAIN POLICY`, which iptables-restore skips.
rules_undo() {
  awk '
    function ours(c) { return c ~ /^(KUBE|CNI)-/ }
    { file = FILENAME == ARGV[1] ? 1 : 2 }
    /^\*/ { table = substr($0, 2); tables[table] = 1; next }
    /^:/ {
      split(substr($0, 2), a, " ")
      if (file == 1) { had[table, a[1]] = a[2]; hadorder[table] = hadorder[table] " " a[1] }
      else { now[table, a[1]] = a[2]; noworder[table] = noworder[table] " " a[1] }
      next
    }
    /^-A / {
      split($0, a, " ")
      if (file == 1) { rules[table, a[2]] = rules[table, a[2]] "\n" $0; before[table SUBSEP $0]++; next }
      nowrules[table, a[2]] = nowrules[table, a[2]] "\n" $0
      if (ours(a[2]) || before[table SUBSEP $0]-- > 0) next
      if ($0 ~ /(KUBE|CNI)-/) del[table] = del[table] "\n-D " substr($0, 4)
      next
    }
    END {
      for (t in tables) {
        decl = ""; refill = ""; flush = ""; drop = ""; policy = ""
        n = split(hadorder[t], cs, " ")
        for (i = 1; i <= n; i++) {
          c = cs[i]
          if (ours(c) && had[t, c] == "-" && (!((t, c) in now) || rules[t, c] != nowrules[t, c])) {
            decl = decl "\n:" c " - [0:0]"; refill = refill rules[t, c]
          } else if (had[t, c] != "-" && ((t, c) in now) && now[t, c] != had[t, c]) {
            policy = policy "\n# policy " t " " c " " had[t, c]
          }
        }
        n = split(noworder[t], cs, " ")
        for (i = 1; i <= n; i++) {
          c = cs[i]
          if (ours(c) && !((t, c) in had) && now[t, c] == "-") { flush = flush "\n-F " c; drop = drop "\n-X " c }
        }
        # Every new chain emptied before any is deleted: one may jump to another.
        if (decl del[t] refill flush drop policy != "") print "*" t decl del[t] refill flush drop policy "\nCOMMIT"
      }
    }' "$1" "$2"
}

# nft_chains: "FAMILY TABLE CHAIN", one line per chain nftables holds.
nft_chains() {
  nft list chains 2>/dev/null | awk '$1 == "table" { t = $2 " " $3 } $1 == "chain" { print t, $2 }' || true
}

host_restore() {
  local d=$1 v t c p key value family table chain
  [[ -d $d ]] || return 0
  for v in iptables ip6tables; do
    [[ -f $d/$v ]] || continue
    "$v-save" >"$d/$v.after" 2>/dev/null || continue
    rules_undo "$d/$v" "$d/$v.after" >"$d/$v.undo"
    [[ -s $d/$v.undo ]] || continue
    "$v-restore" --noflush <"$d/$v.undo" || say "could not remove the $v rules this run added ($d/$v.undo)"
    while read -r _ _ t c p; do
      "$v" -t "$t" -P "$c" "$p" || say "could not put back $v's $t $c policy $p"
    done < <(grep '^# policy ' "$d/$v.undo")
  done
  # A table the run made (the kubelet's ip6tables `mangle`, say) outlives
  # its chains under iptables-nft: deleted once empty, if nft is here.
  for v in iptables ip6tables; do
    if [[ ! -f $d/$v.after ]] || ! command -v nft >/dev/null; then continue; fi
    family=ip
    [[ $v == ip6tables ]] && family=ip6
    while read -r t; do
      grep -qx "\*$t" "$d/$v" && continue
      "$v-save" -t "$t" 2>/dev/null | grep -qE '^-A |^:[^ ]+ - ' && continue
      nft delete table "$family" "$t" 2>/dev/null || say "could not delete the empty $family $t table this run made"
    done < <(sed -n 's/^\*//p' "$d/$v.after")
  done
  # A built-in chain that iptables-nft made for the run's first rule in it
  # (ip6tables' INPUT in a table that had none, say) outlives the rule:
  # deleted once empty. Only the five built-in names; in a table that
  # existed before (a new table went above), chains or none: an empty
  # ip6 filter table was here before a run in this repository's CI.
  if [[ -f $d/nft-chains && -f $d/nft-tables ]]; then
    while read -r family table chain; do
      [[ $chain =~ ^(PREROUTING|INPUT|FORWARD|OUTPUT|POSTROUTING)$ ]] || continue
      grep -qx "$family $table $chain" "$d/nft-chains" && continue
      grep -qx "$family $table" "$d/nft-tables" || continue
      nft list chain "$family" "$table" "$chain" 2>/dev/null |
        awk '$1 !~ /^(table|chain|type|})$/ && NF > 0 { found = 1 } END { exit !found }' && continue
      nft delete chain "$family" "$table" "$chain" 2>/dev/null || say "could not delete the empty chain $family $table $chain this run made"
    done < <(nft_chains)
  fi
  # After the rules: the kernel keeps a counter a rule still names.
  if [[ -f $d/nfacct ]]; then
    while read -r c; do
      nfacct del "$c" >/dev/null 2>&1 || say "could not delete the nfacct counter $c this run made"
    done < <(nfacct_names | comm -13 "$d/nfacct" -)
  elif [[ -f $d/sysctl ]]; then
    say "kube-proxy's nfacct counters (ct_state_invalid_dropped_pkts) stay, unused: install nfacct to have them removed"
  fi
  # ip_forward first: writing it sets forwarding (and accept_redirects) on
  # every interface, which the lines after it then put back one by one.
  [[ -f $d/sysctl ]] || return 0
  sysctl -a 2>/dev/null | grep -E "$HOST_SYSCTLS" >"$d/sysctl.after" || true
  awk -F ' = ' '
    { file = FILENAME == ARGV[1] ? 1 : 2 }
    file == 1 { before[$1] = substr($0, length($1) + 4); next }
    ($1 in before) && before[$1] != substr($0, length($1) + 4) {
      line = $1 "=" before[$1]
      if ($1 == "net.ipv4.ip_forward") first = line; else rest = rest line "\n"
    }
    END { if (first != "") print first; printf "%s", rest }' "$d/sysctl" "$d/sysctl.after" |
    while IFS= read -r key; do
      value=${key#*=}
      sysctl -qw "${key%%=*}=$value" 2>/dev/null || say "could not put back ${key%%=*} = $value"
    done
}
