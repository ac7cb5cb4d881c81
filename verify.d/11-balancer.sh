# shellcheck shell=bash
# verify.d/11-balancer.sh: verify.sh's section 11, behind a load balancer.
# HAProxy in front of three replicas, each naming itself in the
# routing-replica header, and three more that age their connections. One
# channel through L4 is pinned to one replica; L7, client-side balancing and a
# connection age spread the calls; keepalive is hop by hop through L7.
# start_lb (launchers.sh) starts them: --local, six routing-server processes
# on free ports and `haproxy` from PATH with lb/haproxy.cfg; compose, the `lb`
# profile (the `replica` service scaled to 3, `replica-aged` to 3, `haproxy`
# with lb/compose.cfg, which finds them by DNS).
# verify.sh sources this file before it runs a line and calls balancer_rows
# after section 10; the verbs it uses are verify.sh's and launchers.sh's.
# jq programs use $variables inside single quotes on purpose, and verify.sh
# assigns the variables this file reads:
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds: rows 11 ─────────────────────────────────────────────────────────
# HAProxy: lb/haproxy.cfg in --local mode, lb/compose.cfg in compose. Shares
# are of the calls each of 3 replicas answered (routing-replica header).
PINNED_SHARE=${PINNED_SHARE:-0.95}        # L4, one channel: busiest replica's share >= this; one connection is one replica: 1.0
SPREAD_SHARE=${SPREAD_SHARE:-0.2}         # L7 and client-side: each replica >= this; round robin gives 1/3, tonic's random p2c 1/3 ± 0.03 (1 sd, 300 calls)
AGED_SHARE=${AGED_SHARE:-0.1}             # L4 to replicas aged 3 s, 10 s of calls: each >= this; ~4 connections of ~3 s, round robin gives each one
BALANCE_CALLS=${BALANCE_CALLS:-300}       # calls per balance-client phase
AGED_SECS=${AGED_SECS:-12}                # l4_aged calls for this long (s): 3 ages of 3 s (+10 % jitter: 9.9 s at most) end within it, so every replica gets a turn and sends its GOAWAY (11d2)
LB_AGE_SECS=3                             # the aged replicas' --max-connection-age-secs (±10 % jitter)
LB_GRACE_SECS=2                           # and --max-connection-age-grace-secs
GHZ_AGED_SECS=${GHZ_AGED_SECS:-15}        # 11d3: ghz (a grpc-go client) through L4 to the aged replicas for this long, 10 calls in flight: ~5 ages
GHZ_AGED_FAILED_MAX=${GHZ_AGED_FAILED_MAX:-5} # 11d3: ghz's failed count <= this, one per age: ghz counts each attempt that grpc-go retried transparently (none is a failed call; docs/balancing.md)
# The keepalive row (11e) uses lb/haproxy.cfg's *_short frontends: 6 s idle
# timeouts, below the 8 s gap (IDLE_SECS) and above the client's 5 s keepalive.

# ─── Verbs ───────────────────────────────────────────────────────────────────
# quotes_by_replica SERVICE: each replica's GetQuote calls so far, as the
# replicas count them (gRFC A66), as a JSON object {instance: calls}.
quotes_by_replica() {
  fresh "$1" 3
  curl -fs --max-time 5 "$prom_url/api/v1/query" --data-urlencode \
    "query=sum by (instance) (grpc_server_call_started_total{service=\"$1\",grpc_method=\"$SERVICE/GetQuote\"})" |
    jq -c '[.data.result[] | {(.metric.instance): (.value[1] | tonumber)}] | add // {}'
}
# spread BEFORE AFTER: the calls each replica served between two readings,
# sorted, with each one's share: "calls [a b c], shares [..]" as JSON.
spread() {
  jqn --argjson a "$1" --argjson b "$2" \
    '[$b | to_entries[] | .value - ($a[.key] // 0)] | sort as $n | ($n | add) as $t
     | {calls: $n, shares: [$n[] | if $t > 0 then . / $t * 100 | round / 100 else 0 end]}'
}
balance_() { client_at "$LB_L4" balance-client --calls "$BALANCE_CALLS" "$@"; }
# fieldk NAME K FILTER: field, with $k bound to the number K.
fieldk() { jq -r --argjson k "$2" "$3" "$scratch/$1.out" 2>/dev/null || true; }
share() { field "$1" ".phases.$2 | \"\(.per_replica | to_entries | map(\"\(.key)=\(.value)\") | join(\" \")), \(.failed) failed\""; }

# ─── Rows ────────────────────────────────────────────────────────────────────
balancer_rows() {
  start_lb --max-connection-age-secs "$LB_AGE_SECS" --max-connection-age-grace-secs "$LB_GRACE_SECS"
  # Readiness: HAProxy reaches all three replicas behind L4 and behind the aged
  # L4 (a new connection per call, round robin: 30 calls reach each replica
  # 10 times). In compose, HAProxy learns the replicas' addresses by DNS within
  # a couple of seconds of their start; a row must not run before.
  lb_ready=
  deadline=$((SECONDS + READY_TIMEOUT_S))
  while ((SECONDS < deadline)); do
    capture lb_ready client_at "$LB_L4" balance-client --phases l4_footgun --calls 30
    capture lb_ready_aged client_at "$LB_L4_AGED" balance-client --phases l4_footgun --calls 30
    lb_ready=$(field lb_ready '.phases.l4_footgun.per_replica | length')+$(field lb_ready_aged '.phases.l4_footgun.per_replica | length')
    [[ $lb_ready == 3+3 ]] && break
    sleep 1
  done
  check "11 HAProxy reaches 3 + 3 replicas" "${lb_ready:-no answer} replicas" "3+3" \
    "$([[ $lb_ready == 3+3 ]] && echo true)" lb_ready lb_ready_aged

  # 11a2. The same pinning as the replicas count it: one L4 channel alone.
  replicas0=$(quotes_by_replica replica)
  capture lb_pinned balance_ --phases l4_pooled
  pinned=$(spread "$replicas0" "$(quotes_by_replica replica)")
  check "11a2 L4 pinned, the replicas' own count" "$(jq -rn --argjson s "$pinned" '"\($s.calls) calls, shares \($s.shares)"')" \
    "top share >= $PINNED_SHARE" "$(jqn --argjson s "$pinned" --argjson k "$PINNED_SHARE" '$s.shares[-1] >= $k')" lb_pinned

  capture lb_spread balance_ --phases l4_pooled,l4_footgun,l7_pooled,client_side \
    --l7 "$LB_L7" --replicas "$lb_replicas"
  check "11a L4, one channel: pinned" "$(share lb_spread l4_pooled)" "top share >= $PINNED_SHARE, 0 failed" \
    "$(fieldk lb_spread "$PINNED_SHARE" '.phases.l4_pooled | .top_share >= $k and .failed == 0 and .connections == 1')" lb_spread
  check "11b L7, one channel: spread" "$(share lb_spread l7_pooled)" "each >= $SPREAD_SHARE, 0 failed" \
    "$(fieldk lb_spread "$SPREAD_SHARE" '.phases.l7_pooled | .min_share >= $k and .failed == 0')" lb_spread
  check "11c client-side balance_list: spread" "$(share lb_spread client_side)" "each >= $SPREAD_SHARE, 0 failed" \
    "$(fieldk lb_spread "$SPREAD_SHARE" '.phases.client_side | .min_share >= $k and .failed == 0')" lb_spread
  note "L4 channel per call: spread, median" \
    "$(share lb_spread l4_footgun), $(field lb_spread '.phases.l4_footgun.median_call_s * 1e6 | round / 1000') ms"
  note "L4 / L7 one channel: connections" "$(field lb_spread '"\(.phases.l4_pooled.connections) / \(.phases.l7_pooled.connections)"')"

  aged_goaways='count(sum by (instance) (routing_server_goaways_sent_total{service="replica-aged",reason="max_connection_age"}) > 0)'
  aged0=$(quotes_by_replica replica-aged)
  capture lb_aged balance_ --phases l4_aged --l4-aged "$LB_L4_AGED" --aged-secs "$AGED_SECS"
  aged=$(spread "$aged0" "$(quotes_by_replica replica-aged)")
  aged_replicas=$(prom "$aged_goaways")
  # retried: calls hyper dropped unsent on a connection that had just read
  # its GOAWAY, sent again on the next one (clients/src/retry.rs): tonic has
  # no transparent retry of its own. A call the server saw is never retried,
  # and one call at a time loses at most one per connection that ended, so
  # retried <= reconnects.
  check "11d L4 to replicas aged ${LB_AGE_SECS}s" "$(share lb_aged l4_aged)" "each >= $AGED_SHARE, 0 failed" \
    "$(fieldk lb_aged "$AGED_SHARE" '.phases.l4_aged | .min_share >= $k and .failed == 0 and .goaways > 0 and .retried <= .reconnects')" lb_aged
  # The replicas' own count: each served its share, and each sent a GOAWAY
  # max_connection_age (the readiness probes' connections, one call each,
  # never lived long enough to age: these GOAWAYs are the phase's).
  check "11d2 aged, the replicas' own count" \
    "$(jq -rn --argjson s "$aged" '"\($s.calls) calls, shares \($s.shares)"'), ${aged_replicas:-0} sent max_connection_age" \
    "each >= $AGED_SHARE, 3 sent" \
    "$(jqn --argjson s "$aged" --argjson k "$AGED_SHARE" --argjson g "${aged_replicas:-0}" '$s.shares[0] >= $k and ($s.calls | length) == 3 and $g == 3')" lb_aged
  note "aged: GOAWAYs / reconnects / calls / retried" \
    "$(field lb_aged '.phases.l4_aged | "\(.goaways) / \(.reconnects) / \(.calls) / \(.retried)"')"

  # A stock grpc-go client (ghz 0.121, grpc-go 1.56) at the same ages, 10
  # calls in flight on one connection. --duration-stop=wait: ghz's default
  # (close) ends calls in flight itself when it stops, which is not an age.
  capture ghz_aged ghz_ --insecure \
    --proto "$proto_dir/shipping/routing/v1/routing_service.proto" --import-paths "$proto_dir" \
    --call "$SERVICE.GetQuote" -d "$QUOTE_JSON" --connections 1 -c 10 -z "${GHZ_AGED_SECS}s" \
    --duration-stop=wait --timeout 10s -O json "$LB_L4_AGED"
  check "11d3 ghz (grpc-go) at the ages, ${GHZ_AGED_SECS}s" \
    "$(status_codes ghz_aged)" \
    "not OK <= $GHZ_AGED_FAILED_MAX" \
    "$(field ghz_aged --argjson k "$GHZ_AGED_FAILED_MAX" '(.statusCodeDistribution.OK // 0) > 0 and .count - (.statusCodeDistribution.OK // 0) <= $k')" ghz_aged

  capture lb_idle balance_ --phases l4_idle,l7_idle --l4-short "$LB_L4_SHORT" --l7-short "$LB_L7_SHORT" \
    --idle-gap-secs "$IDLE_SECS"
  got=$(field lb_idle '.phases | "L4 \(.l4_idle.keepalive.result)/\(.l4_idle.no_keepalive.result), L7 \(.l7_idle.keepalive.result)/\(.l7_idle.no_keepalive.result)"')
  check "11e ${IDLE_SECS}s gap, 6 s LB timeout: keepalive/none" "${got:-exit $rc}" "SURVIVED/RECONNECTED|FAILED, both" \
    "$(field lb_idle '.phases | [.l4_idle, .l7_idle] | all(.keepalive.result == "SURVIVED" and .no_keepalive.result != "SURVIVED")')" lb_idle
  note "L7 idle: server PINGs reaching the client" "$(field lb_idle '.phases.l7_idle.keepalive.pings_received') (HAProxy answers PINGs, hop by hop)"

  # HAProxy's own connections to the replicas (pooled h2 in L7, idle between
  # calls, PINGed by the replicas) must never trip a policy of theirs.
  lb_logs >"$scratch/lb_policies.err"
  tripped=$(grep -cE 'too many pings|too many control frames|ping strike|no HTTP/2 handshake in time' "$scratch/lb_policies.err" || true)
  echo "$tripped" >"$scratch/lb_policies.out"
  check "11f HAProxy trips no replica policy" "$tripped strikes, GOAWAYs, handshake closes" "0" \
    "$([[ $tripped == 0 ]] && echo true)" lb_policies
  # Stopped before section 12, whose CPU row wants the cores to itself.
  stop_lb
}

}
