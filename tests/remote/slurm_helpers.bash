# Shared by tests/remote/slurm*.bats: the data path inside real Slurm jobs.
#
# Needs the dev cluster up (CTest fixture "devcluster") and, from CTest:
#   GPUPOOL_BUILD           the build tree the cluster runs (its lib/remoting holds libcuda.so.1)
#   GPUPOOL_CUDA_PROGRAMS   the nvcc-built test programs (tests/remote/programs)
# Job helpers (submit, wait_until, job_state, leases_json, no_node_drained, ...) are the
# ones the spank tests use.

# shellcheck source=../spank/helpers.bash
. "$(dirname "${BASH_SOURCE[0]}")/../spank/helpers.bash"

PROGRAMS=${GPUPOOL_CUDA_PROGRAMS:?GPUPOOL_CUDA_PROGRAMS must name the built CUDA test programs}
JOB_SCRIPT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/slurm_job.sh
# Where spank_gpupool's default lib_dir (<plugin dir>/remoting) must point.
REMOTING_LIB_DIR=$GPUPOOL_BUILD/lib/remoting

# submit_on TRANSPORT SBATCH-ARGS...: submits a batch job whose only gpupool settings come
# from spank_gpupool, over TRANSPORT (tcp: TCP on loopback; shm: posix,cma,self); prints
# the job id. UCX_TLS travels in the submitting environment (sbatch --export=ALL): an
# --export=NAME=VALUE list cannot carry it, because the list splits values at commas.
submit_on() {
  local transport=$1
  shift
  local -a ucx
  case $transport in
    tcp) ucx=(UCX_TLS=tcp UCX_NET_DEVICES=lo) ;;
    shm) ucx=(UCX_TLS=posix,cma,self) ;;
    *) echo "submit_on: unknown transport '$transport'" >&2; return 2 ;;
  esac
  env -u GPUPOOL_GPUS -u GPUPOOL_LEASE_ID -u GPUPOOL_LEASE_TOKEN -u GPUPOOL_LEASE_FILE \
    -u GPUPOOL_GENERATION -u CUDA_VISIBLE_DEVICES -u LD_LIBRARY_PATH -u UCX_TLS \
    -u UCX_NET_DEVICES "${ucx[@]}" \
    sbatch --parsable --export=ALL -o "$OUT/%j.out" "$@" | cut -d';' -f1
}

# The UCX_TLS a job must have seen for TRANSPORT.
ucx_tls_of() {
  case $1 in
    tcp) echo tcp ;;
    shm) echo posix,cma,self ;;
  esac
}

# field_of_line LINE KEY: the value of KEY=VALUE in a "JOB ..." or "STEP ..." line.
field_of_line() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -1; }

# The agents' logs (data-path messages: attached, disconnected, refused).
agent_logs() { cat "$GPUPOOL_DEVDIR"/log/agent-*.out 2>/dev/null; }

# agent_saw_client LEASE UUID: the agent serving UUID attached a client of LEASE to it.
agent_saw_client() { agent_logs | grep -qF "attached to GPU $2 (lease $1)"; }

# agent_refused LEASE UUID: the agent refused a client presenting LEASE for UUID.
agent_refused() {
  agent_logs | grep -F "refused client" | grep -qF "lease '$1' with that token does not hold GPU $2"
}

# wait_job_end ID [SECONDS]: waits until the job has ended (default 120 s).
wait_job_end() { wait_until "${2:-120}" job_ended "$1"; }

# Prints the job's output (for failure messages) and checks it ended COMPLETED 0:0.
job_completed_ok() {
  cat "$OUT/$1.out" >&2 || true
  [[ $(job_state "$1") == COMPLETED ]] && [[ $(job_field "$1" ExitCode) == 0:0 ]]
}

# The uuid of the GPU with id $1 (e.g. gpuhost1:0).
uuid_of_gpu() { gpupoolctl show gpus "$1" --json | jq -r '.gpus[0].uuid'; }
