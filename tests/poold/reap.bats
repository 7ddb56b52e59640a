#!/usr/bin/env bats
# gpupoold reaps the lease of a Slurm job that no longer exists (a node crashed, the
# epilog never ran) by asking slurmctld, and never touches the nodes while doing it.
# The jobs hold a gpupool_h100 licence given by hand (root may: etc/job_submit.lua), without
# --gpu-pool, so spank_gpupool neither leases nor releases for them: the test does.
load ../lib/helpers

acquire_for_job() {  # acquire_for_job JOB: a lease for JOB, straight through the API
  curl -sf -H "Authorization: MUNGE $(munge -n -S "$MUNGE_SOCKET" -s gpupool)" \
    -d "{\"job_id\":$1,\"request\":[{\"pool\":\"h100\",\"count\":1}]}" "$GPUPOOL_SERVER/v1/leases"
}

@test "no lease is made for a Slurm job that never existed, not even by root" {
  job=$((900000 + RANDOM))
  run acquire_for_job "$job"
  [ "$status" -ne 0 ]
  job_has_no_lease "$job"
  run curl -s -H "Authorization: MUNGE $(munge -n -S "$MUNGE_SOCKET" -s gpupool)" \
    -d "{\"job_id\":$job,\"request\":[{\"pool\":\"h100\",\"count\":1}]}" "$GPUPOOL_SERVER/v1/leases"
  [[ $output == *"job $job is not a pending or running Slurm job"* ]]
}

@test "the lease of a job that ended without releasing is reaped, and no node drains" {
  # A job of the cluster's own whose lease is taken behind the plugin's back: when the job
  # ends, only the reaper can find it.
  id=$(submit -N1 -L gpupool_h100:1 --wrap 'sleep 2')
  # 60 s: with packaging_build compiling on both cores beside it, the job once took longer
  # than 20 s to start.
  wait_until 60 job_running "$id"
  acquire_for_job "$id" >/dev/null
  job_has_lease "$id"
  wait_until 20 job_ended "$id"
  wait_until 15 job_has_no_lease "$id"
  run sinfo -h -o '%T'
  [[ $output != *drain* ]]
}

@test "a running job's lease is not reaped" {
  id=$(submit -N1 -L gpupool_h100:1 --wrap 'sleep 8')
  wait_until 20 job_running "$id"
  acquire_for_job "$id" >/dev/null
  sleep 5  # more than two reap intervals of the dev cluster
  job_has_lease "$id"
  scancel "$id"
  wait_until 20 job_has_no_lease "$id"
}
