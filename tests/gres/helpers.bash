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

# Job state from slurmctld (squeue drops finished jobs from its default view).
job_state() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
job_reason() { scontrol show job "$1" 2>/dev/null | grep -o ' Reason=[^ ]*' | cut -d= -f2; }
job_is() { [[ $(job_state "$1") == "$2" ]]; }
job_reason_is() { [[ $(job_reason "$1") == "$2" ]]; }
job_ended() {
  local s
  s=$(job_state "$1")
  [[ -n $s && $s != PENDING && $s != RUNNING && $s != COMPLETING && $s != CONFIGURING ]]
}
# Submits a batch job; prints its id. Extra sbatch options first.
submit() { sbatch --parsable -o /dev/null "$@" | cut -d';' -f1; }

# Jobs that run until the test lets them finish: `held_job OPTS...` submits one that
# waits for the file $FLAGS/<jobid>; `finish JOB` creates it. FLAGS must be set.
held_job() {
  submit "$@" --wrap "while [ ! -e $FLAGS/\$SLURM_JOB_ID ]; do sleep 0.2; done"
}
finish() { touch "$FLAGS/$1"; }

license_total() {
  scontrol show license "$1" 2>/dev/null | grep -o 'Total=[0-9]*' | cut -d= -f2
}
license_total_is() { [[ $(license_total "$1") == "$2" ]]; }
pool_total() { awk -v p="$1" '$1 == p {print $2}' "$DEVDIR/gpupool_pools"; }
no_node_drained() {
  local states
  states=$(sinfo -h -N -o '%T')
  [[ -n $states ]] || return 1
  ! grep -qiE 'drain|down|fail' <<<"$states"
}

# gpupoold through gpupoolctl (--json mirrors the API, docs/api.md).
pool_field() { gpupoolctl show pools "$1" --json | jq -r ".pools[0].$2"; }
pool_field_is() { [[ $(pool_field "$1" "$2") == "$3" ]]; }
# The GPU ids of job $1's live lease, sorted, one per line.
lease_gpus_of_job() {
  gpupoolctl show leases job="$1" --json | jq -r '.leases[].gpus[].id' | sort
}
lease_field_of_job() { gpupoolctl show leases job="$1" --json | jq -r ".leases[0].$2"; }
job_has_lease() { [[ $(gpupoolctl show leases job="$1" --json | jq '.leases | length') == 1 ]]; }
job_has_no_lease() { [[ $(gpupoolctl show leases job="$1" --json | jq '.leases | length') == 0 ]]; }
# Event types of job $1, oldest first, space separated.
event_types_of_job() { gpupoolctl show events job="$1" --json | jq -r '[.events[].type] | join(" ")'; }
event_types_are() { [[ $(event_types_of_job "$1") == "$2" ]]; }
