#!/bin/bash
# Several GPUs of a process recover together (failover.h: recovering together). The iterate
# program drives N devices in turn (cudaSetDevice(0), work, cudaSetDevice(1), ...) through
# the replacement libcuda.so.1.
#   --mode shared: one test server A serves all N GPUs; once the program runs, A is killed
#     with SIGKILL and the lease file names N GPUs of server B. Every device's state must
#     come across (PASS), each GPU recovered exactly once, and all but the one whose call
#     found the failure recovered in the background, started by that one's recovery (so
#     before the program's first call to them: it was inside that one's call), not by a
#     failed call of their own.
#   --mode separate: device 0 on server A, device 1 on server C (N=2); A is killed and the
#     lease names B for slot 0 only. Device 1 must be untouched: no recovery of it, and C
#     attached the program once (the same session throughout, nothing replayed there).
#   --mode exit: both GPUs on A (N=2), the program exit_while_recovering; A is killed and
#     the lease names B for slot 0 only, so device 1's background recovery still waits for
#     a replacement (GPUPOOL_RECOVERY_DEADLINE=120) when the program, done with device 0,
#     exits: the exit must stop that wait (logged), within seconds, and exit 0.
#   --mode silent: both GPUs on A (N=2), over TCP; A is stopped with SIGSTOP (a silent host:
#     its sockets stay open, nothing on them fails) and the lease file never changes. A
#     stand-in for gpupoold (GPUPOOL_SERVER, on PORT+2) answers a report about A's GPUs
#     with the lease naming B's once A is stopped (its probe got no answer). The GPU whose
#     call waited on A asks it; the other must recover in the background on its word, before
#     the program's first call to it, each GPU once, PASS.
#
# usage: failover_together.sh --server BIN --lib DIR --transport tcp|shm --port PORT
#            --gpus N --mode shared|separate|exit|silent -- PROGRAM [ARGS...]
# The program prints "...: running" once it is under way, and "...: PASS".
# Uses ports PORT, PORT+1 and PORT+2.
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/test_server.sh"
server="" lib="" transport="" port="" gpus=2 mode=shared
while [ $# -gt 0 ]; do
  if test_server_option "$@"; then shift 2; continue; fi
  case "$1" in
    --gpus) gpus=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "failover_together.sh: unknown option '$1'" >&2; exit 2 ;;
  esac
done
(($# > 0)) || { echo "failover_together.sh: no program given" >&2; exit 2; }
[[ $mode == shared || ($mode =~ ^(separate|exit|silent)$ && $gpus == 2) ]] ||
  { echo "failover_together.sh: --mode shared, or separate, exit or silent with --gpus 2" >&2; exit 2; }
. "$here/transport_env.sh" "$transport" || exit 2

token=$(new_token)
workdir=$(mktemp -d "/tmp/gpupool-failover-together.XXXXXX")
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  rm -rf "$workdir"
}
trap cleanup EXIT

start_server() {  # NAME PORT GPUS
  "$server" --listen "127.0.0.1:$2" --lease L1 --token "$token" --gpus "$3" \
    --backend sim >"$workdir/$1.out" 2>"$workdir/$1.err" &
  pids+=($!)
  eval "$1_pid=$!"
  wait_listening "$!" "$workdir/$1.out" "$workdir/$1.err" "$1"
}
uuid_of() { awk -v i="$2" '$1 == "gpu" && $2 == i { print $3 }' "$workdir/$1.out"; }  # SERVER INDEX
# name_in_lease GENERATION UUID@PORT...: the lease file as spank_gpupool writes it.
name_in_lease() {
  local generation=$1 entries="" entry
  shift
  for entry in "$@"; do
    entries+="${entries:+, }{\"uuid\": \"${entry%@*}\", \"endpoint\": \"127.0.0.1:${entry#*@}\"}"
  done
  printf '{"generation": %d, "gpus": [%s]}\n' "$generation" "$entries" >"$workdir/lease.json.tmp"
  mv "$workdir/lease.json.tmp" "$workdir/lease.json"
}

# B serves 2N GPUs: its last N are not the uuids A's first N share (the sim numbers them).
start_server a "$port" "$gpus"
start_server b "$((port + 1))" "$((2 * gpus))"
before=() after=()
if [[ $mode != separate ]]; then
  for ((d = 0; d < gpus; ++d)); do
    before+=("$(uuid_of a "$d")@$port")
    after+=("$(uuid_of b "$((gpus + d))")@$((port + 1))")
  done
else
  start_server c "$((port + 2))" 2
  before=("$(uuid_of a 0)@$port" "$(uuid_of c 1)@$((port + 2))")
  after=("$(uuid_of b 3)@$((port + 1))" "${before[1]}")
fi
[[ $mode == exit ]] && after[1]=${before[1]}  # slot 1 never moves
name_in_lease 1 "${before[@]}"

if [[ $mode == silent ]]; then
  # gpupoold's stand-in: POST /v1/leases/agent-lost answers with the lease in
  # $workdir/poold.json (A's GPUs until A is stopped: its probe got an answer), and logs
  # which GPU each report named.
  lease_json() {  # UUID@PORT...
    local entries="" entry
    for entry in "$@"; do
      entries+="${entries:+, }{\"uuid\": \"${entry%@*}\", \"endpoint\": \"127.0.0.1:${entry#*@}\"}"
    done
    printf '{"gpus": [%s]}\n' "$entries" >"$workdir/poold.json.tmp"
    mv "$workdir/poold.json.tmp" "$workdir/poold.json"
  }
  lease_json "${before[@]}"
  python3 - "$((port + 2))" "$workdir" <<'PY' >"$workdir/poold.out" 2>"$workdir/poold.err" &
import http.server, json, sys
port, workdir = int(sys.argv[1]), sys.argv[2]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        with open(workdir + "/poold.json") as f:
            lease = json.load(f)
        lost = all(g["uuid"] != body.get("gpu") for g in lease["gpus"])
        with open(workdir + "/poold.log", "a") as f:
            f.write("report %s\n" % body.get("gpu"))
        answer = json.dumps({"probe": "stand-in", "agent_lost": lost, "lease": lease}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(answer)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
PY
  pids+=($!)
  for _ in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$((port + 2))") 2>/dev/null && break
    sleep 0.05
  done
  export GPUPOOL_SERVER="http://127.0.0.1:$((port + 2))"
fi

GPUPOOL_GPUS=$(IFS=,; echo "${before[*]/@/@127.0.0.1:}")
export GPUPOOL_GPUS
export GPUPOOL_LEASE_ID=L1 GPUPOOL_LEASE_TOKEN="$token" GPUPOOL_LEASE_FILE="$workdir/lease.json"
export GPUPOOL_FAILOVER=replay GPUPOOL_RECOVERY_DEADLINE=30
[[ $mode == exit ]] && export GPUPOOL_RECOVERY_DEADLINE=120
unset CUDA_VISIBLE_DEVICES
export LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
timeout 240 "$@" >"$workdir/program.out" 2>"$workdir/program.err" &
program_pid=$!

for _ in $(seq 1 600); do
  grep -q ": running$" "$workdir/program.out" 2>/dev/null && break
  kill -0 "$program_pid" 2>/dev/null || break
  sleep 0.1
done
if ! grep -q ": running$" "$workdir/program.out"; then
  echo "FAIL: the program did not get going" >&2
  cat "$workdir/program.out" "$workdir/program.err" >&2
  exit 1
fi
if [[ $mode == silent ]]; then
  kill -STOP "$a_pid"
  killed_at=$SECONDS
  : >"$workdir/poold.log"  # the reports about the silent host only
  lease_json "${after[@]}"  # gpupoold's probe of A gets no answer now
else
  kill -9 "$a_pid"
  wait "$a_pid" 2>/dev/null
  killed_at=$SECONDS
  name_in_lease 2 "${after[@]}"
fi
wait "$program_pid"
rc=$?
# The stopped server ends with SIGKILL (at SIGTERM and SIGCONT, its shutdown waits on the
# sessions it lost meanwhile).
[[ $mode == silent ]] && { kill -9 "$a_pid"; wait "$a_pid" 2>/dev/null; }
seconds=$((SECONDS - killed_at))
cat "$workdir/program.out"
cat "$workdir/program.err" >&2

fail() { echo "FAIL: $*" >&2; exit 1; }
[[ $rc -eq 0 ]] || fail "the program exited $rc"
grep -q ": PASS" "$workdir/program.out" || fail "no PASS"
err="$workdir/program.err"
# recovered_together LINE: every GPU recovered once, on the second server; one recovery was
# started by a failed call and the others (their log says LINE) by that recovery.
recovered_together() {
  for ((d = 0; d < gpus; ++d)); do
    n=$(grep -c "GPU $d: recovered on ${after[d]%@*} at 127.0.0.1:$((port + 1))" "$err")
    [[ $n -eq 1 ]] || fail "GPU $d recovered $n time(s), not once"
  done
  foreground=$(grep -c "failed (CUDA error 46): recovering on the GPU the lease names next" "$err")
  background=$(grep -c "$1" "$err")
  [[ $foreground -eq 1 ]] || fail "$foreground recoveries started by a failed call, expected 1"
  [[ $background -eq $((gpus - 1)) ]] || fail "$background recoveries started in the background, expected $((gpus - 1))"
}

if [[ $mode == exit ]]; then
  grep -q "GPU 0: recovered on ${after[0]%@*} at 127.0.0.1:$((port + 1))" "$err" || fail "GPU 0 did not recover"
  grep -q "GPU 1 (.*): its connection is lost too" "$err" || fail "GPU 1's recovery did not start"
  grep -q "GPU 1: recovery stopped: the process is shutting down" "$err" ||
    fail "the exit did not stop GPU 1's recovery"
  ((seconds < 30)) || fail "the program took ${seconds} s to end after the failure"
  echo "exited ${seconds} s after the failure, GPU 1's recovery stopped"
elif [[ $mode == silent ]]; then
  # One GPU's call waited on A and asked gpupoold; the other was started by its recovery,
  # on gpupoold's word about its own slot (the lease file never moved).
  recovered_together "its agent is silent too (gpupoold found it gone for another GPU): recovering in the background"
  n=$(grep -c "^report " "$workdir/poold.log")
  [[ $n -eq 2 ]] || fail "gpupoold was told $n time(s), expected twice (each GPU's slot once)"
  echo "a silent host: recovered together on gpupoold's word, $background in the background"
elif [[ $mode == shared ]]; then
  # One GPU's call found the failure; the others were started by its recovery.
  recovered_together "its connection is lost too (another GPU's agent went away): recovering in the background"
  echo "recovered together: $gpus GPUs, $background in the background"
else
  grep -q "GPU 0: recovered on ${after[0]%@*} at 127.0.0.1:$((port + 1))" "$err" || fail "GPU 0 did not recover"
  if grep -q "GPU 1\b.*\(recover\|failed\|lost\)" "$err"; then fail "GPU 1 (its agent healthy) was touched"; fi
  n=$(grep -c "attached to GPU ${before[1]%@*} (lease L1)" "$workdir/c.err")
  [[ $n -eq 1 ]] || fail "server C attached the program $n time(s), expected once (the same session)"
  echo "one agent of two lost: GPU 0 recovered, GPU 1 kept its session"
fi
