#!/usr/bin/env bats
# scripts/devcluster against the running dev cluster (CTest fixture "devcluster").
# Needs: DEVCLUSTER (path of the script); GPUPOOL_DEVDIR, GPUPOOL_DEV_PORTBASE and
# GPUPOOL_BUILD as the fixture used them.

setup() {
  : "${DEVCLUSTER:?set DEVCLUSTER to scripts/devcluster}"
  DEVDIR=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}
  # shellcheck disable=SC1091
  . "$DEVDIR/env"
}

# The start time of pid $1 (field 22 of /proc/PID/stat, counted after the command name).
started() { local s; s=$(cat "/proc/$1/stat") || return 1; s=${s##*) }; cut -d' ' -f20 <<<"$s"; }

# Is pid $1, started at $2, still a live process? (A killed daemon may linger as a zombie
# until init reaps it; and with pid_max 32768 on CI, its pid may be a stranger's soon.)
alive() {
  local s
  s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  s=${s##*) }
  [[ ${s%% *} != Z && $(cut -d' ' -f20 <<<"$s") == "$2" ]]
}

# Prints the Pid= of part $1 from `devcluster status`.
pid_of() {
  "$DEVCLUSTER" status 2>/dev/null | grep "^Part=$1 " | grep -o 'Pid=[0-9-]*' | cut -d= -f2
}

@test "env file exports what a shell needs, pointing at this dev cluster" {
  for var in SLURM_CONF MUNGE_SOCKET GPUPOOL_CONF GPUPOOL_SERVER GPUPOOL_DEVDIR; do
    grep -q "^export $var=" "$DEVDIR/env"
  done
  [ -f "$SLURM_CONF" ]
  [ -S "$MUNGE_SOCKET" ]
  [ -f "$GPUPOOL_CONF" ]
  [[ $GPUPOOL_SERVER =~ ^http://127\.0\.0\.1:[0-9]+$ ]]
  [[ $PATH == "$GPUPOOL_BUILD/bin:"* ]]
  # Never the machine's own Slurm or munge setup.
  [[ $SLURM_CONF != /etc/* && $MUNGE_SOCKET != /run/munge/* ]]
}

@test "status: munge, accounting and Slurm are UP with live pids; exit 0 exactly when every part is UP" {
  run "$DEVCLUSTER" status
  for part in munge mariadb slurmdbd slurmctld slurmd-node1 slurmd-node2; do
    line=$(grep "^Part=$part " <<<"$output")
    [[ $line == *"State=UP Pid="* ]]
    kill -0 "$(pid_of "$part")"
  done
  if grep -q 'State=DOWN' <<<"$output"; then
    [ "$status" -ne 0 ]
    # Whatever is down says why (here: a part not built yet).
    [ -z "$(grep 'State=DOWN' <<<"$output" | grep -v 'Reason=')" ]
  else
    [ "$status" -eq 0 ]
  fi
}

@test "status exits non-zero exactly when a part is reported DOWN" {
  run "$DEVCLUSTER" status
  down=$(grep -c 'State=DOWN' <<<"$output" || true)
  if [ "$down" -eq 0 ]; then [ "$status" -eq 0 ]; else [ "$status" -eq 1 ]; fi
  [ "$(grep -c '^Part=' <<<"$output")" -eq "$("$DEVCLUSTER" parts | wc -l)" ]
}

@test "both nodes are idle in sinfo and not drained" {
  run sinfo -h -N -o '%N %T'
  [ "$status" -eq 0 ]
  grep -qx 'node1 idle' <<<"$output"
  grep -qx 'node2 idle' <<<"$output"
}

@test "srun -N2 runs one task on each node" {
  run timeout 60 srun -N2 -l printenv SLURMD_NODENAME
  [ "$status" -eq 0 ]
  grep -qx '0: node1' <<<"$output"
  grep -qx '1: node2' <<<"$output"
}

@test "srun -N2 hostname prints this machine's name twice" {
  run timeout 60 srun -N2 hostname
  [ "$status" -eq 0 ]
  [ "$(grep -cx "$(hostname)" <<<"$output")" -eq 2 ]
}

@test "sbatch --wait runs a batch job over both nodes and reports its exit code" {
  out="$BATS_TEST_TMPDIR/job.out"
  run timeout 60 sbatch --wait -N2 -o "$out" --wrap 'srun -l printenv SLURMD_NODENAME'
  [ "$status" -eq 0 ]
  grep -qx '0: node1' "$out"
  grep -qx '1: node2' "$out"
  # A failing job makes sbatch --wait fail: the exit code really travels back.
  run timeout 60 sbatch --wait -N1 -o /dev/null --wrap 'exit 3'
  [ "$status" -ne 0 ]
}

@test "up twice is idempotent: the same pids afterwards" {
  before=$("$DEVCLUSTER" status 2>/dev/null || true)
  run "$DEVCLUSTER" up
  [ "$status" -eq 0 ]
  after=$("$DEVCLUSTER" status 2>/dev/null || true)
  [ "$before" = "$after" ]
}

@test "a killed slurmd is DOWN in status, and up brings it back with a new pid" {
  old=$(pid_of slurmd-node2)
  old_start=$(started "$old")
  run "$DEVCLUSTER" kill slurmd-node2
  [ "$status" -eq 0 ]
  run alive "$old" "$old_start"
  [ "$status" -ne 0 ]
  run "$DEVCLUSTER" status
  [ "$status" -ne 0 ]
  grep -q '^Part=slurmd-node2 State=DOWN' <<<"$output"
  run "$DEVCLUSTER" up
  [ "$status" -eq 0 ]
  new=$(pid_of slurmd-node2)
  [[ $new =~ ^[0-9]+$ ]]
  [ "$new" != "$old" ]
  kill -0 "$new"
  run timeout 60 srun -N2 -l printenv SLURMD_NODENAME
  [ "$status" -eq 0 ]
  grep -qx '1: node2' <<<"$output"
}

@test "bad commands and part names are refused with a one-line error, changing nothing" {
  before=$("$DEVCLUSTER" status 2>/dev/null || true)
  run "$DEVCLUSTER" frobnicate
  [ "$status" -ne 0 ]
  [[ $output == *"unknown command 'frobnicate'"* ]]
  run "$DEVCLUSTER" kill nosuchpart
  [ "$status" -ne 0 ]
  [[ $output == *"unknown part 'nosuchpart'"* ]]
  run "$DEVCLUSTER" kill
  [ "$status" -ne 0 ]
  run "$DEVCLUSTER" join gpuhost9
  [ "$status" -ne 0 ]
  after=$("$DEVCLUSTER" status 2>/dev/null || true)
  [ "$before" = "$after" ]
}

@test "accounting: slurmctld stores in this cluster's slurmdbd, which keeps a MariaDB of its own" {
  run scontrol show config
  grep -qE '^AccountingStorageType *= accounting_storage/slurmdbd$' <<<"$output"
  grep -qE "^AccountingStoragePort *= $((GPUPOOL_DEV_PORTBASE + 41))\$" <<<"$output"
  grep -qE '^AccountingStorageTRES *=.*license/gpupool_a100' <<<"$output"
  grep -qx 'StorageType=accounting_storage/mysql' "$DEVDIR/slurmdbd.conf"
  grep -qx "StoragePort=$((GPUPOOL_DEV_PORTBASE + 40))" "$DEVDIR/slurmdbd.conf"
  # MariaDB's data, socket and pid are under the dev cluster's directory, not the system's.
  [[ $(tr '\0' ' ' <"/proc/$(pid_of mariadb)/cmdline") == *"--datadir=$DEVDIR/mariadb/data "* ]]
  [ -S "$DEVDIR/mariadb/mariadb.sock" ]
  [ "$(stat -c %a "$DEVDIR/mariadb")" = 700 ]
  [ "$(stat -c %a "$DEVDIR/slurmdbd.conf")" = 600 ]
  # The cluster, its account and the caller are registered.
  sacctmgr -n -P show cluster format=cluster | grep -qx gpupooldev
  sacctmgr -n -P show assoc where account=pooldev user="$(id -un)" format=user | grep -qx "$(id -un)"
}

@test "restart slurmdbd: accounting answers again and keeps what it had" {
  before=$(sacctmgr -n -P show assoc format=cluster,account,user | sort)
  old=$(pid_of slurmdbd)
  old_start=$(started "$old")
  "$DEVCLUSTER" restart slurmdbd 3>&-
  new=$(pid_of slurmdbd)
  [ "$new" != "$old" ]
  ! alive "$old" "$old_start" || false
  [ "$(sacctmgr -n -P show assoc format=cluster,account,user | sort)" = "$before" ]
}
