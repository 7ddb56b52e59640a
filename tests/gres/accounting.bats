#!/usr/bin/env bats
# Accounting: slurmdbd (with the dev cluster's MariaDB) records pool GPUs as the TRES
# license/gpupool_<pool>, so sacct shows them per job and sreport sums pool-GPU time per
# user. And only the dev cluster's own daemons reach the database.

load ../lib/helpers

# sacct/sreport talk to slurmdbd; a finished job reaches it a moment after it ends.
job_in_sacct() { [[ $(sacct -j "$1" -X -n -P -o State 2>/dev/null) == COMPLETED ]]; }
sacct_field() { sacct -j "$1" -X -n -P -o "$2"; }

@test "every pool's license is a TRES in slurmdbd" {
  run sacctmgr -n -P show tres format=type,name
  [ "$status" -eq 0 ]
  local name
  for name in $(awk '!/^#/ {print $1}' "$DEVDIR/gpupool_pools"); do
    grep -qx "license|gpupool_$name" <<<"$output"
  done
}

# hour_of EPOCH [HOURS]: the local hour EPOCH falls in, plus HOURS, as sreport wants it.
# sreport rounds its window to whole hours; a window that is whole hours already is
# used as given, so sacct can be asked about exactly the same one.
hour_of() {
  local floor
  floor=$(date -d "@$1" +%Y-%m-%dT%H:00:00)
  date -d "@$(($(date -d "$floor" +%s) + ${2:-0} * 3600))" +%Y-%m-%dT%H:%M:%S
}

# sreport_a100_seconds FILTERS...: the pool-GPU seconds of license/gpupool_a100 that
# sreport's job report sums over FILTERS (all size bins together).
sreport_a100_seconds() {
  local line cluster account none small large
  line=$(sreport -n -P -t Seconds -T license/gpupool_a100 job SizesByAccount FlatView \
    grouping=1,4 "$@") || return 1
  echo "sreport $*: $line" >&2
  # Cluster|Account|0-0 TRES|1-3 TRES|>= 4 TRES|% of cluster
  IFS='|' read -r cluster account none small large _ <<<"$line"
  [[ $cluster == gpupooldev && $account == pooldev ]] || return 1
  echo $((none + small + large))
}

@test "a pooled job: sacct AllocTRES has license/gpupool_a100=2; sreport sums its pool-GPU seconds per user" {
  id=$(submit --gpu-pool=a100:2 --wrap 'sleep 3')
  wait_until 60 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  wait_until 30 job_in_sacct "$id"
  run sacct_field "$id" JobID,AllocTRES
  echo "$output" >&2
  [[ $output == "$id|"* ]]
  tr ',' '\n' <<<"${output#*|}" | grep -qx 'license/gpupool_a100=2'
  # The job asked for no other pool.
  ! grep -q 'license/gpupool_h100' <<<"$output" || false
  user=$(id -un)
  [ "$(sacct_field "$id" User)" = "$user" ]
  [ "$(sacct_field "$id" Account)" = pooldev ]
  elapsed=$(sacct_field "$id" ElapsedRaw)
  [ "$elapsed" -ge 3 ]

  # sreport's job reports read job records, not the hourly rollups (which the current
  # hour does not have yet), so they see the job at once. The window: whole hours
  # around the job.
  IFS='|' read -r job_start job_end <<<"$(sacct_field "$id" Start,End)"
  from=$(hour_of "$(date -d "$job_start" +%s)")
  to=$(hour_of "$(date -d "$job_end" +%s)" 1)
  # This job alone: its elapsed seconds times 2 GPUs. (sreport 22.05 reads Jobs= only up
  # to the last comma: without the trailing one the filter is silently empty.)
  [ "$(sreport_a100_seconds Jobs="$id," start="$from" end="$to")" -eq $((elapsed * 2)) ]
  # The user's pool-GPU seconds in the window: sreport's sum equals ElapsedRaw x
  # license count summed over sacct's records of the user's jobs (both cut to the window).
  # Other tests' jobs of this user in the same hour may still be reaching slurmdbd: the
  # two must agree once its records are settled (120 s: under a loaded suite slurmdbd once
  # settled them just after 60).
  wait_until 120 user_sums_agree "$user" "$from" "$to" || {
    echo "sacct: $(user_a100_seconds "$user" "$from" "$to"), sreport: $(sreport_a100_seconds Users="$user" start="$from" end="$to")" >&2
    false
  }
  [ "$(user_a100_seconds "$user" "$from" "$to")" -ge $((elapsed * 2)) ]
}

# user_a100_seconds USER FROM TO: ElapsedRaw x license/gpupool_a100 count over sacct's
# records of USER's jobs, cut to the window. Every record (--duplicates): a job requeued
# after its node failed (scripts/chaos kills slurmd under running jobs, in the same hour)
# has a record per run, and sreport sums them all, where plain sacct shows the last.
user_a100_seconds() {
  local expected=0 secs tres count
  while IFS='|' read -r secs tres; do
    count=$(tr ',' '\n' <<<"$tres" | sed -n 's|^license/gpupool_a100=||p')
    expected=$((expected + secs * ${count:-0}))
  done < <(sacct -X -D -n -P -T -u "$1" -S "$2" -E "$3" -o ElapsedRaw,AllocTRES)
  echo "$expected"
}

# Whether none of USER's jobs runs and sreport's sum over the window equals sacct's.
user_sums_agree() {
  [[ -z $(squeue -h -u "$1" -o %i) ]] || return 1
  [ "$(sreport_a100_seconds Users="$1" start="$2" end="$3" 2>/dev/null)" = "$(user_a100_seconds "$1" "$2" "$3")" ]
}

@test "only slurmdbd's own database user reaches MariaDB; users cannot read its password" {
  local port=$((GPUPOOL_DEV_PORTBASE + 40))
  # mariadb-install-db's root accounts without a password are gone from TCP.
  run mariadb --no-defaults -h 127.0.0.1 -P "$port" -u root -e 'select 1'
  [ "$status" -ne 0 ]
  [[ $output == *"Access denied"* ]]
  run mariadb --no-defaults -h 127.0.0.1 -P "$port" -u slurm -e 'select 1'
  [ "$status" -ne 0 ]
  [[ $output == *"Access denied"* ]]
  # The socket, the password and slurmdbd.conf are private to the cluster's owner.
  run runuser -u nobody -- cat "$DEVDIR/slurmdbd.conf"
  [ "$status" -ne 0 ]
  run runuser -u nobody -- cat "$DEVDIR/mariadb/slurm.password"
  [ "$status" -ne 0 ]
  run runuser -u nobody -- mariadb --no-defaults -S "$DEVDIR/mariadb/mariadb.sock" -u root -e 'select 1'
  [ "$status" -ne 0 ]
  # slurmdbd lets no ordinary user change the accounts.
  run runuser -u nobody -- env SLURM_CONF="$SLURM_CONF" sacctmgr -i add account intruder
  [ "$status" -ne 0 ]
  ! sacctmgr -n -P show account intruder format=account | grep -q intruder || false
}
