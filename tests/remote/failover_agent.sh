#!/bin/bash
# A running CUDA program survives its agent: the iterate program runs against test server A
# through the replacement libcuda.so.1; once it is running, A is killed with SIGKILL and the
# lease file (what spank_gpupool's watcher rewrites at a swap) names a GPU of server B. The
# program must print PASS and the library must log the recovery. With --failover off the
# program must fail with the CUDA error instead.
#
# usage: failover_agent.sh --server BIN --lib DIR --transport tcp|shm --port PORT
#            [--failover replay|off] [--model NAME] -- PROGRAM [ARGS...]
# --model: both servers' simulated GPUs' model (the server's default: an A100).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/test_server.sh"
server="" lib="" transport="" port="" failover=replay model=""
while [ $# -gt 0 ]; do
  if test_server_option "$@"; then shift 2; continue; fi
  case "$1" in
    --failover) failover=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "failover_agent.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "failover_agent.sh: no program given" >&2; exit 2; }
. "$here/transport_env.sh" "$transport" || exit 2

token=$(new_token)
workdir=$(mktemp -d "/tmp/gpupool-failover-test.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$workdir"
}
trap cleanup EXIT

# start_server NAME PORT GPUS. GPUPOOL_TEST_BACKEND=cuda (scripts/test --gpu): both serve
# this machine's GPUs, so on a machine of one GPU B serves the GPU A served, from a process
# of its own (A's memory dies with A, as on another host).
start_server() {
  "$server" --listen "127.0.0.1:$2" --lease L1 --token "$token" --gpus "$3" \
    --backend "${GPUPOOL_TEST_BACKEND:-sim}" ${model:+--model "$model"} >"$workdir/$1.out" 2>"$workdir/$1.err" &
  pids+=($!)
  eval "$1_pid=$!"
  wait_listening "$!" "$workdir/$1.out" "$workdir/$1.err" "$1"
}
start_server a "$port" 1
start_server b "$((port + 1))" 2

# The GPU each server names first ("gpu INDEX UUID"); the sim's B names a second one.
uuid_a=$(awk '$1 == "gpu" { print $3; exit }' "$workdir/a.out")
uuid_b=$(awk '$1 == "gpu" { uuid = $3 } END { print uuid }' "$workdir/b.out")
# name_in_lease UUID PORT: the lease file as spank_gpupool writes it (atomically).
name_in_lease() {
  printf '{"generation": %d, "gpus": [{"uuid": "%s", "endpoint": "127.0.0.1:%s"}]}\n' \
    "$3" "$1" "$2" >"$workdir/lease.json.tmp"
  mv "$workdir/lease.json.tmp" "$workdir/lease.json"
}
name_in_lease "$uuid_a" "$port" 1

export GPUPOOL_GPUS="$uuid_a@127.0.0.1:$port" GPUPOOL_LEASE_ID=L1 GPUPOOL_LEASE_TOKEN="$token"
export GPUPOOL_LEASE_FILE="$workdir/lease.json" GPUPOOL_FAILOVER="$failover"
export GPUPOOL_RECOVERY_DEADLINE=30 CUDA_VISIBLE_DEVICES=0
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 240 ${GPUPOOL_TEST_PRELOAD:+env LD_PRELOAD="$GPUPOOL_TEST_PRELOAD"} "$@" \
  >"$workdir/program.out" 2>"$workdir/program.err" &
program_pid=$!

for _ in $(seq 1 600); do
  grep -q "^iterate: running" "$workdir/program.out" 2>/dev/null && break
  kill -0 "$program_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "^iterate: running" "$workdir/program.out"; then
  echo "FAIL: the program did not get going" >&2
  cat "$workdir/program.out" "$workdir/program.err" >&2
  exit 1
fi
kill -9 "$a_pid"
wait "$a_pid" 2>/dev/null
name_in_lease "$uuid_b" "$((port + 1))" 2
wait "$program_pid"
rc=$?
cat "$workdir/program.out"
cat "$workdir/program.err" >&2

if [[ $failover == off ]]; then
  [[ $rc -ne 0 ]] || { echo "FAIL: with failover off the program went on" >&2; exit 1; }
  grep -q "(46)" "$workdir/program.err" ||
    { echo "FAIL: no CUDA_ERROR_DEVICE_UNAVAILABLE (46) reported" >&2; exit 1; }
  grep -q "recovered on" "$workdir/program.err" &&
    { echo "FAIL: recovered with failover off" >&2; exit 1; }
  echo "failover off: the program got the CUDA error (exit $rc)"
  exit 0
fi
[[ $rc -eq 0 ]] || { echo "FAIL: the program exited $rc" >&2; cat "$workdir/b.err" >&2; exit 1; }
grep -q "^iterate: PASS" "$workdir/program.out" || { echo "FAIL: no PASS" >&2; exit 1; }
grep -q "GPU 0: recovered on $uuid_b at 127.0.0.1:$((port + 1))" "$workdir/program.err" ||
  { echo "FAIL: no recovery logged" >&2; exit 1; }
grep -q "attached to GPU $uuid_b (lease L1)" "$workdir/b.err" ||
  { echo "FAIL: server B never saw the program" >&2; exit 1; }
echo "recovered: $(grep -o 'recovered on .*' "$workdir/program.err")"
