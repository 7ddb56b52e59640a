#!/bin/sh
# private-munged.sh: a munged of one's own under a directory, so that tests of gpupoold and
# gpupoolctl never touch (or need) the machine's munged. The key is made on first use.
#
#   eval "$(private-munged.sh start DIR)"   starts munged with its socket at DIR/munge.socket
#                                           and prints "MUNGE_SOCKET=...; export MUNGE_SOCKET"
#   private-munged.sh stop DIR              stops the munged started for DIR (and only it)
#
# Exit 0 on success; 1 with one line on stderr naming the problem; 2 on bad usage.
set -eu
usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$2
case $dir in /*) ;; *) echo "private-munged.sh: DIR must be an absolute path: $dir" >&2; exit 2 ;; esac
munged=$(command -v munged || echo /usr/sbin/munged)
mungekey=$(command -v mungekey || echo /usr/sbin/mungekey)
sock=$dir/munge.socket
pidfile=$dir/munged.pid

# Prints the pid of DIR's munged if it is alive and really ours (a recycled pid is not).
our_pid() {
  [ -f "$pidfile" ] || return 1
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  case $pid in '' | *[!0-9]*) return 1 ;; esac
  kill -0 "$pid" 2>/dev/null || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$sock" || return 1
  echo "$pid"
}

case $1 in
start)
  mkdir -p "$dir"
  chmod 0700 "$dir"
  if ! our_pid >/dev/null; then
    if [ ! -f "$dir/munge.key" ]; then
      "$mungekey" --create --keyfile="$dir/munge.key" --force
      chmod 0400 "$dir/munge.key"
    fi
    # --force: munged otherwise refuses directories under a world-writable /tmp.
    if ! "$munged" --force --socket="$sock" --key-file="$dir/munge.key" \
        --pid-file="$pidfile" --log-file="$dir/munged.log" --seed-file="$dir/munged.seed" \
        --num-threads=2 2>"$dir/munged.err" 3>&- </dev/null >/dev/null; then
      echo "private-munged.sh: cannot start munged: $(tail -n 1 "$dir/munged.err" 2>/dev/null)" >&2
      exit 1
    fi
  fi
  # munged forks after its socket is ready; wait briefly for the pid file all the same.
  i=0
  while [ ! -S "$sock" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  [ -S "$sock" ] || { echo "private-munged.sh: munged did not create $sock" >&2; exit 1; }
  echo "MUNGE_SOCKET=$sock; export MUNGE_SOCKET"
  ;;
stop)
  if pid=$(our_pid); then
    kill "$pid"
    i=0
    while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  fi
  ;;
*) usage ;;
esac
