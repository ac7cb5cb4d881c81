#!/usr/bin/env bash
# One name per shell function across verify.sh and the verify.d/*.sh it
# sources. They all share one shell, so a function defined in two files is
# silently replaced by the one sourced last: 10-network.sh's `phase` was, by
# 13-deadlines.sh's, and row 10e's summary lines came out empty under
# "$2: unbound variable". Prints each name defined twice with its files and
# exits 1; exits 0 when there is none.
set -euo pipefail
cd "$(dirname "$0")/.."

dups=$(grep -HoE '^[A-Za-z_][A-Za-z0-9_]*\(\)' verify.sh verify.d/*.sh |
  awk -F: '{ sub(/\(\)$/, "", $2); files[$2] = files[$2] " " $1; count[$2]++ }
           END { for (name in count) if (count[name] > 1) print name ":" files[name] }' | sort)
if [[ -n $dups ]]; then
  echo "verify-functions: defined in more than one sourced file (the last one wins):" >&2
  echo "$dups" >&2
  exit 1
fi
echo "ok   every function verify.sh sources has one definition"
