#!/bin/bash
# Ends CUDA programs in each way a program can end, against one dataplane test server, and
# checks that the server logged a clean close ("the client closed its connection") for
# every one, and never a transport failure (such as UCX's "Endpoint timeout").
#
# usage: clean_close.sh --server BIN --lib DIR --transport tcp|shm --port PORT --programs DIR
#   DIR holds exit_modes (static cudart) and cudart_shared (-cudart shared).
set -u
server="" lib="" transport="" port="" programs=""
while [ $# -gt 0 ]; do
  case "$1" in
    --server) server=$2; shift 2 ;;
    --lib) lib=$2; shift 2 ;;
    --transport) transport=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --programs) programs=$2; shift 2 ;;
    *) echo "clean_close.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/transport_env.sh" "$transport" || exit 2

token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
workdir=$(mktemp -d "/tmp/r2-clean-close.XXXXXX")
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
"$server" --listen "127.0.0.1:$port" --lease L1 --token "$token" --gpus 1 \
  > "$workdir/server.out" 2> "$workdir/server.err" &
server_pid=$!
for _ in $(seq 1 100); do
  grep -q "^listening on" "$workdir/server.out" 2>/dev/null && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.05
done
if ! grep -q "^listening on" "$workdir/server.out"; then
  echo "test server did not start:" >&2; cat "$workdir/server.err" >&2; exit 1
fi
export GPUPOOL_GPUS="GPU-5e1f0a11-0000-4000-8000-000000000000@127.0.0.1:$port"
export GPUPOOL_LEASE_ID=L1 GPUPOOL_LEASE_TOKEN="$token" CUDA_VISIBLE_DEVICES=0
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

failed=0
run() {  # name, command...
  local name=$1; shift
  local before
  before=$(grep -c "disconnected:" "$workdir/server.err")
  timeout 60 ${GPUPOOL_TEST_PRELOAD:+env LD_PRELOAD="$GPUPOOL_TEST_PRELOAD"} "$@" \
    > "$workdir/$name.out" 2> "$workdir/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: $name exited $rc" >&2; cat "$workdir/$name.err" >&2; failed=1; return
  fi
  # The library must not complain at exit either.
  if grep -q "gpupool-cuda:" "$workdir/$name.err"; then
    echo "FAIL: $name: the library logged at exit:" >&2; cat "$workdir/$name.err" >&2; failed=1
  fi
  # The server notices the close within a moment; a failed peer would take UCX's timeout.
  for _ in $(seq 1 100); do
    [ "$(grep -c "disconnected:" "$workdir/server.err")" -gt "$before" ] && break
    sleep 0.05
  done
  local line
  line=$(grep "disconnected:" "$workdir/server.err" | tail -n +$((before + 1)) | head -1)
  case "$line" in
    *"disconnected: the client closed its connection") echo "$name: clean close" ;;
    "") echo "FAIL: $name: the server logged no disconnect within 5 s" >&2; failed=1 ;;
    *) echo "FAIL: $name: $line" >&2; failed=1 ;;
  esac
}
for mode in return exit _exit unsynced; do
  run "exit_modes-$mode" "$programs/exit_modes" "$mode"
done
run cudart_shared "$programs/cudart_shared"
if grep -qi "timeout\|connection reset" "$workdir/server.err"; then
  echo "FAIL: transport failures in the server's log:" >&2; failed=1
fi
[ $failed -eq 0 ] || { echo "server log:" >&2; cat "$workdir/server.err" >&2; }
exit $failed
