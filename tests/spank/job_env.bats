#!/usr/bin/env bats
# Jobs that ask for pool GPUs see the lease in their environment, in every step, on every
# node; the lease exists while the job runs and is gone after it.

load ../lib/helpers

# The variables spank_gpupool sets for every step (plus the gpupool profile's).
check_env_file() {
  local f=$1 count=$2 ids
  grep -q '^GPUPOOL_LEASE_ID=L' "$f"
  grep -Eq '^GPUPOOL_LEASE_TOKEN=[0-9a-f]+$' "$f"
  grep -q "^GPUPOOL_SERVER=$GPUPOOL_SERVER\$" "$f"
  grep -q '^GPUPOOL_LEASE_FILE=/' "$f"
  grep -q '^LD_LIBRARY_PATH=.*/lib/remoting' "$f"
  ids=$(grep '^GPUPOOL_GPUS=' "$f" | cut -d= -f2 | tr ',' '\n')
  [ "$(wc -l <<<"$ids")" -eq "$count" ]
  # UUID@HOST:PORT, one per device.
  ! grep -vE '^GPU-[0-9a-f-]+@[0-9.]+:[0-9]+$' <<<"$ids" || false
  grep -q "^CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((count - 1)))\$" "$f"
}

@test "sbatch: the batch script sees the lease; gpupoolctl shows it while it runs, not after" {
  id=$(submit --gpu-pool=a100:2 --wrap "env > $OUT/sbatch.env; cat \$GPUPOOL_LEASE_FILE > $OUT/sbatch.lease; sleep 3")
  wait_until 20 job_running "$id"
  wait_until 10 job_has_lease "$id"
  [ "$(lease_field_of_job "$id" '.gpus | length')" -eq 2 ]
  [ "$(lease_field_of_job "$id" '.request[0].pool')" = a100 ]
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  wait_until 10 job_has_no_lease "$id"
  check_env_file "$OUT/sbatch.env" 2
  # The lease file is the lease, with the same id and GPUs as the environment.
  lease_id=$(grep '^GPUPOOL_LEASE_ID=' "$OUT/sbatch.env" | cut -d= -f2)
  [ "$(jq -r .id "$OUT/sbatch.lease")" = "$lease_id" ]
  [ "$(jq -r '[.gpus[] | .uuid + "@" + .endpoint] | join(",")' "$OUT/sbatch.lease")" = \
    "$(grep '^GPUPOOL_GPUS=' "$OUT/sbatch.env" | cut -d= -f2)" ]
  events=$(events_of_job "$id")
  grep -qx leased <<<"$events"
  grep -qx released <<<"$events"
  no_node_drained
}

@test "srun: the step sees the lease, released when srun returns" {
  run srun --gpu-pool=h100:1 env
  [ "$status" -eq 0 ]
  printf '%s\n' "$output" > "$OUT/srun.env"
  check_env_file "$OUT/srun.env" 1
  id=$(squeue -h -o %i | head -1)
  lease=$(grep '^GPUPOOL_LEASE_ID=' "$OUT/srun.env" | cut -d= -f2)
  wait_until 10 bash -c "! gpupoolctl show leases --json | jq -e '.leases[] | select(.id == \"$lease\")' >/dev/null"
  no_node_drained
}

@test "salloc: every srun inside the allocation sees the same lease" {
  run salloc -N2 --gpu-pool=a100:1,h100:1 bash -c \
    'srun -N2 -l printenv GPUPOOL_LEASE_ID; srun -N1 env; gpupoolctl show leases --json'
  [ "$status" -eq 0 ]
  # Two nodes of step 0 and step 1 report one lease id.
  ids=$(grep -oE '^[01]: L[0-9]+$' <<<"$output" | cut -d' ' -f2 | sort -u)
  [ "$(wc -l <<<"$ids")" -eq 1 ]
  grep -q "^GPUPOOL_LEASE_ID=$ids\$" <<<"$output"
  grep -q '^CUDA_VISIBLE_DEVICES=0,1$' <<<"$output"
  # While the allocation existed, gpupoold held exactly that lease with 2 GPUs.
  [[ $output == *"\"id\": \"$ids\""* || $output == *"\"id\":\"$ids\""* ]]
  wait_until 10 bash -c "! gpupoolctl show leases --json | jq -e '.leases[] | select(.id == \"$ids\")' >/dev/null"
}

@test "a 2-node job gets one lease, the same on both nodes" {
  id=$(submit -N2 --gpu-pool=h100:2 --wrap "srun -N2 -l printenv GPUPOOL_LEASE_ID GPUPOOL_GPUS; sleep 1")
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  out=$(cat "$OUT/$id.out")
  [ "$(grep -cE '^[01]: L[0-9]+$' <<<"$out")" -eq 2 ]
  [ "$(grep -E '^[01]: L[0-9]+$' <<<"$out" | cut -d' ' -f2 | sort -u | wc -l)" -eq 1 ]
  [ "$(grep -E '^[01]: GPU-' <<<"$out" | cut -d' ' -f2 | sort -u | wc -l)" -eq 1 ]
  # gpupoold created exactly one lease for the job.
  [ "$(events_of_job "$id" | grep -cx leased)" -eq 1 ]
  wait_until 10 job_has_no_lease "$id"
  no_node_drained
}

@test "a job without --gpu-pool gets no lease and no gpupool variables" {
  run srun env
  [ "$status" -eq 0 ]
  ! grep -q '^GPUPOOL_LEASE_ID=' <<<"$output" || false
  ! grep -q '^CUDA_VISIBLE_DEVICES=' <<<"$output" || false
}
