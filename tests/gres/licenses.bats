#!/usr/bin/env bats
# job_submit.lua: --gpu-pool=POOL:N becomes licenses + per-node GRES on the server side;
# jobs queue on licenses; bad requests are refused at submit. Independent of whether the
# totals come from the real gpupoold or the devcluster's seed.
load helpers

teardown() {
  if [[ -n ${JOBS:-} ]]; then scancel $JOBS 2>/dev/null || true; fi
}

@test "--gpu-pool becomes pool licenses and a per-node gpupool GRES" {
  out=$BATS_TEST_TMPDIR/job.out
  run timeout 60 sbatch --wait -N1 --gpu-pool=a100:2,h100:1 -o "$out" --wrap \
    'echo count=$GPUPOOL_GRES_COUNT; scontrol show job $SLURM_JOB_ID'
  [ "$status" -eq 0 ]
  grep -q 'count=3' "$out"
  grep -Eq 'Licenses=(gpupool_a100:2,gpupool_h100:1|gpupool_h100:1,gpupool_a100:2)\b' "$out"
  grep -q 'TresPerNode=gres:gpupool:3' "$out"
}

@test "a request larger than the whole pool is refused at submit, naming the pool" {
  total=$(pool_total a100)
  [[ $total =~ ^[0-9]+$ ]]
  before=$(squeue -h | wc -l)
  run sbatch -o /dev/null --gpu-pool=a100:$((total + 1)) --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: pool 'a100' has $total GPUs, $((total + 1)) requested"* ]]
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

@test "malformed --gpu-pool values are refused at submit with a message" {
  run sbatch -o /dev/null --gpu-pool=nosuchpool:1 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"no pool 'nosuchpool' (pools: a100, h100)"* ]]
  run sbatch -o /dev/null --gpu-pool=a100:0 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"count for pool 'a100' must be at least 1"* ]]
  run sbatch -o /dev/null --gpu-pool=a100:1,a100:1 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"pool 'a100' is given twice"* ]]
  run sbatch -o /dev/null --gpu-pool=a100 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"'a100' is not POOL:COUNT"* ]]
}

@test "users cannot take pool licenses by hand with -L; root (admin) can" {
  run su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch -o /dev/null -L gpupool_a100:1 --wrap true"
  [ "$status" -ne 0 ]
  [[ $output == *"licenses gpupool_a100:1 are managed by gpupool; ask with --gpu-pool=POOL:COUNT"* ]]
  # The same user with --gpu-pool is accepted and gets the license.
  run su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch --parsable -o /dev/null --gpu-pool=a100:1 --hold --wrap true"
  [ "$status" -eq 0 ]
  JOBS=$output
  scontrol show job "$JOBS" | grep -q 'Licenses=gpupool_a100:1\b'
  scancel "$JOBS"
  JOBS=$(submit -L gpupool_a100:1 --hold --wrap true)
  scontrol show job "$JOBS" | grep -q 'Licenses=gpupool_a100:1\b'
}

@test "jobs beyond the pool's free GPUs wait with Reason=Licenses and start when GPUs free up" {
  total=$(license_total gpupool_a100)
  [[ $total =~ ^[0-9]+$ ]] && ((total >= 2))
  running=()
  for ((i = 0; i < total / 2; i++)); do
    running+=("$(submit --gpu-pool=a100:2 --wrap 'sleep 300')")
  done
  JOBS="${running[*]}"
  waiting=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  JOBS="$JOBS $waiting"
  for j in "${running[@]}"; do wait_until 10 job_is "$j" RUNNING; done
  wait_until 5 job_is "$waiting" PENDING
  sleep 2  # several scheduling passes: it must still wait
  job_is "$waiting" PENDING
  [ "$(job_reason "$waiting")" = "Licenses" ]
  scancel "${running[0]}"
  wait_until 10 job_is "$waiting" RUNNING
  no_node_drained
}

@test "users cannot change pool licenses of a job with scontrol update" {
  JOBS=$(su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch --parsable -o /dev/null --gpu-pool=a100:1 --hold --wrap true")
  run su -s /bin/sh nobody -c "SLURM_CONF=$SLURM_CONF scontrol update JobId=$JOBS Licenses=gpupool_a100:0"
  [ "$status" -ne 0 ]
  scontrol show job "$JOBS" | grep -q 'Licenses=gpupool_a100:1\b'
}
