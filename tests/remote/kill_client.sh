#!/bin/bash
# A client killed with SIGKILL gets its device memory freed: memory_hold allocates 1 GiB
# and waits; memory_free (exit 0 iff all device memory is free) must fail while it lives
# and succeed within seconds after `kill -9`.
#
# usage: kill_client.sh --server BIN --lib DIR --transport tcp|shm --port PORT
#            --hold PROGRAM --check PROGRAM
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/test_server.sh"
while [ $# -gt 0 ]; do
  if test_server_option "$@"; then shift 2; continue; fi
  case "$1" in
    --hold) hold=$2; shift 2 ;;
    --check) check=$2; shift 2 ;;
    *) echo "kill_client.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
. "$here/transport_env.sh" "$transport" || exit 2
token=$(new_token)
workdir=$(mktemp -d "/tmp/r2-remote-kill.XXXXXX")
holder_pid=""
trap 'kill -9 $holder_pid 2>/dev/null; kill "$server_pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$workdir"' EXIT

# GPUPOOL_TEST_BACKEND=cuda (scripts/test --gpu): the server serves this machine's GPUs.
"$server" --listen "127.0.0.1:$port" --lease L1 --token "$token" \
  --backend "${GPUPOOL_TEST_BACKEND:-sim}" > "$workdir/server.out" 2> "$workdir/server.err" &
server_pid=$!
wait_listening "$server_pid" "$workdir/server.out" "$workdir/server.err"
export GPUPOOL_GPUS="$(awk '$1 == "gpu" { print $3; exit }' "$workdir/server.out")@127.0.0.1:$port"
export GPUPOOL_LEASE_ID=L1 GPUPOOL_LEASE_TOKEN=$token CUDA_VISIBLE_DEVICES=0
# Failover off: this is about the agent freeing a killed client's memory, and a checkpoint
# of the holder's 1 GiB (read back at its first synchronisation) would only delay "ready".
export GPUPOOL_FAILOVER=off
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# GPUPOOL_TEST_PRELOAD: see run_with_server.sh.
preload=(${GPUPOOL_TEST_PRELOAD:+env LD_PRELOAD="$GPUPOOL_TEST_PRELOAD"})
# Free memory before the holder: all of it on the sim; on a GPU (GPUPOOL_TEST_BACKEND=cuda)
# what its driver leaves free, less 256 MiB of slack (a driver keeps some of what was freed),
# still far above what is free while the holder has its 1 GiB.
baseline=$("${preload[@]}" "$check" 0 | awk '/^memory_free:/ { print $2 }')
[[ -n $baseline ]] || { echo "FAIL: memory_free printed no figures" >&2; exit 1; }
[[ ${GPUPOOL_TEST_BACKEND:-sim} == sim ]] || baseline=$((baseline - (256 << 20)))
check=("$check" "$baseline")
"${preload[@]}" "$hold" > "$workdir/hold.out" 2> "$workdir/hold.err" &
holder_pid=$!
for _ in $(seq 1 200); do grep -q ready "$workdir/hold.out" 2>/dev/null && break; sleep 0.05; done
grep -q ready "$workdir/hold.out" || { echo "FAIL: holder never got ready" >&2; cat "$workdir/hold.err" >&2; exit 1; }
if "${preload[@]}" "${check[@]}"; then echo "FAIL: memory reported free while a client holds 1 GiB" >&2; exit 1; fi

kill -9 "$holder_pid"
wait "$holder_pid" 2>/dev/null
holder_pid=""
for _ in $(seq 1 50); do
  if "${preload[@]}" "${check[@]}"; then
    grep "disconnected" "$workdir/server.err"
    echo "memory freed after kill -9"
    exit 0
  fi
  sleep 0.2
done
echo "FAIL: memory still held 10 s after the client was killed" >&2
cat "$workdir/server.err" >&2
exit 1
