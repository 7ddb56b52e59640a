#!/usr/bin/env bats
# Issue 41: what NVML says inside a real --gpu-pool job. The job's LD_LIBRARY_PATH (from
# spank_gpupool's gpupool profile) brings the replacement libnvidia-ml.so.1 beside
# libcuda.so.1; nvml_query (tests/remote/nvml_query.c) loads it as pynvml does, checks it
# against libcuda.so.1 device by device and refuses every GPU outside the lease it is
# given; here its figures are checked against gpupoold's (gpupoolctl show gpus) for the
# leased GPUs, and a job that names another job's GPU is refused by that GPU's agent.

load slurm_helpers

FLAGS=${BATS_FILE_TMPDIR:-/tmp}/flags

setup() { mkdir -p "$FLAGS" "$OUT"; }

# Every GPU uuid gpupoold knows, space-separated (nvml_query refuses each the job lacks).
all_gpu_uuids() { gpupoolctl show gpus --json | jq -r '[.gpus[].uuid] | join(" ")'; }

# gpu_field UUID FIELD: FIELD of that GPU as gpupoold has it.
gpu_field() {
  gpupoolctl show gpus --json | jq -r --arg u "$1" ".gpus[] | select(.uuid == \$u) | .$2"
}

# nvml_matches_gpupoold INDEX UUID: NVML device INDEX in $out is GPU UUID, with gpupoold's
# model, memory and PCI bus id.
nvml_matches_gpupoold() {
  local i=$1 uuid=$2 model memory_mib bus
  model=$(gpu_field "$uuid" model)
  memory_mib=$(gpu_field "$uuid" memory_mib)
  bus=$(gpu_field "$uuid" pci_bus_id)
  [[ -n $model && -n $memory_mib && -n $bus ]]
  grep -qx "GPU${i}_UUID=$uuid" <<<"$out"
  grep -qx "GPU${i}_Name=NVIDIA $model" <<<"$out"
  grep -qx "GPU${i}_MemoryTotal=$((memory_mib * 1048576))" <<<"$out"
  grep -qix "GPU${i}_BusIdLegacy=$bus" <<<"$out"
  # ... and CUDA said the same (nvml_query compared them; its Failures=0 says so too).
  grep -qx "CUDA${i}_UUID=$uuid" <<<"$out"
}

@test "NVML in a job with --gpu-pool=a100:2 shows its two GPUs as CUDA and gpupoold do" {
  local id line lease gpus uuid0 uuid1
  id=$(submit_on tcp --gpu-pool=a100:2 "$JOB_SCRIPT" "$PROGRAMS/nvml_query" $(all_gpu_uuids))
  [[ -n $id ]]
  wait_job_end "$id" 180
  job_completed_ok "$id"
  out=$(cat "$OUT/$id.out")
  grep -qx 'Failures=0' <<<"$out"
  grep -qx "Library=$REMOTING_LIB_DIR/libnvidia-ml.so.1" <<<"$out"
  grep -qx 'Count=2' <<<"$out"
  line=$(grep '^JOB ' <<<"$out")
  lease=$(field_of_line "$line" lease)
  gpus=$(field_of_line "$line" gpus)
  [ "$(field_of_line "$line" ld_library_path)" = "$REMOTING_LIB_DIR" ]
  uuid0=$(cut -d, -f1 <<<"$gpus"); uuid0=${uuid0%@*}
  uuid1=$(cut -d, -f2 <<<"$gpus"); uuid1=${uuid1%@*}
  nvml_matches_gpupoold 0 "$uuid0"
  nvml_matches_gpupoold 1 "$uuid1"
  # Every other GPU of the cluster was asked for by UUID and not found.
  [ "$(grep -c '^Check_ForeignUUID=ok' <<<"$out")" -eq "$(( $(all_gpu_uuids | wc -w) - 2 ))" ]
  # Memory the job's CUDA allocated showed as used on its GPU.
  grep -qx 'Check_AllocationShowsAsUsed=ok' <<<"$out"
  # The agents' figures: the sim's driver, utilisation idle and busy, and the job's own
  # process with the memory it holds.
  grep -qx 'DriverVersion=gpupool-sim [0-9.]*' <<<"$out"
  grep -qx 'Check_UtilizationIdle=ok' <<<"$out"
  grep -qx 'Check_UtilizationBusy=ok' <<<"$out"
  grep -qx 'Check_OwnProcessWithItsMemory=ok' <<<"$out"
  agent_saw_client "$lease" "$uuid0"
  wait_until 15 job_has_no_lease "$id"
  no_node_drained
}

@test "another job's CUDA process is not among the job's GPU processes" {
  local other other_pid id
  # The other job holds 1 GiB on its GPU until it is cancelled, and says its pid.
  other=$(submit_on tcp --gpu-pool=a100:1 "$JOB_SCRIPT" sh -c \
    'echo OTHER_PID=$$; exec "$0"' "$PROGRAMS/memory_hold")
  [[ -n $other ]]
  wait_until 90 grep -qx ready "$OUT/$other.out"
  other_pid=$(sed -n 's/^OTHER_PID=//p' "$OUT/$other.out")
  [[ -n $other_pid ]]
  id=$(submit_on tcp --gpu-pool=a100:1 "$JOB_SCRIPT" "$PROGRAMS/nvml_query")
  [[ -n $id ]]
  wait_job_end "$id" 180
  scancel "$other"
  out=$(cat "$OUT/$id.out")
  echo "$out" >&2
  job_completed_ok "$id"
  grep -qx 'Failures=0' <<<"$out"
  grep -qx 'GPU0_ProcessCount=1' <<<"$out"
  grep -qx 'Check_NoOtherProcess=ok' <<<"$out"
  ! grep -q "^GPU0_Process=$other_pid " <<<"$out"
  wait_job_end "$other" 60
  no_node_drained
}

@test "CUDA_VISIBLE_DEVICES=1 in the job: NVML's only device is the lease's second GPU" {
  local id gpus uuid1
  id=$(submit_on tcp --gpu-pool=a100:2 "$JOB_SCRIPT" env CUDA_VISIBLE_DEVICES=1 \
    "$PROGRAMS/nvml_query")
  [[ -n $id ]]
  wait_job_end "$id" 180
  job_completed_ok "$id"
  out=$(cat "$OUT/$id.out")
  grep -qx 'Failures=0' <<<"$out"
  grep -qx 'Count=1' <<<"$out"
  gpus=$(field_of_line "$(grep '^JOB ' <<<"$out")" gpus)
  uuid1=$(cut -d, -f2 <<<"$gpus"); uuid1=${uuid1%@*}
  nvml_matches_gpupoold 0 "$uuid1"
}

@test "a job naming another job's GPU in GPUPOOL_GPUS is refused at nvmlInit" {
  local other other_uuid other_endpoint id
  other=$(held_job --gpu-pool=a100:1)
  [[ -n $other ]]
  wait_until 60 job_has_lease "$other"
  other_uuid=$(lease_field_of_job "$other" '.gpus[0].uuid')
  other_endpoint=$(lease_field_of_job "$other" '.gpus[0].endpoint')
  [[ $other_uuid == GPU-* && -n $other_endpoint ]]
  # The job's own lease, with the other job's GPU in place of its own.
  id=$(submit_on tcp --gpu-pool=a100:1 "$JOB_SCRIPT" env \
    "GPUPOOL_GPUS=$other_uuid@$other_endpoint" "$PROGRAMS/nvml_query")
  [[ -n $id ]]
  wait_job_end "$id" 120
  finish "$other"
  out=$(cat "$OUT/$id.out")
  echo "$out" >&2
  [[ $(job_state "$id") == FAILED ]]
  grep -qx 'Init=4' <<<"$out"  # NVML_ERROR_NO_PERMISSION
  grep -q "gpupool-nvml: GPU $other_uuid at $other_endpoint refused this process" <<<"$out"
  ! grep -q '^GPU0_' <<<"$out"
  lease=$(field_of_line "$(grep '^JOB ' <<<"$out")" lease)
  agent_refused "$lease" "$other_uuid"
  wait_job_end "$other" 60
  no_node_drained
}
