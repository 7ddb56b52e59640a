#!/usr/bin/env bats
# plugstack.conf userfaultfd=yes (the dev cluster sets it): each task of a step with pool
# GPUs gets a descriptor of /dev/userfaultfd that slurmstepd opened as root, named in
# GPUPOOL_USERFAULTFD, which gpupool's libcuda uses for copy-on-write snapshots of uploads
# (tests/remote/snapshots_unprivileged.sh shows the library taking them as nobody with
# such a descriptor). The jobs here are nobody's, who may not open /dev/userfaultfd
# itself; a CPU-only job gets no descriptor.

load ../lib/helpers

setup_file() {
  # A directory nobody's jobs can read their script from and write their output to.
  JOBS=$(mktemp -d /tmp/gpupool-userfaultfd.XXXXXX)
  chown nobody "$JOBS"
  chmod 755 "$JOBS"
  # What the batch script's shell holds: the variable, what the descriptor is, and whether
  # its user could have opened /dev/userfaultfd itself.
  cat >"$JOBS/job.sh" <<'EOF'
#!/bin/bash
echo "USER=$(id -un)"
echo "FD=${GPUPOOL_USERFAULTFD:-none}"
[ -n "${GPUPOOL_USERFAULTFD:-}" ] && echo "LINK=$(readlink "/proc/$$/fd/$GPUPOOL_USERFAULTFD")"
echo "OPEN_FDS=$(ls -l /proc/$$/fd | grep -c /dev/userfaultfd)"
if (exec 3<>/dev/userfaultfd) 2>/dev/null; then echo "SELF_OPEN=yes"; else echo "SELF_OPEN=no"; fi
EOF
  chmod 755 "$JOBS/job.sh"
  export JOBS
}

teardown_file() {
  rm -rf "$JOBS"
}

# submit_as_nobody SBATCH-ARGS...: nobody's batch job running $JOBS/job.sh; prints its id.
submit_as_nobody() {
  su -s /bin/sh nobody -c "cd $JOBS && SLURM_CONF=$SLURM_CONF sbatch --parsable -o $JOBS/%j.out $* $JOBS/job.sh" |
    cut -d';' -f1
}

@test "a job with pool GPUs gets a descriptor of /dev/userfaultfd its user could not open" {
  grep -q "userfaultfd=yes" "$DEVDIR/plugstack.conf"
  id=$(submit_as_nobody --gpu-pool=a100:1)
  [ -n "$id" ]
  wait_until 60 job_ended "$id"
  cat "$JOBS/$id.out"
  [ "$(job_state "$id")" = COMPLETED ]
  grep -qx "USER=nobody" "$JOBS/$id.out"
  grep -qx "SELF_OPEN=no" "$JOBS/$id.out"  # the kernel's default: root's alone
  grep -Eqx "FD=[0-9]+" "$JOBS/$id.out"
  grep -qx "LINK=/dev/userfaultfd" "$JOBS/$id.out"
  grep -qx "OPEN_FDS=1" "$JOBS/$id.out"
  no_node_drained
}

@test "a CPU-only job gets no descriptor of /dev/userfaultfd" {
  id=$(submit_as_nobody)
  [ -n "$id" ]
  wait_until 60 job_ended "$id"
  cat "$JOBS/$id.out"
  [ "$(job_state "$id")" = COMPLETED ]
  grep -qx "USER=nobody" "$JOBS/$id.out"
  grep -qx "FD=none" "$JOBS/$id.out"
  grep -qx "OPEN_FDS=0" "$JOBS/$id.out"
  no_node_drained
}
