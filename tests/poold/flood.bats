#!/usr/bin/env bats
# gpupoold holds under abuse (issue 37): a local user opens a few hundred connections that
# send a header line every 2 s and never finish their headers, for 40 s. Each is cut at the
# header deadline, the user's share of connections is capped, agents are served on workers
# of their own: meanwhile jobs start and get their leases, gpupoolctl answers, and no host
# goes UNREACHABLE.
load ../lib/helpers

metric() { curl -s "$GPUPOOL_SERVER/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

@test "a slow-header flood from a local user delays no job's lease and no agent" {
  port=${GPUPOOL_SERVER##*:}
  last=$(gpupoolctl show events --json | jq '[.events[].seq] | max // 0')
  # GPUs already UNREACHABLE (a host an earlier test stopped, such as the joining one).
  unreachable_before=$(gpupoolctl show gpus --json | jq -c '[.gpus[] | select(.state == "UNREACHABLE") | .id]')
  timeouts=$(metric gpupool_http_timeouts_total)
  refused=$(metric gpupool_http_refused_total)
  runuser -u nobody -- /usr/bin/python3 "$BATS_TEST_DIRNAME/slow_flood.py" 127.0.0.1 "$port" 300 2 40 \
    >"$BATS_TEST_TMPDIR/flood.out" 2>&1 &
  flood=$!
  sleep 4  # the flood is open and sending
  start=$(date +%s%N)
  gpupoolctl show pools >/dev/null
  took_ms=$((($(date +%s%N) - start) / 1000000))
  echo "gpupoolctl took $took_ms ms during the flood"
  [ "$took_ms" -lt 2000 ]
  ids=()
  for i in 1 2 3 4; do
    ids+=("$(submit --gpu-pool=a100:1 --wrap 'echo LEASE=$GPUPOOL_LEASE_ID; sleep 2')")
  done
  for id in "${ids[@]}"; do
    wait_until 60 job_ended "$id"
    cat "$OUT/$id.out"
    [ "$(job_state "$id")" = COMPLETED ]
    grep -q '^LEASE=L[0-9]' "$OUT/$id.out"
  done
  wait "$flood"
  cat "$BATS_TEST_TMPDIR/flood.out"
  # The flood was cut: no connection of it lived past the 5 s header deadline (and a margin),
  # and its connections beyond the user's share were refused.
  longest=$(sed -n 's/.*longest_open_s=\([0-9.]*\).*/\1/p' "$BATS_TEST_TMPDIR/flood.out")
  awk -v l="$longest" 'BEGIN { exit !(l < 8) }'
  [ "$(metric gpupool_http_timeouts_total)" -gt "$timeouts" ]
  [ "$(metric gpupool_http_refused_total)" -gt "$refused" ]
  # No host went UNREACHABLE meanwhile.
  gpupoolctl show events --json | jq -e --argjson s "$last" \
    '[.events[] | select(.seq > $s and .type == "unreachable")] | length == 0'
  [ "$(gpupoolctl show gpus --json | jq -c '[.gpus[] | select(.state == "UNREACHABLE") | .id]')" = "$unreachable_before" ]
  no_node_drained
}
