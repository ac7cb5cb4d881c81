#!/usr/bin/env bash
# ci/vendor-h2-check.sh: vendor/h2 is the published h2 of the pinned version
# plus the files vendor/README.md names as patched, nothing more or less.
#
# Run with: ci/vendor-h2-check.sh   (from anywhere; .ci/run runs it first)
#
# 1. The pinned version, from the root Cargo.toml's `h2 = "=X.Y.Z"`.
# 2. The published crate, from Cargo's own cache ($CARGO_HOME/registry/cache).
#    Cargo never downloads a crate that [patch.crates-io] replaces, so when
#    it is missing, a throwaway manifest that depends on h2 =X.Y.Z fetches it.
#    vendor/h2's own Cargo.toml must then say X.Y.Z.
# 3. `diff -r` of the unpacked crate against vendor/h2: every file that
#    differs must be one that vendor/README.md's table names (`src/...`), and
#    every file it names must differ (a patch lost in a re-vendoring fails too).
# 4. A warning, not a failure, when crates.io has a newer h2: the policy in
#    docs/ci.md ("Dependencies") says who takes it.
#
# Prints `ok` and what it compared on stdout; exits 1 with the unexpected
# diff if vendor/h2 is not what vendor/README.md says, 2 if it cannot check.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo_home=${CARGO_HOME:-$HOME/.cargo}
diff_lines=${DIFF_LINES:-40} # lines of an unexpected diff shown, per file

die() { echo "vendor-h2-check: $*" >&2; exit 2; }
for tool in cargo diff tar sort timeout; do
  command -v "$tool" >/dev/null || die "$tool is required (cargo: https://rustup.rs; the rest: coreutils, diffutils, tar)"
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# ─── 1. The pinned version ───────────────────────────────────────────────────
version=$(sed -n 's/^h2 = "=\([0-9][0-9.]*\)".*/\1/p' Cargo.toml)
[[ -n $version ]] || die 'no exact pin (h2 = "=X.Y.Z") in Cargo.toml'

# ─── 2. The published crate ──────────────────────────────────────────────────
find_crate() { compgen -G "$cargo_home/registry/cache/*/h2-$version.crate" | head -n 1 || true; }
crate=$(find_crate)
if [[ -z $crate ]]; then
  echo "h2-$version.crate is not in $cargo_home/registry/cache: fetching it" >&2
  mkdir -p "$scratch/fetch/src"
  : >"$scratch/fetch/src/lib.rs"
  printf '[package]\nname = "h2-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n[dependencies]\nh2 = "=%s"\n\n[workspace]\n' \
    "$version" >"$scratch/fetch/Cargo.toml"
  timeout 600 cargo fetch --quiet --manifest-path "$scratch/fetch/Cargo.toml" ||
    die "cargo fetch of h2 =$version failed (is crates.io reachable?)"
  crate=$(find_crate)
  [[ -n $crate ]] || die "cargo fetch left no h2-$version.crate in $cargo_home/registry/cache"
fi
tar -xzf "$crate" -C "$scratch"
published=$scratch/h2-$version
# Checked after the fetch, so that a new pin brings its crate into the cache
# for re-vendoring (vendor/README.md).
vendored=$(sed -n '/^\[package\]/,/^\[/s/^version = "\(.*\)"$/\1/p' vendor/h2/Cargo.toml | head -n 1)
[[ $vendored == "$version" ]] || {
  echo "FAIL vendor/h2 is h2 $vendored, Cargo.toml pins =$version ($crate is the one to vendor)"
  exit 1
}

# ─── 3. The diff ─────────────────────────────────────────────────────────────
# The patched files, as vendor/README.md's table names them.
# shellcheck disable=SC2016 # the backticks are literal, as the table writes them
mapfile -t documented < <(grep '^|' vendor/README.md | grep -o '`src/[^`]*`' | tr -d '`' | sort -u)
((${#documented[@]} > 0)) || die "vendor/README.md's table names no patched file (\`src/...\`)"
# Every path that differs, relative to the crate's root.
mapfile -t differing < <(diff -rq "$published" vendor/h2 |
  sed -e "s|^Files $published/\([^ ]*\) and .* differ\$|\1|" \
    -e "s|^Only in $published\(/*[^:]*\): \(.*\)|\1/\2 (only in the published crate)|" \
    -e 's|^Only in vendor/h2\(/*[^:]*\): \(.*\)|\1/\2 (only in vendor/h2)|' -e 's|^/||' | sort)

failed=0
for path in "${differing[@]}"; do
  if ! printf '%s\n' "${documented[@]}" | grep -qxF -- "$path"; then
    echo "FAIL vendor/h2/$path differs from h2 $version as published, and vendor/README.md does not list it:"
    if [[ -f $published/$path && -f vendor/h2/$path ]]; then
      diff -u "$published/$path" "vendor/h2/$path" | sed "s|$scratch/||" | head -n "$diff_lines" || true
    fi
    failed=1
  fi
done
for path in "${documented[@]}"; do
  if ! printf '%s\n' "${differing[@]}" | grep -qxF -- "$path"; then
    echo "FAIL vendor/README.md lists vendor/h2/$path as patched, but it is h2 $version's file as published"
    failed=1
  fi
done
if ((failed)); then
  echo "vendor-h2-check: vendor/h2 is not h2 $version plus the patches vendor/README.md lists;" \
    "re-vendor it (vendor/README.md, \"Re-vendoring\") or document the change" >&2
  exit 1
fi
echo "ok   vendor/h2 is h2 $version ($crate) plus ${#documented[@]} patched files: ${documented[*]}"

# ─── 4. A newer h2 ───────────────────────────────────────────────────────────
# Asked from the scratch directory, so that cargo reports crates.io's newest
# version rather than this workspace's.
latest=$(cd "$scratch" && timeout 60 cargo info --quiet h2 2>/dev/null | sed -n 's/^version: \([0-9][0-9.]*\).*/\1/p' | head -n 1) || true
if [[ -z $latest ]]; then
  echo "WARNING: could not ask crates.io for h2's newest version ('cargo info h2' failed); not checked"
elif [[ $latest != "$version" && $(printf '%s\n%s\n' "$version" "$latest" | sort -V | tail -n 1) == "$latest" ]]; then
  echo "WARNING: crates.io has h2 $latest, newer than the pinned $version: re-vendor it with the patches" \
    "(vendor/README.md, \"Re-vendoring\"; policy in docs/ci.md, \"Dependencies\")"
else
  echo "ok   h2 $version is crates.io's newest"
fi
