#!/usr/bin/env bash
# The documentation's size budget (issue 45): a page a reader can take in.
#
#   each docs/*.md   <= 25,600 bytes (25 KB)
#   all docs/*.md    <= 153,600 bytes (150 KB)
#   README.md        <= 18,000 bytes (the door, not the house)
#
# Prints every size against its bound, then exits 1 if any is over, 0 if
# none is, 2 if it cannot run. Bounds can be overridden from the
# environment, e.g. DOCS_PAGE_MAX=30000 ci/docs-budget.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PAGE_MAX=${DOCS_PAGE_MAX:-25600}    # bytes per docs/*.md page
TOTAL_MAX=${DOCS_TOTAL_MAX:-153600} # bytes for all docs/*.md together
README_MAX=${README_MAX:-18000}     # bytes for README.md

shopt -s nullglob
pages=(docs/*.md)
if ((${#pages[@]} == 0)) || [[ ! -f README.md ]]; then
  echo "docs-budget: no docs/*.md or no README.md under $(pwd)" >&2
  exit 2
fi

over=0
check() { # name size bound
  local verdict=ok
  if (($2 > $3)); then
    verdict=OVER
    over=1
  fi
  printf '%-4s %-28s %7d bytes (bound %d)\n' "$verdict" "$1" "$2" "$3"
}

total=0
for page in "${pages[@]}"; do
  size=$(wc -c <"$page")
  total=$((total + size))
  check "$page" "$size" "$PAGE_MAX"
done
check "docs/*.md in all" "$total" "$TOTAL_MAX"
check README.md "$(wc -c <README.md)" "$README_MAX"

if ((over)); then
  echo "docs-budget: FAIL: move detail to one page and link to it, or drop superseded figures (git keeps them)" >&2
  exit 1
fi
echo "docs-budget: PASS"
