#!/bin/bash
# scripts/bench/failover --slurm: fault → next completed iteration of an iterative CUDA
# program (failover.d/iterations.cu) in a Slurm job on the dev cluster, per fault kind, in
# the same run:
#   fail   gpupoolctl update gpu=ID state=fail (gpupoold fails it at once: the baseline)
#   kill   the GPU's agent killed with SIGKILL (found through the program's report and
#          gpupoold's probe, POST /v1/leases/agent-lost)
#   silent the same, the program run without GPUPOOL_SERVER (env -u), so that it reports
#          nothing: the agent's death is found when its heartbeats stop for
#          unreachable_timeout, as before the report existed (the second baseline)
#   drain  gpupoolctl update gpu=ID state=drain (a planned move: the lease and its memory
#          move agent to agent)
#   gone   the host stops answering, simulated by SIGSTOP to the GPU's agent and every
#          process under it (its session workers), by pid: connections stay open and
#          nothing answers, as when a host hangs or drops off the network without
#          resetting them; SIGCONT after the trial
#   hang   the sim GPU hangs (the agent's fault API, mode hang): found by the agent's
#          watchdog after hang_timeout without progress and its probe on a fresh session
# The pause is the time from just before the fault command to the end of the longest wait
# for an iteration after it (the iteration that completed on the new GPU; both times
# CLOCK_REALTIME on this machine), the program's own iteration period (~10 ms plus its
# work) included. Median and max of TRIALS trials each, alternating.
# Uses the dev cluster of GPUPOOL_DEVDIR/GPUPOOL_DEV_PORTBASE (started if it is not up)
# and the build tree it runs; runs as the user that may submit there (root on a dev VM).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../../.." && pwd)
#   slurm_faults.sh TRIALS [TRANSPORT [KINDS]]   (KINDS: default "fail kill silent drain gone hang")
trials=${1:-5} transport=${2:-tcp} kinds=${3:-fail kill silent drain gone hang}
[[ $trials =~ ^[1-9][0-9]*$ ]] || { echo "failover --slurm: TRIALS must be a positive number" >&2; exit 2; }
for kind in $kinds; do
  case $kind in
    fail | kill | silent | drain | gone | hang) ;;
    *) echo "failover --slurm: unknown fault kind '$kind' (fail kill silent drain gone hang)" >&2; exit 2 ;;
  esac
done
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
devcluster="$top/scripts/devcluster"
"$devcluster" up >/dev/null
devdir=${GPUPOOL_DEVDIR:-/tmp/gpupool-dev}
# shellcheck disable=SC1091
. "$devdir/env"

work=$(mktemp -d /tmp/gpupool-bench-slurm.XXXXXX)
chmod 755 "$work"
job="" failed_gpu="" killed_agent="" stopped_pids="" hung=""
cleanup() {
  [[ -n $job ]] && scancel "$job" 2>/dev/null || true
  [[ -n $stopped_pids ]] && kill -CONT $stopped_pids 2>/dev/null || true
  [[ -n $hung ]] && fault ${hung} clear >/dev/null 2>&1 || true
  [[ -n $failed_gpu ]] && gpupoolctl update gpu="$failed_gpu" state=resume reason=bench >/dev/null 2>&1 || true
  [[ -n $killed_agent ]] && "$devcluster" start "$killed_agent" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT
"$nvcc" -O2 -o "$work/iterations" "$here/iterations.cu"

median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print 0; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }
maximum() { sort -g | tail -1; }
lease_of() { gpupoolctl show leases --json | jq -r ".leases[] | select(.job_id == $1) | $2"; }
iterations_done() { grep -c '^it ' "$work/$1.out" 2>/dev/null || true; }
wait_for() {  # wait_for SECONDS CMD...
  local until=$((SECONDS + $1))
  shift
  until "$@"; do
    ((SECONDS < until)) || return 1
    sleep 0.1
  done
}
running_20() { (($(iterations_done "$job") + 0 >= 20)); }
# Only the bench's pool (a100) counts: a host that left the cluster (the dev cluster's
# joining test host, gpuhost6) stays UNREACHABLE in gpupoold's durable inventory.
no_failed() { ! gpupoolctl show gpus --json | jq -e '.gpus[] | select(.pool == "a100") | select(.state == "FAILED" or .state == "DRAINED" or .state == "DRAINING")' >/dev/null; }
no_unreachable() { ! gpupoolctl show gpus --json | jq -e '.gpus[] | select(.pool == "a100") | select(.state == "UNREACHABLE")' >/dev/null; }
recovered() { grep -qE 'GPU 0: (recovered on|moved to)' "$work/$job.out"; }
# fault HOST INDEX MODE: a sim fault through the agent's control API (MUNGE authenticated:
# a credential whose payload is "gpupool"), as tests/remote/slurm_failover.bats does.
fault() {
  local port=$((${GPUPOOL_DEV_PORTBASE:-16800} + 29 + ${1#gpuhost}))
  curl -sf -H "Authorization: MUNGE $(printf gpupool | munge -S "$MUNGE_SOCKET")" \
    -d "{\"index\": $2, \"mode\": \"$3\"}" "http://127.0.0.1:$port/v1/faults"
}
# The agent of host $1 and every process under it, the agent first: the processes a host
# that stops answering takes with it (this dev cluster's, started by devcluster up).
descendants() {
  local child
  echo "$1"
  for child in $(pgrep -P "$1"); do descendants "$child"; done
}
host_pids() { descendants "$(cat "$devdir/pids/agent-$1.pid")" | tr '\n' ' '; }
# The pause the fault at $1 (unix ms) caused: the longest wait for an iteration after it
# (the program stops at the fault's effect, which may come later than the command: an
# agent hears of state=fail at its next heartbeat); prints from the fault to the end of
# that wait, in ms.
pause_after() {
  awk -v t="$1" '$1 == "it" && $3 > t - 50 {
      from = prev > t ? prev : t
      if ($3 - from > gap) { gap = $3 - from; end = $3 }
      prev = $3
    } $1 == "it" {prev = $3} END {if (!end) exit 1; print end - t}' "$work/$job.out"
}

# One trial of fault kind $1: prints the pause in ms.
trial() {
  local wrap=""
  [[ $1 == silent ]] && wrap="env -u GPUPOOL_SERVER"
  job=$(
    unset GPUPOOL_GPUS GPUPOOL_LEASE_ID GPUPOOL_LEASE_TOKEN GPUPOOL_LEASE_FILE CUDA_VISIBLE_DEVICES LD_LIBRARY_PATH
    # shellcheck disable=SC1091
    . "$top/tests/remote/transport_env.sh" "$transport"
    GPUPOOL_RECOVERY_DEADLINE=60 sbatch --parsable --export=ALL -o "$work/%j.out" \
      --gpu-pool=a100:1 --wrap "$wrap $work/iterations 90" | cut -d';' -f1
  )
  wait_for 120 running_20 || { echo "failover --slurm: job $job did not start iterating" >&2; cat "$work/$job.out" >&2; exit 1; }
  local gpu="" host index fault_ms pids
  # Asked again while gpupoolctl shows no GPU for it (once, on a cluster just started).
  lease_shown() { gpu=$(lease_of "$job" '.gpus[0].id' 2>/dev/null) && [[ -n $gpu && $gpu != null ]]; }
  wait_for 10 lease_shown || { echo "failover --slurm: gpupoolctl shows no lease of job $job" >&2; exit 1; }
  host=$(lease_of "$job" '.gpus[0].host')
  index=$(lease_of "$job" '.gpus[0].index')
  [[ $1 == gone ]] && pids=$(host_pids "$host")  # found before the clock starts
  fault_ms=$(date +%s%3N)
  case $1 in
    fail)
      failed_gpu=$gpu
      gpupoolctl update gpu="$gpu" state=fail reason=bench >/dev/null ;;
    drain)
      failed_gpu=$gpu  # resumed after the trial, as a failed one
      gpupoolctl update gpu="$gpu" state=drain reason=bench >/dev/null ;;
    gone)
      stopped_pids=$pids
      kill -STOP $stopped_pids ;;
    hang)
      hung="$host $index" failed_gpu=$gpu
      fault "$host" "$index" hang >/dev/null ;;
    *)
      killed_agent=agent-$host
      "$devcluster" kill "$killed_agent" >/dev/null ;;
  esac
  wait_for 60 recovered ||
    { echo "failover --slurm: job $job did not recover after '$1'" >&2; cat "$work/$job.out" >&2; exit 1; }
  sleep 1  # iterations after the recovery
  pause_after "$fault_ms"
  grep -E 'told gpupoold|recovered on' "$work/$job.out" >>"$work/library.log" || true
  scancel "$job"
  job=""
  if [[ -n $stopped_pids ]]; then kill -CONT $stopped_pids 2>/dev/null || true; stopped_pids=""; fi
  if [[ -n $hung ]]; then fault $hung clear >/dev/null; hung=""; fi
  if [[ -n $failed_gpu ]]; then gpupoolctl update gpu="$failed_gpu" state=resume reason=bench >/dev/null; failed_gpu=""; fi
  if [[ -n $killed_agent ]]; then "$devcluster" start "$killed_agent" >/dev/null; killed_agent=""; fi
  wait_for 60 no_unreachable || { echo "failover --slurm: an a100 GPU stayed UNREACHABLE after '$1'" >&2; exit 1; }
  wait_for 30 no_failed || { echo "failover --slurm: an a100 GPU stayed failed or drained after '$1'" >&2; exit 1; }
}

: >"$work/library.log"
for kind in $kinds; do : >"$work/$kind"; done
for _ in $(seq 1 "$trials"); do
  for kind in $kinds; do trial "$kind" >>"$work/$kind"; done
done
setting() { sed -n "s/^ *$1 *= *\([0-9]*\).*/\1/p" "$GPUPOOL_CONF" | head -1; }
timeout=$(setting unreachable_timeout) hang_timeout=$(setting hang_timeout)
timeout=${timeout:-15} hang_timeout=${hang_timeout:-10}
echo "gpupool failover in Slurm jobs (dev cluster, transport=$transport, sim GPUs), $trials trials each"
printf "%-44s %10s %10s %8s  %s\n" "fault → next completed iteration" "median" "max" "goal" "trials (ms)"
for kind in $kinds; do
  goal="< 2 s"
  case $kind in
    fail) label="gpupoolctl update state=fail (baseline)" ;;
    kill) label="agent SIGKILL (report + probe)" ;;
    silent) label="agent SIGKILL, unreported (baseline)" goal="-" ;;
    drain) label="gpupoolctl update state=drain" ;;
    gone) label="host gone (agent + workers SIGSTOP)" ;;
    hang) label="GPU hangs (watchdog + probe)" goal="< $((hang_timeout + 1)) s" ;;
  esac
  printf "%-44s %7s ms %7s ms %8s  %s\n" "$label" "$(median <"$work/$kind")" "$(maximum <"$work/$kind")" \
    "$goal" "$(tr '\n' ' ' <"$work/$kind")"
done
echo "gpupoold's unreachable_timeout here: $timeout s (what an unreported agent's death and a"
echo "silent host wait for); the agent's hang_timeout: $hang_timeout s."
