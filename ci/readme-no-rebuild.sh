#!/usr/bin/env bash
# ci/readme-no-rebuild.sh: after `./verify.sh --local`'s build, every
# `cargo run` the README gives compiles nothing.
#
# Run with: ci/readme-no-rebuild.sh   (from anywhere; .ci/run runs it right
# after `./verify.sh --local`, when the build below has nothing left to do)
#
# Cargo unifies features over the packages one command builds, so a
# dependency that routing-server and routing-clients need with different
# features is compiled once for the pair (verify.sh) and again for each
# package alone (the README's `cargo run --release -p ...`): minutes of
# release-profile build for a reader who was told it would compile nothing.
# The workspace Cargo.toml lines the features up; this check keeps them so.
#
# 1. The pair, built by the very command verify.d/launchers.sh runs.
# 2. Each `cargo run` command in README.md (inline or in a console block),
#    and each client binary the README names, built alone with the same
#    package, binary and profile: `cargo build` in place of `cargo run`,
#    the program's own arguments dropped.
#
# Prints one line per command; exits 1, with the crates that were compiled,
# if any command compiled one; 2 if the README or launchers.sh has no command
# to check. Commands with `--example` are listed but not checked: verify.sh
# does not build examples, and an example builds with the package's
# dev-dependencies and their features, so its first run compiles by design.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TERM_COLOR=never
readme=${README:-README.md}
build_timeout_s=${BUILD_TIMEOUT_S:-3600} # a cold release build of the pair takes 15 to 27 minutes on the 2-core VM

die() { echo "readme-no-rebuild: $*" >&2; exit 2; }
for tool in cargo timeout grep sed; do
  command -v "$tool" >/dev/null || die "$tool is required (cargo: https://rustup.rs; the rest: coreutils, grep, sed)"
done

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# ─── 1. verify.sh's build ────────────────────────────────────────────────────
pair=$(sed -n 's/.*bounded "[^"]*" \(cargo build [^>]*[^ >]\) *>&2.*/\1/p' verify.d/launchers.sh | head -n 1)
[[ -n $pair ]] || die "no 'bounded ... cargo build ...' line in verify.d/launchers.sh"
echo "verify.sh's build: $pair" >&2
read -r -a pair_cmd <<<"$pair"
timeout "$build_timeout_s" "${pair_cmd[@]}" >&2

# ─── 2. The README's commands ────────────────────────────────────────────────
# The command as written, up to the program's arguments (` -- `), a comment,
# the end of an inline code span or of a table cell.
mapfile -t commands < <(grep -o 'cargo run [^`|#]*' "$readme" | sed 's/ -- .*//; s/ *$//' | sort -u)
# Every client binary the README names (`pooled-client` in "the same with
# `pooled-client`"), built as its lever's command would build it.
while read -r bin; do
  if grep -qw -- "$bin" "$readme"; then commands+=("cargo run --release -p routing-clients --bin $bin"); fi
done < <(sed -n 's/^name = "\(.*\)"$/\1/p' clients/Cargo.toml | grep -v '^routing-clients$')
mapfile -t commands < <(printf '%s\n' "${commands[@]}" | sort -u)
((${#commands[@]} > 0)) || die "no 'cargo run' command in $readme"

failed=0
for command in "${commands[@]}"; do
  if [[ $command == *--example* ]]; then
    printf 'skip  %s (an example: built with dev-dependencies, not by verify.sh)\n' "$command"
    continue
  fi
  read -r -a args <<<"${command#cargo run }"
  log=$scratch/build.log
  timeout "$build_timeout_s" cargo build --locked "${args[@]}" >"$log" 2>&1 ||
    { cat "$log" >&2; die "cargo build --locked ${args[*]} failed"; }
  if grep -q '^ *Compiling ' "$log"; then
    printf 'FAIL  %s compiled %d crate(s) after verify.sh'\''s build:\n' "$command" "$(grep -c '^ *Compiling ' "$log")"
    grep '^ *Compiling ' "$log" | sed 's/^ */        /'
    failed=1
  else
    printf 'ok    %s\n' "$command"
  fi
done

if ((failed)); then
  echo "readme-no-rebuild: a package alone builds a dependency with other features than the pair;" \
    "find it with 'cargo tree -e features -i CRATE' and line the features up in the workspace Cargo.toml" >&2
  exit 1
fi
