#!/usr/bin/env bats
# A job whose lease token is wrong is refused by the agent: inside a real --gpu-pool job,
# the program runs with the job's own token and fails, with the agent's refusal, when the
# token is altered. Over TCP and over shared memory.

load slurm_helpers

# The job runs vector_add twice: with the injected token (must work), then with that
# token's last hex digit changed (must be refused); it exits 0 when both went as expected.
SCRIPT='#!/bin/bash
echo "JOB lease=$GPUPOOL_LEASE_ID gpus=$GPUPOOL_GPUS"
@PROGRAMS@/vector_add || { echo "GOOD failed"; exit 1; }
last=${GPUPOOL_LEASE_TOKEN: -1}
[ "$last" = 0 ] && other=1 || other=0
GPUPOOL_LEASE_TOKEN=${GPUPOOL_LEASE_TOKEN%?}$other @PROGRAMS@/vector_add
echo "BAD rc=$?"
'

refused_on() {
  local transport=$1 id out line lease uuid
  id=$(submit_on "$transport" --gpu-pool=a100:1 <<<"${SCRIPT//@PROGRAMS@/$PROGRAMS}")
  [[ -n $id ]]
  wait_job_end "$id"
  job_completed_ok "$id"
  out=$(cat "$OUT/$id.out")
  line=$(grep '^JOB ' <<<"$out")
  lease=$(field_of_line "$line" lease)
  uuid=$(field_of_line "$line" gpus)
  uuid=${uuid%@*}
  [[ $lease == L* && $uuid == GPU-* ]]
  # The right token worked, the wrong one did not: the program saw no device, the library
  # said why, and the agent logged the refusal of this lease for this GPU.
  grep -q '^vector_add: [0-9]* elements, 0 wrong$' <<<"$out"
  [ "$(grep -c '^vector_add: ' <<<"$out")" -eq 1 ]
  grep -q '^BAD rc=1$' <<<"$out"
  grep -q "gpupool-cuda: GPU $uuid at 127.0.0.1:[0-9]* refused this process" <<<"$out"
  agent_saw_client "$lease" "$uuid"
  agent_refused "$lease" "$uuid"
  no_node_drained
}

@test "a wrong lease token is refused by the agent over tcp" {
  refused_on tcp
}

@test "a wrong lease token is refused by the agent over shared memory" {
  refused_on shm
}
