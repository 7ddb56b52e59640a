#!/bin/bash
# Runs one CUDA test program against a fresh data-path test server, through the
# replacement libcuda.so.1, the way a job would (GPUPOOL_* environment, LD_LIBRARY_PATH).
#
# usage: run_with_server.sh --server BIN --lib DIR --transport tcp|shm --port PORT
#            [--server-transport tcp|shm|default] [--gpus N] [--client-token TOKEN]
#            [--expect-refused] [--timeout SECONDS] [--model NAME] -- PROGRAM
#   --server-transport  the server's own UCX settings when they differ from the client's
#                       (default: UCX's own choice, as an agent started by systemd has)
#   --expect-refused  the program must fail and the library must log the refusal
#   --timeout   seconds the program may run (default 120)
#   --model     the simulated GPUs' model (the server's default: an A100)
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/test_server.sh"
server="" lib="" transport="" server_transport="" port="" gpus=1 client_token="" expect_refused=0
program_timeout=120 model=""
while [ $# -gt 0 ]; do
  if test_server_option "$@"; then shift 2; continue; fi
  case "$1" in
    --server-transport) server_transport=$2; shift 2 ;;
    --gpus) gpus=$2; shift 2 ;;
    --client-token) client_token=$2; shift 2 ;;
    --expect-refused) expect_refused=1; shift ;;
    --timeout) program_timeout=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "run_with_server.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
program=${1:?run_with_server.sh: no program given}
. "$here/transport_env.sh" "${server_transport:-$transport}" || exit 2

token=$(new_token)
workdir=$(mktemp -d "/tmp/r2-remote-test.XXXXXX")
trap 'kill "$server_pid" 2>/dev/null; wait "$server_pid" 2>/dev/null; rm -rf "$workdir"' EXIT

# GPUPOOL_TEST_BACKEND=cuda (scripts/test --gpu): the server serves this machine's GPUs.
"$server" --listen "127.0.0.1:$port" --lease L1 --token "$token" --gpus "$gpus" \
  --backend "${GPUPOOL_TEST_BACKEND:-sim}" ${model:+--model "$model"} > "$workdir/server.out" 2> "$workdir/server.err" &
server_pid=$!
. "$here/transport_env.sh" "$transport" || exit 2
wait_listening "$server_pid" "$workdir/server.out" "$workdir/server.err"

# The GPUs as the server names them ("gpu INDEX UUID"): the first `gpus` of them.
gpu_list=""
served=0
while read -r word index uuid; do
  [ "$word" = gpu ] || continue
  served=$((served + 1))
  [ "$served" -le "$gpus" ] && gpu_list="${gpu_list:+$gpu_list,}$uuid@127.0.0.1:$port"
done < "$workdir/server.out"
if [ "$served" -lt "$gpus" ]; then
  echo "FAIL: the program needs $gpus GPU(s); the server has $served" >&2; exit 1
fi
export GPUPOOL_GPUS="$gpu_list" GPUPOOL_LEASE_ID=L1
export GPUPOOL_LEASE_TOKEN="${client_token:-$token}"
export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# What only the sim does (a model chosen with --model, kernels it lacks, its memory model):
# programs check it only where GPUPOOL_EXPECT_SIM says the GPU is the sim.
if [ "${GPUPOOL_TEST_BACKEND:-sim}" = sim ]; then export GPUPOOL_EXPECT_SIM=1; else unset GPUPOOL_EXPECT_SIM; fi

# GPUPOOL_TEST_PRELOAD (scripts/test --sanitize): runtimes the program needs first, as it is
# not instrumented but loads our instrumented libcuda.so.1.
timeout "$program_timeout" ${GPUPOOL_TEST_PRELOAD:+env LD_PRELOAD="$GPUPOOL_TEST_PRELOAD"} "$program" \
  > "$workdir/program.out" 2> "$workdir/program.err"
rc=$?
cat "$workdir/program.out"; cat "$workdir/program.err" >&2
if [ "$expect_refused" = 1 ]; then
  if [ $rc -eq 0 ]; then echo "FAIL: the program ran without a valid lease" >&2; exit 1; fi
  if ! grep -q "refused this process" "$workdir/program.err"; then
    echo "FAIL: no refusal logged by the library" >&2; exit 1
  fi
  if ! grep -q "refused client" "$workdir/server.err"; then
    echo "FAIL: the server did not log the refusal" >&2; cat "$workdir/server.err" >&2; exit 1
  fi
  echo "refused as expected (exit $rc)"
  exit 0
fi
if [ $rc -eq 124 ]; then
  echo "FAIL: $program ran past its ${program_timeout} s and was stopped; server log:" >&2
  cat "$workdir/server.err" >&2
elif [ $rc -ne 0 ]; then
  echo "FAIL: $program exited $rc; server log:" >&2; cat "$workdir/server.err" >&2
fi
exit $rc
