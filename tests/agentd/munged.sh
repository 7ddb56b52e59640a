#!/bin/sh
# Starts or stops a private munged for agentd tests, so they never touch the machine's own
# munged (see shared notes on a one-machine Slurm cluster).
#   munged.sh start DIR   creates DIR/munge.key if missing, starts munged with its socket at
#                         DIR/munge.socket and prints that path
#   munged.sh stop DIR    stops the munged started for DIR
set -eu
usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$2
munged=$(command -v munged || echo /usr/sbin/munged)
mungekey=$(command -v mungekey || echo /usr/sbin/mungekey)
case $1 in
start)
  mkdir -p "$dir"
  # 0755: tests encode credentials as an unprivileged user too; the key stays 0400.
  chmod 0755 "$dir"
  if [ ! -f "$dir/munge.key" ]; then
    "$mungekey" --create --keyfile="$dir/munge.key" --force
    chmod 0400 "$dir/munge.key"
  fi
  # --force: munged refuses some permission layouts of /tmp-based directories otherwise.
  "$munged" --force --socket="$dir/munge.socket" --key-file="$dir/munge.key" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" \
    --seed-file="$dir/munged.seed" --num-threads=2 2>"$dir/munged.err" || {
      echo "munged.sh: cannot start munged: $(cat "$dir/munged.err" "$dir/munged.log" 2>/dev/null | tail -n 3)" >&2
      exit 1
    }
  echo "$dir/munge.socket"
  ;;
stop)
  # SIGTERM and a short wait: faster than `munged --stop`, which polls for a second or two.
  if [ -f "$dir/munged.pid" ]; then
    pid=$(cat "$dir/munged.pid")
    kill "$pid" 2>/dev/null || true
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.05; i=$((i + 1)); done
  fi
  ;;
*) usage ;;
esac
