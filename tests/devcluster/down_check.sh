#!/usr/bin/env bash
# Fixture cleanup: `devcluster down`, then prove that no process it had recorded is alive.
# Usage: down_check.sh path/to/devcluster
set -uo pipefail
devcluster=$1
pids=$("$devcluster" status 2>/dev/null | grep -o 'Pid=[0-9]*' | cut -d= -f2)
[[ -n $pids ]] || { echo "down_check: no running part was recorded before down" >&2; exit 1; }
"$devcluster" down || { echo "down_check: 'devcluster down' failed" >&2; exit 1; }
alive=()
for pid in $pids; do
  # A recorded daemon that was reaped late may linger as a zombie for a moment.
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid") != Z* ]] || break
    sleep 0.2
  done
  if kill -0 "$pid" 2>/dev/null && [[ $(ps -o stat= -p "$pid") != Z* ]]; then
    alive+=("$pid")
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
