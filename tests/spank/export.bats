#!/usr/bin/env bats
# Every --export form gives a job its lease: the option reaches slurmstepd whatever
# environment the job exports (sbatch --export=NONE used to get licenses but no lease).
# salloc has no --export in Slurm 22.05: inside an allocation each form is given to srun.

load ../lib/helpers

# The forms, with a marker variable in the submitting environment that shows which
# environment the job really got: ALL passes it on, NONE and a list without ALL do not.
FORMS=(ALL NONE GPUPOOL_EXPORT_OTHER ALL,GPUPOOL_EXPORT_SET=x)
export GPUPOOL_EXPORT_MARKER=submitter GPUPOOL_EXPORT_OTHER=listed

# check_form FORM ENV-FILE: the job got a lease and the environment FORM asked for.
check_form() {
  local form=$1 f=$2
  grep -q '^GPUPOOL_LEASE_ID=L[0-9]' "$f"
  grep -q '^GPUPOOL_GPUS=GPU-' "$f"
  case $form in
    ALL) grep -q '^GPUPOOL_EXPORT_MARKER=submitter$' "$f" ;;
    NONE) ! grep -q '^GPUPOOL_EXPORT_' "$f" ;;
    GPUPOOL_EXPORT_OTHER)
      grep -q '^GPUPOOL_EXPORT_OTHER=listed$' "$f"
      ! grep -q '^GPUPOOL_EXPORT_MARKER=' "$f" || false
      ;;
    ALL,GPUPOOL_EXPORT_SET=x)
      grep -q '^GPUPOOL_EXPORT_SET=x$' "$f"
      grep -q '^GPUPOOL_EXPORT_MARKER=submitter$' "$f"
      ;;
  esac
}

@test "sbatch: every --export form gets licenses and a lease, in the batch step and its sruns" {
  local ids=() i
  for i in "${!FORMS[@]}"; do
    ids[i]=$(submit --export="${FORMS[i]}" --gpu-pool=a100:1 --wrap \
      "/usr/bin/env > $OUT/sbatch-$i.env; srun /usr/bin/printenv GPUPOOL_LEASE_ID > $OUT/sbatch-$i.step")
  done
  for i in "${!FORMS[@]}"; do
    wait_until 60 job_ended "${ids[i]}"
    echo "form ${FORMS[i]}: job ${ids[i]}" >&2
    cat "$OUT/${ids[i]}.out" >&2 || true
    [ "$(job_state "${ids[i]}")" = COMPLETED ]
    [ "$(job_field "${ids[i]}" Licenses)" = gpupool_a100:1 ]
    check_form "${FORMS[i]}" "$OUT/sbatch-$i.env"
    # The srun step inside saw the batch step's lease.
    [ "$(cat "$OUT/sbatch-$i.step")" = "$(grep '^GPUPOOL_LEASE_ID=' "$OUT/sbatch-$i.env" | cut -d= -f2)" ]
    events_of_job "${ids[i]}" | grep -qx leased
  done
  no_node_drained
}

@test "srun: every --export form gets a lease" {
  local i
  for i in "${!FORMS[@]}"; do
    run srun --export="${FORMS[i]}" --gpu-pool=h100:1 /usr/bin/env
    echo "form ${FORMS[i]}: status $status" >&2
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" >"$OUT/srun-$i.env"
    check_form "${FORMS[i]}" "$OUT/srun-$i.env"
  done
  no_node_drained
}

@test "salloc: srun with every --export form inside the allocation gets the job's lease" {
  # salloc itself has no --export option in this Slurm release.
  run salloc --export=NONE --gpu-pool=a100:1 true
  [ "$status" -ne 0 ]
  local script="" i
  for i in "${!FORMS[@]}"; do
    script+="srun --export='${FORMS[i]}' /usr/bin/env > $OUT/salloc-$i.env || exit 1; "
  done
  run salloc --gpu-pool=a100:1 bash -c "$script"
  [ "$status" -eq 0 ]
  local ids=""
  for i in "${!FORMS[@]}"; do
    check_form "${FORMS[i]}" "$OUT/salloc-$i.env"
    ids+="$(grep '^GPUPOOL_LEASE_ID=' "$OUT/salloc-$i.env")"$'\n'
  done
  # One lease for the allocation, whatever each step exported.
  [ "$(sort -u <<<"${ids%$'\n'}" | wc -l)" -eq 1 ]
  no_node_drained
}
