# Shared by tests/remote/slurm*.bats: the data path inside real Slurm jobs.
#
# Needs the dev cluster up (CTest fixture "devcluster") and, from CTest:
#   GPUPOOL_BUILD           the build tree the cluster runs (its lib/remoting holds libcuda.so.1)
#   GPUPOOL_CUDA_PROGRAMS   the nvcc-built test programs (tests/remote/programs)
# Job helpers (submit, wait_until, job_state, leases_json, no_node_drained, ...) come from
# tests/lib/helpers.bash, the one helper file of all cluster tests.

# shellcheck source=../lib/helpers.bash
. "$(dirname "${BASH_SOURCE[0]}")/../lib/helpers.bash"

# shellcheck disable=SC2034  # used by the .bats files
PROGRAMS=${GPUPOOL_CUDA_PROGRAMS:?GPUPOOL_CUDA_PROGRAMS must name the built CUDA test programs}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2034
JOB_SCRIPT=$HERE/slurm_job.sh
# Where spank_gpupool's default lib_dir (<plugin dir>/remoting) must point.
# shellcheck disable=SC2034
REMOTING_LIB_DIR=$GPUPOOL_BUILD/lib/remoting

# with_transport TRANSPORT CMD...: runs CMD (sbatch, srun) with the UCX settings of
# TRANSPORT (transport_env.sh: tcp on loopback, or shm = posix,cma,self) and none of the
# variables spank_gpupool injects, so that whatever a job has came from the plugin.
# UCX_TLS travels in the submitting environment (Slurm's default --export=ALL): an
# --export=NAME=VALUE list cannot carry posix,cma,self, because Slurm splits it at commas.
with_transport() {
  local transport=$1
  shift
  (
    unset GPUPOOL_GPUS GPUPOOL_LEASE_ID GPUPOOL_LEASE_TOKEN GPUPOOL_LEASE_FILE \
      GPUPOOL_GENERATION CUDA_VISIBLE_DEVICES LD_LIBRARY_PATH UCX_TLS UCX_NET_DEVICES
    # shellcheck source=transport_env.sh
    . "$HERE/transport_env.sh" "$transport" || exit 2
    exec "$@"
  )
}

# submit_on TRANSPORT SBATCH-ARGS...: submits a batch job over TRANSPORT (with_transport);
# prints the job id.
submit_on() {
  local transport=$1
  shift
  with_transport "$transport" sbatch --parsable --export=ALL -o "$OUT/%j.out" "$@" | cut -d';' -f1
}

# The UCX_TLS a job must have seen for TRANSPORT.
ucx_tls_of() { with_transport "$1" printenv UCX_TLS; }

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

# lease_gone LEASE: gpupoold lists no lease LEASE any more.
lease_gone() {
  [ "$(leases_json | jq --arg l "$1" '[.leases[] | select(.id == $l)] | length')" = 0 ]
}

# The uuid of the GPU with id $1 (e.g. gpuhost1:0).
uuid_of_gpu() { gpupoolctl show gpus "$1" --json | jq -r '.gpus[0].uuid'; }
