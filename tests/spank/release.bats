#!/usr/bin/env bats
# The lease is released on every path a job can end by, and no node is drained.

load ../lib/helpers

# Time limits count in whole minutes, so the time-limit job is submitted first and checked
# last, while the other tests run.
setup_file() {
  . "$BATS_TEST_DIRNAME/../lib/helpers.bash"
  TIMELIMIT_JOB=$(submit --gpu-pool=h100:1 -t 1 --wrap 'sleep 300')
  export TIMELIMIT_JOB
}

@test "scancel of a running job releases its lease" {
  id=$(submit --gpu-pool=a100:2 --wrap 'sleep 300')
  wait_until 20 job_running "$id"
  wait_until 10 job_has_lease "$id"
  scancel "$id"
  wait_until 20 job_ended "$id"
  [ "$(job_state "$id")" = CANCELLED ]
  wait_until 10 job_has_no_lease "$id"
  events_of_job "$id" | grep -qx released
  no_node_drained
}

@test "a failing job releases its lease" {
  id=$(submit --gpu-pool=a100:1 --wrap 'exit 3')
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = FAILED ]
  [ "$(job_field "$id" ExitCode)" = 3:0 ]
  events=$(events_of_job "$id")
  grep -qx leased <<<"$events"
  wait_until 10 job_has_no_lease "$id"
  no_node_drained
}

@test "the lease file is removed at job end" {
  id=$(submit --gpu-pool=a100:1 --wrap "echo \$GPUPOOL_LEASE_FILE; test -s \$GPUPOOL_LEASE_FILE")
  wait_until 30 job_ended "$id"
  [ "$(job_state "$id")" = COMPLETED ]
  file=$(head -1 "$OUT/$id.out")
  [[ $file == /*/job$id.json ]]
  wait_until 10 test ! -e "$file"
}

@test "a job killed at its time limit releases its lease" {
  id=$TIMELIMIT_JOB
  wait_until 20 job_running "$id"
  wait_until 10 job_has_lease "$id"
  # slurmctld ends it one minute after it started, at its next time-limit pass.
  wait_until 120 job_ended "$id"
  [ "$(job_state "$id")" = TIMEOUT ]
  wait_until 10 job_has_no_lease "$id"
  events_of_job "$id" | grep -qx released
  no_node_drained
}
