// What a remote device is: the properties of its GPU model, and the value of each
// CUdevice_attribute (see device_attributes.cc).
#pragma once

#include <cuda.h>

#include <cstdint>
#include <vector>

#include "common/gpu_models.h"
#include "remote/client/core/runtime.h"
#include "remote/image/fatbin.h"

namespace gpupool::client {

// The figures of a GPU model that programs read (cudaGetDeviceProperties) and that the
// occupancy calculator needs (common/gpu_models.h, shared with the sim backend).
using ModelProperties = GpuModel;

// The properties of `device`'s model. On the sim, everything comes from the model's
// table entry (the sim backend took its compute capability and SM count from the same
// entry, device::SimulateKnownModel); on a GPU host, compute capability
// and SM count come from the GPU itself and the rest from the entry for its model, or for
// its generation when the model is not in the table.
ModelProperties PropertiesOf(const Device& device);

// CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, as GPUs since sm_80 report it: the
// largest access policy window a stream or kernel may be given.
constexpr int kMaxAccessPolicyWindowBytes = 134213632;

// True when `device` runs launches in thread block clusters: compute capability 9.0 and
// later, on a GPU host (its driver) or the sim (its engine keeps a cluster's blocks
// resident together). Older GPUs have none (CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH 0).
bool RunsClusterLaunches(const Device& device);

// CUDA_ERROR_INVALID_VALUE for attributes outside the enum.
CUresult DeviceAttribute(const Device& device, int attribute, int* value);

// A kernel's CU_FUNC_ATTRIBUTE_PTX_VERSION and BINARY_VERSION on `device` (e.g. 90). CUB,
// Thrust and cuSPARSE pick their host-side tuning by the PTX version, which must be that of
// the device code that runs: cuSPARSE's SpMV tuned for one version and run by another's
// kernels leaves rows unwritten, without an error.
struct KernelCodeVersions {
  int ptx = 0;
  int binary = 0;
};
// `reported_ptx`, `reported_binary`: what the agent said (dataplane::FunctionResources, the
// driver's own answers on a real GPU; 0: not said), which win. Otherwise from the image's
// code (`ptx_archs`, `sass`) by image::ChooseCode for the device's compute capability: on
// the sim, the PTX the sim runs, also in place of SASS; on a real GPU that runs a SASS
// entry, that SASS's architecture (nvcc builds sm_XX from compute_XX's PTX, whose version
// the driver reports), else the PTX its driver compiles.
KernelCodeVersions CodeVersionsOf(const Device& device, int reported_ptx, int reported_binary,
                                  const std::vector<uint32_t>& ptx_archs, const std::vector<image::SassTarget>& sass);

}  // namespace gpupool::client
