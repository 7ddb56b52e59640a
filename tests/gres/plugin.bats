#!/usr/bin/env bats
# gres_gpupool.so: built for the installed release, loaded by Slurm, sets the job env.
load ../lib/helpers

SO=$GPUPOOL_BUILD/lib/slurm/gres_gpupool.so
installed() { slurmd -V | awk '{print $NF}'; }

@test "gres_gpupool.so records the installed Slurm release and exports the GRES API" {
  [ -f "$SO" ]
  [ "$(cat "$GPUPOOL_BUILD/lib/slurm/gres_gpupool.release")" = "$(installed)" ]
  strings "$SO" | grep -qx 'gres/gpupool'
  strings "$SO" | grep -qx "gpupool gres built for Slurm $(installed)"
  # __asan_default_options: ASan builds only (common/asan_defaults.c).
  exported=$(nm -D --defined-only "$SO" | awk '{print $3}' | grep -vx __asan_default_options)
  for sym in plugin_name plugin_type plugin_version init fini gres_p_node_config_load \
    gres_p_job_set_env gres_p_step_set_env gres_p_task_set_env gres_p_send_stepd \
    gres_p_recv_stepd gres_p_get_job_info gres_p_get_step_info gres_p_get_devices \
    gres_p_step_hardware_init gres_p_step_hardware_fini gres_p_epilog_build_env \
    gres_p_epilog_set_env; do
    grep -qx "$sym" <<<"$exported"
  done
  # Nothing else leaks out of the plugin.
  [ "$(wc -l <<<"$exported")" -eq 19 ]
}

@test "a mismatched Slurm release is refused with a message naming both releases" {
  run "$GPUPOOL_SOURCE/gres/fetch-slurm-source" --check 1.2.3
  [ "$status" -eq 1 ]
  [[ $output == *"built for Slurm 1.2.3 but Slurm $(installed) is installed"* ]]
  run "$GPUPOOL_SOURCE/gres/fetch-slurm-source" --check "$(installed)"
  [ "$status" -eq 0 ]
}

@test "slurmctld and every slurmd loaded gres/gpupool" {
  grep -q "gres/gpupool: loaded, built for Slurm $(installed)" "$DEVDIR/log/slurmctld.log"
  grep -q "gres/gpupool: loaded, built for Slurm $(installed)" "$DEVDIR/log/slurmd.node1.log"
  grep -q "gres/gpupool: loaded, built for Slurm $(installed)" "$DEVDIR/log/slurmd.node2.log"
}

@test "nodes advertise their per-node gpupool count from the configuration" {
  want=$(awk '/Name=gpupool/ {sub(/.*Count=/, ""); print $1}' "$DEVDIR/gres.conf")
  [[ $want =~ ^[0-9]+$ ]]
  for node in node1 node2; do
    scontrol show node "$node" | grep -q "Gres=gpupool:$want\b"
  done
}

@test "job, step and task environments carry GPUPOOL_GRES_COUNT" {
  out=$BATS_TEST_TMPDIR/env.out
  run timeout 60 sbatch --wait -N1 --gres=gpupool:3 -o "$out" --wrap \
    'echo job=$GPUPOOL_GRES_COUNT
     srun bash -c "echo step=\$GPUPOOL_GRES_COUNT"
     srun --gres=gpupool:1 bash -c "echo smallstep=\$GPUPOOL_GRES_COUNT"'
  [ "$status" -eq 0 ]
  # (srun may add "step creation temporarily disabled" notes between the lines)
  grep -qx 'job=3' "$out"
  grep -qx 'step=3' "$out"
  grep -qx 'smallstep=1' "$out"
}

@test "a job without gpupool GRES has no GPUPOOL_GRES_COUNT" {
  run timeout 60 srun -N1 printenv GPUPOOL_GRES_COUNT
  [ "$status" -ne 0 ]
  [ -z "$(grep -Ex "[0-9]+" <<<"$output")" ]
}

# The dev cluster's Epilog keeps $DEVDIR/epilog/job<ID>.<node>.env of jobs whose epilog
# environment has GPUPOOL_GRES_COUNT (see scripts/devcluster.d/config.sh).
@test "the epilog environment carries GPUPOOL_GRES_COUNT on every node of the job, and only for pool jobs" {
  j=$(timeout 60 sbatch --wait --parsable -N2 -o /dev/null --gpu-pool=h100:2 --wrap true)
  [[ $j =~ ^[0-9]+$ ]]
  # The epilog runs as the job completes; sbatch --wait may return just before.
  wait_until 10 test -f "$DEVDIR/epilog/job$j.node2.env"
  wait_until 10 test -f "$DEVDIR/epilog/job$j.node1.env"
  grep -qx 'GPUPOOL_GRES_COUNT=2' "$DEVDIR/epilog/job$j.node1.env"
  grep -qx 'GPUPOOL_GRES_COUNT=2' "$DEVDIR/epilog/job$j.node2.env"
  plain=$(timeout 60 sbatch --wait --parsable -N1 -o /dev/null --wrap true)
  [[ $plain =~ ^[0-9]+$ ]]
  sleep 1
  [ -z "$(ls "$DEVDIR/epilog" | grep "^job$plain\.")" ]
  no_node_drained
}

restore_node2() { scontrol update NodeName=node2 "Gres=gpupool:$NODE2_GRES"; }
teardown() { if [[ -n ${NODE2_GRES:-} ]]; then restore_node2; fi; }

@test "a node whose per-node limit is 2 never runs a job needing 3" {
  NODE2_GRES=$(scontrol show node node2 | grep -o 'Gres=gpupool:[0-9]*' | cut -d: -f2)
  scontrol update NodeName=node2 Gres=gpupool:2
  run sbatch -o /dev/null -N1 -w node2 --gres=gpupool:3 --wrap true
  [ "$status" -ne 0 ]
  [[ $output == *"Requested node configuration is not available"* ]]
  jobs=()
  for i in 1 2 3; do jobs+=("$(submit -N1 --gres=gpupool:3 --wrap 'sleep 2')"); done
  sleep 1
  for j in "${jobs[@]}"; do
    [[ $(squeue -h -j "$j" -o '%N') != *node2* ]]
  done
  scancel "${jobs[@]}"
  restore_node2
  scontrol show node node2 | grep -q "Gres=gpupool:$NODE2_GRES\b"
  no_node_drained
}
