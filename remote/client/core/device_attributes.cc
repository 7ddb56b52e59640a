// cuDeviceGetAttribute answers: from the GPU model's properties (PropertiesOf), the
// description the agent sent (memory, PCI location) and fixed CUDA limits. Features that
// cannot work across a network (mapped or managed memory, memory pools, peer access,
// cluster launches) are reported absent so that well-behaved programs and the runtime do
// not try them.
#include "remote/client/core/device_attributes.h"

#include <cstring>

namespace gpupool::client {

ModelProperties PropertiesOf(const Device& device) {
  const auto& d = device.description();
  const bool real_gpu = std::strcmp(d.executor, "sim") != 0;
  if (const GpuModel* model = FindGpuModel(d.name)) {
    ModelProperties properties = *model;
    if (real_gpu && d.cc_major > 0) {
      properties.cc_major = d.cc_major;
      properties.cc_minor = d.cc_minor;
      if (d.multiprocessor_count > 0) properties.multiprocessors = d.multiprocessor_count;
    }
    return properties;
  }
  // Unknown model: its generation's figures, with what the agent reported.
  ModelProperties properties = GenerationModel(d.cc_major, d.cc_minor);
  if (d.cc_major > 0) {
    properties.cc_major = d.cc_major;
    properties.cc_minor = d.cc_minor;
  }
  if (d.multiprocessor_count > 0) properties.multiprocessors = d.multiprocessor_count;
  return properties;
}

bool RunsClusterLaunches(const Device& device) { return PropertiesOf(device).cc_major >= 9; }

CUresult DeviceAttribute(const Device& device, int attribute, int* value) {
  const ModelProperties p = PropertiesOf(device);
  switch (attribute) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
      *value = 1024;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
      *value = 64;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
      *value = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
      *value = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
      *value = 65535;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
      *value = p.shared_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
      *value = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH:
      *value = 2147483647;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
      *value = p.registers_per_block;
      break;
    case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
      *value = p.clock_khz;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT:
      *value = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT:
      *value = 32;
      break;
    case CU_DEVICE_ATTRIBUTE_GPU_OVERLAP:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
      *value = p.multiprocessors;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH:
      *value = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH:
      *value = 131072;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT:
      *value = 65536;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH:
      *value = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT:
      *value = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH:
      *value = 16384;
      break;
    case CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT:
      *value = 512;
      break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
      *value = 1;
      break;
    // Managed memory, coherent at call boundaries (managed.cc): not concurrently with
    // the host, nor by page faults; on executors that place memory at the process's
    // addresses (the sim).
    // Mapped host memory is made the same way (api_memory.cc, cuMemHostAlloc), and so is
    // registered host memory, read-only too, at its own addresses (cuMemHostRegister).
    // Also the virtual memory management API (vmm.cc), whose mappings are memory placed at
    // the process's addresses.
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
    case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
    case CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED:
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
      *value = std::strcmp(device.description().executor, "sim") == 0 ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
      *value = device.pci_bus;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID:
      *value = device.pci_device;
      break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID:
      *value = device.pci_domain;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
      *value = p.memory_clock_khz;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
      *value = p.memory_bus_width;
      break;
    case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
      *value = p.l2_cache_bytes;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
      *value = p.max_threads_per_multiprocessor;
      break;
    case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
      *value = p.async_engines;
      break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
      *value = p.cc_major;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
      *value = p.cc_minor;
      break;
    case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
      *value = p.shared_per_multiprocessor;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
      *value = p.registers_per_multiprocessor;
      break;
    case CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO:
      *value = p.single_to_double_ratio;
      break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
      *value = p.shared_per_block_optin;
      break;
    case CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED:
      *value = 1;
      break;
    // Stream-ordered pools (mem_pools.cc), with no exportable handle types (no IPC).
    case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES:
      *value = 0;
      break;
    // Cooperative launches on one device (not across several).
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
      *value = 1;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR:
      *value = p.max_blocks_per_multiprocessor;
      break;
    case CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE:
      *value = kMaxAccessPolicyWindowBytes;
      break;
    // Thread block clusters: from compute capability 9.0 on (api/clusters.h).
    case CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH:
      *value = RunsClusterLaunches(device) ? 1 : 0;
      break;
    case CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK:
      *value = p.reserved_shared_per_block;
      break;
    default:
      if (attribute <= 0 || attribute >= CU_DEVICE_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
      *value = 0;  // a feature the remote device does not offer
  }
  return CUDA_SUCCESS;
}

KernelCodeVersions CodeVersionsOf(const Device& device, int reported_ptx, int reported_binary,
                                  const std::vector<uint32_t>& ptx_archs, const std::vector<image::SassTarget>& sass) {
  const ModelProperties model = PropertiesOf(device);
  const auto arch = static_cast<uint32_t>(model.cc_major * 10 + model.cc_minor);
  const image::CodeChoice chosen = image::ChooseCode(ptx_archs, sass, arch);
  const bool real_gpu = std::strcmp(device.description().executor, "sim") != 0;
  KernelCodeVersions versions;
  if (reported_ptx > 0) {
    versions.ptx = reported_ptx;
  } else if (real_gpu && chosen.sass_arch != 0) {
    versions.ptx = static_cast<int>(chosen.sass_arch);
  } else {
    versions.ptx = static_cast<int>(chosen.found && chosen.ptx_arch != 0 ? chosen.ptx_arch : arch);
  }
  if (reported_binary > 0) {
    versions.binary = reported_binary;
  } else {
    versions.binary = static_cast<int>(chosen.sass_arch != 0 ? chosen.sass_arch : arch);
  }
  return versions;
}

}  // namespace gpupool::client
