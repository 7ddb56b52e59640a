#!/usr/bin/env bats
# When no lease can be had (here: gpupoold is down) the job fails with a message the user
# sees, and no node is drained. A gpupoold that comes back within the plugin's retry=
# window (default 15 s) is waited for.

load ../lib/helpers

idle_gpus() { gpupoolctl show gpus --json | jq '[.gpus[] | select(.state == "IDLE")] | length'; }

setup_file() {
  . "$BATS_TEST_DIRNAME/../lib/helpers.bash"
  IDLE_BEFORE=$(idle_gpus)
  export IDLE_BEFORE
  "$DEVCLUSTER" stop gpupoold
  ! curl -sf "$GPUPOOL_SERVER/v1/ping" || false
}

teardown_file() {
  . "$BATS_TEST_DIRNAME/../lib/helpers.bash"
  detached "$DEVCLUSTER" restart gpupoold
  wait_until 30 curl -sf "$GPUPOOL_SERVER/v1/ping"
  # The agents re-register within a heartbeat or two; later tests need every GPU back.
  wait_until 30 bash -c "[[ \$(gpupoolctl show gpus --json | jq '[.gpus[] | select(.state == \"IDLE\")] | length') -eq $IDLE_BEFORE ]]"
}

@test "sbatch: the job fails, its output and AdminComment say why, no node drained" {
  id=$(submit --gpu-pool=a100:1 --wrap 'echo the-script-ran')
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = FAILED ]
  [ "$(job_field "$id" ExitCode)" = 1:0 ]
  grep -q "gpupool: job $id: cannot lease GPUs: cannot reach gpupoold" "$OUT/$id.out"
  ! grep -q the-script-ran "$OUT/$id.out" || false
  scontrol show job "$id" | grep -q "AdminComment=gpupool: job $id: cannot lease GPUs"
  wait_until 20 all_nodes_idle
  no_node_drained
}

@test "srun: the step fails with exit status 1 and the reason on stderr, no node drained" {
  run srun -N2 --gpu-pool=h100:1 echo the-step-ran
  [ "$status" -eq 1 ]
  [[ $output == *"cannot lease GPUs: cannot reach gpupoold"* ]]
  [[ $output != *the-step-ran* ]]
  wait_until 20 all_nodes_idle
  no_node_drained
}

@test "jobs without --gpu-pool still run while gpupoold is down" {
  run srun -N2 echo fine
  [ "$status" -eq 0 ]
  [ "$(grep -c fine <<<"$output")" -eq 2 ]
}

@test "a job that starts while gpupoold is down gets its lease when gpupoold is back within retry=" {
  id=$(submit --gpu-pool=a100:1 --wrap 'echo "lease=$GPUPOOL_LEASE_ID"')
  wait_until 20 job_running "$id"
  sleep 2  # the plugin is retrying now
  detached "$DEVCLUSTER" start gpupoold
  wait_until 40 job_ended "$id"
  cat "$OUT/$id.out" >&2
  [ "$(job_state "$id")" = COMPLETED ]
  grep -Eq '^lease=L[0-9]+$' "$OUT/$id.out"
  no_node_drained
}
