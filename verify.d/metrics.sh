# shellcheck shell=bash
# verify.d/metrics.sh: the verbs that read the servers' own metrics through
# Prometheus's HTTP API (the Prometheus that launchers.sh starts, at
# $prom_url), for rows 4d, 5c, 7d, 8d, 11a2, 11d2 and 12d2.
# verify.sh sources this file before it runs a line; the verbs it uses (die,
# jqn) and PROM_FRESH_S are verify.sh's, prom_log is launchers.sh's.
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# prom EXPR: the value of the PromQL instant query EXPR (its first series),
# or empty if it has none.
prom() {
  curl -fs --max-time 5 "$prom_url/api/v1/query" --data-urlencode "query=$1" 2>/dev/null |
    jq -r '.data.result[0].value[1] // empty' 2>/dev/null || true
}
# fresh SERVICE [TARGETS]: waits until TARGETS (1 unless said) targets of
# SERVICE are up in a scrape that began after this call, so the counters
# read next include every step taken before it. A new target shows up in
# Prometheus within about 5 s; a known one within a scrape interval (1 s).
fresh() {
  local service=$1 want=${2:-1} since got deadline=$((SECONDS + PROM_FRESH_S))
  since=$(date +%s.%N)
  while ((SECONDS < deadline)); do
    # timestamp() of a selector is its sample's time (of an expression,
    # it would be the query's): the scrape's start, for `up`.
    got=$(prom "count(timestamp(up{service=\"$service\"}) > $since and up{service=\"$service\"} == 1)")
    [[ ${got:-0} -ge $want ]] && return 0
    sleep 0.25
  done
  prom_log >&2
  die "Prometheus at $prom_url has no fresh scrape of $want $service target(s) after ${PROM_FRESH_S}s"
}
# value EXPR: the value of EXPR, 0 if it has no series yet (a counter not
# yet incremented).
value() {
  local got
  got=$(prom "$1")
  echo "${got:-0}"
}
# counted SERVICE EXPR: after a fresh scrape of SERVICE, the value of EXPR.
counted() {
  fresh "$1"
  value "$2"
}
# delta A B: B - A, as an integer when both are.
delta() { jqn --argjson a "${1:-0}" --argjson b "${2:-0}" '$b - $a'; }

}
