# Shared by tests/gres/*.bats: the dev cluster's environment and small waits.
# Needs GPUPOOL_BUILD, GPUPOOL_SOURCE, DEVCLUSTER (set by tests/gres/CMakeLists.txt).

DEVDIR=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}
# shellcheck disable=SC1091
. "$DEVDIR/env"

# wait_until SECONDS CMD...: retries CMD every 0.2 s; fails after SECONDS.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

job_state() { squeue -h -j "$1" -o '%T' 2>/dev/null; }
job_reason() { squeue -h -j "$1" -o '%r' 2>/dev/null; }
job_is() { [[ $(job_state "$1") == "$2" ]]; }
# Submits a batch job; prints its id. Extra sbatch options first.
submit() { sbatch --parsable -o /dev/null "$@" | cut -d';' -f1; }
license_total() {
  scontrol show license "$1" 2>/dev/null | grep -o 'Total=[0-9]*' | cut -d= -f2
}
license_total_is() { [[ $(license_total "$1") == "$2" ]]; }
pool_total() { awk -v p="$1" '$1 == p {print $2}' "$DEVDIR/gpupool_pools"; }
no_node_drained() { [ -z "$(sinfo -h -N -o "%T" | grep -E "drain|down|fail")" ]; }
