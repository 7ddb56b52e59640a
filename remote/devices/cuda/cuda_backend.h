// CudaBackend: the real GPUs of this host, found with NVML, watched for Xid errors.
//
// Discovery: NVML (UUID, name, memory, PCI bus id, compute capability), the CUDA driver
// (multiprocessor count) and hwloc (NUMA node of the PCI device). Health: a thread waits on
// NVML Xid events (nvmlEventSetWait_v2) and polls each device; a hardware Xid (xid.h) or
// NVML_ERROR_GPU_IS_LOST marks the GPU FAILED and fires the health listener.
//
// libnvidia-ml.so.1 and libcuda.so.1 are dlopen'ed at run time; nothing is linked, so the
// agent builds and starts on machines without a GPU, where Open() fails with a one-line
// error ("cannot load libnvidia-ml.so.1: ..."). Run on one H100 (driver 580) under the
// data-path test server (scripts/test --gpu): discovery and an Xid event (31, classified
// as no reason to swap) were seen; a failure Xid has not been.
#pragma once

#include <memory>

#include "common/config.h"
#include "remote/device/backend.h"

namespace gpupool::devices {

// Loads NVML and the CUDA driver, discovers the GPUs and starts the health thread.
Result<std::unique_ptr<device::GpuBackend>> OpenCudaBackend(const AgentConfig& config);

}  // namespace gpupool::devices
