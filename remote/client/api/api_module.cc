// Driver API: modules, libraries, kernels/functions and kernel launch.
//
// Images are parsed here (fatbin.h) for their kernels' parameter layouts, and shipped to
// the agent once per device. A launch packs the arguments by that layout and travels
// one-way; its execution errors arrive at the next synchronising call. Launch
// configuration errors are caught here, at launch time, like a real driver does.
#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>

#include "common/latency_probe.h"
#include "remote/client/api/clusters.h"
#include "remote/client/api/module_functions.h"
#include "remote/client/core/api_common.h"
#include "remote/client/core/device_attributes.h"
#include "remote/client/graph/graphs.h"
#include "remote/client/ops/launch.h"
#include "remote/nvrtc/nvrtc_ptx.h"

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

// cuda.h maps these to their _v2 versions; the library defines both.
#undef cuLinkCreate
#undef cuLinkAddData
#undef cuLinkAddFile
using gpupool::image::ParseModuleImage;

namespace {

namespace dp = gpupool::dataplane;

// The PTX NVRTC made with `cubin` in this process, from the NVRTC shim beside this library
// (nvrtc_ptx.h), when the program uses it; empty otherwise.
std::string NvrtcPtxOf(const void* cubin, size_t size) {
  static auto ptx_for = reinterpret_cast<GpupoolNvrtcPtxFor>(dlsym(RTLD_DEFAULT, GPUPOOL_NVRTC_PTX_FOR));
  if (ptx_for == nullptr) return "";
  size_t needed = ptx_for(cubin, size, nullptr, 0);
  if (needed == 0) return "";
  std::string ptx(needed, '\0');
  if (ptx_for(cubin, size, ptx.data(), ptx.size()) != needed) return "";
  return ptx;  // with its NUL, as a PTX image is passed
}

CUresult NewModule(const void* image, bool is_library, Module** result) {
  auto parsed = ParseModuleImage(image);
  if (!parsed.ok()) {
    LogError("cannot load module: %s", parsed.status().message().c_str());
    return CUDA_ERROR_INVALID_IMAGE;
  }
  auto module = std::make_unique<Module>();
  module->is_library = is_library;
  const auto* bytes = static_cast<const uint8_t*>(parsed->bytes);
  module->image.assign(bytes, bytes + parsed->size);
  if (parsed->ptx.empty() && parsed->relocatable.empty() && parsed->has_sass()) {
    // A cubin NVRTC compiled for a real architecture: its PTX, which every GPU (and the
    // sim) can run, in its place.
    if (std::string ptx = NvrtcPtxOf(parsed->bytes, parsed->size); !ptx.empty()) {
      auto reparsed = gpupool::image::ParseModuleImageBytes(ptx.data(), ptx.size());
      if (reparsed.ok() && !reparsed->ptx.empty()) {
        module->image.assign(ptx.begin(), ptx.end());
        parsed->ptx = std::move(reparsed->ptx);
        LogDebug("module: a cubin of NVRTC's, loaded from its PTX");
      }
    }
  }
  if (parsed->ptx.empty() && !parsed->relocatable.empty()) {
    // nvcc -rdc=true: the linked image holds only SASS, which a GPU of another architecture
    // (and the sim) cannot run; a driver then JIT-links the translation units' PTX. Ship
    // that PTX with the image, for the agent to link.
    auto with_ptx = gpupool::image::WithRelocatablePtx(*parsed);
    if (!with_ptx.ok()) {
      LogError("cannot load module: %s", with_ptx.status().message().c_str());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    module->image = std::move(*with_ptx);
    auto reparsed = gpupool::image::ParseModuleImageBytes(module->image.data(), module->image.size());
    if (reparsed.ok()) parsed->ptx = std::move(reparsed->ptx);
  }
  for (auto& [name, ptx_layout] : parsed->ptx_kernels) {
    auto driver = parsed->kernels.find(name);
    if (driver == parsed->kernels.end() || driver->second.params.size() != ptx_layout.params.size()) continue;
    bool same = driver->second.param_size == ptx_layout.param_size;
    for (size_t i = 0; same && i < ptx_layout.params.size(); ++i) {
      same = driver->second.params[i].offset == ptx_layout.params[i].offset &&
             driver->second.params[i].size == ptx_layout.params[i].size;
    }
    if (!same) module->sim_layouts.emplace(name, std::move(ptx_layout));
  }
  module->kernels = std::move(parsed->kernels);
  for (const auto& ptx : parsed->ptx) module->ptx_archs.push_back(ptx.arch);
  module->sass = std::move(parsed->sass);
  module->ptx_names_clusters = gpupool::image::PtxNamesClusters(parsed->ptx);
  module->compiled_clusters = gpupool::image::CompiledClusters(parsed->ptx);
  *result = module.release();
  return CUDA_SUCCESS;
}

// The outputs of JIT options, as a driver writes them: the info log gets an empty string,
// the error log `error` (cut to fit), each where a buffer of at least a byte was given,
// with the bytes written (its terminating NUL included, 0 for an empty string) back in the
// size option; CU_JIT_WALL_TIME gets `wall_ms` (a float, in the option's value slot).
// Options a driver reads only are left as they are.
void WriteJitOutputs(unsigned count, CUjit_option* options, void** values, const char* error, float wall_ms) {
  if (count == 0 || options == nullptr || values == nullptr) return;
  for (unsigned i = 0; i < count; ++i) {
    if (options[i] == CU_JIT_WALL_TIME) {
      values[i] = nullptr;
      std::memcpy(&values[i], &wall_ms, sizeof(wall_ms));
      continue;
    }
    const bool info = options[i] == CU_JIT_INFO_LOG_BUFFER;
    if (!info && options[i] != CU_JIT_ERROR_LOG_BUFFER) continue;
    const char* text = info || error == nullptr ? "" : error;
    const CUjit_option size_option = info ? CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES : CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
    for (unsigned j = 0; j < count; ++j) {
      if (options[j] != size_option) continue;
      const size_t capacity = reinterpret_cast<uintptr_t>(values[j]);
      size_t written = 0;
      if (capacity > 0 && values[i] != nullptr) {
        const size_t length = std::min(std::strlen(text), capacity - 1);
        std::memcpy(values[i], text, length);
        static_cast<char*>(values[i])[length] = '\0';
        written = length == 0 ? 0 : length + 1;
      }
      values[j] = reinterpret_cast<void*>(static_cast<uintptr_t>(written));
    }
  }
}

CUresult LoadModuleForCurrentContext(CUmodule* handle, const void* image) {
  if (handle == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
  Module* module = nullptr;
  if (CUresult status = NewModule(image, false, &module); status != CUDA_SUCCESS) return status;
  uint64_t remote_id = 0;
  if (CUresult status = Runtime::Get().EnsureModuleLoaded(module, device, &remote_id); status != CUDA_SUCCESS) {
    delete module;
    return status;
  }
  *handle = reinterpret_cast<CUmodule>(module);
  return CUDA_SUCCESS;
}

CUresult UnloadModule(const void* handle) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  Module* module = AsModule(handle);
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::set<uint64_t> managed_variables;
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    managed_variables.swap(module->managed_variables);
  }
  for (uint64_t address : managed_variables) Runtime::Get().ForgetManaged(address);
  for (auto& [device, remote_id] : module->remote_ids) {
    dp::ModuleUnloadArgs args{remote_id};
    Runtime::Get().Post(device, dp::kOpModuleUnload, &args, sizeof(args));
  }
  module->magic = 0;
  delete module;
  return CUDA_SUCCESS;
}

// The Function for kernel `name` of `module` (created on first request).
CUresult GetFunction(Module* module, const char* name, Function** result) {
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(Runtime::Get().mu());
  auto existing = module->functions.find(name);
  if (existing != module->functions.end()) {
    *result = existing->second.get();
    return CUDA_SUCCESS;
  }
  auto kernel = module->kernels.find(name);
  if (kernel == module->kernels.end()) return CUDA_ERROR_NOT_FOUND;
  auto function = std::make_unique<Function>();
  function->module = module;
  function->name = name;
  function->layout = kernel->second;
  if (auto sim = module->sim_layouts.find(name); sim != module->sim_layouts.end()) function->sim_layout = sim->second;
  if (auto compiled = module->compiled_clusters.find(name); compiled != module->compiled_clusters.end()) {
    function->compiled_cluster = compiled->second;
  }
  *result = function.get();
  module->functions[name] = std::move(function);
  return CUDA_SUCCESS;
}

// `cooperative`: every block resident at once, so that blocks may wait for each other
// (cuLaunchCooperativeKernel; cooperative groups' grid.sync()). `cluster`: the shape of
// the thread block clusters the GPU's driver runs it in (nullptr: none). Recorded as a
// kernel node (with its cluster dimension) while `stream` captures; else ops/launch.cc
// launches it.
CUresult Launch(CUfunction handle, const unsigned grid[3], const unsigned block[3], unsigned shared_mem,
                CUstream stream, void** params, void** extra, bool cooperative = false,
                const unsigned* cluster = nullptr) {
  // A plain launch of a kernel given a cluster shape at run time (cuFuncSetAttribute
  // REQUIRED_CLUSTER_*) runs in it, checked as cuLaunchKernelEx checks one.
  unsigned runtime_shape[3] = {0, 0, 0};
  if (Function* function = AsFunction(handle); cluster == nullptr && function != nullptr) {
    for (int axis = 0; axis < 3; ++axis) {
      runtime_shape[axis] = function->runtime_cluster[axis].load(std::memory_order_relaxed);
    }
  }
  unsigned shape[3] = {1, 1, 1};
  if (runtime_shape[0] != 0 || runtime_shape[1] != 0 || runtime_shape[2] != 0) {
    if (runtime_shape[0] == 0 || runtime_shape[1] == 0 || runtime_shape[2] == 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
    CUlaunchAttribute attribute{};
    attribute.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attribute.value.clusterDim.x = runtime_shape[0];
    attribute.value.clusterDim.y = runtime_shape[1];
    attribute.value.clusterDim.z = runtime_shape[2];
    CUlaunchConfig config{};
    config.gridDimX = grid[0];
    config.gridDimY = grid[1];
    config.gridDimZ = grid[2];
    config.blockDimX = block[0];
    config.blockDimY = block[1];
    config.blockDimZ = block[2];
    config.hStream = stream;
    config.attrs = &attribute;
    config.numAttrs = 1;
    std::vector<CUlaunchAttribute> others;
    if (CUresult status = WithoutClusterDimension(config, handle, &others, shape); status != CUDA_SUCCESS) {
      return status;
    }
    if (ClusterBlockCount(shape[0], shape[1], shape[2]) > 1) cluster = shape;
  }
  if (AnyCapture()) {
    Function* function = nullptr;
    if (CUresult status = CheckLaunch(handle, grid, block, &function); status != CUDA_SUCCESS) {
      return status;
    }
    // A kernel node keeps the arguments' values of the moment it was captured.
    std::vector<char> packed;
    if (CUresult status = PackParams(*function, params, extra, &packed); status != CUDA_SUCCESS) {
      return status;
    }
    CUresult captured = CUDA_SUCCESS;
    if (CaptureKernel(stream, handle, grid, block, shared_mem, std::move(packed), cooperative, &captured, cluster)) {
      return captured;
    }
  }
  return LaunchKernel(handle, grid, block, shared_mem, stream, params, extra, cooperative, cluster);
}

CUresult LaunchEx(const CUlaunchConfig* given, CUfunction function, void** params, void** extra) {
  if (given == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUlaunchAttribute> attributes;
  unsigned cluster[3];
  if (CUresult status = WithoutClusterDimension(*given, function, &attributes, cluster); status != CUDA_SUCCESS) {
    return status;
  }
  CUlaunchConfig plain = *given;
  plain.attrs = attributes.data();
  plain.numAttrs = static_cast<unsigned>(attributes.size());
  const CUlaunchConfig* config = &plain;
  if (CUresult status = CheckLaunchAttributes(*config); status != CUDA_SUCCESS) return status;
  unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
      cooperative = config->attrs[i].value.cooperative != 0;
    }
  }
  const bool clustered = ClusterBlockCount(cluster[0], cluster[1], cluster[2]) > 1;
  return Launch(function, grid, block, config->sharedMemBytes, config->hStream, params, extra, cooperative,
                clustered ? cluster : nullptr);
}

// cuModuleLoad / cuLibraryLoadFromFile: the file's bytes (a cubin, fatbin or PTX text;
// PTX gets its terminating NUL).
CUresult ReadImageFile(const char* path, std::vector<char>* bytes) {
  if (path == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    LogError("cannot load module: cannot open %s", path);
    return CUDA_ERROR_FILE_NOT_FOUND;
  }
  bytes->assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
  bytes->push_back('\0');
  return CUDA_SUCCESS;
}

// cuModuleGetGlobal / cuLibraryGetGlobal: the variable's address on the module's device
// (`device`; -1: the current context's).
CUresult GetGlobal(Module* module, const char* name, CUdeviceptr* dptr, size_t* bytes, int device = -1) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr || std::strlen(name) >= sizeof(dp::ModuleGetGlobalArgs{}.name)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (device < 0) {
    if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
  }
  dp::ModuleGetGlobalArgs args{};
  if (CUresult status = Runtime::Get().EnsureModuleLoaded(module, device, &args.module); status != CUDA_SUCCESS) {
    return status;
  }
  std::snprintf(args.name, sizeof(args.name), "%s", name);
  dp::ModuleGetGlobalResult result{};
  std::string out;
  CUresult status =
      Runtime::Get().Call(device, dp::kOpModuleGetGlobal, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
  if (status != CUDA_SUCCESS) return status;
  if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
  std::memcpy(&result, out.data(), sizeof(result));
  // Copies to the variable go through the allocation table like any device pointer.
  Runtime::Get().AddAllocation(result.dptr, result.size, device);
  if (dptr != nullptr) *dptr = result.dptr;
  if (bytes != nullptr) *bytes = result.size;
  return CUDA_SUCCESS;
}

}  // namespace

namespace gpupool::client {

uint64_t ForEachFunction(CUmodule handle, void (*visit)(void* opaque, void* function, uint64_t owner), void* opaque) {
  Module* module = AsModule(handle);
  if (module == nullptr || visit == nullptr) return 0;
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    for (const auto& [name, layout] : module->kernels) names.push_back(name);
  }
  uint64_t visited = 0;
  for (const std::string& name : names) {
    Function* function = nullptr;
    if (GetFunction(module, name.c_str(), &function) != CUDA_SUCCESS) continue;
    // Outside every lock: the caller's function may call the driver.
    visit(opaque, function, reinterpret_cast<uint64_t>(handle));
    ++visited;
  }
  return visited;
}

}  // namespace gpupool::client

// --- Modules -------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* path) {
  GPUPOOL_BODY({
    std::vector<char> bytes;
    if (CUresult status = ReadImageFile(path, &bytes); status != CUDA_SUCCESS) return status;
    return LoadModuleForCurrentContext(module, bytes.data());
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule module,
                                                       const char* name) {
  GPUPOOL_BODY({ return GetGlobal(AsModule(module), name, dptr, bytes); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                                     const char* name) {
  GPUPOOL_BODY({ return GetGlobal(AsModule(library), name, dptr, bytes); });
}

// A __managed__ variable: one address for the host and the GPU, as cudart reads it when a
// program first touches the variable (the host code reaches it through that address).
// The variable becomes a managed range (managed.cc), coherent at call boundaries like
// cuMemAllocManaged memory. Like cudart, this does not check that the variable was
// declared __managed__ (.attribute(.managed) in its PTX).
GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                                      const char* name) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Module* module = AsModule(library);
    // A library belongs to no context, and cudart asks before it makes one current (when
    // the program first touches the variable): the current context's device, else device 0,
    // cudart's default.
    int device = 0;
    if (CurrentDevice(&device) != CUDA_SUCCESS) device = 0;
    CUdeviceptr address = 0;
    size_t size = 0;
    if (CUresult status = GetGlobal(module, name, &address, &size, device); status != CUDA_SUCCESS) {
      return status;
    }
    if (CUresult status = Runtime::Get().AddManagedVariable(device, address, size); status != CUDA_SUCCESS) {
      return status;
    }
    {
      std::lock_guard<std::mutex> lock(Runtime::Get().mu());
      module->managed_variables.insert(address);
    }
    LogDebug("__managed__ variable %s: %zu bytes at 0x%llx, managed", name, size,
             static_cast<unsigned long long>(address));
    if (dptr != nullptr) *dptr = address;
    if (bytes != nullptr) *bytes = size;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* path, CUjit_option*, void**,
                                                        unsigned int, CUlibraryOption*, void**, unsigned int) {
  GPUPOOL_BODY({
    if (library == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    std::vector<char> bytes;
    if (CUresult status = ReadImageFile(path, &bytes); status != CUDA_SUCCESS) return status;
    Module* module = nullptr;
    if (CUresult status = NewModule(bytes.data(), true, &module); status != CUDA_SUCCESS) {
      return status;
    }
    *library = reinterpret_cast<CUlibrary>(module);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  GPUPOOL_BODY({ return LoadModuleForCurrentContext(module, image); });
}

// The JIT options' outputs are written as a driver writes them (WriteJitOutputs): a load
// that fails puts its error's name in the error log (the agent's log has the details).
GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int count,
                                                     CUjit_option* options, void** values) {
  GPUPOOL_BODY({
    const auto start = std::chrono::steady_clock::now();
    CUresult status = LoadModuleForCurrentContext(module, image);
    const float wall_ms = std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - start).count();
    std::string error;
    if (status != CUDA_SUCCESS) {
      const char* name = "CUDA_ERROR_UNKNOWN";
      (void)cuGetErrorName(status, &name);
      error = std::string("gpupool: cannot load the module on the remote GPU: ") + name +
              " (the GPU host's agent log says why)";
    }
    WriteJitOutputs(count, options, values, error.c_str(), wall_ms);
    return status;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatbin) {
  GPUPOOL_BODY({ return LoadModuleForCurrentContext(module, fatbin); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleUnload(CUmodule module) {
  GPUPOOL_BODY({ return UnloadModule(module); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleGetFunction(CUfunction* result, CUmodule handle, const char* name) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Function* function = nullptr;
    if (CUresult status = GetFunction(AsModule(handle), name, &function); status != CUDA_SUCCESS) {
      return status;
    }
    *result = reinterpret_cast<CUfunction>(function);
    return CUDA_SUCCESS;
  });
}

// --- Libraries (context-independent modules, what the CUDA 12+ runtime uses) ----------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option*, void**,
                                                    unsigned int, CUlibraryOption*, void**, unsigned int) {
  GPUPOOL_BODY({
    if (library == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Module* module = nullptr;
    if (CUresult status = NewModule(code, true, &module); status != CUDA_SUCCESS) return status;
    *library = reinterpret_cast<CUlibrary>(module);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  GPUPOOL_BODY({ return UnloadModule(library); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryGetKernel(CUkernel* result, CUlibrary library, const char* name) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    Function* function = nullptr;
    if (CUresult status = GetFunction(AsModule(library), name, &function); status != CUDA_SUCCESS) {
      return status;
    }
    *result = reinterpret_cast<CUkernel>(function);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryGetModule(CUmodule* module, CUlibrary library) {
  GPUPOOL_BODY({
    if (module == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (AsModule(library) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *module = reinterpret_cast<CUmodule>(library);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary library) {
  GPUPOOL_BODY({
    Module* module = AsModule(library);
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *count = static_cast<unsigned>(module->kernels.size());
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int count, CUlibrary library) {
  GPUPOOL_BODY({
    Module* module = AsModule(library);
    if (kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    std::vector<std::string> names;
    for (const auto& [name, layout] : module->kernels) names.push_back(name);
    for (unsigned i = 0; i < count && i < names.size(); ++i) {
      Function* function = nullptr;
      if (CUresult status = GetFunction(module, names[i].c_str(), &function); status != CUDA_SUCCESS) {
        return status;
      }
      kernels[i] = reinterpret_cast<CUkernel>(function);
    }
    return CUDA_SUCCESS;
  });
}

// A module's functions, as a library's kernels (the same object behind both handles).
GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule module) {
  return cuLibraryGetKernelCount(count, reinterpret_cast<CUlibrary>(module));
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions, unsigned int count,
                                                             CUmodule module) {
  return cuLibraryEnumerateKernels(reinterpret_cast<CUkernel*>(functions), count, reinterpret_cast<CUlibrary>(module));
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuKernelGetFunction(CUfunction* result, CUkernel kernel) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (AsFunction(kernel) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *result = reinterpret_cast<CUfunction>(kernel);
    return CUDA_SUCCESS;
  });
}

// Function/kernel queries and the occupancy calculator: api_function.cc.

// --- Launch --------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                 unsigned int bx, unsigned int by, unsigned int bz,
                                                 unsigned int shared_mem, CUstream stream, void** params,
                                                 void** extra) {
  GPUPOOL_PROBE_SCOPE(probe, "libcuda.cuLaunchKernel");
  GPUPOOL_BODY({
    unsigned grid[3] = {gx, gy, gz};
    unsigned block[3] = {bx, by, bz};
    return Launch(f, grid, block, shared_mem, stream, params, extra);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                                      unsigned int bx, unsigned int by, unsigned int bz,
                                                      unsigned int shared_mem, CUstream stream, void** params,
                                                      void** extra) {
  return cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params, extra);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                                            unsigned int gz, unsigned int bx, unsigned int by,
                                                            unsigned int bz, unsigned int shared_mem, CUstream stream,
                                                            void** params) {
  GPUPOOL_BODY({
    unsigned grid[3] = {gx, gy, gz};
    unsigned block[3] = {bx, by, bz};
    return Launch(f, grid, block, shared_mem, stream, params, nullptr, true);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                                 unsigned int gz, unsigned int bx, unsigned int by,
                                                                 unsigned int bz, unsigned int shared_mem,
                                                                 CUstream stream, void** params) {
  return cuLaunchCooperativeKernel(f, gx, gy, gz, bx, by, bz, shared_mem, stream, params);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                                   void** extra) {
  GPUPOOL_BODY({ return LaunchEx(config, f, params, extra); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                                        void** extra) {
  return cuLaunchKernelEx(config, f, params, extra);
}

// --- Linking (cuLink*) ---------------------------------------------------------------------
// A driver's JIT linker combines PTX, cubins, fatbins and device libraries into one cubin.
// Here a link of a single PTX, cubin or fatbin input completes to that input itself, which
// cuModuleLoadData takes as it is (the sim runs its PTX; a GPU host's driver JIT-compiles
// or loads it); several inputs, host objects and libraries complete to one fatbin of the
// PTX units each holds for the device (LinkInputs), which the GPU links as it links an
// -rdc=true program. NVVM IR is refused with CUDA_ERROR_NOT_SUPPORTED, saying so. The JIT
// log buffers get empty strings (WriteJitOutputs).

namespace {

constexpr uint32_t kLinkMagic = 0x6c6e6b31;  // "lnk1"

// At most this many inputs to one link (the sim links at most 4096 units), and PTX units
// under 1 GiB (the image library's bound on a decompressed fatbin entry).
constexpr size_t kMaxLinkInputs = 4096;
constexpr size_t kMaxLinkUnitBytes = size_t{1} << 30;

struct LinkInput {
  CUjitInputType type;
  std::vector<char> bytes;                    // PTX with its terminating NUL; empty for objects and libraries
  std::vector<gpupool::image::PtxEntry> ptx;  // an object's or library's, read when added
};

struct LinkState {
  uint32_t magic = kLinkMagic;
  std::vector<LinkInput> inputs;
  std::vector<char> image;  // cuLinkComplete's result, owned until cuLinkDestroy
};

LinkState* AsLink(CUlinkState handle) {
  auto* link = reinterpret_cast<LinkState*>(handle);
  return link != nullptr && link->magic == kLinkMagic ? link : nullptr;
}

// Log buffers: an empty string where one fits; bytes written (0) back in the size option;
// a wall time of 0 (WriteJitOutputs).
void EmptyJitLogs(unsigned count, CUjit_option* options, void** values) {
  WriteJitOutputs(count, options, values, "", 0.0f);
}

const char* LinkInputKind(CUjitInputType type) {
  switch (type) {
    case CU_JIT_INPUT_PTX:
      return "PTX";
    case CU_JIT_INPUT_CUBIN:
      return "cubin";
    case CU_JIT_INPUT_FATBINARY:
      return "fatbin";
    case CU_JIT_INPUT_OBJECT:
      return "object file";
    case CU_JIT_INPUT_LIBRARY:
      return "library";
    default:
      return "input";
  }
}

// The PTX entries of one link input, as the image library reads them.
gpupool::Result<std::vector<gpupool::image::PtxEntry>> PtxOfLinkInput(const LinkInput& input) {
  if (input.type == CU_JIT_INPUT_OBJECT || input.type == CU_JIT_INPUT_LIBRARY) return input.ptx;
  const auto* bytes = reinterpret_cast<const uint8_t*>(input.bytes.data());
  auto parsed = gpupool::image::ParseModuleImageBytes(bytes, input.bytes.size());
  if (!parsed.ok()) return parsed.status();
  if (parsed->ptx.empty() && parsed->has_sass()) {
    // A cubin NVRTC made in this process: the PTX it came from.
    std::string ptx = NvrtcPtxOf(bytes, input.bytes.size());
    if (!ptx.empty()) {
      auto reparsed = gpupool::image::ParseModuleImageBytes(ptx.data(), ptx.size());
      if (reparsed.ok()) return std::move(reparsed->ptx);
    }
  }
  return std::move(parsed->ptx);
}

// The PTX of a module with nothing in it, for the current device, NUL-terminated.
CUresult EmptyModuleImage(std::vector<char>* image) {
  int ordinal = 0;
  if (CUresult status = CurrentDevice(&ordinal); status != CUDA_SUCCESS) return status;
  const Device* device = Runtime::Get().device(ordinal);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const ModelProperties model = PropertiesOf(*device);
  const int arch = model.cc_major * 10 + model.cc_minor;
  // The oldest PTX ISA that has the target (sm_100: 8.6, sm_120: 8.7).
  const char* version = arch >= 120 ? "8.7" : arch >= 100 ? "8.6" : "8.0";
  const std::string text =
      std::string(".version ") + version + "\n.target sm_" + std::to_string(arch) + "\n.address_size 64\n";
  image->assign(text.begin(), text.end());
  image->push_back('\0');
  return CUDA_SUCCESS;
}

// Several inputs (or a host object or library): the PTX each input holds for the current
// device, as one fatbin whose units the GPU links into one module (the sim does, like the
// units of an -rdc=true program). Each input gives the PTX a driver would JIT for the
// device (its newest entries not newer than it). A library member without PTX adds
// nothing: libcudadevrt.a holds PTX only for the newest GPUs, and the sim provides the
// device runtime's entry points itself.
CUresult LinkInputs(LinkState* link) {
  int ordinal = 0;
  if (CUresult status = CurrentDevice(&ordinal); status != CUDA_SUCCESS) return status;
  const Device* device = Runtime::Get().device(ordinal);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  const ModelProperties model = PropertiesOf(*device);
  const uint32_t device_arch = static_cast<uint32_t>(model.cc_major * 10 + model.cc_minor);
  std::vector<gpupool::image::PtxEntry> units;
  for (size_t i = 0; i < link->inputs.size(); ++i) {
    const LinkInput& input = link->inputs[i];
    auto entries = PtxOfLinkInput(input);
    if (!entries.ok()) {
      LogError("cuLinkComplete: input %zu (%s): %s", i + 1, LinkInputKind(input.type),
               entries.status().message().c_str());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    if (entries->empty()) {
      if (input.type == CU_JIT_INPUT_LIBRARY) continue;
      LogError(
          "cuLinkComplete: input %zu (%s) holds no PTX, only machine code (SASS): "
          "gpupool links PTX only",
          i + 1, LinkInputKind(input.type));
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    const gpupool::image::PtxEntry* chosen = gpupool::image::ChoosePtx(*entries, device_arch);
    if (chosen == nullptr) {
      if (input.type == CU_JIT_INPUT_LIBRARY) continue;  // e.g. libcudadevrt.a's compute_121
      LogError(
          "cuLinkComplete: input %zu (%s) holds PTX only for GPUs newer than this one "
          "(compute capability %u.%u)",
          i + 1, LinkInputKind(input.type), device_arch / 10, device_arch % 10);
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
    const uint32_t arch = chosen->arch;
    for (auto& entry : *entries) {
      if (entry.arch != arch) continue;
      if (entry.text.size() >= kMaxLinkUnitBytes) {
        LogError("cuLinkComplete: input %zu (%s) holds a PTX unit of 1 GiB or more", i + 1, LinkInputKind(input.type));
        return CUDA_ERROR_INVALID_VALUE;
      }
      units.push_back(std::move(entry));
    }
  }
  if (units.empty()) {
    LogError("cuLinkComplete: the inputs hold no PTX to link");
    return CUDA_ERROR_INVALID_IMAGE;
  }
  // A driver JITs every unit for the one device: the units count as one architecture,
  // the newest they target (none is newer than the device).
  uint32_t arch = 0;
  for (const auto& unit : units) arch = std::max(arch, unit.arch);
  for (auto& unit : units) unit.arch = arch;
  std::vector<uint8_t> fatbin = gpupool::image::FatbinOfPtx(units);
  link->image.assign(fatbin.begin(), fatbin.end());
  LogDebug("cuLinkComplete: %zu input(s) linked as %zu PTX unit(s) for compute_%u", link->inputs.size(), units.size(),
           arch);
  return CUDA_SUCCESS;
}

CUresult AddLinkInput(CUlinkState handle, CUjitInputType type, std::vector<char> bytes) {
  LinkState* link = AsLink(handle);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  std::vector<gpupool::image::PtxEntry> ptx;
  switch (type) {
    case CU_JIT_INPUT_PTX:
      // The text up to its NUL (or the given size), then a NUL.
      bytes.resize(strnlen(bytes.data(), bytes.size()));
      bytes.push_back('\0');
      break;
    case CU_JIT_INPUT_CUBIN:
    case CU_JIT_INPUT_FATBINARY:
      break;
    case CU_JIT_INPUT_OBJECT:
    case CU_JIT_INPUT_LIBRARY: {
      // Read now, as a driver reads an input when it is added: a bad one is refused here,
      // and only its PTX is kept.
      auto read = type == CU_JIT_INPUT_OBJECT ? gpupool::image::PtxOfHostObject(data, bytes.size())
                                              : gpupool::image::PtxOfArchive(data, bytes.size());
      if (!read.ok()) {
        LogError("cuLinkAddData/cuLinkAddFile: the %s cannot be read: %s", LinkInputKind(type),
                 read.status().message().c_str());
        return CUDA_ERROR_INVALID_IMAGE;
      }
      ptx = std::move(*read);
      bytes.clear();
      break;
    }
    case CU_JIT_INPUT_NVVM:
      return static_cast<CUresult>(ReportUnsupported("cuLinkAddData/cuLinkAddFile(NVVM input)", "device code linking"));
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (link->inputs.size() >= kMaxLinkInputs) {
    LogError("cuLinkAddData/cuLinkAddFile: more than %zu inputs to one link", kMaxLinkInputs);
    return CUDA_ERROR_INVALID_VALUE;
  }
  link->inputs.push_back(LinkInput{type, std::move(bytes), std::move(ptx)});
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkCreate_v2(unsigned int count, CUjit_option* options, void** values,
                                                  CUlinkState* result) {
  GPUPOOL_BODY({
    if (result == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    EmptyJitLogs(count, options, values);
    *result = reinterpret_cast<CUlinkState>(new LinkState);
    return CUDA_SUCCESS;
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkCreate(unsigned int count, CUjit_option* options, void** values,
                                               CUlinkState* result) {
  return cuLinkCreate_v2(count, options, values, result);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkAddData_v2(CUlinkState link, CUjitInputType type, void* data, size_t size,
                                                   const char*, unsigned int count, CUjit_option* options,
                                                   void** values) {
  GPUPOOL_BODY({
    if (data == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
    EmptyJitLogs(count, options, values);
    const char* bytes = static_cast<const char*>(data);
    return AddLinkInput(link, type, std::vector<char>(bytes, bytes + size));
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkAddData(CUlinkState link, CUjitInputType type, void* data, size_t size,
                                                const char* name, unsigned int count, CUjit_option* options,
                                                void** values) {
  return cuLinkAddData_v2(link, type, data, size, name, count, options, values);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState link, CUjitInputType type, const char* path,
                                                   unsigned int count, CUjit_option* options, void** values) {
  GPUPOOL_BODY({
    EmptyJitLogs(count, options, values);
    if (AsLink(link) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    std::vector<char> bytes;
    if (CUresult status = ReadImageFile(path, &bytes); status != CUDA_SUCCESS) return status;
    if (type != CU_JIT_INPUT_PTX) bytes.pop_back();  // ReadImageFile's NUL is for text
    return AddLinkInput(link, type, std::move(bytes));
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkAddFile(CUlinkState link, CUjitInputType type, const char* path,
                                                unsigned int count, CUjit_option* options, void** values) {
  return cuLinkAddFile_v2(link, type, path, count, options, values);
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkComplete(CUlinkState handle, void** image, size_t* size) {
  GPUPOOL_BODY({
    LinkState* link = AsLink(handle);
    if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (image == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (link->inputs.empty()) {
      // Nothing to link: a module with nothing in it, which loads (a driver hands out
      // such an image too: driver 580 on an H100).
      if (CUresult status = EmptyModuleImage(&link->image); status != CUDA_SUCCESS) return status;
      *image = link->image.data();
      *size = link->image.size();
      return CUDA_SUCCESS;
    }
    const LinkInput& first = link->inputs.front();
    if (link->inputs.size() == 1 && first.type != CU_JIT_INPUT_OBJECT && first.type != CU_JIT_INPUT_LIBRARY) {
      link->image = first.bytes;  // one module image: loaded as it is (a GPU's driver too)
    } else if (CUresult status = LinkInputs(link); status != CUDA_SUCCESS) {
      return status;
    }
    *image = link->image.data();  // owned by the link state until cuLinkDestroy, as on a GPU
    *size = link->image.size();
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuLinkDestroy(CUlinkState handle) {
  GPUPOOL_BODY({
    LinkState* link = AsLink(handle);
    if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    link->magic = 0;
    delete link;
    return CUDA_SUCCESS;
  });
}

namespace gpupool::client {

CUresult ClusterBlocks(const CUlaunchConfig& config, unsigned* blocks, std::vector<CUlaunchAttribute>* others) {
  if (config.numAttrs > 0 && config.attrs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *blocks = 1;
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const CUlaunchAttribute& attribute = config.attrs[i];
    if (attribute.id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      if (others != nullptr) others->push_back(attribute);
      continue;
    }
    const auto& dim = attribute.value.clusterDim;
    *blocks = ClusterBlockCount(dim.x, dim.y, dim.z);
  }
  return CUDA_SUCCESS;
}

// A cluster launch (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION of more than one block), checked
// as a driver checks it, as cuBLAS launches its kernels on GPUs of compute capability 9.0
// and later. *plain: `config`'s attributes without the cluster dimension; *cluster: the
// cluster's shape, which the GPU runs (a GPU host's driver, or the sim's engine, which keeps
// a cluster's blocks resident together). On the sim a kernel whose module names no cluster
// state runs as a plain launch, which computes the same (and may run compiled: the engine's
// JIT tier runs no clusters). A GPU older than 9.0 has no clusters (CUDA_ERROR_NOT_SUPPORTED,
// as it reports CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH 0).
CUresult WithoutClusterDimension(const CUlaunchConfig& config, CUfunction handle, std::vector<CUlaunchAttribute>* plain,
                                 unsigned cluster[3]) {
  cluster[0] = cluster[1] = cluster[2] = 1;
  unsigned blocks = 1;
  if (CUresult status = ClusterBlocks(config, &blocks, plain); status != CUDA_SUCCESS) return status;
  if (blocks == 0) return CUDA_ERROR_INVALID_VALUE;
  if (blocks == 1) return CUDA_SUCCESS;  // one block: a plain launch
  Function* function = AsFunction(handle);
  if (function == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  int ordinal = 0;
  uint64_t stream = 0;
  if (CUresult status = ResolveDevice(config.hStream, &ordinal, &stream); status != CUDA_SUCCESS) return status;
  const Device* device = Runtime::Get().device(ordinal);
  if (device == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  if (!RunsClusterLaunches(*device)) {
    const ModelProperties model = PropertiesOf(*device);
    LogError(
        "cuLaunchKernelEx(%s): a cluster of %u blocks on a GPU of compute capability %d.%d, which has no "
        "thread block clusters",
        function->name.c_str(), blocks, model.cc_major, model.cc_minor);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const unsigned grid[3] = {config.gridDimX, config.gridDimY, config.gridDimZ};
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    if (config.attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& dim = config.attrs[i].value.clusterDim;
    if (grid[0] % dim.x != 0 || grid[1] % dim.y != 0 || grid[2] % dim.z != 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  if (blocks > MaxClusterBlocks(*device, *function)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  if (std::strcmp(device->description().executor, "sim") == 0 && function->module != nullptr &&
      !function->module->ptx_names_clusters) {
    return CUDA_SUCCESS;  // the same answer as a plain launch
  }
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    if (config.attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& dim = config.attrs[i].value.clusterDim;
    cluster[0] = dim.x;
    cluster[1] = dim.y;
    cluster[2] = dim.z;
  }
  return CUDA_SUCCESS;
}

unsigned MaxClusterBlocks(const Device& device, const Function& function) {
  bool non_portable = false;
  {
    std::lock_guard<std::mutex> lock(Runtime::Get().mu());
    non_portable = function.non_portable_clusters;
  }
  return non_portable && RunsClusterLaunches(device) ? dp::kMaxClusterBlocks : kPortableClusterBlocks;
}

}  // namespace gpupool::client
