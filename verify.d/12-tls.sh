# shellcheck shell=bash
# verify.d/12-tls.sh: verify.sh's section 12, over TLS (server/src/connection/tls.rs,
# docs/tls.md). A second routing-server with --tls-cert/--tls-key, with
# certificates from its own `dev-cert`, issuing no session tickets, so that
# every footgun connection pays a full handshake. start_tls (launchers.sh)
# starts it: --local, in the scratch directory, on a free port; compose, the
# `tls` profile (`certs` writes them into the `tls` volume, `server-tls`
# serves on 9443, the tools read /certs/tls/ca.pem).
# verify.sh sources this file before it runs a line and calls tls_rows after
# section 11; the verbs it uses are verify.sh's and launchers.sh's.
# jq programs use $variables inside single quotes on purpose, and verify.sh
# assigns the variables this file reads:
# shellcheck disable=SC2016,SC2154
# One { ... } group, parsed whole when sourced (see the top of verify.sh).
{

# ─── Bounds: rows 12 ─────────────────────────────────────────────────────────
# A new TLS 1.3 connection costs TCP set-up (1 RTT), then the TLS handshake
# (1 RTT: ClientHello out, the server's flight back), before its call (1 RTT).
TLS_FOOTGUN_MIN_RTTS=${TLS_FOOTGUN_MIN_RTTS:-2.7} # footgun over TLS median call >= this many RTTs: TCP + TLS 1.3 + the call = 3
TLS_POOLED_MAX_RTTS=${TLS_POOLED_MAX_RTTS:-1.5}   # pooled over TLS median call <= this many RTTs: the call alone (1 RTT), + 0.5 RTT for CPU
TLS_PLAINTEXT_MAX_S=${TLS_PLAINTEXT_MAX_S:-5}     # grpcurl -plaintext on the TLS port fails within this (s): one loopback round trip, where a closed connection has grpcurl retry for its whole 10 s
TLS_CPU_MIN_RATIO=${TLS_CPU_MIN_RATIO:-1.5}       # server CPU per footgun call, full TLS handshakes ÷ plaintext >= this: a key exchange, a signature and the key schedule (~0.25 ms) on top of TCP and HTTP/2 set-up (0.1-0.16 ms); measured x2.4 here (2 workers), x3.4-5.0 with 1 (docs/tls.md)
TLS_CPU_CALLS=${TLS_CPU_CALLS:-1000}              # footgun calls per CPU sample: ~1 s each, 1000 connections, enough /proc clock ticks (10 ms each)

# ─── Verbs ───────────────────────────────────────────────────────────────────
tls_client() { client_at "$tls_target" "$1" --tls-ca "$ca" "${@:2}"; } # tls_client BIN ARGS...
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; } # cpu_ticks PID: user + system, in clock ticks
per_call() { jqn --argjson t "$1" --argjson n "$TLS_CPU_CALLS" '$t * 10000 / $n | round'; } # per_call TICKS: us per call

# ─── Rows ────────────────────────────────────────────────────────────────────
tls_rows() {
  start_tls
  wait_serving tls_ready "$tls_target" "$tls_pid" -cacert "$ca"
  [[ $status == SERVING ]] || fail "12 TLS server reports SERVING" "${status:-no answer}" "SERVING" tls_ready

  capture tls_list grpcurl_ -cacert "$ca" "$tls_target" list
  found=$(grep -cx "$SERVICE" "$scratch/tls_list.out" || true)
  check "12a TLS: reflection lists RoutingService" "$(wc -l <"$scratch/tls_list.out") services, match=$found" \
    "lists $SERVICE" "$([[ $rc == 0 && $found == 1 ]] && echo true)" tls_list

  capture tls_quote grpcurl_ -cacert "$ca" -d "$QUOTE_JSON" "$tls_target" "$SERVICE/GetQuote"
  got=$(field tls_quote '[.quote.price.amount, .quote.routeId] | join(" ")')
  check "12b TLS: GetQuote" "${got:-no answer}" "1001.00 NLRTM-SGSIN" \
    "$([[ $got == "1001.00 NLRTM-SGSIN" ]] && echo true)" tls_quote

  capture tls_catalog grpcurl_ -cacert "$ca" -max-msg-sz "$RAISED_CAP" -d '{"pageSize":25}' \
    "$tls_target" "$SERVICE/ListRoutes"
  got=$(field tls_catalog '.routes | length')
  check "12c TLS: full catalog, -max-msg-sz" "${got:-exit $rc} routes" "25 routes" \
    "$([[ $got == 25 ]] && echo true)" tls_catalog

  # In compose, `took` includes starting grpcurl's container (about a second).
  started=$SECONDS
  capture tls_plaintext grpcurl_ -plaintext "$tls_target" list
  took=$((SECONDS - started))
  told=$(grep -c 'this port speaks TLS' "$scratch/tls_plaintext.err" || true)
  check "12d grpcurl -plaintext on the TLS port" "exit $rc in ${took}s, told=$told" "fails in < ${TLS_PLAINTEXT_MAX_S}s, says TLS" \
    "$([[ $rc != 0 && $told -ge 1 && $took -lt $TLS_PLAINTEXT_MAX_S ]] && echo true)" tls_plaintext

  # 12d2. The TLS server counts a handshake per footgun call (gRFC A118's
  # grpc.server.tls.handshakes): a channel per call is a handshake per call.
  handshakes='sum(grpc_server_tls_handshakes_total{service="server-tls",grpc_tls_handshake_result="success"})'
  handshakes0=$(counted server-tls "$handshakes")
  capture tls_footgun_count tls_client footgun-client --calls "$CALLS"
  server_handshakes=$(delta "$handshakes0" "$(counted server-tls "$handshakes")")
  check "12d2 TLS footgun: the server's handshakes" "+$server_handshakes for $(field tls_footgun_count .connections) connections" \
    "+$CALLS" "$([[ $server_handshakes == "$CALLS" ]] && echo true)" tls_footgun_count

  # 12e/f. Lever 1 over TLS on the link: the footgun pays TCP and TLS.
  link_reuse tls_ "12e/f TLS median call in RTTs" "$TLS_FOOTGUN_MIN_RTTS" "$TLS_POOLED_MAX_RTTS" tls_client
  check "12e TLS footgun on $LINK: median call" "${footgun_rtts:-exit $rc} RTT, $(field tls_footgun_link .tls.version)" \
    ">= $TLS_FOOTGUN_MIN_RTTS RTT" \
    "$(jqn --argjson f "${footgun_rtts:-0}" --argjson k "$TLS_FOOTGUN_MIN_RTTS" '$f >= $k')" tls_footgun_link
  check "12f TLS pooled on $LINK: median call" "${pooled_rtts:-exit $rc} RTT" "<= $TLS_POOLED_MAX_RTTS RTT" \
    "$(jqn --argjson p "${pooled_rtts:-1e9}" --argjson k "$TLS_POOLED_MAX_RTTS" '$p <= $k')" tls_pooled_link
  note "TLS footgun / pooled on $LINK, median" "${footgun_rtts} / ${pooled_rtts} RTT"

  # 12g. The handshake's price on loopback: the servers' own CPU time, from
  # /proc (Linux), per footgun call, full TLS handshakes against plaintext.
  plain_pid=$(host_pid server)
  tls_server_pid=$(host_pid server-tls)
  if [[ -n $tls_server_pid && -n $plain_pid && -r /proc/$tls_server_pid/stat && -r /proc/$plain_pid/stat ]]; then
    for try in $(seq "$TIMING_ATTEMPTS"); do
      before=$(cpu_ticks "$plain_pid")
      capture cpu_plain client_ footgun-client --calls "$TLS_CPU_CALLS"
      plain_ticks=$(($(cpu_ticks "$plain_pid") - before))
      before=$(cpu_ticks "$tls_server_pid")
      capture cpu_tls tls_client footgun-client --calls "$TLS_CPU_CALLS"
      tls_ticks=$(($(cpu_ticks "$tls_server_pid") - before))
      ratio=$(jqn --argjson t "$tls_ticks" --argjson p "$plain_ticks" 'if $p > 0 then $t / $p * 100 | round / 100 else 0 end')
      cpu_ok=$(jqn --argjson r "$ratio" --argjson k "$TLS_CPU_MIN_RATIO" '$r >= $k')
      [[ $cpu_ok == true ]] && break
      if ((try < TIMING_ATTEMPTS)); then
        row "12g TLS handshake CPU (try $try)" "x$ratio ($tls_ticks / $plain_ticks ticks)" ">= x$TLS_CPU_MIN_RATIO" "retry"
      fi
    done
    check "12g server CPU per footgun call: TLS/plain" \
      "x$ratio ($(per_call "$tls_ticks") / $(per_call "$plain_ticks") us)" ">= x$TLS_CPU_MIN_RATIO" "$cpu_ok" cpu_tls cpu_plain
    note "server CPU per conn: TLS / plain" "$(per_call "$tls_ticks") us / $(per_call "$plain_ticks") us"
  else
    row "12g server CPU per footgun call: TLS/plain" "cannot read the servers' /proc/PID/stat" "(Linux; a rootless engine hides them)" skipped
  fi

  # 12h. What the TLS port offers, as openssl on the host sees it: ALPN h2 (the
  # only protocol it offers), over TLS 1.3 (1.2 too, when a client asks). In
  # compose, through the port published on the host's loopback.
  tls_host_port=$(tls_host_port)
  if command -v openssl >/dev/null 2>&1; then
    capture tls_alpn bounded 30 openssl s_client -connect "$tls_host_port" -servername localhost -alpn h2
    alpn=$(grep -ao 'ALPN protocol: [^ ]*' "$scratch/tls_alpn.out" | head -n 1 | cut -d' ' -f3 || true)
    version=$(grep -aoE 'New, TLSv1\.[0-9]' "$scratch/tls_alpn.out" | head -n 1 | cut -d' ' -f2 || true)
    check "12h openssl s_client -alpn h2" "ALPN ${alpn:-none}, ${version:-no handshake}" "ALPN h2, TLSv1.3" \
      "$([[ $alpn == h2 && $version == TLSv1.3 ]] && echo true)" tls_alpn
  else
    row "12h openssl s_client -alpn h2" "no openssl on PATH" "(apt-get install openssl)" skipped
  fi
}

}
