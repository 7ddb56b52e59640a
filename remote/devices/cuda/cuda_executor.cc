#include "remote/devices/cuda/cuda_executor.h"

#include <cuda.h>
#include <dlfcn.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <utility>

#include "remote/image/fatbin.h"
#include "remote/protocol/sim_texture.h"
#include "remote/protocol/texture_desc.h"
#include "remote/protocol/protocol.h"

namespace gpupool::devices {

// The driver entry points the executor uses, by their versioned symbol names.
struct CudaDriver {
  decltype(&::cuInit) init;
  decltype(&::cuDeviceGetCount) device_count;
  decltype(&::cuDeviceGet) device_get;
  decltype(&::cuDeviceGetUuid) device_uuid;
  decltype(&::cuDevicePrimaryCtxRetain) primary_retain;
  decltype(&::cuDevicePrimaryCtxRelease) primary_release;
  decltype(&::cuCtxSetCurrent) set_current;
  decltype(&::cuCtxSynchronize) synchronize;
  decltype(&::cuMemAlloc) alloc;
  decltype(&::cuMemFree) free;
  decltype(&::cuMemGetInfo) info;
  decltype(&::cuMemcpyHtoDAsync) htod;
  decltype(&::cuMemcpyDtoHAsync) dtoh;
  decltype(&::cuMemcpyDtoDAsync) dtod;
  decltype(&::cuMemsetD8Async) memset8;
  decltype(&::cuMemsetD16Async) memset16;
  decltype(&::cuMemsetD32Async) memset32;
  decltype(&::cuModuleLoadData) module_load;
  decltype(&::cuModuleUnload) module_unload;
  decltype(&::cuModuleGetFunction) module_function;
  decltype(&::cuLaunchKernel) launch;
  decltype(&::cuStreamCreateWithPriority) stream_create;
  decltype(&::cuStreamDestroy) stream_destroy;
  decltype(&::cuStreamSynchronize) stream_synchronize;
  decltype(&::cuStreamQuery) stream_query;
  decltype(&::cuStreamWaitEvent) stream_wait_event;
  decltype(&::cuEventCreate) event_create;
  decltype(&::cuEventDestroy) event_destroy;
  decltype(&::cuEventRecord) event_record;
  decltype(&::cuEventSynchronize) event_synchronize;
  decltype(&::cuEventQuery) event_query;
  decltype(&::cuEventElapsedTime) event_elapsed;
  decltype(&::cuModuleGetGlobal) module_global = nullptr;            // optional
  decltype(&::cuFuncGetAttribute) function_attribute = nullptr;      // optional
  decltype(&::cuFuncSetAttribute) function_set_attribute = nullptr;  // optional
  // Optional: the virtual memory management API, for AllocateAt.
  decltype(&::cuDeviceGetAttribute) device_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemAddressReserve) address_reserve = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemCreate) mem_create = nullptr;
  decltype(&::cuMemRelease) mem_release = nullptr;
  decltype(&::cuMemMap) mem_map = nullptr;
  decltype(&::cuMemUnmap) mem_unmap = nullptr;
  decltype(&::cuMemSetAccess) mem_set_access = nullptr;
  decltype(&::cuLaunchKernelEx) launch_ex = nullptr;    // cooperative launches (CUDA 11.8+)
  decltype(&::cuTexObjectCreate) tex_create = nullptr;  // optional: texture objects
  decltype(&::cuTexObjectDestroy) tex_destroy = nullptr;
  decltype(&::cuArray3DCreate) array_create = nullptr;  // optional: CUDA arrays, surfaces
  decltype(&::cuArrayDestroy) array_destroy = nullptr;
  decltype(&::cuMemcpy3DAsync) memcpy3d = nullptr;
  decltype(&::cuSurfObjectCreate) surf_create = nullptr;
  decltype(&::cuSurfObjectDestroy) surf_destroy = nullptr;
  decltype(&::cuTensorMapEncodeTiled) tensor_map_encode = nullptr;  // optional: tensor maps (TMA)
  decltype(&::cuTensorMapReplaceAddress) tensor_map_replace = nullptr;
  decltype(&::cuMipmappedArrayCreate) mipmapped_create = nullptr;  // optional: mipmapped arrays
  decltype(&::cuMipmappedArrayGetLevel) mipmapped_level = nullptr;
  decltype(&::cuMipmappedArrayDestroy) mipmapped_destroy = nullptr;
  // Optional: the JIT linker, for images whose PTX is several units (LinkPtxUnits).
  decltype(&::cuLinkCreate_v2) link_create = nullptr;
  decltype(&::cuLinkAddData_v2) link_add_data = nullptr;
  decltype(&::cuLinkComplete) link_complete = nullptr;
  decltype(&::cuLinkDestroy) link_destroy = nullptr;

  bool has_linker() const { return link_create && link_add_data && link_complete && link_destroy; }

  bool has_vmm() const {
    return device_attribute && granularity && address_reserve && address_free && mem_create && mem_release && mem_map &&
           mem_unmap && mem_set_access;
  }
};

namespace {

template <typename T>
bool Resolve(void* library, const char* name, T* function) {
  *function = reinterpret_cast<T>(dlsym(library, name));
  return *function != nullptr;
}

Result<const CudaDriver*> LoadDriver() {
  static std::once_flag once;
  static Result<const CudaDriver*>* loaded = nullptr;
  std::call_once(once, [] {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) {
      loaded =
          new Result<const CudaDriver*>(Status::Unavailable(std::string("cannot load the CUDA driver: ") + dlerror()));
      return;
    }
    // Our own replacement driver must never serve as the agent's driver.
    if (dlsym(library, "cuGpupoolRemotingLibrary") != nullptr) {
      loaded = new Result<const CudaDriver*>(
          Status::Unavailable("libcuda.so.1 found first is gpupool's remoting library, not a GPU driver "
                              "(check the agent's LD_LIBRARY_PATH)"));
      return;
    }
    auto* d = new CudaDriver();
    bool ok =
        Resolve(library, "cuInit", &d->init) && Resolve(library, "cuDeviceGetCount", &d->device_count) &&
        Resolve(library, "cuDeviceGet", &d->device_get) && Resolve(library, "cuDeviceGetUuid", &d->device_uuid) &&
        Resolve(library, "cuDevicePrimaryCtxRetain", &d->primary_retain) &&
        Resolve(library, "cuDevicePrimaryCtxRelease_v2", &d->primary_release) &&
        Resolve(library, "cuCtxSetCurrent", &d->set_current) && Resolve(library, "cuCtxSynchronize", &d->synchronize) &&
        Resolve(library, "cuMemAlloc_v2", &d->alloc) && Resolve(library, "cuMemFree_v2", &d->free) &&
        Resolve(library, "cuMemGetInfo_v2", &d->info) && Resolve(library, "cuMemcpyHtoDAsync_v2", &d->htod) &&
        Resolve(library, "cuMemcpyDtoHAsync_v2", &d->dtoh) && Resolve(library, "cuMemcpyDtoDAsync_v2", &d->dtod) &&
        Resolve(library, "cuMemsetD8Async", &d->memset8) && Resolve(library, "cuMemsetD16Async", &d->memset16) &&
        Resolve(library, "cuMemsetD32Async", &d->memset32) && Resolve(library, "cuModuleLoadData", &d->module_load) &&
        Resolve(library, "cuModuleUnload", &d->module_unload) &&
        Resolve(library, "cuModuleGetFunction", &d->module_function) &&
        Resolve(library, "cuLaunchKernel", &d->launch) &&
        Resolve(library, "cuStreamCreateWithPriority", &d->stream_create) &&
        Resolve(library, "cuStreamDestroy_v2", &d->stream_destroy) &&
        Resolve(library, "cuStreamSynchronize", &d->stream_synchronize) &&
        Resolve(library, "cuStreamQuery", &d->stream_query) &&
        Resolve(library, "cuStreamWaitEvent", &d->stream_wait_event) &&
        Resolve(library, "cuEventCreate", &d->event_create) &&
        Resolve(library, "cuEventDestroy_v2", &d->event_destroy) &&
        Resolve(library, "cuEventRecord", &d->event_record) &&
        Resolve(library, "cuEventSynchronize", &d->event_synchronize) &&
        Resolve(library, "cuEventQuery", &d->event_query) && Resolve(library, "cuEventElapsedTime", &d->event_elapsed);
    Resolve(library, "cuModuleGetGlobal_v2", &d->module_global);
    Resolve(library, "cuFuncGetAttribute", &d->function_attribute);
    Resolve(library, "cuFuncSetAttribute", &d->function_set_attribute);
    Resolve(library, "cuDeviceGetAttribute", &d->device_attribute);
    Resolve(library, "cuMemGetAllocationGranularity", &d->granularity);
    Resolve(library, "cuMemAddressReserve", &d->address_reserve);
    Resolve(library, "cuMemAddressFree", &d->address_free);
    Resolve(library, "cuMemCreate", &d->mem_create);
    Resolve(library, "cuMemRelease", &d->mem_release);
    Resolve(library, "cuMemMap", &d->mem_map);
    Resolve(library, "cuMemUnmap", &d->mem_unmap);
    Resolve(library, "cuMemSetAccess", &d->mem_set_access);
    Resolve(library, "cuLaunchKernelEx", &d->launch_ex);
    Resolve(library, "cuTexObjectCreate", &d->tex_create);
    Resolve(library, "cuTexObjectDestroy", &d->tex_destroy);
    Resolve(library, "cuArray3DCreate_v2", &d->array_create);
    Resolve(library, "cuArrayDestroy", &d->array_destroy);
    Resolve(library, "cuMemcpy3DAsync_v2", &d->memcpy3d);
    Resolve(library, "cuSurfObjectCreate", &d->surf_create);
    Resolve(library, "cuTensorMapEncodeTiled", &d->tensor_map_encode);
    Resolve(library, "cuTensorMapReplaceAddress", &d->tensor_map_replace);
    Resolve(library, "cuSurfObjectDestroy", &d->surf_destroy);
    Resolve(library, "cuMipmappedArrayCreate", &d->mipmapped_create);
    Resolve(library, "cuMipmappedArrayGetLevel", &d->mipmapped_level);
    Resolve(library, "cuMipmappedArrayDestroy", &d->mipmapped_destroy);
    Resolve(library, "cuLinkCreate_v2", &d->link_create);
    Resolve(library, "cuLinkAddData_v2", &d->link_add_data);
    Resolve(library, "cuLinkComplete", &d->link_complete);
    Resolve(library, "cuLinkDestroy", &d->link_destroy);
    if (!ok) {
      loaded =
          new Result<const CudaDriver*>(Status::Unavailable("the CUDA driver lacks an entry point the agent needs"));
      return;
    }
    CUresult status = d->init(0);
    if (status != CUDA_SUCCESS) {
      loaded =
          new Result<const CudaDriver*>(Status::Unavailable("cuInit failed with CUDA error " + std::to_string(status)));
      return;
    }
    loaded = new Result<const CudaDriver*>(static_cast<const CudaDriver*>(d));
  });
  return *loaded;
}

std::string FormatUuid(const CUuuid& uuid) {
  const auto* b = reinterpret_cast<const unsigned char*>(uuid.bytes);
  char text[64];
  std::snprintf(text, sizeof(text), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return text;
}

CUdeviceptr Ptr(uint64_t value) { return static_cast<CUdeviceptr>(value); }
void* AsPointer(uint64_t value) { return reinterpret_cast<void*>(static_cast<uintptr_t>(value)); }

// Physical memory of AllocateAt: pinned device memory of `device`.
CUmemAllocationProp DeviceMemory(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// The granularity of VMM allocations on `device`; 0 when the driver lacks the API or the
// device does not support it (AllocateAt then answers CUDA_ERROR_NOT_SUPPORTED).
uint64_t VmmGranularity(const CudaDriver* d, CUdevice device) {
  if (!d->has_vmm()) return 0;
  int supported = 0;
  if (d->device_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) !=
          CUDA_SUCCESS ||
      supported == 0) {
    return 0;
  }
  CUmemAllocationProp prop = DeviceMemory(device);
  size_t granularity = 0;
  if (d->granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS) {
    return 0;
  }
  // The rounding below needs a power of two (every driver so far reports 2 MiB).
  if (granularity == 0 || (granularity & (granularity - 1)) != 0) return 0;
  return granularity;
}

// The address windows of placed allocations (cuda_executor.h): aligned to their size.
constexpr uint64_t kAddressWindow = uint64_t{64} << 30;

// What a launch may use of dynamic shared memory without the function's opt-in.
constexpr uint32_t kDefaultDynamicSharedLimit = 48 << 10;
// The wire's numbers are cuda.h's (protocol.h has no cuda.h to take them from).
static_assert(dataplane::kResourceTypeArray == CU_RESOURCE_TYPE_ARRAY &&
              dataplane::kResourceTypeMipmappedArray == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY &&
              dataplane::kResourceTypeLinear == CU_RESOURCE_TYPE_LINEAR &&
              dataplane::kResourceTypePitch2D == CU_RESOURCE_TYPE_PITCH2D);
static_assert(dataplane::kTextureFlagsKnown ==
              (CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB |
               CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP));
static_assert(dataplane::kCuInvalidClusterSize == CUDA_ERROR_INVALID_CLUSTER_SIZE);
// The most blocks of a cluster without the function's opt-in to non-portable sizes.
constexpr uint32_t kPortableClusterBlocks = 8;

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%" PRIx64, value);
  return text;
}

}  // namespace

int32_t CudaExecutor::DriverVersion() {
  auto driver = LoadDriver();
  if (!driver.ok()) return 0;
  // The library LoadDriver opened (RTLD_NOLOAD: only if it is loaded already).
  void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (library == nullptr) return 0;
  int version = 0;
  int (*get_version)(int*) = nullptr;
  if (!Resolve(library, "cuDriverGetVersion", &get_version) || get_version(&version) != 0) {
    version = 0;
  }
  dlclose(library);  // drops the reference RTLD_NOLOAD took
  return version;
}

Result<std::unique_ptr<device::Executor>> CudaExecutor::Create(const std::string& gpu_uuid) {
  auto driver = LoadDriver();
  if (!driver.ok()) return driver.status();
  const CudaDriver* d = driver.value();
  int count = 0;
  if (d->device_count(&count) != CUDA_SUCCESS) return Status::Unavailable("cuDeviceGetCount failed");
  for (int i = 0; i < count; ++i) {
    CUdevice device = 0;
    CUuuid uuid{};
    if (d->device_get(&device, i) != CUDA_SUCCESS || d->device_uuid(&uuid, device) != CUDA_SUCCESS) {
      continue;
    }
    if (FormatUuid(uuid) != gpu_uuid) continue;
    CUcontext context = nullptr;
    CUresult status = d->primary_retain(&context, device);
    if (status != CUDA_SUCCESS) {
      return Status::Unavailable("cannot retain the primary context of " + gpu_uuid + ": CUDA error " +
                                 std::to_string(status));
    }
    return std::unique_ptr<device::Executor>(new CudaExecutor(d, device, context, VmmGranularity(d, device)));
  }
  return Status::Unavailable("the CUDA driver has no GPU " + gpu_uuid);
}

CudaExecutor::CudaExecutor(const CudaDriver* driver, int device, void* context, uint64_t granularity)
    : driver_(driver), device_(device), context_(context), granularity_(granularity) {}

CudaExecutor::~CudaExecutor() {
  // Everything the client left behind goes, so its memory is free for the next lease.
  if (Enter() == CUDA_SUCCESS) {
    driver_->synchronize();
    for (auto& [handle, object] : texture_objects_) driver_->tex_destroy(static_cast<CUtexObject>(handle));
    for (auto& [handle, array] : surface_objects_) driver_->surf_destroy(static_cast<CUsurfObject>(handle));
    for (auto& [id, array] : arrays_) {
      if (array.mipmapped == 0) driver_->array_destroy(static_cast<CUarray>(array.handle));
    }
    for (auto& [id, mipmapped] : mipmapped_) {
      driver_->mipmapped_destroy(static_cast<CUmipmappedArray>(mipmapped.handle));
    }
    for (auto& [id, event] : events_) driver_->event_destroy(static_cast<CUevent>(event));
    for (auto& [id, stream] : streams_) driver_->stream_destroy(static_cast<CUstream>(stream));
    for (auto& [id, module] : modules_) driver_->module_unload(static_cast<CUmodule>(module));
    for (auto& [dptr, size] : allocations_) {
      if (placed_.count(dptr) == 0) driver_->free(Ptr(dptr));
    }
    for (auto& [start, run] : runs_) UnmapRun(start, run);
    for (uint64_t base : windows_) driver_->address_free(Ptr(base), kAddressWindow);
  }
  driver_->primary_release(device_);
}

int32_t CudaExecutor::Enter() { return driver_->set_current(static_cast<CUcontext>(context_)); }

bool CudaExecutor::Owns(uint64_t dptr, uint64_t size) const {
  // Module variables (cuModuleGetGlobal) of this session's modules are reachable too.
  auto global = module_globals_.upper_bound(dptr);
  if (global != module_globals_.begin()) {
    --global;
    if (dptr - global->first <= global->second.size && size <= global->second.size - (dptr - global->first)) {
      return true;
    }
  }
  auto after = allocations_.upper_bound(dptr);
  if (after == allocations_.begin()) return false;
  const auto& [start, length] = *std::prev(after);
  uint64_t offset = dptr - start;
  return offset <= length && size <= length - offset;
}

bool CudaExecutor::Overlaps(uint64_t dptr, uint64_t size) const {
  // REQUIRES: dptr + size does not wrap.
  auto after = allocations_.lower_bound(dptr);
  if (after != allocations_.end() && after->first < dptr + size) return true;
  if (after == allocations_.begin()) return false;
  const auto& [start, length] = *std::prev(after);
  return dptr - start < length;
}

bool CudaExecutor::StreamFor(uint64_t id, void** stream) {
  if (id == 0) {
    *stream = nullptr;
    return true;
  }
  auto found = streams_.find(id);
  if (found == streams_.end()) return false;
  *stream = found->second;
  return true;
}

int32_t CudaExecutor::Allocate(uint64_t size, uint64_t* dptr) {
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUdeviceptr ptr = 0;
  CUresult status = driver_->alloc(&ptr, size);
  if (status == CUDA_SUCCESS) {
    *dptr = ptr;
    allocations_[ptr] = size;
  }
  return status;
}

int32_t CudaExecutor::AllocateAt(uint64_t address, uint64_t size) {
  if (size == 0 || address == 0 || size > UINT64_MAX - address) return CUDA_ERROR_INVALID_VALUE;
  if (Overlaps(address, size)) {
    error_detail_ = Hex(address) + " (" + std::to_string(size) + " bytes) overlaps an allocation of this session";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (granularity_ == 0) return CUDA_ERROR_NOT_SUPPORTED;
  const uint64_t end = address + size;
  if (end > UINT64_MAX - (granularity_ - 1)) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t first = address & ~(granularity_ - 1);
  const uint64_t last = (end + granularity_ - 1) & ~(granularity_ - 1);
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;

  // The granules [first, last): those this session has mapped already are shared, the gaps
  // between them are mapped now, each gap as one run.
  std::vector<uint64_t> used;     // runs this allocation touches, in address order
  std::vector<uint64_t> created;  // the ones mapped by this call
  uint64_t cursor = first;
  if (auto after = runs_.upper_bound(cursor); after != runs_.begin()) {
    auto before = std::prev(after);
    if (cursor - before->first < before->second.size) {
      used.push_back(before->first);
      cursor = before->first + before->second.size;
    }
  }
  while (cursor < last) {
    auto next = runs_.lower_bound(cursor);
    if (next != runs_.end() && next->first == cursor) {
      used.push_back(cursor);
      cursor += next->second.size;
      continue;
    }
    uint64_t gap_end = next == runs_.end() ? last : std::min(last, next->first);
    // A mapping lies inside one reservation: a run ends at its window's end.
    gap_end = std::min(gap_end, (cursor & ~(kAddressWindow - 1)) + kAddressWindow);
    if (int32_t status = MapRun(cursor, gap_end - cursor); status != CUDA_SUCCESS) {
      for (uint64_t start : created) {
        UnmapRun(start, runs_.at(start));
        runs_.erase(start);
      }
      return status;
    }
    created.push_back(cursor);
    used.push_back(cursor);
    cursor = gap_end;
  }
  for (uint64_t start : used) ++runs_.at(start).users;
  allocations_[address] = size;  // copies are checked against what was asked, not the granules
  placed_[address] = std::move(used);
  return CUDA_SUCCESS;
}

int32_t CudaExecutor::ReserveWindow(uint64_t address) {
  const uint64_t base = address & ~(kAddressWindow - 1);
  if (windows_.count(base)) return CUDA_SUCCESS;
  CUdeviceptr granted = 0;
  CUresult status = driver_->address_reserve(&granted, kAddressWindow, 0, Ptr(base), 0);
  if (status == CUDA_SUCCESS && granted == Ptr(base)) {
    windows_.insert(base);
    return CUDA_SUCCESS;
  }
  if (status == CUDA_SUCCESS) driver_->address_free(granted, kAddressWindow);
  // The address is a hint to the driver: it moves (or refuses) a range that another
  // session of this GPU, or the driver itself, holds. Not an error of the client's: it
  // answers CUDA_ERROR_NOT_SUPPORTED like an executor that cannot place memory, so that the
  // session allocates with cuMemAlloc instead and the client, seeing another address, runs
  // on unprotected (it says so in its log) rather than failing its cuMemAlloc.
  error_detail_ =
      "cuMemAddressReserve of the " + std::to_string(kAddressWindow >> 30) + " GiB window at " + Hex(base) +
      (status == CUDA_SUCCESS ? " granted " + Hex(granted) : " failed: CUDA error " + std::to_string(status));
  return CUDA_ERROR_NOT_SUPPORTED;
}

int32_t CudaExecutor::MapRun(uint64_t start, uint64_t size) {
  if (int32_t status = ReserveWindow(start); status != CUDA_SUCCESS) return status;
  CUmemAllocationProp prop = DeviceMemory(device_);
  CUmemGenericAllocationHandle handle = 0;
  const char* step = "cuMemCreate";
  CUresult status = driver_->mem_create(&handle, size, &prop, 0);
  if (status == CUDA_SUCCESS) {
    step = "cuMemMap";
    status = driver_->mem_map(Ptr(start), size, 0, handle, 0);
    if (status == CUDA_SUCCESS) {
      CUmemAccessDesc access{};
      access.location = prop.location;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      step = "cuMemSetAccess";
      status = driver_->mem_set_access(Ptr(start), size, &access, 1);
      if (status == CUDA_SUCCESS) {
        runs_[start] = VmmRun{size, handle, 0};
        return CUDA_SUCCESS;
      }
      driver_->mem_unmap(Ptr(start), size);
    }
    driver_->mem_release(handle);
  }
  // Resource errors (out of memory above all) are the client's answer, as cuMemAlloc's are.
  error_detail_ =
      std::string(step) + " of " + std::to_string(size) + " bytes at " + Hex(start) + " (AllocateAt) failed";
  return status;
}

int32_t CudaExecutor::UnmapRun(uint64_t start, const VmmRun& run) {
  CUresult unmapped = driver_->mem_unmap(Ptr(start), run.size);
  CUresult released = driver_->mem_release(run.handle);
  return unmapped != CUDA_SUCCESS ? unmapped : released;
}

int32_t CudaExecutor::Free(uint64_t dptr) {
  if (dptr == 0) return CUDA_SUCCESS;
  auto allocation = allocations_.find(dptr);
  if (allocation == allocations_.end()) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t size = allocation->second;
  allocations_.erase(allocation);
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  // The texture objects over it go first: the memory may be the next session's soon, and an
  // object left over it would let this session's kernels read that.
  DestroyObjectsOver([&](const TextureObject& object) { return object.array == 0 && object.start - dptr < size; },
                     [](uint64_t /*array*/) { return false; });
  auto placed = placed_.find(dptr);
  if (placed == placed_.end()) return driver_->free(Ptr(dptr));
  std::vector<uint64_t> runs = std::move(placed->second);
  placed_.erase(placed);
  int32_t result = CUDA_SUCCESS;
  bool synchronized = false;
  for (uint64_t start : runs) {
    auto run = runs_.find(start);
    if (run == runs_.end() || --run->second.users > 0) continue;  // still another's granules
    // Like cuMemFree, wait for the work that may still use the memory before it goes.
    if (!synchronized) {
      synchronized = true;
      if (CUresult status = driver_->synchronize(); status != CUDA_SUCCESS) result = status;
    }
    int32_t status = UnmapRun(start, run->second);
    if (result == CUDA_SUCCESS) result = status;
    runs_.erase(run);
  }
  return result;
}

void CudaExecutor::MemoryInfo(uint64_t* free, uint64_t* total) {
  size_t f = 0, t = 0;
  if (Enter() == CUDA_SUCCESS) driver_->info(&f, &t);
  *free = f;
  *total = t;
}

int32_t CudaExecutor::CopyToDevice(uint64_t dst, const void* src, uint64_t size, uint64_t stream) {
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (size == 0) return CUDA_SUCCESS;
  if (!Owns(dst, size)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUresult status = driver_->htod(Ptr(dst), src, size, static_cast<CUstream>(s));
  // `src` is the server's receive buffer, reused by the next request: wait for the copy.
  if (status == CUDA_SUCCESS) status = driver_->stream_synchronize(static_cast<CUstream>(s));
  return status;
}

int32_t CudaExecutor::CopyFromDevice(uint64_t src, uint64_t size, uint64_t stream, const void** data) {
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  *data = nullptr;
  if (size == 0) return CUDA_SUCCESS;
  if (!Owns(src, size)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  staging_.resize(size);
  CUresult status = driver_->dtoh(staging_.data(), Ptr(src), size, static_cast<CUstream>(s));
  if (status == CUDA_SUCCESS) status = driver_->stream_synchronize(static_cast<CUstream>(s));
  *data = staging_.data();
  return status;
}

int32_t CudaExecutor::CopyDeviceToDevice(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) {
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (size == 0) return CUDA_SUCCESS;
  if (!Owns(dst, size) || !Owns(src, size)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->dtod(Ptr(dst), Ptr(src), size, static_cast<CUstream>(s));
}

int32_t CudaExecutor::Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint64_t stream) {
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (element_size != 1 && element_size != 2 && element_size != 4) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0) return CUDA_SUCCESS;
  if (count > UINT64_MAX / element_size || !Owns(dst, count * element_size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  auto cs = static_cast<CUstream>(s);
  switch (element_size) {
    case 1:
      return driver_->memset8(Ptr(dst), static_cast<unsigned char>(value), count, cs);
    case 2:
      return driver_->memset16(Ptr(dst), static_cast<unsigned short>(value), count, cs);
    case 4:
      return driver_->memset32(Ptr(dst), value, count, cs);
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

int32_t CudaExecutor::LoadModule(uint64_t module, const void* image, size_t image_size,
                                 const std::vector<device::KernelInfo>& kernels,
                                 uint64_t /*globals_base: the driver places them*/,
                                 uint64_t /*device_heap: the driver's own heap*/,
                                 uint32_t /*pending_launches, device_ordinal, facts: the driver's own*/, int32_t,
                                 const dataplane::DeviceRuntimeFacts*) {
  if (modules_.count(module)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  auto parsed = image::ParseModuleImageBytes(image, image_size);
  CUmodule loaded = nullptr;
  CUresult status = CUDA_SUCCESS;
  if (parsed.ok() && image::IsFatbin(image, image_size) && !parsed->has_sass() && !parsed->ptx.empty()) {
    // A fatbin of PTX alone (nvcc -arch=compute_XX, or the client's cuLinkComplete of
    // several inputs: image::FatbinOfPtx): its PTX for this GPU goes to the JIT as text
    // rather than the fatbin to cuModuleLoadData. Driver 580 on an H100 crashed (SIGSEGV in
    // cuModuleLoadData) on a fatbin of FatbinOfPtx's, and a crash here takes every client
    // of the agent with it.
    void* jitted = nullptr;
    status = static_cast<CUresult>(JitPtx(parsed->ptx, &jitted));
    if (status == CUDA_ERROR_NOT_FOUND) status = CUDA_ERROR_NO_BINARY_FOR_GPU;
    loaded = static_cast<CUmodule>(jitted);
  } else {
    // The image buffer is the server's; the driver copies what it needs during the load.
    status = driver_->module_load(&loaded, image);
    if (status != CUDA_SUCCESS && parsed.ok()) {
      // A driver JITs one PTX entry of an image. When the image's PTX for this GPU is
      // several units (an -rdc=true program's translation units: image::
      // WithRelocatablePtx) and its SASS, if any, does not suit the GPU, link the units
      // here, as the client's driver would have, and load the result.
      void* linked = nullptr;
      auto jitted = static_cast<CUresult>(JitPtx(parsed->ptx, &linked, /*at_least=*/2));
      if (jitted != CUDA_ERROR_NOT_FOUND) {
        status = jitted;
        loaded = static_cast<CUmodule>(linked);
      }
    }
  }
  if (status == CUDA_SUCCESS) modules_[module] = loaded;
  return status;
}

int32_t CudaExecutor::JitPtx(const std::vector<image::PtxEntry>& ptx, void** loaded, size_t at_least) {
  int major = 0, minor = 0;
  if (driver_->device_attribute != nullptr) {
    driver_->device_attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_);
    driver_->device_attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_);
  }
  const image::PtxEntry* chosen = image::ChoosePtx(ptx, static_cast<uint32_t>(major * 10 + minor));
  if (chosen == nullptr) return CUDA_ERROR_NOT_FOUND;
  std::vector<const image::PtxEntry*> units;
  for (const image::PtxEntry& entry : ptx) {
    if (entry.arch == chosen->arch) units.push_back(&entry);
  }
  if (units.size() < at_least) return CUDA_ERROR_NOT_FOUND;
  CUmodule module = nullptr;
  if (units.size() == 1) {
    CUresult status = driver_->module_load(&module, units[0]->text.c_str());
    if (status == CUDA_SUCCESS) *loaded = module;
    return status;
  }
  if (!driver_->has_linker()) return CUDA_ERROR_NOT_SUPPORTED;
  CUlinkState link = nullptr;
  CUresult status = driver_->link_create(0, nullptr, nullptr, &link);
  if (status != CUDA_SUCCESS) return status;
  for (const image::PtxEntry* unit : units) {
    if (status != CUDA_SUCCESS) break;
    // The text with its NUL, as cuLinkAddData takes PTX.
    status = driver_->link_add_data(link, CU_JIT_INPUT_PTX, const_cast<char*>(unit->text.c_str()),
                                    unit->text.size() + 1, "unit", 0, nullptr, nullptr);
  }
  void* cubin = nullptr;
  size_t cubin_size = 0;
  if (status == CUDA_SUCCESS) status = driver_->link_complete(link, &cubin, &cubin_size);
  // The linked cubin belongs to the link state: load it before destroying that.
  if (status == CUDA_SUCCESS) status = driver_->module_load(&module, cubin);
  driver_->link_destroy(link);
  if (status == CUDA_SUCCESS) *loaded = module;
  return status;
}

int32_t CudaExecutor::UnloadModule(uint64_t module) {
  auto found = modules_.find(module);
  if (found == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUresult status = driver_->module_unload(static_cast<CUmodule>(found->second));
  for (auto it = module_globals_.begin(); it != module_globals_.end();) {
    it = it->second.module == module ? module_globals_.erase(it) : std::next(it);
  }
  modules_.erase(found);
  return status;
}

int32_t CudaExecutor::GetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* size) {
  auto found = modules_.find(module);
  if (found == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (driver_->module_global == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUdeviceptr address = 0;
  size_t bytes = 0;
  CUresult status = driver_->module_global(&address, &bytes, static_cast<CUmodule>(found->second), name.c_str());
  if (status != CUDA_SUCCESS) return status;
  module_globals_[address] = ModuleGlobal{bytes, module};
  *dptr = address;
  *size = bytes;
  return CUDA_SUCCESS;
}

std::string CudaExecutor::TakeErrorDetail() { return std::exchange(error_detail_, {}); }

int32_t CudaExecutor::GetFunction(uint64_t module, uint64_t function, const std::string& name) {
  auto found = modules_.find(module);
  if (found == modules_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUfunction f = nullptr;
  CUresult status = driver_->module_function(&f, static_cast<CUmodule>(found->second), name.c_str());
  if (status == CUDA_SUCCESS) functions_[function] = f;
  return status;
}

bool CudaExecutor::Resources(uint64_t function, dataplane::FunctionResources* resources) {
  auto found = functions_.find(function);
  if (found == functions_.end() || driver_->function_attribute == nullptr) return false;
  if (Enter() != CUDA_SUCCESS) return false;
  auto f = static_cast<CUfunction>(found->second);
  auto get = [&](CUfunction_attribute attribute, int32_t* value) {
    int number = 0;
    if (driver_->function_attribute(&number, attribute, f) != CUDA_SUCCESS) return false;
    *value = number;
    return true;
  };
  if (!(get(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &resources->max_threads_per_block) &&
        get(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, &resources->static_shared_bytes) &&
        get(CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, &resources->const_bytes) &&
        get(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, &resources->local_bytes) &&
        get(CU_FUNC_ATTRIBUTE_NUM_REGS, &resources->registers))) {
    return false;
  }
  // Which code runs: the driver's own answer, since it chose between the image's SASS and
  // PTX. Where the image holds SASS for this GPU and PTX only for newer ones (cuSPARSE:
  // sm_90 SASS, compute_120 PTX), the library computed 120 from the image, and cuSPARSE,
  // tuning its host side for 120, left rows of an SpMV unwritten by the sm_90 kernels
  // (issue 41, on an H200). Optional: 0 where the driver does not say.
  int32_t ptx = 0, binary = 0;
  if (get(CU_FUNC_ATTRIBUTE_PTX_VERSION, &ptx) && ptx > 0 && ptx <= INT16_MAX) {
    resources->ptx_version = static_cast<int16_t>(ptx);
  }
  if (get(CU_FUNC_ATTRIBUTE_BINARY_VERSION, &binary) && binary > 0 && binary <= INT16_MAX) {
    resources->binary_version = static_cast<int16_t>(binary);
  }
  return true;
}

int32_t CudaExecutor::Launch(uint64_t function, const device::LaunchConfig& config, const void* params,
                             size_t param_size) {
  auto found = functions_.find(function);
  if (found == functions_.end()) return CUDA_ERROR_INVALID_HANDLE;
  void* s = nullptr;
  if (!StreamFor(config.stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  // More than 48 KiB of dynamic shared memory needs the function's opt-in on the driver
  // too. The client has checked the size against the attribute the program set (its
  // cuFuncSetAttribute stays in the client), so the launch opts in for what it asks.
  if (config.shared_mem > kDefaultDynamicSharedLimit && driver_->function_set_attribute) {
    CUresult status = driver_->function_set_attribute(static_cast<CUfunction>(found->second),
                                                      CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                      static_cast<int>(config.shared_mem));
    if (status != CUDA_SUCCESS) return status;
  }
  size_t size = param_size;
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<void*>(params), CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  const uint32_t cluster_blocks = config.cluster[0] * config.cluster[1] * config.cluster[2];
  const bool clustered = cluster_blocks != 1;
  // Clusters of more than 8 blocks need the function's opt-in on the driver; the client
  // sends one only where the program allowed them (its cuFuncSetAttribute stays there).
  if (cluster_blocks > kPortableClusterBlocks && driver_->function_set_attribute) {
    CUresult status = driver_->function_set_attribute(static_cast<CUfunction>(found->second),
                                                      CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1);
    if (status != CUDA_SUCCESS) return status;
  }
  if (config.cooperative || clustered) {
    // cuLaunchCooperativeKernel takes no packed buffer; cuLaunchKernelEx does, and takes
    // the cluster's shape (the driver checks it against the kernel and the GPU: a GPU
    // before 9.0 refuses it, as it would the program's own launch).
    if (driver_->launch_ex == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
    CUlaunchAttribute attributes[2]{};
    unsigned count = 0;
    if (config.cooperative) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attributes[count++].value.cooperative = 1;
    }
    if (clustered) {
      attributes[count].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attributes[count].value.clusterDim.x = config.cluster[0];
      attributes[count].value.clusterDim.y = config.cluster[1];
      attributes[count++].value.clusterDim.z = config.cluster[2];
    }
    CUlaunchConfig launch{};
    launch.gridDimX = config.grid[0];
    launch.gridDimY = config.grid[1];
    launch.gridDimZ = config.grid[2];
    launch.blockDimX = config.block[0];
    launch.blockDimY = config.block[1];
    launch.blockDimZ = config.block[2];
    launch.sharedMemBytes = config.shared_mem;
    launch.hStream = static_cast<CUstream>(s);
    launch.attrs = attributes;
    launch.numAttrs = count;
    return driver_->launch_ex(&launch, static_cast<CUfunction>(found->second), nullptr,
                              param_size > 0 ? extra : nullptr);
  }
  return driver_->launch(static_cast<CUfunction>(found->second), config.grid[0], config.grid[1], config.grid[2],
                         config.block[0], config.block[1], config.block[2], config.shared_mem, static_cast<CUstream>(s),
                         nullptr, param_size > 0 ? extra : nullptr);
}

int32_t CudaExecutor::CreateTextureObject(const dataplane::TexObjectCreateArgs& args, uint64_t start, uint64_t bytes,
                                          uint64_t* handle) {
  if (driver_->tex_create == nullptr || driver_->tex_destroy == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  CUDA_RESOURCE_DESC resource{};
  resource.resType = static_cast<CUresourcetype>(args.resource_type);
  TextureObject object{start, bytes, 0};
  if (args.resource_type == dataplane::kResourceTypeArray) {
    // One of this session's arrays (`start` is its id).
    auto array = arrays_.find(start);
    if (array == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
    resource.res.array.hArray = static_cast<CUarray>(array->second.handle);
    object = TextureObject{0, 0, start};
  } else if (args.resource_type == dataplane::kResourceTypeMipmappedArray) {
    auto mipmapped = mipmapped_.find(start);
    if (mipmapped == mipmapped_.end()) return CUDA_ERROR_INVALID_HANDLE;
    resource.res.mipmap.hMipmappedArray = static_cast<CUmipmappedArray>(mipmapped->second.handle);
    object = TextureObject{0, 0, start};
  } else if (bytes == 0 || !Owns(start, bytes)) {
    // Over this session's own memory only (module variables count, as for copies).
    error_detail_ = "a texture object over memory that is not one of the session's allocations";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  if (args.resource_type == dataplane::kResourceTypeLinear) {
    resource.res.linear.devPtr = Ptr(start);
    resource.res.linear.format = static_cast<CUarray_format>(args.format);
    resource.res.linear.numChannels = args.channels;
    resource.res.linear.sizeInBytes = args.size_bytes;
  } else if (args.resource_type == dataplane::kResourceTypePitch2D) {
    resource.res.pitch2D.devPtr = Ptr(start);
    resource.res.pitch2D.format = static_cast<CUarray_format>(args.format);
    resource.res.pitch2D.numChannels = args.channels;
    resource.res.pitch2D.width = args.width;
    resource.res.pitch2D.height = args.height;
    resource.res.pitch2D.pitchInBytes = args.pitch;
  }
  const CUDA_TEXTURE_DESC texture = dataplane::TextureFromWire(args);
  CUtexObject made = 0;
  CUresult status = driver_->tex_create(&made, &resource, &texture, nullptr);
  if (status != CUDA_SUCCESS) return status;
  texture_objects_[made] = object;
  *handle = made;
  return CUDA_SUCCESS;
}

template <typename Table, typename Destroy>
int32_t CudaExecutor::DestroyListed(Table* table, uint64_t handle, Destroy destroy) {
  auto found = table->find(handle);
  if (found == table->end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  table->erase(found);
  return destroy(handle);
}

template <typename Reads, typename Writes>
void CudaExecutor::DestroyObjectsOver(Reads reads, Writes writes) {
  auto texture_over = [&](const auto& entry) { return reads(entry.second); };
  auto surface_over = [&](const auto& entry) { return writes(entry.second); };
  if (std::none_of(texture_objects_.begin(), texture_objects_.end(), texture_over) &&
      std::none_of(surface_objects_.begin(), surface_objects_.end(), surface_over)) {
    return;
  }
  // Kernels still queued may read them.
  driver_->synchronize();
  std::erase_if(texture_objects_, [&](const auto& entry) {
    if (texture_over(entry)) driver_->tex_destroy(static_cast<CUtexObject>(entry.first));
    return texture_over(entry);
  });
  std::erase_if(surface_objects_, [&](const auto& entry) {
    if (surface_over(entry)) driver_->surf_destroy(static_cast<CUsurfObject>(entry.first));
    return surface_over(entry);
  });
}

int32_t CudaExecutor::DestroyTextureObject(uint64_t handle) {
  return DestroyListed(&texture_objects_, handle, driver_->tex_destroy);
}

int32_t CudaExecutor::CreateArray(const dataplane::ArrayCreateArgs& args) {
  if (driver_->array_create == nullptr || driver_->array_destroy == nullptr || driver_->memcpy3d == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (arrays_.count(args.array) || mipmapped_.count(args.array)) return CUDA_ERROR_INVALID_VALUE;
  // The session checked the format and channels; the driver checks the sizes and flags.
  const uint64_t element = uint64_t{dataplane::SimTexelChannelBytes(args.format)} * args.channels;
  ArrayRecord record;
  if (__builtin_mul_overflow(args.width, element, &record.row_bytes)) return CUDA_ERROR_INVALID_VALUE;
  record.rows = std::max<uint64_t>(args.height, 1);
  record.slices = std::max<uint64_t>(args.depth, 1);
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = dataplane::ArrayFromWire(args);
  CUarray made = nullptr;
  CUresult status = driver_->array_create(&made, &descriptor);
  if (status != CUDA_SUCCESS) return status;
  record.handle = made;
  arrays_[args.array] = record;
  return CUDA_SUCCESS;
}

int32_t CudaExecutor::CreateMipmappedArray(const dataplane::MipmappedArrayCreateArgs& args) {
  if (driver_->mipmapped_create == nullptr || driver_->mipmapped_level == nullptr ||
      driver_->mipmapped_destroy == nullptr || driver_->memcpy3d == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const dataplane::ArrayCreateArgs& d = args.descriptor;
  // Ids taken, by an array or another mipmapped array (the session checked that the levels'
  // ids do not wrap: `last` is at most 2^64 - 1).
  const uint64_t last = args.first_level + (args.levels - 1);
  if (mipmapped_.count(d.array) || arrays_.count(d.array) ||
      arrays_.lower_bound(args.first_level) != arrays_.upper_bound(last) ||
      mipmapped_.lower_bound(args.first_level) != mipmapped_.upper_bound(last)) {
    error_detail_ = "a mipmapped array's id or one of its levels' is taken";
    return CUDA_ERROR_INVALID_VALUE;
  }
  const uint64_t element = uint64_t{dataplane::SimTexelChannelBytes(d.format)} * d.channels;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  const CUDA_ARRAY3D_DESCRIPTOR descriptor = dataplane::ArrayFromWire(d);
  CUmipmappedArray made = nullptr;
  if (CUresult status = driver_->mipmapped_create(&made, &descriptor, args.levels); status != CUDA_SUCCESS) {
    return status;
  }
  // Each level's extent, for the copies' bounds: level 0's halved, at least 1; layers and a
  // cubemap's faces (Depth of a layered or cubemap array) stay.
  const bool stacked = d.flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
  std::vector<ArrayRecord> levels(args.levels);
  for (uint32_t l = 0; l < args.levels; ++l) {
    CUarray level = nullptr;
    CUresult status = driver_->mipmapped_level(&level, made, l);
    uint64_t row_bytes = 0;
    if (status == CUDA_SUCCESS && __builtin_mul_overflow(std::max<uint64_t>(d.width >> l, 1), element, &row_bytes)) {
      status = CUDA_ERROR_INVALID_VALUE;
    }
    if (status != CUDA_SUCCESS) {
      driver_->mipmapped_destroy(made);
      return status;
    }
    levels[l].handle = level;
    levels[l].row_bytes = row_bytes;
    levels[l].rows = std::max<uint64_t>(d.height >> l, 1);
    levels[l].slices = stacked ? std::max<uint64_t>(d.depth, 1) : std::max<uint64_t>(d.depth >> l, 1);
    levels[l].mipmapped = d.array;
  }
  for (uint32_t l = 0; l < args.levels; ++l) arrays_[args.first_level + l] = levels[l];
  mipmapped_[d.array] = MipmappedRecord{made, args.first_level, args.levels};
  return CUDA_SUCCESS;
}

int32_t CudaExecutor::DestroyMipmappedArray(uint64_t mipmapped) {
  auto found = mipmapped_.find(mipmapped);
  if (found == mipmapped_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  const MipmappedRecord record = found->second;
  const uint64_t first = record.first_level, last = record.first_level + (record.levels - 1);
  auto level_of = [&](uint64_t id) { return id >= first && id <= last; };
  // The objects over it and over its levels first.
  DestroyObjectsOver([&](const TextureObject& object) { return object.array == mipmapped || level_of(object.array); },
                     level_of);
  arrays_.erase(arrays_.lower_bound(first), arrays_.upper_bound(last));
  mipmapped_.erase(found);
  return driver_->mipmapped_destroy(static_cast<CUmipmappedArray>(record.handle));
}

int32_t CudaExecutor::DestroyArray(uint64_t array) {
  auto found = arrays_.find(array);
  if (found == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (found->second.mipmapped != 0) {
    error_detail_ = "a level of a mipmapped array goes only with the mipmapped array";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  // The objects over it first, as with memory (Free).
  DestroyObjectsOver([&](const TextureObject& object) { return object.array == array; },
                     [&](uint64_t over) { return over == array; });
  void* handle = found->second.handle;
  arrays_.erase(found);
  return driver_->array_destroy(static_cast<CUarray>(handle));
}

namespace {

// True when the region (origin x bytes, y, z; extent width bytes, height, depth) lies inside
// an array of `row_bytes` x `rows` x `slices`.
bool InsideArray(uint64_t row_bytes, uint64_t rows, uint64_t slices, uint64_t x, uint64_t y, uint64_t z, uint64_t width,
                 uint64_t height, uint64_t depth) {
  uint64_t end = 0;
  return !__builtin_add_overflow(x, width, &end) && end <= row_bytes && !__builtin_add_overflow(y, height, &end) &&
         end <= rows && !__builtin_add_overflow(z, depth, &end) && end <= slices;
}

}  // namespace

int32_t CudaExecutor::CopyArray(const dataplane::ArrayCopyArgs& args, const void* payload, const void** bulk,
                                uint64_t* bulk_len) {
  *bulk = nullptr;
  *bulk_len = 0;
  auto found = arrays_.find(args.array);
  if (found == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
  const ArrayRecord& array = found->second;
  if (!InsideArray(array.row_bytes, array.rows, array.slices, args.x_bytes, args.y, args.z, args.width_bytes,
                   args.height, args.depth)) {
    error_detail_ = "an array copy's region leaves the array";
    return CUDA_ERROR_INVALID_VALUE;
  }
  void* s = nullptr;
  if (!StreamFor(args.stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  CUDA_MEMCPY3D copy{};
  copy.WidthInBytes = args.width_bytes;
  copy.Height = args.height;
  copy.Depth = args.depth;
  // The array's side, then the other.
  auto& array_type = args.to_array ? copy.dstMemoryType : copy.srcMemoryType;
  array_type = CU_MEMORYTYPE_ARRAY;
  (args.to_array ? copy.dstArray : copy.srcArray) = static_cast<CUarray>(array.handle);
  (args.to_array ? copy.dstXInBytes : copy.srcXInBytes) = args.x_bytes;
  (args.to_array ? copy.dstY : copy.srcY) = args.y;
  (args.to_array ? copy.dstZ : copy.srcZ) = args.z;
  auto& other_type = args.to_array ? copy.srcMemoryType : copy.dstMemoryType;
  const uint64_t bytes = args.width_bytes * args.height * args.depth;  // checked by the session
  switch (args.other_kind) {
    case dataplane::kArrayCopyHost:
      other_type = CU_MEMORYTYPE_HOST;
      if (args.to_array) {
        copy.srcHost = payload;
        copy.srcPitch = args.width_bytes;
        copy.srcHeight = args.height;
      } else {
        staging_.resize(bytes);
        copy.dstHost = staging_.data();
        copy.dstPitch = args.width_bytes;
        copy.dstHeight = args.height;
      }
      break;
    case dataplane::kArrayCopyDevice: {
      // The rows and slices in this session's memory: (depth-1) slices of other_height rows
      // of other_pitch bytes, (height-1) rows more, and one row's width_bytes.
      const uint64_t pitch = args.other_pitch, slice_rows = args.other_height;
      uint64_t extent = 0, part = 0;
      if ((args.height > 1 || args.depth > 1) && pitch < args.width_bytes) return CUDA_ERROR_INVALID_VALUE;
      if (args.depth > 1 && slice_rows < args.height) return CUDA_ERROR_INVALID_VALUE;
      if (__builtin_mul_overflow(pitch, slice_rows, &part) || __builtin_mul_overflow(part, args.depth - 1, &extent) ||
          __builtin_mul_overflow(pitch, args.height - 1, &part) || __builtin_add_overflow(extent, part, &extent) ||
          __builtin_add_overflow(extent, args.width_bytes, &extent) || !Owns(args.other, extent)) {
        error_detail_ = "an array copy's device memory is not the session's";
        return CUDA_ERROR_INVALID_VALUE;
      }
      other_type = CU_MEMORYTYPE_DEVICE;
      (args.to_array ? copy.srcDevice : copy.dstDevice) = Ptr(args.other);
      (args.to_array ? copy.srcPitch : copy.dstPitch) = pitch;
      (args.to_array ? copy.srcHeight : copy.dstHeight) = slice_rows;
      break;
    }
    case dataplane::kArrayCopyArray: {
      auto other = arrays_.find(args.other);
      if (other == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
      const ArrayRecord& second = other->second;
      if (!InsideArray(second.row_bytes, second.rows, second.slices, args.other_x_bytes, args.other_y, args.other_z,
                       args.width_bytes, args.height, args.depth)) {
        error_detail_ = "an array copy's region leaves the other array";
        return CUDA_ERROR_INVALID_VALUE;
      }
      other_type = CU_MEMORYTYPE_ARRAY;
      (args.to_array ? copy.srcArray : copy.dstArray) = static_cast<CUarray>(second.handle);
      (args.to_array ? copy.srcXInBytes : copy.dstXInBytes) = args.other_x_bytes;
      (args.to_array ? copy.srcY : copy.dstY) = args.other_y;
      (args.to_array ? copy.srcZ : copy.dstZ) = args.other_z;
      break;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUresult status = driver_->memcpy3d(&copy, static_cast<CUstream>(s));
  // The host side is the server's receive buffer or staging_: done before either is reused.
  if (status == CUDA_SUCCESS && args.other_kind == dataplane::kArrayCopyHost) {
    status = driver_->stream_synchronize(static_cast<CUstream>(s));
  }
  if (status == CUDA_SUCCESS && args.other_kind == dataplane::kArrayCopyHost && !args.to_array) {
    *bulk = staging_.data();
    *bulk_len = bytes;
  }
  return status;
}

// A tensor map of the driver's, over this session's own memory (module variables count, as
// for copies): the driver checks the rest as for any program.
int32_t CudaExecutor::TensorMap(const dataplane::TensorMapArgs& args, uint8_t* map) {
  const bool encode = args.kind == dataplane::kTensorMapEncodeTiled;
  if (encode ? driver_->tensor_map_encode == nullptr : driver_->tensor_map_replace == nullptr) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (!Owns(args.address, 1)) {
    error_detail_ = "a tensor map over memory that is not one of the session's allocations";
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  alignas(64) CUtensorMap made;
  CUresult status;
  if (encode) {
    status = driver_->tensor_map_encode(
        &made, static_cast<CUtensorMapDataType>(args.data_type), args.rank, AsPointer(args.address),
        reinterpret_cast<const cuuint64_t*>(args.dims), reinterpret_cast<const cuuint64_t*>(args.strides),
        reinterpret_cast<const cuuint32_t*>(args.box), reinterpret_cast<const cuuint32_t*>(args.element_strides),
        static_cast<CUtensorMapInterleave>(args.interleave), static_cast<CUtensorMapSwizzle>(args.swizzle),
        static_cast<CUtensorMapL2promotion>(args.l2_promotion), static_cast<CUtensorMapFloatOOBfill>(args.oob_fill));
  } else {
    std::memcpy(&made, args.map, sizeof(made));
    status = driver_->tensor_map_replace(&made, AsPointer(args.address));
  }
  if (status != CUDA_SUCCESS) return status;
  std::memcpy(map, &made, sizeof(made));
  return CUDA_SUCCESS;
}

int32_t CudaExecutor::CreateSurfaceObject(uint64_t array, uint64_t* handle) {
  if (driver_->surf_create == nullptr || driver_->surf_destroy == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  auto found = arrays_.find(array);
  if (found == arrays_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUDA_RESOURCE_DESC resource{};
  resource.resType = CU_RESOURCE_TYPE_ARRAY;
  resource.res.array.hArray = static_cast<CUarray>(found->second.handle);
  CUsurfObject made = 0;
  CUresult status = driver_->surf_create(&made, &resource);
  if (status != CUDA_SUCCESS) return status;
  surface_objects_[made] = array;
  *handle = made;
  return CUDA_SUCCESS;
}

int32_t CudaExecutor::DestroySurfaceObject(uint64_t handle) {
  return DestroyListed(&surface_objects_, handle, driver_->surf_destroy);
}

int32_t CudaExecutor::CreateStream(uint64_t stream, uint32_t flags, int32_t priority) {
  if (stream == 0 || streams_.count(stream)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUstream created = nullptr;
  CUresult status = driver_->stream_create(&created, flags, priority);
  if (status == CUDA_SUCCESS) streams_[stream] = created;
  return status;
}

int32_t CudaExecutor::DestroyStream(uint64_t stream) {
  auto found = streams_.find(stream);
  if (found == streams_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUresult status = driver_->stream_destroy(static_cast<CUstream>(found->second));
  streams_.erase(found);
  return status;
}

int32_t CudaExecutor::SynchronizeStream(uint64_t stream) {
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  if (stream == 0) return driver_->synchronize();
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  return driver_->stream_synchronize(static_cast<CUstream>(s));
}

int32_t CudaExecutor::QueryStream(uint64_t stream) {
  void* s = nullptr;
  if (!StreamFor(stream, &s)) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->stream_query(static_cast<CUstream>(s));
}

int32_t CudaExecutor::StreamWaitEvent(uint64_t stream, uint64_t event) {
  void* s = nullptr;
  auto found = events_.find(event);
  if (!StreamFor(stream, &s) || found == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->stream_wait_event(static_cast<CUstream>(s), static_cast<CUevent>(found->second), 0);
}

int32_t CudaExecutor::CreateEvent(uint64_t event, uint32_t flags) {
  if (event == 0 || events_.count(event)) return CUDA_ERROR_INVALID_VALUE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUevent created = nullptr;
  CUresult status = driver_->event_create(&created, flags);
  if (status == CUDA_SUCCESS) events_[event] = created;
  return status;
}

int32_t CudaExecutor::DestroyEvent(uint64_t event) {
  auto found = events_.find(event);
  if (found == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  CUresult status = driver_->event_destroy(static_cast<CUevent>(found->second));
  events_.erase(found);
  return status;
}

int32_t CudaExecutor::RecordEvent(uint64_t event, uint64_t stream) {
  void* s = nullptr;
  auto found = events_.find(event);
  if (!StreamFor(stream, &s) || found == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->event_record(static_cast<CUevent>(found->second), static_cast<CUstream>(s));
}

int32_t CudaExecutor::SynchronizeEvent(uint64_t event) {
  auto found = events_.find(event);
  if (found == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->event_synchronize(static_cast<CUevent>(found->second));
}

int32_t CudaExecutor::QueryEvent(uint64_t event) {
  auto found = events_.find(event);
  if (found == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->event_query(static_cast<CUevent>(found->second));
}

int32_t CudaExecutor::ElapsedTime(uint64_t start, uint64_t end, float* milliseconds) {
  auto first = events_.find(start);
  auto second = events_.find(end);
  if (first == events_.end() || second == events_.end()) return CUDA_ERROR_INVALID_HANDLE;
  if (int32_t status = Enter(); status != CUDA_SUCCESS) return status;
  return driver_->event_elapsed(milliseconds, static_cast<CUevent>(first->second),
                                static_cast<CUevent>(second->second));
}

}  // namespace gpupool::devices
