#!/usr/bin/env bats
# capacity-publisher keeps Slurm's pool licenses equal to gpupoold's usable counts.
# gpupoold is played by fake_poold (a JSON file the test rewrites); the dev cluster's own
# publisher, if it runs, is stopped for the duration and brought back by `devcluster up`.
load helpers

PUBLISHER=$GPUPOOL_SOURCE/scripts/capacity-publisher

pools() {  # pools A100_TOTAL A100_USABLE
  printf '{"pools":[{"name":"a100","total":%d,"usable":%d},{"name":"h100","total":8,"usable":8}]}\n' \
    "$1" "$2" >"$POOLS_JSON.tmp"
  mv "$POOLS_JSON.tmp" "$POOLS_JSON"
}

setup_file() {
  "$DEVCLUSTER" stop publisher
  export STATE=$BATS_FILE_TMPDIR
  export POOLS_JSON=$STATE/pools.json
  cp "$DEVDIR/licenses.conf" "$STATE/licenses.conf.saved"
  cp "$DEVDIR/gpupool_pools" "$STATE/gpupool_pools.saved"
  pools 4 4
  port=$(( ${GPUPOOL_DEV_PORTBASE:-16800} + 15 ))
  "$FAKE_POOLD" "$port" "$POOLS_JSON" >"$STATE/fake.log" 2>&1 &
  echo $! >"$STATE/fake.pid"
  "$PUBLISHER" -D --server "http://127.0.0.1:$port" --interval 1 \
    --licenses "$DEVDIR/licenses.conf" --totals "$DEVDIR/gpupool_pools" \
    --munge-socket "$MUNGE_SOCKET" >"$STATE/publisher.log" 2>&1 &
  echo $! >"$STATE/publisher.pid"
}

teardown_file() {
  kill "$(cat "$STATE/publisher.pid")" "$(cat "$STATE/fake.pid")" 2>/dev/null || true
  squeue -h -o %i | xargs -r scancel
  cp "$STATE/licenses.conf.saved" "$DEVDIR/licenses.conf"
  cp "$STATE/gpupool_pools.saved" "$DEVDIR/gpupool_pools"
  scontrol reconfigure
  "$DEVCLUSTER" up >/dev/null 2>&1 || true
}

teardown() {
  if [[ -n ${JOBS:-} ]]; then scancel $JOBS 2>/dev/null || true; fi
}

@test "Slurm's pool license total follows gpupoold's usable count within 5 s" {
  pools 4 4
  wait_until 5 license_total_is gpupool_a100 4
  grep -qx 'a100 4' "$DEVDIR/gpupool_pools"
}

@test "pool of 4: three jobs of 2 GPUs, two run, one waits for Licenses and starts when one ends" {
  wait_until 5 license_total_is gpupool_a100 4
  a=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  b=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  c=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  JOBS="$a $b $c"
  wait_until 10 job_is "$a" RUNNING
  wait_until 10 job_is "$b" RUNNING
  sleep 2
  job_is "$c" PENDING
  [ "$(job_reason "$c")" = "Licenses" ]
  scancel "$a"
  wait_until 10 job_is "$c" RUNNING
}

@test "a request of 5 from a pool of 4 is refused at submit" {
  wait_until 5 license_total_is gpupool_a100 4
  run sbatch -o /dev/null --gpu-pool=a100:5 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"pool 'a100' has 4 GPUs, 5 requested"* ]]
}

@test "a failed GPU drops capacity to 3 within 5 s; the running job keeps running; resume restores 4" {
  wait_until 5 license_total_is gpupool_a100 4
  JOBS=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  wait_until 10 job_is "$JOBS" RUNNING
  pools 4 3
  wait_until 5 license_total_is gpupool_a100 3
  sleep 1
  job_is "$JOBS" RUNNING
  no_node_drained
  # A waiting request of 2 more cannot start now (3 usable, 2 held)...
  waiting=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  JOBS="$JOBS $waiting"
  sleep 2
  job_is "$waiting" PENDING
  # ...and starts once the GPU is back.
  pools 4 4
  wait_until 5 license_total_is gpupool_a100 4
  wait_until 10 job_is "$waiting" RUNNING
  no_node_drained
}

@test "gpupoold unreachable: the last published counts stay and the publisher says why" {
  wait_until 5 license_total_is gpupool_a100 4
  kill "$(cat "$STATE/fake.pid")"
  sleep 3
  license_total_is gpupool_a100 4
  kill -0 "$(cat "$STATE/publisher.pid")"
  grep -q 'cannot reach gpupoold' "$STATE/publisher.log"
  port=$(( ${GPUPOOL_DEV_PORTBASE:-16800} + 15 ))
  "$FAKE_POOLD" "$port" "$POOLS_JSON" >>"$STATE/fake.log" 2>&1 &
  echo $! >"$STATE/fake.pid"
  pools 4 2
  wait_until 5 license_total_is gpupool_a100 2
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
}
