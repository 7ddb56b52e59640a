#!/usr/bin/env bats
# Issue 4 on the real stack: gpupoold, sim agents, capacity-publisher, job_submit.lua and
# spank_gpupool (jobs ask with --gpu-pool). The dev cluster's l40s pool holds exactly 4
# GPUs (gpuhost5) and no other test uses it; the l4 pool is empty until a host joins.
load ../lib/helpers

POOL=l40s
LICENSE=gpupool_l40s

setup_file() {
  export FLAGS=$BATS_FILE_TMPDIR/flags
  mkdir -p "$FLAGS"
  # A run that was cut short may have left an l40s GPU failed or drained.
  local id
  for id in $(gpupoolctl show gpus pool=$POOL --json |
    jq -r '.gpus[] | select(.state != "IDLE" and .state != "LEASED") | .id'); do
    gpupoolctl update gpu="$id" state=resume >/dev/null
  done
  wait_until 10 license_total_is $LICENSE 4
}

teardown() {
  # Let every job of this test end, and wait until its lease is gone, so that the next
  # test starts with the whole pool free.
  local j
  for j in ${JOBS:-}; do finish "$j"; done
  for j in ${JOBS:-}; do
    wait_until 10 job_ended "$j" || scancel "$j"
    wait_until 10 job_has_no_lease "$j" || true
  done
}

# Fail-safe for the file: no agent of the joining host outlives it.
teardown_file() {
  "$DEVCLUSTER" stop agent-gpuhost6 >/dev/null 2>&1 || true
}

ctld_pid() { "$DEVCLUSTER" status | grep '^Part=slurmctld ' | grep -o 'Pid=[0-9]*'; }

@test "the l40s pool has 4 GPUs, all usable, and Slurm's license says so" {
  pool_field_is $POOL total 4
  pool_field_is $POOL usable 4
  license_total_is $LICENSE 4
  [ "$(pool_total $POOL)" = 4 ]
}

@test "pool of 4: of three jobs of 2 GPUs two run, the third waits for Licenses and starts when one finishes" {
  a=$(held_job --gpu-pool=$POOL:2)
  b=$(held_job --gpu-pool=$POOL:2)
  c=$(held_job --gpu-pool=$POOL:2)
  JOBS="$a $b $c"
  wait_until 10 job_is "$a" RUNNING
  wait_until 10 job_is "$b" RUNNING
  wait_until 10 job_has_lease "$a"
  wait_until 10 job_has_lease "$b"
  # The third waits in the queue, saying why.
  wait_until 5 job_reason_is "$c" Licenses
  job_is "$c" PENDING
  pool_field_is $POOL idle 0
  # Two leases of 2 GPUs, no GPU in both.
  [ "$( (lease_gpus_of_job "$a"; lease_gpus_of_job "$b") | sort -u | wc -l)" -eq 4 ]
  sleep 1  # another scheduling pass: still waiting
  job_is "$c" PENDING
  # One job finishes by itself; the waiting job starts and gets its own 2 GPUs.
  finish "$a"
  wait_until 10 job_ended "$a"
  wait_until 10 job_is "$c" RUNNING
  wait_until 10 job_has_lease "$c"
  [ "$(job_state "$a")" = COMPLETED ]
  [ "$( (lease_gpus_of_job "$b"; lease_gpus_of_job "$c") | sort -u | wc -l)" -eq 4 ]
  no_node_drained
}

@test "a request of 5 from the pool of 4 is refused at submit, naming the pool and its size" {
  before=$(squeue -h | wc -l)
  run sbatch -o /dev/null --gpu-pool=$POOL:5 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: pool '$POOL' has 4 GPUs, 5 requested"* ]]
  run srun --gpu-pool=$POOL:5 true
  [ "$status" -ne 0 ]
  [[ $output == *"pool '$POOL' has 4 GPUs, 5 requested"* ]]
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

@test "a GPU fails under a running job: capacity 3 within 5 s, the job runs on, no node drained; resume: 4" {
  ctld_before=$(ctld_pid)
  j=$(held_job --gpu-pool=$POOL:2)
  JOBS=$j
  wait_until 10 job_is "$j" RUNNING
  wait_until 10 job_has_lease "$j"
  failed=$(lease_gpus_of_job "$j" | head -1)
  start=$(date +%s%N)
  gpupoolctl update gpu="$failed" state=fail reason="test: Xid 79"
  wait_until 5 license_total_is $LICENSE 3
  echo "# license total followed the failure in $((($(date +%s%N) - start) / 1000000)) ms" >&3
  pool_field_is $POOL failed 1
  # The job keeps running; gpupoold moved its lease off the failed GPU.
  job_is "$j" RUNNING
  [ "$(lease_field_of_job "$j" .generation)" = 2 ]
  [ "$(lease_gpus_of_job "$j" | wc -l)" -eq 2 ]
  [ -z "$(lease_gpus_of_job "$j" | grep -x "$failed")" ]
  no_node_drained
  # 3 usable, 2 held: another job of 2 has to wait...
  w=$(held_job --gpu-pool=$POOL:2)
  JOBS="$j $w"
  wait_until 5 job_reason_is "$w" Licenses
  # ...until the GPU is back.
  start=$(date +%s%N)
  gpupoolctl update gpu="$failed" state=resume
  wait_until 5 license_total_is $LICENSE 4
  echo "# license total followed the resume in $((($(date +%s%N) - start) / 1000000)) ms" >&3
  wait_until 10 job_is "$w" RUNNING
  job_is "$j" RUNNING
  no_node_drained
  # Slurm was reconfigured, never restarted.
  [ "$(ctld_pid)" = "$ctld_before" ]
  # The history shows the failure and the swap between lease and release.
  finish "$j"
  wait_until 10 job_ended "$j"
  wait_until 10 job_has_no_lease "$j"
  event_types_are "$j" "leased failed swapped released"
  [ "$(job_state "$j")" = COMPLETED ]
}

@test "a drained GPU lowers capacity, and Slurm follows it back on resume" {
  gpu=$(gpupoolctl show gpus pool=$POOL --json | jq -r '[.gpus[] | select(.state == "IDLE")][0].id')
  [[ $gpu == gpuhost5:* ]]
  gpupoolctl update gpu="$gpu" state=drain reason="test: maintenance"
  wait_until 5 license_total_is $LICENSE 3
  pool_field_is $POOL drained 1
  gpupoolctl update gpu="$gpu" state=resume
  wait_until 5 license_total_is $LICENSE 4
  no_node_drained
}

@test "accounting: after a job, gpupoolctl show events job=N names the GPUs it leased and the release" {
  out=$BATS_TEST_TMPDIR/job.out
  j=$(timeout 60 sbatch --wait --parsable -o "$out" --gpu-pool=$POOL:2 --wrap 'echo "gpus=$GPUPOOL_GPUS"')
  [[ $j =~ ^[0-9]+$ ]]
  # The job's own view: two UUIDs with their agent endpoints.
  seen=$(sed -n 's/^gpus=//p' "$out" | tr ',' '\n' | cut -d@ -f1 | sort)
  [ "$(wc -l <<<"$seen")" -eq 2 ]
  wait_until 10 job_has_no_lease "$j"
  event_types_are "$j" "leased released"
  # The text form an admin reads.
  text=$(gpupoolctl show events job="$j")
  [[ $text == *"Type=leased"*"JobId=$j"* ]]
  [[ $text == *"Type=released"*"JobId=$j"* ]]
  # The leased event lists exactly the GPUs the job saw.
  ids=$(gpupoolctl show events job="$j" --json |
    jq -r '.events[] | select(.type == "leased") | .detail' | tr ',' '\n')
  uuids=$(for id in $ids; do gpupoolctl show gpus "$id" --json | jq -r '.gpus[0].uuid'; done | sort)
  [ "$uuids" = "$seen" ]
  for id in $ids; do [[ $id == gpuhost5:* ]]; done
  # Lease and release are in order, with times.
  gpupoolctl show events job="$j" --json |
    jq -e '.events | length == 2 and .[0].seq < .[1].seq and .[0].time <= .[1].time'
}

@test "a GPU host joining raises capacity within 5 s; losing it lowers it again" {
  before=$(license_total gpupool_l4)
  [[ $before =~ ^[0-9]+$ ]]
  pool_field_is l4 usable "$before"
  start=$(date +%s%N)
  "$DEVCLUSTER" join
  wait_until 5 license_total_is gpupool_l4 $((before + 2))
  echo "# license total followed the join in $((($(date +%s%N) - start) / 1000000)) ms" >&3
  # The new GPUs are really usable: a job of 2 gets them.
  j=$(timeout 60 sbatch --wait --parsable -o /dev/null --gpu-pool=l4:2 --wrap true)
  [[ $j =~ ^[0-9]+$ ]]
  wait_until 10 job_has_no_lease "$j"
  gpupoolctl show events job="$j" --json |
    jq -e '[.events[] | select(.type == "leased") | .detail | split(",")[] | startswith("gpuhost6:")] == [true, true]'
  # The host goes away: after gpupoold's unreachable_timeout its GPUs no longer count.
  "$DEVCLUSTER" stop agent-gpuhost6
  wait_until 15 license_total_is gpupool_l4 "$before"
  pool_field_is l4 unreachable 2
  no_node_drained
}
