# The one bats helper file of the cluster tests (tests/*/*.bats with `load ../lib/helpers`):
# the dev cluster's environment, jobs, leases, licenses, and the checks every test repeats.
# Needs the dev cluster up (CTest fixture "devcluster" from tests/devcluster). From CTest:
# GPUPOOL_BUILD (the build tree the cluster runs), DEVCLUSTER (scripts/devcluster), and
# GPUPOOL_SOURCE where a test needs the source tree.

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

# Jobs, as slurmctld sees them (squeue drops finished jobs from its default view).
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_field() { scontrol show job "$1" 2>/dev/null | grep -o " $2=[^ ]*" | head -1 | cut -d= -f2-; }
job_reason() { job_field "$1" Reason; }
job_is() { [[ $(job_state "$1") == "$2" ]]; }
job_reason_is() { [[ $(job_reason "$1") == "$2" ]]; }
job_running() { job_is "$1" RUNNING; }
job_ended() {
  local s
  s=$(job_state "$1")
  [[ -n $s && $s != PENDING && $s != RUNNING && $s != COMPLETING && $s != CONFIGURING ]]
}
# Submits a batch job whose output goes to $OUT/<id>.out; prints the id. Options first.
submit() { sbatch --parsable -o "$OUT/%j.out" "$@" | cut -d';' -f1; }

# Jobs that run until the test lets them finish: `held_job OPTS...` submits one that
# waits for the file $FLAGS/<jobid>; `finish JOB` creates it. FLAGS must be set.
held_job() {
  submit "$@" --wrap "while [ ! -e $FLAGS/\$SLURM_JOB_ID ]; do sleep 0.2; done"
}
finish() { touch "$FLAGS/$1"; }

# Licenses and the pool totals scripts/devcluster wrote.
license_total() {
  scontrol show license "$1" 2>/dev/null | grep -o 'Total=[0-9]*' | cut -d= -f2
}
license_total_is() { [[ $(license_total "$1") == "$2" ]]; }
pool_total() { awk -v p="$1" '$1 == p {print $2}' "$DEVDIR/gpupool_pools"; }

# gpupoold through gpupoolctl (--json mirrors the API, docs/api.md).
leases_json() { gpupoolctl show leases --json; }
lease_count_of_job() { leases_json | jq "[.leases[] | select(.job_id == $1)] | length"; }
job_has_lease() { [[ $(lease_count_of_job "$1") == 1 ]]; }
job_has_no_lease() { [[ $(lease_count_of_job "$1") == 0 ]]; }
# lease_field_of_job JOB JQ-PATH, e.g. '.gpus[].id'.
lease_field_of_job() { leases_json | jq -r ".leases[] | select(.job_id == $1) | $2"; }
# The GPU ids of job $1's live lease, sorted, one per line.
lease_gpus_of_job() { lease_field_of_job "$1" '.gpus[].id' | sort; }
# Every GPU id held by a live lease, one per line (duplicates mean a double lease).
leased_gpu_ids() { leases_json | jq -r '.leases[].gpus[].id'; }
pool_field() { gpupoolctl show pools "$1" --json | jq -r ".pools[0].$2"; }
pool_field_is() { [[ $(pool_field "$1" "$2") == "$3" ]]; }
# Event types of job $1, oldest first: one per line, or space separated.
events_of_job() { gpupoolctl show events job="$1" --json | jq -r '.events[].type'; }
event_types_of_job() { gpupoolctl show events job="$1" --json | jq -r '[.events[].type] | join(" ")'; }
event_types_are() { [[ $(event_types_of_job "$1") == "$2" ]]; }

# gpupool never drains a node: every node IDLE, ALLOCATED, MIXED or COMPLETING, and no
# node carries a reason Slurm gives when a prolog, epilog or batch step failed.
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
