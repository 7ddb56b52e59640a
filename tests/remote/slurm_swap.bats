#!/usr/bin/env bats
# A swap under a running job, seen from the data path: a batch job runs vector_add in an
# srun step on its GPU; `gpupoolctl update gpu=<that GPU> state=fail` moves the lease
# (generation 2); the job's next srun step gets the new GPU from spank_gpupool and runs on
# it; the batch step's own, older environment now names a GPU the lease no longer holds,
# and the agent refuses it. No node is drained. (The library does not reconnect a running
# process to the new GPU: a new step is how a job picks the new GPU up.)

load slurm_helpers

teardown() {
  [[ -n ${FAILED_GPU:-} ]] &&
    gpupoolctl update gpu="$FAILED_GPU" state=resume reason="r3 swap test" >/dev/null || true
}

SCRIPT='#!/bin/bash
step() {
  srun -n1 bash -c "echo \"STEP$1 lease=\$GPUPOOL_LEASE_ID gpus=\$GPUPOOL_GPUS\"; exec @PROGRAMS@/vector_add"
}
step 1 || exit 1
echo READY
f=$GPUPOOL_LEASE_FILE
for i in $(seq 1 150); do
  [ "$(jq .generation "$f")" -gt 1 ] && break
  sleep 0.2
done
echo "GEN $(jq .generation "$f")"
step 2 || exit 1
@PROGRAMS@/vector_add
echo "STALE rc=$?"
'

step1_done_or_job_ended() { grep -q '^READY$' "$OUT/$1.out" 2>/dev/null || job_ended "$1"; }

swap_on() {
  local transport=$1 id out step1 step2 lease old_uuid new_uuid
  id=$(submit_on "$transport" --gpu-pool=a100:1 <<<"${SCRIPT//@PROGRAMS@/$PROGRAMS}")
  [[ -n $id ]]
  wait_until 60 step1_done_or_job_ended "$id"
  grep -q '^READY$' "$OUT/$id.out" || { job_completed_ok "$id"; false; }
  FAILED_GPU=$(lease_field_of_job "$id" '.gpus[0].id')
  [ "$(lease_field_of_job "$id" .generation)" = 1 ]
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="r3 swap test" >/dev/null
  wait_job_end "$id" 90
  job_completed_ok "$id"
  out=$(cat "$OUT/$id.out")

  step1=$(grep '^STEP1 ' <<<"$out")
  step2=$(grep '^STEP2 ' <<<"$out")
  lease=$(field_of_line "$step1" lease)
  [ "$(field_of_line "$step2" lease)" = "$lease" ]
  old_uuid=$(field_of_line "$step1" gpus)
  old_uuid=${old_uuid%@*}
  new_uuid=$(field_of_line "$step2" gpus)
  new_uuid=${new_uuid%@*}
  [ "$old_uuid" = "$(uuid_of_gpu "$FAILED_GPU")" ]
  [[ $new_uuid == GPU-* && $new_uuid != "$old_uuid" ]]
  grep -q '^GEN 2$' <<<"$out"
  # Both steps ran vector_add to a correct result, each on its own GPU, under one lease.
  [ "$(grep -c '^vector_add: [0-9]* elements, 0 wrong$' <<<"$out")" -eq 2 ]
  agent_saw_client "$lease" "$old_uuid"
  agent_saw_client "$lease" "$new_uuid"
  # The pre-swap environment is refused: the lease no longer holds the failed GPU.
  grep -q '^STALE rc=1$' <<<"$out"
  grep -q "gpupool-cuda: GPU $old_uuid at .* refused this process" <<<"$out"
  agent_refused "$lease" "$old_uuid"
  events_of_job "$id" | grep -qx swapped
  no_node_drained
}

@test "a GPU failed under a running job over tcp: the next step runs on the new GPU" {
  swap_on tcp
}

@test "a GPU failed under a running job over shared memory: the next step runs on the new GPU" {
  swap_on shm
}
