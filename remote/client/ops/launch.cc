// Kernel launches (ops/launch.h): the launch's checks against what the kernel and the
// device allow, the arguments packed in the kernel's layout, one one-way request.
#include <algorithm>
#include <cstring>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/core/device_attributes.h"
#include "remote/client/core/occupancy.h"
#include "remote/client/ops/launch.h"

namespace gpupool::client::ops {

namespace dp = gpupool::dataplane;

constexpr int kAssumedRegistersPerThread = 32;

// What the agent said `function` needs on device `ordinal` (all 0: nothing known).
gpupool::dataplane::FunctionResources KnownResources(const Function& function, int ordinal) {
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  auto found = function.resources.find(ordinal);
  return found == function.resources.end() ? gpupool::dataplane::FunctionResources{} : found->second;
}

// What the calculator needs of `function` on device `ordinal`, resolving it there first
// (as a launch would); the assumptions where the agent cannot say, or it does not resolve.
KernelResources ResourcesOf(Function& function, int ordinal) {
  uint64_t remote = 0;
  (void)Runtime::Get().EnsureFunction(&function, ordinal, &remote);
  const gpupool::dataplane::FunctionResources known = KnownResources(function, ordinal);
  KernelResources resources;
  resources.registers_per_thread = known.registers > 0 ? known.registers : kAssumedRegistersPerThread;
  resources.static_shared_bytes = std::max(known.static_shared_bytes, 0);
  resources.max_threads_per_block =
      known.max_threads_per_block > 0 ? std::min(known.max_threads_per_block, 1024) : 1024;
  return resources;
}

CUresult CheckLaunchResources(Function& function, int device, unsigned threads, unsigned shared_bytes) {
  Device* d = Runtime::Get().device(device);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  int static_shared;
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    auto found = function.resources.find(device);
    if (found == function.resources.end()) {
      if (shared_bytes == 0) return CUDA_SUCCESS;  // nothing known to check against
      static_shared = 0;
    } else {
      const gpupool::dataplane::FunctionResources& known = found->second;
      if (known.max_threads_per_block > 0 && threads > static_cast<unsigned>(known.max_threads_per_block)) {
        return CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES;
      }
      if (shared_bytes == 0) return CUDA_SUCCESS;  // within any limit (the common launch)
      static_shared = std::max(known.static_shared_bytes, 0);
    }
  }
  const ModelProperties model = PropertiesOf(*d);
  int limit;
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    limit = function.max_dynamic_shared_bytes >= 0 ? function.max_dynamic_shared_bytes
                                                   : model.shared_per_block - static_shared;
  }
  return shared_bytes > static_cast<unsigned>(std::max(limit, 0)) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult CheckCooperativeGrid(Function& function, int device, const unsigned grid[3], const unsigned block[3],
                              unsigned shared_bytes) {
  Device* d = Runtime::Get().device(device);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const ModelProperties model = PropertiesOf(*d);
  const int threads = static_cast<int>(block[0] * block[1] * block[2]);
  const uint64_t resident =
      uint64_t(ActiveBlocksPerMultiprocessor(model, ResourcesOf(function, device), threads, shared_bytes)) *
      model.multiprocessors;
  const uint64_t blocks = uint64_t{grid[0]} * grid[1] * grid[2];
  return blocks > resident ? CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE : CUDA_SUCCESS;
}

CUresult CheckLaunchAttributes(const CUlaunchConfig& config) {
  if (config.numAttrs > 0 && config.attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config.attrs[i];
    switch (attribute.id) {
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        break;  // a cooperative launch (LaunchEx)
      case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION: {
        const auto& dim = attribute.value.clusterDim;
        if (ClusterBlockCount(dim.x, dim.y, dim.z) > 1) {
          return static_cast<CUresult>(
              ReportUnsupported("cuLaunchKernelEx(cluster dimension)", "thread block clusters"));
        }
        break;
      }
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT:
        return static_cast<CUresult>(ReportUnsupported("cuLaunchKernelEx(programmatic or launch-completion event)",
                                                       "an event recorded from inside a running kernel"));
      default:
        // Priorities, cache and sync-domain hints, programmatic serialization, preferred
        // cluster shapes: they tune how a GPU schedules, never what the kernel computes.
        break;
    }
  }
  return CUDA_SUCCESS;
}

// Packs kernel arguments into the layout the kernel expects.
CUresult PackParams(const Function& function, void** params, void** extra, std::vector<char>* packed) {
  if (extra != nullptr) {
    // CU_LAUNCH_PARAM_BUFFER_POINTER, ptr, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END
    const void* buffer = nullptr;
    size_t size = 0;
    for (int i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
      if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
        buffer = extra[i + 1];
      } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
        size = *static_cast<size_t*>(extra[i + 1]);
      } else {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (params != nullptr || (size > 0 && buffer == nullptr)) return CUDA_ERROR_INVALID_VALUE;
    packed->assign(static_cast<const char*>(buffer), static_cast<const char*>(buffer) + size);
    return CUDA_SUCCESS;
  }
  packed->assign(function.layout.param_size, 0);
  if (function.layout.params.empty()) return CUDA_SUCCESS;
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < function.layout.params.size(); ++i) {
    const ParamSlot& slot = function.layout.params[i];
    if (params[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(packed->data() + slot.offset, params[i], slot.size);
  }
  return CUDA_SUCCESS;
}

// Arguments packed in the driver's layout, moved to where the kernel's PTX declares them
// (Function::sim_layout), for a sim GPU, which runs the PTX. A buffer shorter than the
// driver's layout (CU_LAUNCH_PARAM_BUFFER_SIZE) is refused, as the driver would read past it.
CUresult RepackForPtx(const Function& function, std::vector<char>* packed) {
  const KernelLayout& driver = function.layout;
  const KernelLayout& ptx = *function.sim_layout;
  if (packed->size() < driver.param_size) return CUDA_ERROR_INVALID_VALUE;
  thread_local std::vector<char> moved;
  moved.assign(ptx.param_size, 0);
  for (size_t i = 0; i < ptx.params.size(); ++i) {
    const ParamSlot& from = driver.params[i];
    const ParamSlot& to = ptx.params[i];
    const uint32_t size = std::min(from.size, to.size);
    if (uint64_t{from.offset} + size > packed->size() || uint64_t{to.offset} + size > moved.size()) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::memcpy(moved.data() + to.offset, packed->data() + from.offset, size);
  }
  packed->swap(moved);
  return CUDA_SUCCESS;
}

CUresult LaunchKernel(CUfunction handle, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                      CUstream stream, void** params, void** extra, bool cooperative, const unsigned* cluster) {
  Function* function = nullptr;
  if (CUresult status = CheckLaunch(handle, grid, block, &function); status != CUDA_SUCCESS) {
    return status;
  }
  const uint64_t threads = uint64_t{block[0]} * block[1] * block[2];
  int device = 0;
  dp::LaunchArgs args{};
  if (CUresult status = ResolveDevice(stream, &device, &args.stream); status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = Runtime::Get().EnsureFunction(function, device, &args.function); status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = CheckLaunchResources(*function, device, static_cast<unsigned>(threads), shared_mem);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (cooperative) {
    if (CUresult status = CheckCooperativeGrid(*function, device, grid, block, shared_mem); status != CUDA_SUCCESS) {
      return status;
    }
    args.flags = dp::kLaunchCooperative;
  }
  if (cluster != nullptr && ClusterBlockCount(cluster[0], cluster[1], cluster[2]) > 1) {
    if (ClusterBlockCount(cluster[0], cluster[1], cluster[2]) > dp::kMaxClusterBlocks) {
      return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    }
    args.flags |= dp::kLaunchCluster;
    for (int i = 0; i < 3; ++i) args.cluster[i] = static_cast<uint8_t>(cluster[i]);
  }
  // The thread's own buffer, reused launch after launch (Post copies what it keeps).
  thread_local std::vector<char> packed;
  if (CUresult status = PackParams(*function, params, extra, &packed); status != CUDA_SUCCESS) {
    return status;
  }
  if (Device* d = Runtime::Get().device(device);
      function->sim_layout.has_value() && d != nullptr && std::strcmp(d->description().executor, "sim") == 0) {
    if (CUresult status = RepackForPtx(*function, &packed); status != CUDA_SUCCESS) return status;
  }
  if (CUresult status = Runtime::Get().MapPinnedArguments(device, CurrentContext(), packed.data(), packed.size());
      status != CUDA_SUCCESS) {
    return status;
  }
  std::memcpy(args.grid, grid, sizeof(args.grid));
  std::memcpy(args.block, block, sizeof(args.block));
  args.shared_mem = shared_mem;
  args.param_size = static_cast<uint32_t>(packed.size());
  return Runtime::Get().Post(device, dp::kOpLaunch, &args, sizeof(args), packed.data(), packed.size());
}

CUresult PackKernelParams(CUfunction handle, void** params, void** extra, std::vector<char>* packed) {
  Function* function = AsFunction(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return PackParams(*function, params, extra, packed);
}

CUresult LaunchPacked(CUfunction function, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                      CUstream stream, const std::vector<char>& params, bool cooperative, const unsigned* cluster) {
  size_t size = params.size();
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<char*>(params.data()), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  return LaunchKernel(function, grid, block, shared_mem, stream, nullptr, extra, cooperative, cluster);
}

}  // namespace gpupool::client::ops
