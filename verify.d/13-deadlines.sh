# shellcheck shell=bash
# verify.d/13-deadlines.sh: verify.sh's section 13, lever 6: deadlines that
# reach the server, cancellation that stops the work, retries that do not
# multiply an outage (docs/deadlines.md). Three more routing-servers, each
# with its metrics on, started by start_extra (launchers.sh): --local, with
# --fault-* on free ports (every server it starts serves metrics); compose, the
# `faults` profile's server-slow, server-outage and server-metered, which
# compose.yaml gives the same settings and metrics on port 9464. What the
# server did is read from its /metrics by the clients (--metrics).
# verify.sh sources this file before it runs a line and calls deadline_rows
# after section 12; the verbs it uses are verify.sh's and launchers.sh's.
# jq programs use $variables inside single quotes on purpose, and verify.sh
# assigns the variables this file reads:
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds: rows 13 ─────────────────────────────────────────────────────────
SLOW_DELAY_MS=2000                            # server-slow's --fault-delay-ms (compose.yaml's the same): a dependency far slower than any deadline here
SLOW_DEFAULT_DEADLINE_S=1                     # server-slow's --default-deadline-secs (compose.yaml's the same): under the delay, so no_deadline shows the server's bound within the phase (the default, 30 s, would take 30 s)
DEADLINE_MS=${DEADLINE_MS:-200}               # the deadline of endpoint_timeout and request_deadline (ms), as in grpc-go's experiment
DEADLINE_MARGIN_MS=${DEADLINE_MARGIN_MS:-300} # scheduling margin (ms): a call ends, and the server's calls in flight are back to 0, within deadline + this; timers fire within 1 ms, a busy 2-core runner or a container network adds tens of ms, and 200 + 300 ms is still a quarter of the delay
DEADLINE_RATE=${DEADLINE_RATE:-50}            # calls/s in the rate phases: 2 s of them, 100 calls, so calls in flight at the deadline are about 10
CANCEL_SEEN=${CANCEL_SEEN:-0.8}               # cancelled: share of the 500 calls the server had in flight just before the cancel >= this, or the 0 after it proves nothing
NAIVE_MIN=${NAIVE_MIN:-3}                     # outage, 5 attempts, no throttling: server calls per client call >= this (5 by arithmetic)
THROTTLED_MAX=${THROTTLED_MAX:-1.5}           # outage, A6 throttling (10 tokens, 0.1): <= this (1 + 4/calls = 1.08 at 50 calls)
RETRY_CALLS=${RETRY_CALLS:-50}                # retry-client calls per phase

# ─── Verbs ───────────────────────────────────────────────────────────────────
# phase NAME PHASE FILTER: field of one phase of a client's line.
phase() { field "$1" ".phases.$2 | $3"; }

# ─── Rows ────────────────────────────────────────────────────────────────────
deadline_rows() {
  local deadline_ok try limit_ms slow_metrics outage_target outage_metrics healthy_target healthy_metrics
  limit_ms=$((DEADLINE_MS + DEADLINE_MARGIN_MS))
  start_extra slow server-slow "13 slow server reports SERVING" \
    --fault-delay-ms "$SLOW_DELAY_MS" --default-deadline-secs "$SLOW_DEFAULT_DEADLINE_S"
  slow_metrics=$(metrics_of slow server-slow)
  # One run, four phases on the slow server; only the timing check is tried again.
  for try in $(seq "$TIMING_ATTEMPTS"); do
    capture deadlines client_at "$extra_target" deadline-client --metrics "$slow_metrics" \
      --rate "$DEADLINE_RATE" --deadline-ms "$DEADLINE_MS" --settle-ms "$DEADLINE_MARGIN_MS"
    deadline_ok=$(phase deadlines request_deadline "(.max_s * 1000 <= $limit_ms)")
    [[ $deadline_ok == true ]] && break
    if ((try < TIMING_ATTEMPTS)); then
      row "13a request_deadline: calls end (try $try)" "$(phase deadlines request_deadline '.max_s * 1000 | round') ms" "<= $limit_ms ms" "retry"
    fi
  done
  # tonic ends a call whose deadline passed with CANCELLED "Timeout expired"
  # when its own timer fires before the server's DEADLINE_EXCEEDED arrives
  # (ended_by_client_timer): both mean the deadline, and nothing else may end a call.
  check "13a request_deadline ${DEADLINE_MS} ms: calls end" \
    "$(phase deadlines request_deadline '"max \(.max_s * 1000 | round) ms, \(.statuses | to_entries | map("\(.key)=\(.value)") | join(","))"')" \
    "<= $limit_ms ms, DEADLINE_EXCEEDED or tonic's timer" \
    "$(phase deadlines request_deadline "(.max_s * 1000 <= $limit_ms) and (.ended_by_client_timer + (.statuses.DEADLINE_EXCEEDED // 0) == .calls) and .grpc_timeout_on_wire != null")" deadlines
  check "13b request_deadline: server in flight" \
    "peak $(phase deadlines request_deadline .server.in_flight_peak), $(phase deadlines request_deadline .server.in_flight_after_settle) ${DEADLINE_MARGIN_MS} ms after" \
    "peak <= rate x $limit_ms ms, then 0" \
    "$(phase deadlines request_deadline ".server.in_flight_after_settle == 0 and .server.in_flight_peak <= $DEADLINE_RATE * $limit_ms / 1000 and .server.started == .calls")" deadlines
  # What the wire showed: tonic's Endpoint::timeout sends no grpc-timeout
  # (its GrpcTimeout layer enforces it in the client). The server still
  # stops, because the client's give-up resets the stream: CANCELLED.
  check "13c endpoint_timeout: on the wire, server" \
    "$(phase deadlines endpoint_timeout '"grpc-timeout \(.grpc_timeout_on_wire // "none"), \(.server.ended | to_entries | map("\(.key)=\(.value)") | join(",")), \(.server.in_flight_after_settle) left"')" \
    "none; CANCELLED by the reset, 0 left" \
    "$(phase deadlines endpoint_timeout '.grpc_timeout_on_wire == null and .server.ended.CANCELLED == .calls and .server.in_flight_after_settle == 0')" deadlines
  check "13d cancelled at 200 ms: handlers 300 ms later" \
    "$(phase deadlines cancelled '"\(.server.handlers_running_after_settle) of \(.server.in_flight_before_cancel) in flight"')" \
    "0, of >= $CANCEL_SEEN x 500" \
    "$(phase deadlines cancelled ".server.handlers_running_after_settle == 0 and .server.in_flight_before_cancel >= $CANCEL_SEEN * .calls")" deadlines
  # No deadline from the client: the calls pile up (rate x bound in flight)
  # until the server's default deadline ends each one, not the 2 s delay.
  check "13h no_deadline: server's ${SLOW_DEFAULT_DEADLINE_S} s default ends calls" \
    "$(phase deadlines no_deadline '"max \(.max_s * 1000 | round) ms, \(.statuses | to_entries | map("\(.key)=\(.value)") | join(",")), peak \(.server.in_flight_peak)"')" \
    "<= $((SLOW_DEFAULT_DEADLINE_S * 1000 + DEADLINE_MARGIN_MS)) ms, all DEADLINE_EXCEEDED, peak <= rate x that" \
    "$(phase deadlines no_deadline "(.max_s * 1000 <= $SLOW_DEFAULT_DEADLINE_S * 1000 + $DEADLINE_MARGIN_MS) and (.statuses.DEADLINE_EXCEEDED // 0) == .calls and .server.in_flight_peak <= $DEADLINE_RATE * ($SLOW_DEFAULT_DEADLINE_S * 1000 + $DEADLINE_MARGIN_MS) / 1000")" deadlines
  note "request deadline: server ended" "$(phase deadlines request_deadline '.server.ended | to_entries | map("\(.key)=\(.value)") | join(", ")')"

  start_extra outage server-outage "13 outage server reports SERVING" \
    --fault-unavailable-percent 100
  outage_target=$extra_target
  outage_metrics=$(metrics_of outage server-outage)
  start_extra metered server-metered "13 healthy server reports SERVING"
  healthy_target=$extra_target
  healthy_metrics=$(metrics_of metered server-metered)
  capture retries client_at "$outage_target" retry-client --metrics "$outage_metrics" \
    --healthy-target "$healthy_target" --healthy-metrics "$healthy_metrics" --calls "$RETRY_CALLS"
  check "13e outage, 5 attempts: server work" "x$(phase retries naive .multiplier) ($(phase retries naive .server_started) calls)" ">= x$NAIVE_MIN" \
    "$(phase retries naive ".multiplier >= $NAIVE_MIN and .server_started != null")" retries
  check "13f outage, A6 throttling: server work" "x$(phase retries throttled .multiplier) ($(phase retries throttled .server_started) calls)" "<= x$THROTTLED_MAX" \
    "$(phase retries throttled ".multiplier <= $THROTTLED_MAX and .server_started != null")" retries
  check "13g healthy, A6 policy: server work" "x$(phase retries healthy .multiplier) ($(phase retries healthy .ok) OK)" "x1 exactly, all OK" \
    "$(phase retries healthy '.server_started == (.ok + .failed) and .failed == 0')" retries
}

}
