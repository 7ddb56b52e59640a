#!/usr/bin/env bats
# capacity-publisher when gpupoold misbehaves: unreachable, or answering something that is
# not a pool list. The real gpupoold cannot be made to do either on demand, so fake_poold
# plays it (a JSON file the test rewrites). Capacity following the real gpupoold is tested
# in capacity.bats. The dev cluster's own publisher is stopped for the duration and
# brought back by `devcluster up`.
load ../lib/helpers

PUBLISHER=$GPUPOOL_SOURCE/scripts/capacity-publisher

pools() {  # pools A100_USABLE [RAW_BODY]
  if [[ -n ${2:-} ]]; then
    echo "$2" >"$POOLS_JSON.tmp"
  else
    printf '{"pools":[{"name":"a100","total":8,"usable":%d},{"name":"h100","total":8,"usable":8}]}\n' \
      "$1" >"$POOLS_JSON.tmp"
  fi
  mv "$POOLS_JSON.tmp" "$POOLS_JSON"
}

start_fake() {
  "$FAKE_POOLD" "$FAKE_PORT" "$POOLS_JSON" >>"$STATE/fake.log" 2>&1 3>&- &
  echo $! >"$STATE/fake.pid"
}

setup_file() {
  "$DEVCLUSTER" stop publisher
  export STATE=$BATS_FILE_TMPDIR
  export POOLS_JSON=$STATE/pools.json
  export FAKE_PORT=$((GPUPOOL_DEV_PORTBASE + 15))
  cp "$DEVDIR/licenses.conf" "$STATE/licenses.conf.saved"
  cp "$DEVDIR/gpupool_pools" "$STATE/gpupool_pools.saved"
  pools 4
  start_fake
  "$PUBLISHER" -D --server "http://127.0.0.1:$FAKE_PORT" --interval 1 \
    --licenses "$DEVDIR/licenses.conf" --totals "$DEVDIR/gpupool_pools" \
    --munge-socket "$MUNGE_SOCKET" >"$STATE/publisher.log" 2>&1 3>&- &
  echo $! >"$STATE/publisher.pid"
}

teardown_file() {
  kill "$(cat "$STATE/publisher.pid")" "$(cat "$STATE/fake.pid")" 2>/dev/null || true
  cp "$STATE/licenses.conf.saved" "$DEVDIR/licenses.conf"
  cp "$STATE/gpupool_pools.saved" "$DEVDIR/gpupool_pools"
  scontrol reconfigure
  "$DEVCLUSTER" up >/dev/null 2>&1 || true
}

@test "the publisher follows a gpupoold it reaches (fake_poold) within 5 s" {
  wait_until 5 license_total_is gpupool_a100 4
  grep -qx 'a100 8' "$DEVDIR/gpupool_pools"
}

@test "gpupoold unreachable: the last published counts stay and the publisher says why" {
  wait_until 5 license_total_is gpupool_a100 4
  # A loaded machine may have started the publisher before fake_poold listened: count from
  # here.
  local before
  before=$(grep -c 'cannot reach gpupoold' "$STATE/publisher.log" || true)
  kill "$(cat "$STATE/fake.pid")"
  sleep 2
  license_total_is gpupool_a100 4
  kill -0 "$(cat "$STATE/publisher.pid")"
  grep -q 'cannot reach gpupoold' "$STATE/publisher.log"
  # Said once, not once per round.
  [ "$(grep -c 'cannot reach gpupoold' "$STATE/publisher.log")" -eq $((before + 1)) ]
  start_fake
  pools 2
  wait_until 5 license_total_is gpupool_a100 2
}

@test "an answer that is not a pool list changes nothing and is logged" {
  pools 3
  wait_until 5 license_total_is gpupool_a100 3
  pools 0 '{"error":"something else answered"}'
  sleep 2
  license_total_is gpupool_a100 3
  grep -q 'unexpected answer from' "$STATE/publisher.log"
  grep -q 'Licenses=gpupool_a100:3,' "$DEVDIR/licenses.conf"
  pools 4
  wait_until 5 license_total_is gpupool_a100 4
}

@test "bad publisher options are refused with a one-line error" {
  run "$PUBLISHER" --interval soon --licenses /tmp/x
  [ "$status" -eq 2 ]
  [[ $output == *"--interval 'soon' is not a number of seconds"* ]]
  run "$PUBLISHER" --server http://127.0.0.1:1
  [ "$status" -eq 2 ]
  [[ $output == *"--licenses FILE is required"* ]]
  run "$PUBLISHER" --bogus
  [ "$status" -eq 2 ]
  [[ $output == *"unknown option '--bogus'"* ]]
  run "$PUBLISHER" --licenses /nonexistent/dir/licenses.conf
  [ "$status" -eq 2 ]
  [[ $output == *"directory of --licenses '/nonexistent/dir/licenses.conf' does not exist"* ]]
}
