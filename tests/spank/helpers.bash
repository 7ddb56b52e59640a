# Shared by tests/spank/*.bats: the dev cluster's environment, job helpers, lease queries.
# Needs the dev cluster up (CTest fixture "devcluster"); DEVCLUSTER names scripts/devcluster.

DEVDIR=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}
# shellcheck disable=SC1091
. "$DEVDIR/env"
: "${DEVCLUSTER:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/scripts/devcluster}"

# A scratch directory per test file for job output (jobs run as root on this machine).
OUT=${BATS_FILE_TMPDIR:-/tmp}/out
mkdir -p "$OUT"

# wait_until SECONDS CMD...: retries CMD every 0.2 s; fails after SECONDS.
wait_until() {
  local deadline=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < deadline)) || return 1
    sleep 0.2
  done
}

job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2-; }
job_is() { [[ $(job_state "$1") == "$2" ]]; }
job_running() { job_is "$1" RUNNING; }
job_ended() {
  local s
  s=$(job_state "$1")
  [[ -n $s && $s != PENDING && $s != RUNNING && $s != COMPLETING && $s != CONFIGURING ]]
}
# Submits a batch job whose output goes to $OUT/<id>.out; prints the id.
submit() { sbatch --parsable -o "$OUT/%j.out" "$@" | cut -d';' -f1; }

# Lease queries through gpupoolctl (its --json mirrors GET /v1/leases).
leases_json() { gpupoolctl show leases --json; }
lease_count_of_job() { leases_json | jq "[.leases[] | select(.job_id == $1)] | length"; }
job_has_lease() { [[ $(lease_count_of_job "$1") == 1 ]]; }
job_has_no_lease() { [[ $(lease_count_of_job "$1") == 0 ]]; }
lease_field_of_job() { leases_json | jq -r ".leases[] | select(.job_id == $1) | $2"; }
# Every GPU id held by a live lease, one per line (duplicates mean a double lease).
leased_gpu_ids() { leases_json | jq -r '.leases[].gpus[].id'; }
events_of_job() { gpupoolctl show events job="$1" --json | jq -r '.events[].type'; }

# gpupool never drains a node: every node IDLE, ALLOCATED, MIXED or COMPLETING.
no_node_drained() {
  local states
  states=$(sinfo -h -N -o '%T')
  [[ -n $states ]] || return 1
  ! grep -qiE 'drain|down|fail|maint' <<<"$states" || return 1
  ! scontrol show node | grep -qE 'Reason=.*(Prolog|Epilog|batch job complete)'
}
all_nodes_idle() { [[ -z $(sinfo -h -N -o '%T' | grep -v '^idle$') ]]; }

# detached CMD...: runs CMD (e.g. `devcluster restart gpupoold`) with every descriptor
# above 2 closed, so that a daemon it starts does not hold one of bats' pipes open (bats
# would then wait for the daemon forever).
detached() {
  (
    for fd in /proc/$BASHPID/fd/*; do
      fd=${fd##*/}
      ((fd > 2)) && eval "exec $fd>&-"
    done
    exec "$@"
  ) </dev/null
}
