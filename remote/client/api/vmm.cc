// The virtual memory management API (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree and their queries), for
// programs that manage device address space themselves (growable buffers, striping across
// GPUs, the CUDA samples' vectorAddMMAP).
//
// The library already chooses every device address of the process (runtime.h), so the
// pieces map onto what the agent offers:
// - a reservation is a range of this process's addresses, in a window of its own that no
//   other allocation uses;
// - a physical allocation (cuMemCreate) is a record here: size and GPU;
// - it becomes device memory when a mapping of it is made accessible (cuMemSetAccess):
//   an allocation on its GPU placed at the mapped address, as cuMemAlloc's memory is.
//   Before that, the address is not device memory, as on a GPU.
// - Unmapping keeps the memory on the GPU while the physical allocation lives (a program
//   may map it again, usually at a larger reservation when a buffer grows); mapping it at
//   another address moves it there on the GPU. It is freed when the last reference to the
//   physical allocation goes and it is unmapped.
//
// Limits, each refused with CUDA_ERROR_NOT_SUPPORTED and a log line naming it: a mapping
// covers a whole physical allocation (offset 0, its size), a physical allocation has one
// mapping at a time (no aliases), no shareable handles (IPC), and memory is accessible only
// from its own GPU (remote GPUs do not reach each other's memory; cuDeviceCanAccessPeer
// says 0). Adjacent mappings are separate allocations on the agent: a copy or memset over
// several is cut at their seams (api_memory.cc, SpanPieces).
//
// Offered on the sim only, as the device attribute VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
// says. (The cuda executor places this process's allocations too, but it has not been
// tried with this API.)
#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/protocol/protocol.h"

namespace dp = gpupool::dataplane;
using namespace gpupool::client;  // NOLINT

namespace {

// The granularity a GPU reports for both MINIMUM and RECOMMENDED: 2 MiB pages.
constexpr uint64_t kGranularity = uint64_t{2} << 20;
// Reservations: [128 TiB, 160 TiB). Above where Linux places user mappings (x86-64 4-level
// paging ends at 128 TiB), below the 2^48 the agents accept, apart from cuMemAlloc's
// addresses (32 TiB on) and page-locked memory's window (64 to 96 TiB), or in a
// ThreadSanitizer build their windows below 512 GiB (Runtime::kDeviceAddresses).
constexpr uint64_t kReserveWindow = uint64_t{128} << 40;
constexpr uint64_t kReserveWindowEnd = uint64_t{160} << 40;

struct Physical {
  uint64_t size;
  int device;
  CUmemAllocationProp prop;
  int references = 1;      // cuMemCreate and each cuMemRetainAllocationHandle
  uint64_t mapped_at = 0;  // the mapping's address, 0 when unmapped
  // Where its memory is on the GPU (0: none yet). Equals mapped_at while accessible; after
  // an unmap it stays where it was, detached (not in the allocation table), until the
  // physical allocation is mapped again or freed.
  uint64_t placed_at = 0;
  std::vector<char> saved;  // contents moved off the GPU (see EvictDetached)
  bool has_saved = false;
};

struct Mapping {
  uint64_t size;
  CUmemGenericAllocationHandle handle;
  unsigned long long access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
};

struct State {
  std::mutex mu;
  std::map<uint64_t, uint64_t> reservations;  // start -> size
  std::map<CUmemGenericAllocationHandle, Physical> physicals;
  std::map<uint64_t, Mapping> mappings;  // address -> mapping
  CUmemGenericAllocationHandle next_handle = 0x7a3000001;
};

State& state() {
  static State* s = new State;  // never destroyed: used until the process ends
  return *s;
}

bool Aligned(uint64_t value) { return value % kGranularity == 0; }

bool OffersVmmApi(int device) {
  Device* d = Runtime::Get().device(device);
  return d != nullptr && std::strcmp(d->description().executor, "sim") == 0;
}

// The reservation holding [address, address+size), or reservations.end().
std::map<uint64_t, uint64_t>::iterator ReservationOf(State& s, uint64_t address, uint64_t size) {
  auto after = s.reservations.upper_bound(address);
  if (after == s.reservations.begin()) return s.reservations.end();
  auto found = std::prev(after);
  if (address - found->first > found->second || size > found->second - (address - found->first)) {
    return s.reservations.end();
  }
  return found;
}

bool OverlapsMapping(State& s, uint64_t address, uint64_t size) {
  auto after = s.mappings.lower_bound(address);
  if (after != s.mappings.end() && after->first < address + size) return true;
  if (after == s.mappings.begin()) return false;
  auto before = std::prev(after);
  return before->first + before->second.size > address;
}

bool RangeFree(State& s, uint64_t address, uint64_t size) {
  if (address < kReserveWindow || address > kReserveWindowEnd || size > kReserveWindowEnd - address) {
    return false;
  }
  auto after = s.reservations.lower_bound(address);
  if (after != s.reservations.end() && after->first < address + size) return false;
  if (after == s.reservations.begin()) return true;
  auto before = std::prev(after);
  return before->first + before->second <= address;
}

// The mapping holding `address`, or mappings.end().
std::map<uint64_t, Mapping>::iterator MappingHolding(State& s, uint64_t address) {
  auto after = s.mappings.upper_bound(address);
  if (after == s.mappings.begin()) return s.mappings.end();
  auto found = std::prev(after);
  return address - found->first < found->second.size ? found : s.mappings.end();
}

// The addresses of the mappings that make up [address, address+size) end to end; false
// when the range is not whole mappings (a gap, or a mapping running past either end).
bool WholeMappings(State& s, uint64_t address, uint64_t size, std::vector<uint64_t>* covered) {
  covered->clear();
  const uint64_t end = address + size;
  for (uint64_t at = address; at < end;) {
    auto found = s.mappings.find(at);
    if (found == s.mappings.end() || found->second.size > end - at) return false;
    covered->push_back(at);
    at += found->second.size;
  }
  return true;
}

CUresult FreeOnDevice(int device, uint64_t address) {
  dp::MemFreeArgs args{address};
  return Runtime::Get().Call(device, dp::kOpMemFree, &args, sizeof(args));
}

// Device memory of `size` on `device` at `address`; CUDA_ERROR_NOT_SUPPORTED when the
// executor places it elsewhere.
CUresult PlaceOnDevice(int device, uint64_t address, uint64_t size) {
  dp::MemAllocArgs args{size, address};
  std::string out;
  CUresult status = Runtime::Get().Call(device, dp::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
  if (status != CUDA_SUCCESS) return status;
  dp::MemAllocResult result{0};
  if (out.size() != sizeof(result)) return CUDA_ERROR_UNKNOWN;
  std::memcpy(&result, out.data(), sizeof(result));
  if (result.dptr != address) {
    (void)FreeOnDevice(device, result.dptr);
    LogError("cuMemSetAccess: GPU %d cannot place memory at the mapped address", device);
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  return CUDA_SUCCESS;
}

// Moves the memory of a detached physical allocation that lies in [address, address+size)
// off the GPU (into this process), so that the range can be placed anew: the program freed
// the reservation it was in, or maps something else there.
CUresult EvictDetached(State& s, uint64_t address, uint64_t size) {
  for (auto& [handle, physical] : s.physicals) {
    // Detached: on the GPU, but not at its mapping's address (unmapped, or mapped anew and
    // not yet accessible there).
    if (physical.placed_at == 0 || physical.placed_at == physical.mapped_at) continue;
    if (physical.placed_at >= address + size || physical.placed_at + physical.size <= address) {
      continue;
    }
    physical.saved.resize(physical.size);
    dp::MemcpyDtoHArgs args{physical.placed_at, physical.size, 0};
    CUresult status = Runtime::Get().Call(physical.device, dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0,
                                          physical.saved.data(), physical.size);
    if (status != CUDA_SUCCESS) return status;
    if (status = FreeOnDevice(physical.device, physical.placed_at); status != CUDA_SUCCESS) {
      return status;
    }
    physical.has_saved = true;
    physical.placed_at = 0;
  }
  return CUDA_SUCCESS;
}

// Frees `physical`'s memory on its GPU once nothing refers to it and it is unmapped.
CUresult MaybeFree(State& s, CUmemGenericAllocationHandle handle) {
  auto found = s.physicals.find(handle);
  if (found == s.physicals.end()) return CUDA_SUCCESS;
  Physical& physical = found->second;
  if (physical.references > 0 || physical.mapped_at != 0) return CUDA_SUCCESS;
  CUresult status = CUDA_SUCCESS;
  if (physical.placed_at != 0) status = FreeOnDevice(physical.device, physical.placed_at);
  s.physicals.erase(found);
  return status;
}

// Makes `mapping` (at `address`) device memory: places its physical allocation there,
// moving or restoring earlier contents.
CUresult MakeAccessible(State& s, uint64_t address, Mapping& mapping) {
  Physical& physical = s.physicals.at(mapping.handle);
  if (physical.placed_at == address) {
    Runtime::Get().AddAllocation(address, physical.size, physical.device);
    return CUDA_SUCCESS;
  }
  if (CUresult status = EvictDetached(s, address, mapping.size); status != CUDA_SUCCESS) {
    return status;
  }
  if (CUresult status = PlaceOnDevice(physical.device, address, physical.size); status != CUDA_SUCCESS) {
    return status;
  }
  if (physical.placed_at != 0) {
    // Mapped before at another address: the bytes move on the GPU.
    dp::MemcpyDtoDArgs args{address, physical.placed_at, physical.size, 0};
    CUresult status = Runtime::Get().Post(physical.device, dp::kOpMemcpyDtoD, &args, sizeof(args));
    if (status == CUDA_SUCCESS) status = FreeOnDevice(physical.device, physical.placed_at);
    if (status != CUDA_SUCCESS) {
      (void)FreeOnDevice(physical.device, address);
      return status;
    }
  } else if (physical.has_saved) {
    dp::MemcpyHtoDArgs args{address, physical.size, 0};
    CUresult status = Runtime::Get().Post(physical.device, dp::kOpMemcpyHtoD, &args, sizeof(args),
                                          physical.saved.data(), physical.size);
    // The request holds its own copy of the bytes once posted.
    if (status != CUDA_SUCCESS) {
      (void)FreeOnDevice(physical.device, address);
      return status;
    }
    physical.saved.clear();
    physical.saved.shrink_to_fit();
    physical.has_saved = false;
  }
  physical.placed_at = address;
  Runtime::Get().AddAllocation(address, physical.size, physical.device);
  return CUDA_SUCCESS;
}

// Takes `mapping` out of the allocation table; its memory stays on the GPU.
void MakeInaccessible(uint64_t address, Mapping& mapping) {
  if (mapping.access == CU_MEM_ACCESS_FLAGS_PROT_NONE) return;
  int device = 0;
  (void)Runtime::Get().RemoveAllocation(address, &device);
  mapping.access = CU_MEM_ACCESS_FLAGS_PROT_NONE;
}

CUresult CheckProp(const CUmemAllocationProp* prop) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (Runtime::Get().device(prop->location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                                                CUmemAllocationGranularity_flags option) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult status = CheckProp(prop); status != CUDA_SUCCESS) return status;
    *granularity = kGranularity;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                                      unsigned long long flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (ptr == nullptr || size == 0 || !Aligned(size) || flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (alignment == 0) alignment = kGranularity;
    if ((alignment & (alignment - 1)) != 0 || alignment % kGranularity != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    // The address asked for when it is free (a growing buffer asks for the addresses right
    // after its reservation); else the first free range of the window.
    uint64_t chosen = 0;
    if (addr != 0 && addr % alignment == 0 && RangeFree(s, addr, size)) {
      chosen = addr;
    } else {
      uint64_t candidate = kReserveWindow;
      for (const auto& [start, length] : s.reservations) {
        if (start >= candidate + size) break;
        candidate = std::max(candidate, (start + length + alignment - 1) / alignment * alignment);
      }
      if (candidate + size > kReserveWindowEnd) return CUDA_ERROR_OUT_OF_MEMORY;
      chosen = candidate;
    }
    s.reservations[chosen] = size;
    *ptr = chosen;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto found = s.reservations.find(ptr);
    if (found == s.reservations.end() || found->second != size) return CUDA_ERROR_INVALID_VALUE;
    if (OverlapsMapping(s, ptr, size)) {
      LogError("cuMemAddressFree: the range at 0x%llx still has mappings; cuMemUnmap them first",
               static_cast<unsigned long long>(ptr));
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult status = EvictDetached(s, ptr, size); status != CUDA_SUCCESS) return status;
    s.reservations.erase(found);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                                              const CUmemAllocationProp* prop, unsigned long long flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (handle == nullptr || size == 0 || !Aligned(size) || flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (CUresult status = CheckProp(prop); status != CUDA_SUCCESS) return status;
    if (prop->requestedHandleTypes != CU_MEM_HANDLE_TYPE_NONE) {
      return static_cast<CUresult>(ReportUnsupported("cuMemCreate with a shareable handle type",
                                                     "remote GPU memory is not shared between "
                                                     "processes (no IPC)"));
    }
    if (!OffersVmmApi(prop->location.id)) {
      return static_cast<CUresult>(
          ReportUnsupported("cuMemCreate", "the virtual memory API is offered on the sim's GPUs only"));
    }
    Device* device = Runtime::Get().device(prop->location.id);
    if (size > device->description().total_memory) return CUDA_ERROR_OUT_OF_MEMORY;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    CUmemGenericAllocationHandle id = s.next_handle++;
    Physical physical{};
    physical.size = size;
    physical.device = prop->location.id;
    physical.prop = *prop;
    s.physicals.emplace(id, std::move(physical));
    *handle = id;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto found = s.physicals.find(handle);
    if (found == s.physicals.end() || found->second.references == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    --found->second.references;
    return MaybeFree(s, handle);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                           CUmemGenericAllocationHandle handle, unsigned long long flags) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (ptr == 0 || size == 0 || !Aligned(ptr) || !Aligned(size) || !Aligned(offset) || flags != 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto physical = s.physicals.find(handle);
    if (physical == s.physicals.end() || physical->second.references == 0) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    if (offset > physical->second.size || size > physical->second.size - offset) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (ReservationOf(s, ptr, size) == s.reservations.end() || OverlapsMapping(s, ptr, size)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (offset != 0 || size != physical->second.size) {
      return static_cast<CUresult>(
          ReportUnsupported("cuMemMap of part of a physical allocation",
                            "each mapping is one allocation on the GPU's agent; map whole allocations"));
    }
    if (physical->second.mapped_at != 0) {
      return static_cast<CUresult>(
          ReportUnsupported("cuMemMap of a physical allocation that is mapped already",
                            "an allocation on a remote GPU has one address at a time; cuMemUnmap it first"));
    }
    physical->second.mapped_at = ptr;
    s.mappings[ptr] = Mapping{size, handle};
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (ptr == 0 || size == 0) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    // The range must be whole mappings, end to end (a GPU unmaps whole pages; ours are
    // whole allocations).
    std::vector<uint64_t> covered;
    if (!WholeMappings(s, ptr, size, &covered)) return CUDA_ERROR_INVALID_VALUE;
    // Memory freed here is freed by the agent after the work sent before (one ordered
    // connection per GPU).
    CUresult first_error = CUDA_SUCCESS;
    for (uint64_t at : covered) {
      Mapping mapping = s.mappings.at(at);
      MakeInaccessible(at, mapping);
      s.mappings.erase(at);
      s.physicals.at(mapping.handle).mapped_at = 0;
      if (CUresult status = MaybeFree(s, mapping.handle); status != CUDA_SUCCESS && first_error == CUDA_SUCCESS) {
        first_error = status;
      }
    }
    return first_error;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                                 size_t count) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (ptr == 0 || size == 0 || desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    std::vector<uint64_t> covered;
    if (!WholeMappings(s, ptr, size, &covered)) return CUDA_ERROR_INVALID_VALUE;
    // What each access descriptor asks, checked before anything changes.
    for (uint64_t at : covered) {
      const Physical& physical = s.physicals.at(s.mappings.at(at).handle);
      for (size_t i = 0; i < count; ++i) {
        if (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
        if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        if (Runtime::Get().device(desc[i].location.id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
        if (desc[i].location.id != physical.device) {
          if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE) continue;
          // cuDeviceCanAccessPeer says 0 for every pair: as a GPU without peer access.
          return CUDA_ERROR_INVALID_DEVICE;
        }
        if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ) {
          return static_cast<CUresult>(ReportUnsupported("cuMemSetAccess with CU_MEM_ACCESS_FLAGS_PROT_READ",
                                                         "remote GPU memory is read-write or not mapped"));
        }
      }
    }
    for (uint64_t at : covered) {
      Mapping& mapping = s.mappings.at(at);
      int device = s.physicals.at(mapping.handle).device;
      unsigned long long wanted = mapping.access;
      for (size_t i = 0; i < count; ++i) {
        if (desc[i].location.id == device) wanted = desc[i].flags;
      }
      if (wanted == mapping.access) continue;
      if (wanted == CU_MEM_ACCESS_FLAGS_PROT_NONE) {
        MakeInaccessible(at, mapping);
        continue;
      }
      if (CUresult status = MakeAccessible(s, at, mapping); status != CUDA_SUCCESS) return status;
      mapping.access = wanted;
    }
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location,
                                                 CUdeviceptr ptr) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (Runtime::Get().device(location->id) == nullptr) return CUDA_ERROR_INVALID_DEVICE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto found = MappingHolding(s, ptr);
    if (found == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    bool own = s.physicals.at(found->second.handle).device == location->id;
    *flags = own ? found->second.access : static_cast<unsigned long long>(CU_MEM_ACCESS_FLAGS_PROT_NONE);
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const auto ptr = reinterpret_cast<uint64_t>(addr);
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto found = MappingHolding(s, ptr);
    if (found == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    ++s.physicals.at(found->second.handle).references;
    *handle = found->second.handle;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                                         CUmemGenericAllocationHandle handle) {
  GPUPOOL_BODY({
    if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    std::lock_guard<std::mutex> lock(s.mu);
    auto found = s.physicals.find(handle);
    if (found == s.physicals.end() || found->second.references == 0) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *prop = found->second.prop;
    return CUDA_SUCCESS;
  });
}
