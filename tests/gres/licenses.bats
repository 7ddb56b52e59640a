#!/usr/bin/env bats
# job_submit.lua: --gpu-pool=POOL:N becomes licenses + per-node GRES on the server side;
# bad requests are refused at submit, also when the client-side check is skipped; users
# cannot take or change pool licenses by hand. (Queueing on licenses: capacity.bats.)
load ../lib/helpers

teardown() {
  if [[ -n ${JOBS:-} ]]; then scancel $JOBS 2>/dev/null || true; fi
}

@test "--gpu-pool becomes pool licenses and a per-node gpupool GRES that agrees with the lease" {
  out=$BATS_TEST_TMPDIR/job.out
  run timeout 60 sbatch --wait -N1 --gpu-pool=a100:2,h100:1 -o "$out" --wrap \
    'echo count=$GPUPOOL_GRES_COUNT; echo gpus=$GPUPOOL_GPUS; scontrol show job $SLURM_JOB_ID'
  [ "$status" -eq 0 ]
  grep -q 'count=3' "$out"
  # spank_gpupool's lease has as many GPUs as the GRES count says.
  [ "$(sed -n 's/^gpus=//p' "$out" | tr ',' '\n' | grep -c @)" -eq 3 ]
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

@test "an unknown pool is refused at submit, listing the pools" {
  before=$(squeue -h | wc -l)
  run sbatch -o /dev/null --gpu-pool=nosuchpool:1 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: no pool 'nosuchpool' (pools: a100, h100, l4, l40s)"* ]]
  run srun --gpu-pool=nosuchpool:1 true
  [ "$status" -ne 0 ]
  [[ $output == *"no pool 'nosuchpool'"* ]]
  [ "$(squeue -h | wc -l)" -eq "$before" ]
}

# spank_gpupool refuses malformed values in sbatch itself (tests/spank); slurmctld must
# refuse them too, for a client that skips that check and sets the option variable itself.
@test "malformed requests that bypass the client-side check are refused by slurmctld" {
  var=_SLURM_SPANK_OPTION_gpupool_gpu_pool
  before=$(squeue -h | wc -l)
  run env "$var=a100:0" sbatch -o /dev/null --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: --gpu-pool: count for pool 'a100' must be at least 1"* ]]
  run env "$var=a100:1,a100:1" sbatch -o /dev/null --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: --gpu-pool: pool 'a100' is given twice"* ]]
  run env "$var=a100" sbatch -o /dev/null --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: --gpu-pool: 'a100' is not POOL:COUNT"* ]]
  run env "$var=a100:$(($(pool_total a100) + 1))" sbatch -o /dev/null --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: pool 'a100' has $(pool_total a100) GPUs"* ]]
  [ "$(squeue -h | wc -l)" -eq "$before" ]
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

@test "users cannot change pool licenses of a job with scontrol update" {
  JOBS=$(su -s /bin/sh nobody -c "cd /tmp && SLURM_CONF=$SLURM_CONF sbatch --parsable -o /dev/null --gpu-pool=a100:1 --hold --wrap true")
  run su -s /bin/sh nobody -c "SLURM_CONF=$SLURM_CONF scontrol update JobId=$JOBS Licenses=gpupool_a100:0"
  [ "$status" -ne 0 ]
  scontrol show job "$JOBS" | grep -q 'Licenses=gpupool_a100:1\b'
}

# gpupool.conf(5) allows '.' in pool names (spank_gpupool does too): slurmctld must read
# such a name as a pool, not refuse the request as malformed.
@test "a pool name with '.' is read as a pool name at submit" {
  var=_SLURM_SPANK_OPTION_gpupool_gpu_pool
  run env "$var=a100.v2:1" sbatch -o /dev/null --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"gpupool: no pool 'a100.v2' (pools: a100, h100, l4, l40s)"* ]]
  [[ $output != *"is not POOL:COUNT"* ]]
}
