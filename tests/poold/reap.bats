#!/usr/bin/env bats
# gpupoold reaps the lease of a Slurm job that no longer exists (a node crashed, the
# epilog never ran) by asking slurmctld, and never touches the nodes while doing it.
load ../lib/helpers

acquire_for_job() {  # acquire_for_job JOB: a lease for JOB, straight through the API
  curl -sf -H "Authorization: MUNGE $(munge -n -S "$MUNGE_SOCKET" -s gpupool)" \
    -d "{\"job_id\":$1,\"request\":[{\"pool\":\"h100\",\"count\":1}]}" "$GPUPOOL_SERVER/v1/leases"
}

@test "a lease whose Slurm job never existed is reaped" {
  job=$((900000 + RANDOM))
  # The pool may be held by other tests' jobs for a moment: retry until the lease is
  # granted. It is not looked up afterwards: the reaper may already have taken it (the
  # reaped event below shows it existed).
  wait_until 30 acquire_for_job "$job"
  wait_until 15 job_has_no_lease "$job"
  run gpupoolctl show events job="$job" -o
  [[ $output == *"Type=reaped"* ]]
  [[ $output == *"has ended"* ]]
}

@test "the lease of a job that ended without releasing is reaped, and no node drains" {
  # A job of the cluster's own whose lease is taken behind the plugin's back: when the job
  # ends, only the reaper can find it.
  id=$(submit -N1 --wrap 'sleep 2')
  wait_until 20 job_running "$id"
  acquire_for_job "$id" >/dev/null
  job_has_lease "$id"
  wait_until 20 job_ended "$id"
  wait_until 15 job_has_no_lease "$id"
  run sinfo -h -o '%T'
  [[ $output != *drain* ]]
}

@test "a running job's lease is not reaped" {
  id=$(submit -N1 --wrap 'sleep 8')
  wait_until 20 job_running "$id"
  acquire_for_job "$id" >/dev/null
  sleep 5  # more than two reap intervals of the dev cluster
  job_has_lease "$id"
  scancel "$id"
  wait_until 20 job_has_no_lease "$id"
}
