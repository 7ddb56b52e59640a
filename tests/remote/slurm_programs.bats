#!/usr/bin/env bats
# Issue 5 (b): each CUDA test program runs, unmodified, inside a real Slurm job asking
# --gpu-pool (sbatch; srun for vector_add), through the environment spank_gpupool injects
# (GPUPOOL_GPUS, GPUPOOL_LEASE_ID/TOKEN, CUDA_VISIBLE_DEVICES, LD_LIBRARY_PATH from the
# gpupool profile), over TCP on loopback and over shared memory, against the dev cluster's
# sim agents. The submitting environment holds none of those variables (with_transport),
# so whatever the job has came from the plugin.

load slurm_helpers

# run_in_job TRANSPORT GPUS PROGRAM: submits PROGRAM on a100:GPUS, waits for it, checks
# that it succeeded with the injected environment and that the agent of each leased GPU
# served it under the job's lease; leaves the output in $out and the lease in $lease.
run_in_job() {
  local transport=$1 count=$2 program=$3 id line gpus entry uuid
  id=$(submit_on "$transport" --gpu-pool="a100:$count" "$JOB_SCRIPT" "$PROGRAMS/$program")
  [[ -n $id ]]
  wait_job_end "$id" 180
  job_completed_ok "$id"
  out=$(cat "$OUT/$id.out")
  line=$(grep '^JOB ' <<<"$out")
  lease=$(field_of_line "$line" lease)
  gpus=$(field_of_line "$line" gpus)
  [[ $lease == L* ]]
  [ "$(field_of_line "$line" visible)" = "$(seq -s, 0 $((count - 1)))" ]
  [ "$(field_of_line "$line" ucx_tls)" = "$(ucx_tls_of "$transport")" ]
  # The profile put the replacement libcuda.so.1 first, from the plugin's default lib_dir.
  [ "$(field_of_line "$line" ld_library_path)" = "$REMOTING_LIB_DIR" ]
  [ "$(tr ',' '\n' <<<"$gpus" | wc -l)" -eq "$count" ]
  for entry in ${gpus//,/ }; do
    uuid=${entry%@*}
    [[ $entry == *@127.0.0.1:* ]]
    agent_saw_client "$lease" "$uuid"
  done
  # The lease ends with the job; no node was drained on the way.
  wait_until 15 job_has_no_lease "$id"
  no_node_drained
}

@test "vector_add over tcp" {
  run_in_job tcp 1 vector_add
  grep -q '^vector_add: [0-9]* elements, 0 wrong$' <<<"$out"
}

@test "vector_add over shared memory" {
  run_in_job shm 1 vector_add
  grep -q '^vector_add: [0-9]* elements, 0 wrong$' <<<"$out"
}

@test "1 GiB copy round trip with checksum over tcp" {
  run_in_job tcp 1 copy_roundtrip
  grep -qE '^copy_roundtrip: 1073741824 bytes, checksum ([0-9a-f]{16}) expected \1$' <<<"$out"
}

@test "1 GiB copy round trip with checksum over shared memory" {
  run_in_job shm 1 copy_roundtrip
  grep -qE '^copy_roundtrip: 1073741824 bytes, checksum ([0-9a-f]{16}) expected \1$' <<<"$out"
}

@test "several streams with events over tcp" {
  run_in_job tcp 1 streams_events
  grep -qE '^streams_events: [0-9]+ streams, .* ms, 0 wrong$' <<<"$out"
}

@test "several streams with events over shared memory" {
  run_in_job shm 1 streams_events
  grep -qE '^streams_events: [0-9]+ streams, .* ms, 0 wrong$' <<<"$out"
}

# Device i is the lease's GPU i: the PCI bus id the program reads through the library is
# the one gpupoold has for that GPU.
devices_are_the_leased_gpus() {
  local gpus entry uuid bus i=0
  gpus=$(field_of_line "$(grep '^JOB ' <<<"$out")" gpus)
  [ "$(grep -c '^device [0-9]*: NVIDIA A100-SXM4-80GB, ' <<<"$out")" -eq 2 ]
  for entry in ${gpus//,/ }; do
    uuid=${entry%@*}
    bus=$(gpupoolctl show gpus --json | jq -r --arg u "$uuid" '.gpus[] | select(.uuid == $u) | .pci_bus_id')
    [[ -n $bus ]]
    grep -q "^device $i: .*, bus $bus\$" <<<"$out"
    i=$((i + 1))
  done
}

@test "device properties of both leased GPUs over tcp" {
  run_in_job tcp 2 device_properties
  devices_are_the_leased_gpus
}

@test "device properties of both leased GPUs over shared memory" {
  run_in_job shm 2 device_properties
  devices_are_the_leased_gpus
}

# The program itself exits 0 only when every call failed with the error it expects.
@test "error path over tcp: the expected CUDA errors, and the GPU stays healthy" {
  run_in_job tcp 1 error_path
  grep -q '^fault: cudaErrorIllegalAddress$' <<<"$out"
  uuid=$(field_of_line "$(grep '^JOB ' <<<"$out")" gpus)
  uuid=${uuid%@*}
  # An application's fault is not the GPU's: it is not failed or swapped.
  [ "$(gpupoolctl show gpus --json | jq -r --arg u "$uuid" '.gpus[] | select(.uuid == $u) | .state')" = IDLE ]
}

@test "error path over shared memory: the expected CUDA errors" {
  run_in_job shm 1 error_path
  grep -q '^bad launch: cudaError' <<<"$out"
  grep -q '^fault: cudaErrorIllegalAddress$' <<<"$out"
}

# Issue 41's programs (tests/remote/driver, built beside these): dynamic parallelism's tail
# launches, a quadtree built by recursive launches, copies and memsets from device code and
# the pending-launch limit, device attributes, limits and 3D copies asked from device code,
# the rest of the device runtime's queries and 3D memsets from device code, stream capture
# as NVIDIA's graph samples use it, registered host memory mapped for kernels. Each checks
# its own results.
@test "dynamic parallelism, capture and registered memory programs over tcp" {
  local program
  for program in cdp_tail_launch cdp_quadtree cdp_device_copies cdp_pending_launches cdp_device_queries \
    cdp_runtime_queries capture_fidelity registered_memory; do
    run_in_job tcp 1 "../driver/cuda/$program"
    grep -qE '^(tail launch|quadtree|cdp_device_copies|cdp_pending_launches|cdp_device_queries|cdp_runtime_queries|capture fidelity|registered memory): PASS$' <<<"$out"
  done
}

# srun as the whole job (no batch script): the same environment reaches an interactive step.
srun_job_on() {
  local transport=$1 line lease uuid
  out=$(with_transport "$transport" srun --gpu-pool=a100:1 "$JOB_SCRIPT" "$PROGRAMS/vector_add" 2>&1 3>&-)
  echo "$out" >&2
  grep -q '^vector_add: [0-9]* elements, 0 wrong$' <<<"$out"
  line=$(grep '^JOB ' <<<"$out")
  lease=$(field_of_line "$line" lease)
  uuid=$(field_of_line "$line" gpus)
  uuid=${uuid%@*}
  [ "$(field_of_line "$line" ucx_tls)" = "$(ucx_tls_of "$transport")" ]
  [ "$(field_of_line "$line" ld_library_path)" = "$REMOTING_LIB_DIR" ]
  agent_saw_client "$lease" "$uuid"
  wait_until 15 lease_gone "$lease"
  no_node_drained
}

@test "vector_add as an srun job over tcp" {
  srun_job_on tcp
}

@test "vector_add as an srun job over shared memory" {
  srun_job_on shm
}
