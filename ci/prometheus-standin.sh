# shellcheck shell=bash
# ci/prometheus-standin.sh: sourced by ci/standin-images.sh (Podman) and
# ci/docker-standin-images.sh (Docker), which both stand Debian's prometheus
# package in for the official prom/prometheus image.

# prometheus_standin DIR: the root of a stand-in image in DIR: this host's
# prometheus at /bin/prometheus, where the official image has it, with every
# library it loads at the same paths (Debian builds it with cgo), and the
# database folder the official image's user owns.
prometheus_standin() {
  local dir=$1 bin lib
  bin=$(command -v prometheus) || { echo "prometheus is not on PATH: apt-get install prometheus" >&2; exit 2; }
  mkdir -p "$dir/bin" "$dir/prometheus" "$dir/etc/prometheus"
  ldd "$bin" 2>/dev/null | grep -o '/[^ ]*' | sort -u | while read -r lib; do
    cp --parents -L "$lib" "$dir/"
  done
  cp "$bin" "$dir/bin/prometheus"
  # Owned by the user the image runs as, as in the official image: the
  # volume compose mounts there takes this owner.
  chown 65534:65534 "$dir/prometheus"
}
