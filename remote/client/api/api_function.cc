// Driver API: what the client knows about a kernel (its name, parameters and attributes),
// and the occupancy calculator on the device model's figures (what a launch checks:
// ops/launch.cc).
//
// The client knows a kernel's parameter layout from its image; what the compiled kernel
// needs (registers, static shared memory, its thread bound) only the agent's GPU knows: it
// says so in the reply that resolves the kernel there. Where it cannot (the sim allocates
// no registers) the library assumes 32 registers per thread.
#include <algorithm>
#include <vector>

#include "remote/client/api/clusters.h"
#include "remote/client/core/api_common.h"
#include "remote/client/core/device_attributes.h"
#include "remote/client/core/occupancy.h"
#include "remote/client/ops/launch.h"

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

namespace {

// The device a query about a kernel is for: `ordinal`, else the current context's.
CUresult QueryDevice(int ordinal, Device** device) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (ordinal < 0) {
    if (CUresult status = CurrentDevice(&ordinal); status != CUDA_SUCCESS) return status;
  }
  *device = Runtime::Get().device(ordinal);
  return *device == nullptr ? CUDA_ERROR_INVALID_DEVICE : CUDA_SUCCESS;
}

// A kernel and the device a query about it is for (QueryDevice), both resolved.
CUresult QueryFunction(const void* handle, int ordinal, Function** function, Device** device) {
  *function = AsFunction(handle);
  if (*function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return QueryDevice(ordinal, device);
}

CUresult Name(const void* handle, const char** name) {
  Function* function = AsFunction(handle);
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = function->name.c_str();
  return CUDA_SUCCESS;
}

CUresult ParamInfo(const void* handle, size_t index, size_t* offset, size_t* size) {
  Function* function = AsFunction(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= function->layout.params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset) *offset = function->layout.params[index].offset;
  if (size) *size = function->layout.params[index].size;
  return CUDA_SUCCESS;
}

CUresult FunctionAttribute(int* value, int attribute, const void* handle, int ordinal) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Function* function = nullptr;
  Device* device = nullptr;
  if (CUresult status = QueryFunction(handle, ordinal, &function, &device); status != CUDA_SUCCESS) return status;
  const ModelProperties model = PropertiesOf(*device);
  const KernelResources resources = ResourcesOf(*function, device->ordinal);
  const gpupool::dataplane::FunctionResources known = KnownResources(*function, device->ordinal);
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *value = resources.max_threads_per_block;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *value = resources.static_shared_bytes;
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *value = std::max(known.const_bytes, 0);
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *value = std::max(known.local_bytes, 0);
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *value = resources.registers_per_thread;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: {
      // The code that runs (CodeVersionsOf): on a GPU host as its driver says, on the sim
      // the PTX it runs, also in place of SASS. CUB and Thrust refuse a version they were
      // not compiled for.
      const KernelCodeVersions versions = CodeVersionsOf(*device, known.ptx_version, known.binary_version,
                                                         function->module->ptx_archs, function->module->sass);
      *value = attribute == CU_FUNC_ATTRIBUTE_PTX_VERSION ? versions.ptx : versions.binary;
      break;
    }
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *value = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *value = function->max_dynamic_shared_bytes >= 0 ? function->max_dynamic_shared_bytes
                                                       : model.shared_per_block - resources.static_shared_bytes;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *value = function->preferred_shared_carveout;
      break;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      *value = function->non_portable_clusters ? 1 : 0;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: {
      // The shape the kernel was compiled for (__cluster_dims__), from its module's PTX; which
      // the GPU (its driver, or the sim's engine) launches it in. A module of SASS alone
      // gives none here.
      const gpupool::image::CompiledCluster& compiled = function->compiled_cluster;
      const int axis = attribute - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH;
      *value = attribute == CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET ? compiled.must_be_set
               : compiled.dims[0] != 0
                   ? static_cast<int>(compiled.dims[axis])
                   : static_cast<int>(function->runtime_cluster[axis].load(std::memory_order_relaxed));
      break;
    }
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      *value = 0;  // CU_CLUSTER_SCHEDULING_POLICY_DEFAULT
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult SetFunctionAttribute(const void* handle, int attribute, int value, int ordinal) {
  Function* function = nullptr;
  Device* device = nullptr;
  if (CUresult status = QueryFunction(handle, ordinal, &function, &device); status != CUDA_SUCCESS) return status;
  const ModelProperties model = PropertiesOf(*device);
  const KernelResources resources = ResourcesOf(*function, device->ordinal);
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > model.shared_per_block_optin - resources.static_shared_bytes) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      function->max_dynamic_shared_bytes = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      function->preferred_shared_carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      // A shape compiled into the kernel cannot be changed (as a driver answers). One set at
      // run time is the shape of its plain launches once all three are positive; checked
      // there, as a driver checks it.
      if (function->compiled_cluster.dims[0] != 0) return CUDA_ERROR_NOT_PERMITTED;
      if (value < 0) return CUDA_ERROR_INVALID_VALUE;
      function->runtime_cluster[attribute - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH].store(
          static_cast<unsigned>(value), std::memory_order_relaxed);
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (value != 0 && value != 1) return CUDA_ERROR_INVALID_VALUE;
      function->non_portable_clusters = value == 1;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return CUDA_SUCCESS;  // a scheduling hint
    default:
      return CUDA_ERROR_INVALID_VALUE;  // read-only attributes, as on a GPU
  }
}

CUresult CacheConfig(const void* handle, CUfunc_cache config) {
  if (AsFunction(handle) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (config < CU_FUNC_CACHE_PREFER_NONE || config > CU_FUNC_CACHE_PREFER_EQUAL) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return RequireInit();  // a preference that only tunes a real GPU's L1/shared split
}

// The model and kernel figures an occupancy query works with.
CUresult OccupancyInputs(CUfunction handle, ModelProperties* model, KernelResources* kernel) {
  Function* function = AsFunction(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  Device* device = nullptr;
  if (CUresult status = QueryDevice(-1, &device); status != CUDA_SUCCESS) return status;
  *model = PropertiesOf(*device);
  *kernel = ResourcesOf(*function, device->ordinal);
  return CUDA_SUCCESS;
}

CUresult ActiveBlocks(int* blocks, CUfunction function, int block_size, size_t dynamic_shared) {
  if (blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  ModelProperties model{};
  KernelResources kernel;
  if (CUresult status = OccupancyInputs(function, &model, &kernel); status != CUDA_SUCCESS) {
    return status;
  }
  *blocks = ActiveBlocksPerMultiprocessor(model, kernel, block_size, dynamic_shared);
  return CUDA_SUCCESS;
}

CUresult PotentialBlockSize(int* min_grid_size, int* block_size, CUfunction function,
                            CUoccupancyB2DSize shared_for_block_size, size_t dynamic_shared, int block_size_limit) {
  if (min_grid_size == nullptr || block_size == nullptr || block_size_limit < 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ModelProperties model{};
  KernelResources kernel;
  if (CUresult status = OccupancyInputs(function, &model, &kernel); status != CUDA_SUCCESS) {
    return status;
  }
  MaxPotentialBlockSize(model, kernel, shared_for_block_size, dynamic_shared, block_size_limit, min_grid_size,
                        block_size);
  return CUDA_SUCCESS;
}

}  // namespace

// --- Names and parameters --------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction function) {
  GPUPOOL_BODY({ return Name(function, name); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel kernel) {
  GPUPOOL_BODY({ return Name(kernel, name); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncGetParamInfo(CUfunction function, size_t index, size_t* offset, size_t* size) {
  GPUPOOL_BODY({ return ParamInfo(function, index, offset, size); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t index, size_t* offset, size_t* size) {
  GPUPOOL_BODY({ return ParamInfo(kernel, index, offset, size); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncGetModule(CUmodule* module, CUfunction function) {
  GPUPOOL_BODY({
    if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Function* f = AsFunction(function);
    if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *module = reinterpret_cast<CUmodule>(f->module);
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction function) {
  GPUPOOL_BODY({
    if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (AsFunction(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *state = CU_FUNCTION_LOADING_STATE_LOADED;  // modules load eagerly here
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncLoad(CUfunction function) {
  GPUPOOL_BODY({ return AsFunction(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE; });
}

// --- Attributes and cache preferences ------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction function) {
  GPUPOOL_BODY({ return FunctionAttribute(value, attribute, function, -1); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelGetAttribute(int* value, CUfunction_attribute attribute, CUkernel kernel,
                                                       CUdevice device) {
  GPUPOOL_BODY({ return FunctionAttribute(value, attribute, kernel, device); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncSetAttribute(CUfunction function, CUfunction_attribute attribute, int value) {
  GPUPOOL_BODY({ return SetFunctionAttribute(function, attribute, value, -1); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attribute, int value, CUkernel kernel,
                                                       CUdevice device) {
  GPUPOOL_BODY({ return SetFunctionAttribute(kernel, attribute, value, device); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction function, CUfunc_cache config) {
  GPUPOOL_BODY({ return CacheConfig(function, config); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice) {
  GPUPOOL_BODY({ return CacheConfig(kernel, config); });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction function, CUsharedconfig config) {
  GPUPOOL_BODY({
    if (AsFunction(function) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (config < CU_SHARED_MEM_CONFIG_DEFAULT_BANK_SIZE || config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return RequireInit();  // a bank-width hint GPUs since Maxwell ignore
  });
}

// --- Occupancy -----------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction function,
                                                                                       int block_size,
                                                                                       size_t dynamic_shared,
                                                                                       unsigned int flags) {
  GPUPOOL_BODY({
    if (flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return ActiveBlocks(blocks, function, block_size, dynamic_shared);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction function,
                                                                              int block_size, size_t dynamic_shared) {
  GPUPOOL_BODY({ return ActiveBlocks(blocks, function, block_size, dynamic_shared); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* min_grid_size, int* block_size,
                                                                   CUfunction function,
                                                                   CUoccupancyB2DSize shared_for_block_size,
                                                                   size_t dynamic_shared, int block_size_limit) {
  GPUPOOL_BODY({
    return PotentialBlockSize(min_grid_size, block_size, function, shared_for_block_size, dynamic_shared,
                              block_size_limit);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int* min_grid_size, int* block_size,
                                                                            CUfunction function,
                                                                            CUoccupancyB2DSize shared_for_block_size,
                                                                            size_t dynamic_shared, int block_size_limit,
                                                                            unsigned int flags) {
  GPUPOOL_BODY({
    if (flags & ~static_cast<unsigned>(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return PotentialBlockSize(min_grid_size, block_size, function, shared_for_block_size, dynamic_shared,
                              block_size_limit);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamic_shared, CUfunction function,
                                                                          int blocks, int block_size) {
  GPUPOOL_BODY({
    if (dynamic_shared == nullptr || blocks <= 0 || block_size <= 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    ModelProperties model{};
    KernelResources kernel;
    if (CUresult status = OccupancyInputs(function, &model, &kernel); status != CUDA_SUCCESS) {
      return status;
    }
    *dynamic_shared = AvailableDynamicSharedPerBlock(model, kernel, blocks, block_size);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int* cluster_size, CUfunction function,
                                                                     const CUlaunchConfig* config) {
  GPUPOOL_BODY({
    if (cluster_size == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Function* kernel = AsFunction(function);
    if (kernel == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    Device* device = nullptr;
    if (CUresult status = QueryDevice(-1, &device); status != CUDA_SUCCESS) return status;
    // The portable size where the GPU runs clusters (clusters.h), else one block, the only
    // "cluster" an older GPU runs.
    *cluster_size = RunsClusterLaunches(*device) ? static_cast<int>(kPortableClusterBlocks) : 1;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* clusters, CUfunction function,
                                                               const CUlaunchConfig* config) {
  GPUPOOL_BODY({
    if (clusters == nullptr || config == nullptr) return CUDA_ERROR_INVALID_VALUE;
    unsigned cluster_blocks = 1;
    std::vector<CUlaunchAttribute> others;
    if (CUresult status = ClusterBlocks(*config, &cluster_blocks, &others); status != CUDA_SUCCESS) return status;
    if (cluster_blocks == 0) return CUDA_ERROR_INVALID_VALUE;
    CUlaunchConfig plain = *config;
    plain.attrs = others.data();
    plain.numAttrs = static_cast<unsigned>(others.size());
    if (CUresult status = CheckLaunchAttributes(plain); status != CUDA_SUCCESS) return status;
    ModelProperties model{};
    KernelResources kernel;
    if (CUresult status = OccupancyInputs(function, &model, &kernel); status != CUDA_SUCCESS) {
      return status;
    }
    // As the launch checks it (api_module.cc): no clusters before 9.0, at most 8 blocks (16
    // where allowed).
    if (cluster_blocks > 1 && model.cc_major < 9) return CUDA_ERROR_NOT_SUPPORTED;
    Device* device = nullptr;
    if (CUresult status = QueryDevice(-1, &device); status != CUDA_SUCCESS) return status;
    if (cluster_blocks > MaxClusterBlocks(*device, *AsFunction(function))) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    int block = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
    // The clusters the GPU's resident blocks make (a GPU keeps a cluster within one of its
    // GPCs, which this does not model).
    *clusters = ActiveBlocksPerMultiprocessor(model, kernel, block, config->sharedMemBytes) * model.multiprocessors /
                static_cast<int>(cluster_blocks);
    return CUDA_SUCCESS;
  });
}
