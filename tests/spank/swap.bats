#!/usr/bin/env bats
# gpupoolctl update gpu=ID state=fail under a running job: the job's lease moves to
# another GPU, the job learns of it (lease file, a notice that is not an error), the swap is recorded,
# the job finishes, and no node is drained.

load ../lib/helpers

teardown() {
  [[ -n ${FAILED_GPU:-} ]] && gpupoolctl update gpu="$FAILED_GPU" state=resume reason=test >/dev/null || true
}

# Waits in the job until its lease file shows generation > 1, then prints the file.
SCRIPT='
f=$GPUPOOL_LEASE_FILE
echo START gen=$(jq .generation "$f") gpus=$GPUPOOL_GPUS
for i in $(seq 1 100); do
  [ "$(jq .generation "$f")" -gt 1 ] && break
  sleep 0.2
done
echo AFTER gen=$(jq .generation "$f") gpus=$(jq -r "[.gpus[] | .uuid + \"@\" + .endpoint] | join(\",\")" "$f")
'

@test "a failed GPU under a running batch job is swapped; the job sees it and finishes" {
  id=$(submit --gpu-pool=a100:2 --wrap "$SCRIPT")
  wait_until 20 job_running "$id"
  wait_until 10 job_has_lease "$id"
  before=$(lease_field_of_job "$id" '.gpus[].id')
  FAILED_GPU=$(head -1 <<<"$before")
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="swap test"
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  out=$(cat "$OUT/$id.out")
  grep -q '^START gen=1 ' <<<"$out"
  grep -q '^AFTER gen=2 ' <<<"$out"
  # The new GPU list differs from the old one and no longer holds the failed GPU.
  failed_uuid=$(gpupoolctl show gpus "$FAILED_GPU" --json | jq -r '.gpus[0].uuid')
  start=$(grep '^START' <<<"$out" | sed 's/.*gpus=//')
  after=$(grep '^AFTER' <<<"$out" | sed 's/.*gpus=//')
  [[ $start == *"$failed_uuid"* ]]
  [[ $after != *"$failed_uuid"* ]]
  [ "$(tr ',' '\n' <<<"$after" | wc -l)" -eq 2 ]
  # The batch step told the job, as information: a plain line, no "error:".
  grep -q "^gpupool: lease L[0-9]* generation 2 (ACTIVE): device [01]: $FAILED_GPU -> [a-z0-9]*:[0-9]*; GPUPOOL_LEASE_FILE is updated\$" <<<"$out"
  ! grep -q 'error:.*gpupool' <<<"$out" || false
  events_of_job "$id" | grep -qx swapped
  no_node_drained
}

@test "a swap under an srun job reaches srun and the lease file (extern step watcher)" {
  # In the background, with bats' own descriptor closed so that bats does not wait on it.
  srun --gpu-pool=h100:1 bash -c "$SCRIPT" >"$OUT/srun-swap.out" 2>&1 3>&- &
  srun_pid=$!
  wait_until 20 bash -c '[[ $(gpupoolctl show leases --json | jq ".leases | length") -ge 1 ]]'
  id=$(squeue -h -o %i | head -1)
  FAILED_GPU=$(lease_field_of_job "$id" '.gpus[0].id')
  gpupoolctl update gpu="$FAILED_GPU" state=fail reason="swap test"
  wait "$srun_pid"
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  out=$(cat "$OUT/srun-swap.out")
  grep -q '^START gen=1 ' <<<"$out"
  grep -q '^AFTER gen=2 ' <<<"$out"
  # srun prints what slurm_notify_job sent, as information.
  grep -q "^srun: gpupool: lease L[0-9]* generation 2 .*$FAILED_GPU -> " <<<"$out"
  ! grep -q 'error:.*gpupool' <<<"$out" || false
  events_of_job "$id" | grep -qx swapped
  no_node_drained
}
