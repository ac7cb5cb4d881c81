# shellcheck shell=bash
# verify.d/10-network.sh: verify.sh's section 10, each lever where it pays, on
# an emulated link. The clients route their channels through a link inside
# their own process (--link, clients/src/link.rs), so this works in a
# container as well. The bounds are physics, in round trips (RTT) and
# bytes ÷ rate.
# verify.sh sources this file before it runs a line and calls network_rows
# after row 9; the verbs it uses are verify.sh's and launchers.sh's.
# jq programs use $variables inside single quotes on purpose, and verify.sh
# assigns the variables this file reads:
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds: rows 10, on $LINK (set in verify.sh's workload table) ───────────
FOOTGUN_MIN_RTTS=${FOOTGUN_MIN_RTTS:-1.9} # footgun median call >= this many RTTs: TCP set-up (1 RTT) + the call (1 RTT) = 2
POOLED_MAX_RTTS=${POOLED_MAX_RTTS:-1.5}   # pooled median call <= this many RTTs: the call alone (1 RTT), + 0.5 RTT for CPU
GZIP_LINK_MAX_FRACTION=${GZIP_LINK_MAX_FRACTION:-0.5} # gzip fetch < this x (identity bytes ÷ rate): its 7 KB take 0.003 s + 1 RTT + CPU, identity's 5.0 MB take 2.0 s
NAT_IDLE_SECS=${NAT_IDLE_SECS:-6}         # the NAT forgets a flow idle this long: above the 5 s keepalive, below the 8 s gap
NAT_ABANDON_SECS=${NAT_ABANDON_SECS:-3}   # the call after the gap is abandoned after this (s): 50 RTTs, no answer is merely slow
# window-client on longhaul (400 ms round trip). Physics: a receive window W lets
# at most W bytes be in flight per round trip, so throughput <= W ÷ RTT.
WINDOW_FLOOR_MARGIN=${WINDOW_FLOOR_MARGIN:-0.9} # 64 KiB fetch time >= bytes ÷ (65,535 B ÷ RTT) x this
WINDOW_SPEEDUP=${WINDOW_SPEEDUP:-5}       # tonic-default Mbit/s > 64 KiB Mbit/s x this (ceilings: 2 MiB ÷ 64 KiB = 32x)

# ─── Verbs ───────────────────────────────────────────────────────────────────
# window_phase NAME: one window-client phase, for the summary (10e).
window_phase() { field window "\"\(.$1.mbit_s) Mbit/s (ceiling \(.$1.window_ceiling_mbit_s)), \(.$1.bytes) B in \(.$1.s) s\""; }

# ─── Rows ────────────────────────────────────────────────────────────────────
network_rows() {
  # 10a/b. Channel reuse: a new connection costs a round trip before its call.
  link_reuse "" "10a/b median call in RTTs" "$FOOTGUN_MIN_RTTS" "$POOLED_MAX_RTTS" client_
  rtt_ms=$(field pooled_link .link.rtt_ms)
  check "10a footgun on $LINK: median call" "${footgun_rtts:-exit $rc} RTT of ${rtt_ms:-?} ms" ">= $FOOTGUN_MIN_RTTS RTT" \
    "$(jqn --argjson f "${footgun_rtts:-0}" --argjson k "$FOOTGUN_MIN_RTTS" '$f >= $k')" footgun_link
  check "10b pooled on $LINK: median call" "${pooled_rtts:-exit $rc} RTT of ${rtt_ms:-?} ms" "<= $POOLED_MAX_RTTS RTT" \
    "$(jqn --argjson p "${pooled_rtts:-1e9}" --argjson k "$POOLED_MAX_RTTS" '$p <= $k')" pooled_link
  note "footgun / pooled on $LINK, median" \
    "$(field footgun_link '"\(.median_call_s * 1e6 | round / 1000) ms"') / $(field pooled_link '"\(.median_call_s * 1e6 | round / 1000) ms"') (${footgun_rtts} / ${pooled_rtts} RTT)"

  # 10c. gzip: on a link slower than gzip, the smaller response arrives first.
  capture gzip_link client_ gzip-client --link "$LINK"
  identity_s=$(field gzip_link .identity_s)
  gzip_s=$(field gzip_link .gzip_s)
  floor_s=$(field gzip_link .identity_bytes_over_rate_s)
  got=$(field gzip_link '"gzip \(.gzip_s * 100 | round / 100) s, identity \(.identity_s * 100 | round / 100) s"')
  check "10c gzip on $LINK wins end to end" "${got:-exit $rc}" "gzip < $GZIP_LINK_MAX_FRACTION x ${floor_s:-?} s <= identity" \
    "$(jq -r --argjson k "$GZIP_LINK_MAX_FRACTION" '.result == "MATCH" and .faster_end_to_end == "gzip"
      and .gzip_s < $k * .identity_bytes_over_rate_s and .identity_s >= .identity_bytes_over_rate_s' \
      "$scratch/gzip_link.out" 2>/dev/null || true)" gzip_link
  note "full catalog on $LINK: identity / gzip" "$identity_s s / $gzip_s s"

  # 10d. Keepalive against a NAT that forgets idle flows. Either end's PINGs
  # keep a NAT entry alive, and the chapter's server PINGs every 5 s, so the
  # control without keepalive talks to a second, quiet server (no PINGs of its
  # own); a third channel without keepalive talks to the chapter's server.
  start_extra quiet quiet-server "10d quiet server reports SERVING" --keepalive-secs 3600
  quiet_target=$extra_target
  capture nat client_ keepalive-client --phases nat --link "$LINK" --nat-idle-secs "$NAT_IDLE_SECS" \
    --idle-secs "$IDLE_SECS" --nat-abandon-secs "$NAT_ABANDON_SECS" --quiet-target "$quiet_target"
  got=$(field nat '"\(.nat_keepalive) / \(.nat_no_keepalive) / \(.nat_server_keepalive)"')
  check "10d NAT ${NAT_IDLE_SECS}s: keepalive / none / server" "${got:-exit $rc}" "SURVIVED / ABANDONED|FAILED / SURVIVED" \
    "$(field nat '.nat_keepalive == "SURVIVED" and (.nat_no_keepalive == "ABANDONED" or .nat_no_keepalive == "FAILED") and .nat_server_keepalive == "SURVIVED"')" nat
  note "PINGs in the ${IDLE_SECS}s NAT gap, 3 channels" \
    "$(field nat '"\(.nat_keepalive_pings_sent) sent / \(.nat_no_keepalive_pings) / \(.nat_server_keepalive_pings_received) received"')"

  # 10e. The flow-control window on a long link: window-client's phases run at
  # once, each on its own emulated longhaul link (400 ms RTT), whatever $LINK is.
  capture window client_ window-client
  small_s=$(field window '.small.s * 100 | round / 100')
  window_floor_s=$(field window '.small.bytes * 8 / (.small.window_ceiling_mbit_s * 1e6) * 1000 | round / 1000')
  speedup=$(field window '.tonic_default.mbit_s / .small.mbit_s * 10 | round / 10')
  check "10e 64 KiB window vs tonic's default" \
    "${small_s:-exit $rc} s (floor ${window_floor_s:-?} s), default x${speedup:-?}" \
    ">= floor x$WINDOW_FLOOR_MARGIN, > x$WINDOW_SPEEDUP" \
    "$(jq -r --argjson m "$WINDOW_FLOOR_MARGIN" --argjson k "$WINDOW_SPEEDUP" \
      '.small.s >= .small.bytes * 8 / (.small.window_ceiling_mbit_s * 1e6) * $m and .tonic_default.mbit_s > .small.mbit_s * $k' \
      "$scratch/window.out" 2>/dev/null || true)" window
  note "window 64 KiB (longhaul)" "$(window_phase small)"
  note "window tonic default" "$(window_phase tonic_default)"
  note "window adaptive (BDP)" "$(window_phase adaptive)"
  note "window adaptive: start -> largest" "$(field window '"\(.adaptive.stream_window) -> \(.adaptive.grown_stream_window) B"')"
  note "64 KiB: 1 channel vs N channels" "$(field window '"\(.one_channel.mbit_s) vs \(.n_channels.mbit_s) Mbit/s (\(.n_channels.channels) channels)"')"
}

}
