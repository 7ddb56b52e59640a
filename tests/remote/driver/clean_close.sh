#!/bin/bash
# Ends CUDA programs in each way a program can end, against one dataplane test server, and
# checks that the server logged a clean close ("the client closed its connection") for
# every one, and no transport failure (such as UCX's "Endpoint timeout").
#
# _exit is the exception: no code of the library runs, the kernel closes the process's
# sockets, and the server can see the UCX connection's end before the bootstrap socket's
# and log "Endpoint timeout" (a race in the server's close, remote/transport/rpc_server.cc;
# about 1 run in 4 over TCP). For _exit the test requires that the server logs the
# disconnect and reports which reason it gave.
#
# usage: clean_close.sh --server BIN --lib DIR --transport tcp|shm --port PORT --programs DIR
#   DIR holds exit_modes (static cudart) and cudart_shared (-cudart shared).
set -u
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/test_server.sh"
server="" lib="" transport="" port="" programs=""
while [ $# -gt 0 ]; do
  if test_server_option "$@"; then shift 2; continue; fi
  case "$1" in
    --programs) programs=$2; shift 2 ;;
    *) echo "clean_close.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
. "$here/transport_env.sh" "$transport" || exit 2

token=$(new_token)
workdir=$(mktemp -d "/tmp/r2-clean-close.XXXXXX")
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$workdir"' EXIT
# GPUPOOL_TEST_BACKEND=cuda (scripts/test --gpu): the server serves this machine's GPUs.
"$server" --listen "127.0.0.1:$port" --lease L1 --token "$token" --gpus 1 \
  --backend "${GPUPOOL_TEST_BACKEND:-sim}" > "$workdir/server.out" 2> "$workdir/server.err" &
server_pid=$!
wait_listening "$server_pid" "$workdir/server.out" "$workdir/server.err"
export GPUPOOL_GPUS="$(awk '$1 == "gpu" { print $3; exit }' "$workdir/server.out")@127.0.0.1:$port"
export GPUPOOL_LEASE_ID=L1 GPUPOOL_LEASE_TOKEN="$token" CUDA_VISIBLE_DEVICES=0
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

failed=0
run() {  # name, strict (1: only a clean close passes), command...
  local name=$1 strict=$2; shift 2
  local before
  before=$(grep -c "disconnected:" "$workdir/server.err")
  timeout 60 ${GPUPOOL_TEST_PRELOAD:+env LD_PRELOAD="$GPUPOOL_TEST_PRELOAD"} "$@" \
    > "$workdir/$name.out" 2> "$workdir/$name.err"
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: $name exited $rc" >&2; cat "$workdir/$name.err" >&2; failed=1; return
  fi
  # The library must not complain at exit either. (Where the GPU cannot give the process its
  # addresses back, the cuda executor, it says once at start that the process is not
  # protected against a failure of its GPU: not a complaint at exit.)
  if grep -v "is not protected against a failure of its GPU" "$workdir/$name.err" |
    grep -q "gpupool-cuda:"; then
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
    *)
      if [ "$strict" = 1 ]; then
        echo "FAIL: $name: $line" >&2; failed=1
      else
        echo "$name: closed, but the server's close raced: ${line##*disconnected: }"
        echo "$line" >> "$workdir/raced"
      fi ;;
  esac
}
for mode in return exit unsynced; do
  run "exit_modes-$mode" 1 "$programs/exit_modes" "$mode"
done
run "exit_modes-_exit" 0 "$programs/exit_modes" _exit
run cudart_shared 1 "$programs/cudart_shared"
touch "$workdir/raced"
# Transport failures other than the _exit race's line.
if grep -v -F -f "$workdir/raced" "$workdir/server.err" | grep -qi "timeout\|connection reset"; then
  echo "FAIL: transport failures in the server's log:" >&2; failed=1
fi
[ $failed -eq 0 ] || { echo "server log:" >&2; cat "$workdir/server.err" >&2; }
exit $failed
