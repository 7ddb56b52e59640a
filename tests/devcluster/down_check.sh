#!/usr/bin/env bash
# Fixture cleanup: `devcluster down`, then prove that no process it had recorded is alive.
# Usage: down_check.sh path/to/devcluster
set -uo pipefail
devcluster=$1

# "STATE STARTTIME" of pid $1 from /proc/PID/stat (fields 3 and 22; the command name in
# field 2 may hold spaces, so fields are counted after its closing parenthesis).
proc_state() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }
  read -r -a fields <<<"$stat"
  echo "${fields[0]} ${fields[19]}"
}

pids=$("$devcluster" status 2>/dev/null | grep -o 'Pid=[0-9]*' | cut -d= -f2)
[[ -n $pids ]] || { echo "down_check: no running part was recorded before down" >&2; exit 1; }
# A pid names our process only while its start time is the one seen now: CI machines run
# with pid_max 32768 and spawn thousands of processes beside this test, so a pid freed by
# `down` can belong to a stranger a second later (stop 21's CI saw exactly that).
declare -A started
for pid in $pids; do
  read -r _ started[$pid] < <(proc_state "$pid") || started[$pid]=gone
done
"$devcluster" down || { echo "down_check: 'devcluster down' failed" >&2; exit 1; }

# Ours and not yet a zombie: the same start time, in a state other than Z.
still_ours() {
  local state start
  read -r state start < <(proc_state "$1") || return 1
  [[ $start == "${started[$1]}" && $state != Z ]]
}

alive=()
for pid in $pids; do
  # A recorded daemon that was reaped late may linger as a zombie for a moment.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    still_ours "$pid" || break
    sleep 0.2
  done
  if still_ours "$pid"; then
    alive+=("$pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | cut -c1-120))")
  fi
done
if ((${#alive[@]})); then
  echo "down_check: still alive after down: ${alive[*]}" >&2
  exit 1
fi
if "$devcluster" status >/dev/null 2>&1; then
  echo "down_check: status exits 0 after down" >&2
  exit 1
fi
echo "down_check: $(wc -w <<<"$pids") recorded processes stopped"
