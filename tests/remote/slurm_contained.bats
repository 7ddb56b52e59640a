#!/usr/bin/env bats
# Issue 36: a GPU host contains its tenants. Each session (a lease on a GPU) runs in its own
# sandboxed gpupool-worker, and what a tenant does hurts only that tenant: an endless kernel
# ends with its job and the GPU serves the next job within seconds; a worker killed under a
# running program is the tenant's fault (the GPU stays healthy, the program goes on by
# replaying on a fresh worker); a hostile module cannot touch another job's memory or the
# agent. Nothing is FAILED, no pool loses capacity, no node is drained.

load slurm_helpers

setup() {
  DRAINED=()
}

teardown() {
  local gpu
  for gpu in "${DRAINED[@]}"; do
    gpupoolctl update gpu="$gpu" state=resume reason="containment test" >/dev/null 2>&1 || true
  done
  rm -f "$OUT/attacker-done"
}

agent_pid() { cat "$GPUPOOL_DEVDIR/pids/agent-$1.pid"; }
# The session worker of lease $2 on the agent of host $1 (its argv names the session).
worker_of() { pgrep -P "$(agent_pid "$1")" -f -- "gpupool-worker .*--lease $2 " || true; }
no_gpu_failed() { ! gpupoolctl show gpus --json | jq -e '.gpus[] | select(.state == "FAILED")' >/dev/null; }
spinning() { grep -q '^endless_kernel: spinning' "$OUT/$1.out" 2>/dev/null || job_ended "$1"; }
said() { grep -q "$2" "$OUT/$1.out" 2>/dev/null || job_ended "$1"; }

# Drains every a100 GPU but $1, so that the next a100:1 job gets $1.
keep_only() {
  local gpu
  for gpu in $(gpupoolctl show gpus --json | jq -r '.gpus[] | select(.pool == "a100") | .id'); do
    [[ $gpu == "$1" ]] && continue
    gpupoolctl update gpu="$gpu" state=drain reason="containment test" >/dev/null
    DRAINED+=("$gpu")
  done
}

@test "an endless kernel ends with its job: the GPU serves the next job within seconds and nothing is FAILED" {
  local id gpu host lease worker next started seconds
  id=$(submit_on tcp --gpu-pool=a100:1 --wrap "$PROGRAMS/endless_kernel")
  [[ -n $id ]]
  wait_until 120 spinning "$id"
  grep -q '^endless_kernel: spinning' "$OUT/$id.out" || { job_completed_ok "$id"; false; }
  gpu=$(lease_field_of_job "$id" '.gpus[0].id')
  host=$(lease_field_of_job "$id" '.gpus[0].host')
  lease=$(lease_field_of_job "$id" '.id')
  worker=$(worker_of "$host" "$lease")
  [[ -n $worker ]]
  # The next a100 job can only get this GPU.
  keep_only "$gpu"
  started=$(date +%s.%N)
  scancel "$id"
  next=$(submit_on tcp --gpu-pool=a100:1 --wrap "$PROGRAMS/vector_add")
  wait_job_end "$next" 120
  seconds=$(echo "$(date +%s.%N) - $started" | bc)
  echo "# the next job on the endless kernel's GPU finished ${seconds} s after scancel" >&3
  job_completed_ok "$next"
  grep -q '^vector_add: [0-9]* elements, 0 wrong$' "$OUT/$next.out"
  # The spinning worker is gone, and the GPU was never taken for hung.
  ! kill -0 "$worker" 2>/dev/null
  (($(echo "$seconds < 45" | bc)))
  no_gpu_failed
  [ "$(pool_field a100 failed)" = 0 ] || [ "$(pool_field a100 failed)" = null ]
  no_node_drained
}

@test "a session worker killed under a running program is the tenant's fault: the GPU stays healthy and the program goes on" {
  local id gpu uuid host lease worker
  id=$(GPUPOOL_RECOVERY_DEADLINE=60 submit_on tcp --gpu-pool=a100:1 --wrap "$PROGRAMS/iterate 200 15 4 32")
  [[ -n $id ]]
  wait_until 120 said "$id" '^iterate: running'
  grep -q '^iterate: running' "$OUT/$id.out" || { job_completed_ok "$id"; false; }
  gpu=$(lease_field_of_job "$id" '.gpus[0].id')
  uuid=$(lease_field_of_job "$id" '.gpus[0].uuid')
  host=$(lease_field_of_job "$id" '.gpus[0].host')
  lease=$(lease_field_of_job "$id" '.id')
  worker=$(worker_of "$host" "$lease")
  [[ -n $worker ]]
  kill -KILL "$worker"
  wait_job_end "$id" 240
  job_completed_ok "$id"
  grep -q '^iterate: PASS' "$OUT/$id.out"
  # It went on on the same GPU, through a new worker: not a GPU failure.
  grep -q "GPU 0: recovered on $uuid" "$OUT/$id.out"
  agent_logs | grep -q "the session worker of lease $lease on GPU $uuid killed by signal 9 (Killed): the tenant's fault, the GPU stays healthy"
  [ "$(gpupoolctl show gpus "$gpu" --json | jq -r '.gpus[0].state')" != FAILED ]
  ! events_of_job "$id" | grep -qx swapped
  no_gpu_failed
  no_node_drained
}

@test "a hostile module with wrapping sizes reaches neither another job's memory nor the agent" {
  local victim attacker host
  victim=$(submit_on tcp --gpu-pool=a100:1 --wrap "$PROGRAMS/victim_memory $OUT/attacker-done")
  [[ -n $victim ]]
  wait_until 120 said "$victim" '^victim_memory: ready'
  grep -q '^victim_memory: ready' "$OUT/$victim.out" || { job_completed_ok "$victim"; false; }
  host=$(lease_field_of_job "$victim" '.gpus[0].host')
  attacker=$(submit_on tcp --gpu-pool=a100:1 --wrap "$PROGRAMS/tenant_module")
  wait_job_end "$attacker" 120
  cat "$OUT/$attacker.out" >&3
  # Each is refused at load with CUDA_ERROR_INVALID_PTX (218): sizes are checked where
  # they are parsed, so nothing wraps and no 1 TiB shared array reaches the JIT.
  local variant
  for variant in 0 1 2 3; do
    grep -q "^tenant_module: variant $variant: cuModuleLoadData = 218$" "$OUT/$attacker.out"
  done
  touch "$OUT/attacker-done"
  wait_job_end "$victim" 120
  job_completed_ok "$victim"
  grep -q '^victim_memory: 0 bytes changed$' "$OUT/$victim.out"
  # Every agent lived on (its process is the one from before), and every part answers.
  # A part can be slow to answer for a moment under load (a node still completing the
  # attacker's job, a ping past its 2 s): what it said is shown if it never does.
  kill -0 "$(agent_pid "$host")"
  wait_until 30 "$DEVCLUSTER" status >/dev/null 2>&1 || { "$DEVCLUSTER" status >&3 || true; false; }
  no_gpu_failed
  no_node_drained
}
