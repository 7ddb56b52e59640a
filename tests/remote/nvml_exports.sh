#!/bin/bash
# The replacement libnvidia-ml.so.1 (remote/nvml) exports NVML entry points only (in an
# ASan build also __asan_default_options, common/asan_defaults.c), every name of the calls
# nvidia-smi and pynvml make for a device list, under NVML's soname, and links neither UCX
# (loaded at nvmlInit, through the transport module) nor libcuda.
set -euo pipefail
so=${1:?usage: nvml_exports.sh LIBNVIDIA_ML}
[[ -f $so ]] || { echo "no library at $so"; exit 1; }
exports=$(nm -D --defined-only "$so" | awk '{print $3}')
bad=$(grep -Ev '^(nvml[A-Za-z0-9_]+|__asan_default_options)$' <<<"$exports" || true)
if [[ -n $bad ]]; then
  echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
for sym in nvmlInit nvmlInit_v2 nvmlInitWithFlags nvmlShutdown nvmlErrorString \
    nvmlDeviceGetCount nvmlDeviceGetCount_v2 nvmlDeviceGetHandleByIndex \
    nvmlDeviceGetHandleByIndex_v2 nvmlDeviceGetHandleByUUID nvmlDeviceGetHandleByPciBusId_v2 \
    nvmlDeviceGetName nvmlDeviceGetUUID nvmlDeviceGetPciInfo_v3 nvmlDeviceGetMemoryInfo \
    nvmlDeviceGetMemoryInfo_v2 nvmlDeviceGetUtilizationRates nvmlDeviceGetTemperature \
    nvmlDeviceGetPowerUsage nvmlDeviceGetComputeRunningProcesses_v3 nvmlDeviceGetComputeMode \
    nvmlDeviceGetMigMode nvmlSystemGetDriverVersion nvmlSystemGetCudaDriverVersion_v2; do
  grep -qx "$sym" <<<"$exports" || { echo "missing $sym"; exit 1; }
done
soname=$(objdump -p "$so" | awk '$1 == "SONAME" {print $2}')
[[ $soname == libnvidia-ml.so.1 ]] || { echo "soname is '$soname', not libnvidia-ml.so.1"; exit 1; }
if ldd "$so" | grep -Eq 'libuc[pst]|libcuda'; then
  echo "links what it must load only at nvmlInit, or libcuda:"; ldd "$so"; exit 1
fi
echo "ok: $(wc -l <<<"$exports") NVML entry points, soname $soname, no UCX or libcuda linked"
