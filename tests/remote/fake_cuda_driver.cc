// A stand-in for the GPU host's libcuda.so.1, for testing the cuda executor on machines
// without a GPU: one device (UUID bytes 00..0f), device memory in host RAM. With the
// stand-in NVML (fake_nvml.cc) beside it, gpupool-dataplane-testd --backend cuda serves it
// (the forwarded data path end to end, kernels aside: they do nothing here), of compute
// capability 7.5, or GPUPOOL_FAKE_CUDA_CC. It implements
// only the entry points the executor resolves, with plain C types (same ABI as cuda.h's).
// Every memory operation that reaches it is counted (fake_cuda_memory_calls), so a test
// can tell whether the executor let a request through to the driver at all.
//
// The virtual memory management API (cuMemAddressReserve, cuMemCreate, cuMemMap, ...)
// keeps tables of reservations, physical handles and mappings, with the rules the real
// driver documents: 2 MiB granules, the reserve address is only a hint (a range that meets
// another reservation or a cuMemAlloc block is placed elsewhere), a mapping covers one
// whole handle inside one reservation and is unreachable until cuMemSetAccess, unmapping
// takes the whole mapping, and a reservation is freed whole and only once unmapped. Tests
// count what is live (fake_cuda_live_vmm) and steer it (fake_cuda_vmm_control).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace {

using CUresult = int;
constexpr CUresult kSuccess = 0;
constexpr CUresult kInvalidValue = 1;
constexpr CUresult kOutOfMemory = 2;
constexpr CUresult kInvalidHandle = 400;
constexpr CUresult kIllegalAddress = 700;
constexpr uint64_t kGranularity = uint64_t{2} << 20;

// cuda.h's layouts of the structures the VMM calls take.
struct MemLocation {
  int type;
  int id;
};  // CU_MEM_LOCATION_TYPE_DEVICE = 1
struct MemAllocationProp {
  int type;  // CU_MEM_ALLOCATION_TYPE_PINNED = 1
  int requested_handle_types;
  MemLocation location;
  void* win32_metadata;
  unsigned char alloc_flags[8];
};
struct MemAccessDesc {
  MemLocation location;
  int flags;
};  // READWRITE = 3

bool IsThisDevice(const MemLocation& location) { return location.type == 1 && location.id == 0; }

std::mutex mu;
std::map<uint64_t, std::vector<unsigned char>> blocks;  // device address -> bytes
uint64_t next_address = 0x7000000000ull;
uint64_t memory_calls = 0;
int stream_or_event = 0;

std::map<uint64_t, uint64_t> reservations;  // start -> size
std::map<uint64_t, uint64_t> handles;       // handle -> size (created, not released)
uint64_t next_handle = 1;
uint64_t next_elsewhere = 0x600000000000ull;  // where hints that are not honoured go
struct Mapping {
  uint64_t size;
  uint64_t handle;
  bool accessible;
};
std::map<uint64_t, Mapping> mappings;  // device address -> mapping; bytes in `blocks`
// Test controls (fake_cuda_vmm_control).
int vmm_supported = 1;
int reserve_elsewhere = 0;                                                // this many reservations ignore their hint
int fail_create_after = -1, fail_map_after = -1, fail_access_after = -1;  // -1: never

// Counts down a failure control: true when this call is to fail.
bool Fails(int* after) {
  if (*after < 0) return false;
  return (*after)-- == 0;
}

// True when [start, start+size) meets a range of `ranges` (start -> size).
bool Meets(const std::map<uint64_t, uint64_t>& ranges, uint64_t start, uint64_t size) {
  auto after = ranges.lower_bound(start);
  if (after != ranges.end() && after->first < start + size) return true;
  return after != ranges.begin() && std::prev(after)->first + std::prev(after)->second > start;
}

// The bytes of [address, address+size) as pieces of blocks: inside one block, or across
// mappings that follow each other without a gap (VA reserved and mapped piece by piece is
// one range to the GPU; cuMemAlloc blocks are never adjacent). False if any byte is not
// reachable. REQUIRES: mu.
using Piece = std::pair<unsigned char*, size_t>;
bool Find(uint64_t address, uint64_t size, std::vector<Piece>* pieces) {
  pieces->clear();
  auto block = blocks.upper_bound(address);
  if (block == blocks.begin()) return false;
  --block;
  while (true) {
    auto& [start, bytes] = *block;
    // A mapped range is reachable once cuMemSetAccess opened it.
    auto mapped = mappings.find(start);
    if (mapped != mappings.end() && !mapped->second.accessible) return false;
    uint64_t offset = address - start;
    if (offset >= bytes.size()) return false;
    size_t here = static_cast<size_t>(std::min<uint64_t>(size, bytes.size() - offset));
    pieces->emplace_back(bytes.data() + offset, here);
    size -= here;
    address += here;
    if (size == 0) return true;
    if (mapped == mappings.end() || ++block == blocks.end() || block->first != address ||
        mappings.count(address) == 0) {
      return false;
    }
  }
}

// Copies between the host and device range [address, address+size). REQUIRES: mu.
CUresult CopyIn(uint64_t address, const void* from, size_t size) {
  std::vector<Piece> pieces;
  if (!Find(address, size, &pieces)) return kIllegalAddress;
  const auto* source = static_cast<const unsigned char*>(from);
  for (auto& [to, length] : pieces) {
    std::memcpy(to, source, length);
    source += length;
  }
  return kSuccess;
}
CUresult CopyOut(void* to, uint64_t address, size_t size) {
  std::vector<Piece> pieces;
  if (!Find(address, size, &pieces)) return kIllegalAddress;
  auto* target = static_cast<unsigned char*>(to);
  for (auto& [from, length] : pieces) {
    std::memcpy(target, from, length);
    target += length;
  }
  return kSuccess;
}

template <typename T>
CUresult Fill(uint64_t address, T value, size_t count) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  std::vector<unsigned char> pattern(count * sizeof(T));
  for (size_t i = 0; i < count; ++i) std::memcpy(&pattern[i * sizeof(T)], &value, sizeof(T));
  return CopyIn(address, pattern.data(), pattern.size());
}

// The device's compute capability as major * 10 + minor: 75, or GPUPOOL_FAKE_CUDA_CC
// ("9.0"), as the stand-in NVML reads it too.
int FakeComputeCapability() {
  const char* given = std::getenv("GPUPOOL_FAKE_CUDA_CC");
  int major = 0, minor = 0;
  if (given != nullptr && std::sscanf(given, "%d.%d", &major, &minor) == 2) return major * 10 + minor;
  return 75;
}

}  // namespace

extern "C" {

uint64_t fake_cuda_memory_calls() {
  std::lock_guard<std::mutex> lock(mu);
  return memory_calls;
}
uint64_t fake_cuda_live_allocations() {
  std::lock_guard<std::mutex> lock(mu);
  return blocks.size() - mappings.size();  // cuMemAlloc's
}
// What the VMM calls left: what = 0 reservations, 1 handles, 2 mappings.
uint64_t fake_cuda_live_vmm(int what) {
  std::lock_guard<std::mutex> lock(mu);
  return what == 0 ? reservations.size() : what == 1 ? handles.size() : mappings.size();
}
// Steers the VMM calls: what = 0 device supports VMM (value 0/1, read at executor Create),
// 1 the next `value` reservations ignore their hint, 2/3/4 cuMemCreate/cuMemMap/
// cuMemSetAccess fail after `value` more successful calls (-1: never).
void fake_cuda_vmm_control(int what, int value) {
  std::lock_guard<std::mutex> lock(mu);
  switch (what) {
    case 0:
      vmm_supported = value;
      break;
    case 1:
      reserve_elsewhere = value;
      break;
    case 2:
      fail_create_after = value;
      break;
    case 3:
      fail_map_after = value;
      break;
    case 4:
      fail_access_after = value;
      break;
  }
}

CUresult cuInit(unsigned) { return kSuccess; }
CUresult cuDeviceGetCount(int* count) {
  *count = 1;
  return kSuccess;
}
CUresult cuDeviceGet(int* device, int ordinal) {
  *device = ordinal;
  return ordinal == 0 ? kSuccess : kInvalidValue;
}
CUresult cuDeviceGetUuid(unsigned char* uuid, int) {
  for (int i = 0; i < 16; ++i) uuid[i] = static_cast<unsigned char>(i);
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRetain(void** context, int) {
  *context = &stream_or_event;
  return kSuccess;
}
CUresult cuDevicePrimaryCtxRelease_v2(int) { return kSuccess; }
CUresult cuCtxSetCurrent(void*) { return kSuccess; }
CUresult cuCtxSynchronize() { return kSuccess; }

CUresult cuMemAlloc_v2(uint64_t* dptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  if (size == 0) return kInvalidValue;
  *dptr = next_address;
  blocks[next_address].resize(size);
  next_address += (size + 4095) / 4096 * 4096 + 4096;
  return kSuccess;
}
CUresult cuMemFree_v2(uint64_t dptr) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  if (mappings.count(dptr)) return kInvalidValue;  // VMM memory goes with cuMemUnmap
  return blocks.erase(dptr) ? kSuccess : kInvalidValue;
}
CUresult cuDeviceGetAttribute(int* value, int attribute, int device) {
  if (device != 0) return kInvalidValue;
  std::lock_guard<std::mutex> lock(mu);
  switch (attribute) {
    case 75:
      *value = FakeComputeCapability() / 10;
      break;  // COMPUTE_CAPABILITY_MAJOR: a compute capability 7.5 GPU unless told
    case 76:
      *value = FakeComputeCapability() % 10;
      break;  // COMPUTE_CAPABILITY_MINOR
    case 102:
      *value = vmm_supported;
      break;  // VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
    case 16:
      *value = 40;
      break;  // MULTIPROCESSOR_COUNT (a T4's)
    default:
      *value = 0;
  }
  return kSuccess;
}
// The one device, at the bus id the stand-in NVML (fake_nvml.cc) names.
CUresult cuDeviceGetByPCIBusId(int* device, const char* bus_id) {
  if (bus_id == nullptr || std::strstr(bus_id, ":17:00.0") == nullptr) return kInvalidValue;
  *device = 0;
  return kSuccess;
}
CUresult cuMemGetAllocationGranularity(size_t* granularity, const MemAllocationProp* prop, int) {
  if (prop == nullptr || prop->type != 1 || !IsThisDevice(prop->location)) return kInvalidValue;
  *granularity = kGranularity;
  return kSuccess;
}
CUresult cuMemAddressReserve(uint64_t* ptr, size_t size, size_t alignment, uint64_t addr, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (size == 0 || size % kGranularity != 0 || flags != 0) return kInvalidValue;
  if (alignment != 0 && (alignment & (alignment - 1)) != 0) return kInvalidValue;
  bool honoured = addr != 0 && addr % kGranularity == 0 && reserve_elsewhere == 0 && !Meets(reservations, addr, size);
  // Nor over cuMemAlloc's blocks (mapped blocks lie inside reservations).
  for (auto& [start, bytes] : blocks) {
    if (honoured && start < addr + size && start + bytes.size() > addr) honoured = false;
  }
  if (reserve_elsewhere > 0) --reserve_elsewhere;
  if (!honoured) {
    addr = next_elsewhere;
    next_elsewhere += size + kGranularity;
  }
  reservations[addr] = size;
  *ptr = addr;
  return kSuccess;
}
CUresult cuMemAddressFree(uint64_t ptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  auto found = reservations.find(ptr);
  if (found == reservations.end() || found->second != size) return kInvalidValue;
  auto mapped = mappings.lower_bound(ptr);
  if (mapped != mappings.end() && mapped->first < ptr + size) return kInvalidValue;  // still mapped
  reservations.erase(found);
  return kSuccess;
}
CUresult cuMemCreate(uint64_t* handle, size_t size, const MemAllocationProp* prop, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(mu);
  if (size == 0 || size % kGranularity != 0 || flags != 0 || prop == nullptr || prop->type != 1 ||
      !IsThisDevice(prop->location)) {
    return kInvalidValue;
  }
  if (Fails(&fail_create_after)) return kOutOfMemory;
  *handle = next_handle++;
  handles[*handle] = size;
  return kSuccess;
}
CUresult cuMemRelease(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  return handles.erase(handle) ? kSuccess : kInvalidValue;
}
CUresult cuMemMap(uint64_t ptr, size_t size, size_t offset, uint64_t handle, unsigned long long flags) {
  std::lock_guard<std::mutex> lock(mu);
  auto created = handles.find(handle);
  if (created == handles.end() || created->second != size || offset != 0 || flags != 0) {
    return kInvalidValue;
  }
  auto reserved = reservations.upper_bound(ptr);
  if (reserved == reservations.begin()) return kInvalidValue;
  --reserved;
  if (ptr + size > reserved->first + reserved->second) return kInvalidValue;  // not inside one
  auto mapped = mappings.lower_bound(ptr);
  bool meets_after = mapped != mappings.end() && mapped->first < ptr + size;
  bool meets_before = mapped != mappings.begin() && std::prev(mapped)->first + std::prev(mapped)->second.size > ptr;
  if (meets_after || meets_before) return kInvalidValue;  // already mapped
  if (Fails(&fail_map_after)) return kOutOfMemory;
  mappings[ptr] = Mapping{size, handle, false};
  blocks[ptr].resize(size);
  return kSuccess;
}
CUresult cuMemUnmap(uint64_t ptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu);
  auto found = mappings.find(ptr);
  if (found == mappings.end() || found->second.size != size) return kInvalidValue;
  mappings.erase(found);
  blocks.erase(ptr);
  return kSuccess;
}
CUresult cuMemSetAccess(uint64_t ptr, size_t size, const MemAccessDesc* desc, size_t count) {
  std::lock_guard<std::mutex> lock(mu);
  if (count != 1 || desc == nullptr || !IsThisDevice(desc->location) || desc->flags != 3) {
    return kInvalidValue;
  }
  auto found = mappings.find(ptr);
  if (found == mappings.end() || found->second.size != size) return kInvalidValue;
  if (Fails(&fail_access_after)) return kInvalidValue;
  found->second.accessible = true;
  return kSuccess;
}
CUresult cuMemGetInfo_v2(size_t* free, size_t* total) {
  *free = *total = size_t{1} << 30;
  return kSuccess;
}
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  return CopyIn(dst, src, size);
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  return CopyOut(dst, src, size);
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t size, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  std::vector<unsigned char> bytes(size);
  if (CopyOut(bytes.data(), src, size) != kSuccess) return kIllegalAddress;
  return CopyIn(dst, bytes.data(), size);
}
CUresult cuMemsetD8Async(uint64_t dst, unsigned char value, size_t count, void*) { return Fill(dst, value, count); }
CUresult cuMemsetD16Async(uint64_t dst, unsigned short value, size_t count, void*) { return Fill(dst, value, count); }
CUresult cuMemsetD32Async(uint64_t dst, unsigned value, size_t count, void*) { return Fill(dst, value, count); }

// Module images: a fatbin (magic 0xBA55ED50) is refused as a driver refuses PTX it JITs
// alone that calls functions of other units (CUDA_ERROR_INVALID_PTX); the linker's output
// ("linked N") and anything else load.
constexpr CUresult kInvalidPtx = 218;
// Fatbins handed to cuModuleLoadData (refused, as a driver refuses one whose PTX is several
// units; the cuda executor hands it none of PTX alone).
uint64_t fatbin_loads = 0;
uint64_t fake_cuda_fatbin_loads() {
  std::lock_guard<std::mutex> lock(mu);
  return fatbin_loads;
}
// Whether a fatbin (its 16-byte header, then entries: kind 2 an ELF, the entry header's
// size at 4 and its padded payload's at 8) holds SASS.
bool FatbinHoldsSass(const unsigned char* fatbin) {
  uint64_t size = 0;
  std::memcpy(&size, fatbin + 8, sizeof(size));
  for (uint64_t at = 16; at + 16 <= 16 + size;) {
    uint16_t kind = 0;
    uint32_t header = 0, payload = 0;
    std::memcpy(&kind, fatbin + at, sizeof(kind));
    std::memcpy(&header, fatbin + at + 4, sizeof(header));
    std::memcpy(&payload, fatbin + at + 8, sizeof(payload));
    if (kind == 2) return true;
    if (header == 0) return false;
    at += header + payload;
  }
  return false;
}
// A fatbin loads where it holds SASS (a program's, whose SASS the stand-in takes for its
// own); one of PTX alone is refused, as a driver's JIT of the client's link output crashed
// (the executor must never hand it over: fake_cuda_fatbin_loads counts the tries).
CUresult cuModuleLoadData(void** module, const void* image) {
  uint32_t magic = 0;
  std::memcpy(&magic, image, sizeof(magic));
  if (magic == 0xBA55ED50) {
    std::lock_guard<std::mutex> lock(mu);
    ++fatbin_loads;
    if (!FatbinHoldsSass(static_cast<const unsigned char*>(image))) return kInvalidPtx;
  }
  *module = &stream_or_event;
  return kSuccess;
}
// The JIT linker: one link state at a time; counts the PTX inputs of the last link and
// the states still alive (fake_cuda_links: 0 inputs, 1 live states).
struct LinkState {
  int inputs = 0;
  char image[32] = {};
};
uint64_t link_inputs = 0, live_links = 0;
uint64_t fake_cuda_links(int which) {
  std::lock_guard<std::mutex> lock(mu);
  return which == 0 ? link_inputs : live_links;
}
CUresult cuLinkCreate_v2(unsigned, int*, void**, void** state) {
  std::lock_guard<std::mutex> lock(mu);
  *state = new LinkState;
  ++live_links;
  return kSuccess;
}
CUresult cuLinkAddData_v2(void* state, int type, void* data, size_t size, const char*, unsigned, int*, void**) {
  if (type != 1 || data == nullptr || size == 0) return kInvalidValue;  // CU_JIT_INPUT_PTX
  if (static_cast<const char*>(data)[size - 1] != '\0') return kInvalidValue;
  ++static_cast<LinkState*>(state)->inputs;
  return kSuccess;
}
CUresult cuLinkComplete(void* state, void** image, size_t* size) {
  auto* link = static_cast<LinkState*>(state);
  std::snprintf(link->image, sizeof(link->image), "linked %d", link->inputs);
  *image = link->image;
  *size = sizeof(link->image);
  std::lock_guard<std::mutex> lock(mu);
  link_inputs = static_cast<uint64_t>(link->inputs);
  return kSuccess;
}
CUresult cuLinkDestroy(void* state) {
  std::lock_guard<std::mutex> lock(mu);
  delete static_cast<LinkState*>(state);
  --live_links;
  return kSuccess;
}
CUresult cuModuleUnload(void*) { return kSuccess; }
CUresult cuModuleGetFunction(void** function, void*, const char*) {
  *function = &stream_or_event;
  return kSuccess;
}
// A compiled kernel's attributes, distinct per attribute number (cuda.h's CUfunction_attribute:
// 0 max threads, 1 shared, 2 const, 3 local, 4 registers, 5 PTX version, 6 binary version)
// so that a mix-up shows.
CUresult cuFuncGetAttribute(int* value, int attribute, void* function) {
  if (function != &stream_or_event) return kInvalidHandle;
  static const int values[] = {384, 4224, 256, 48, 72, 80, 86};
  if (attribute < 0 || attribute > 6) return kInvalidValue;
  *value = values[attribute];
  return kSuccess;
}
// The function's opt-in to dynamic shared memory past 48 KiB (cuFuncSetAttribute with
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8); a launch past it is refused, as a
// driver refuses it.
int dynamic_shared_optin = 48 << 10;
int fake_cuda_dynamic_shared_optin() {
  std::lock_guard<std::mutex> lock(mu);
  return dynamic_shared_optin;
}
// And its opt-in to clusters of more than 8 blocks (NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 14):
// a launch of up to 16 blocks a cluster then, else of up to 8.
bool non_portable_clusters = false;
CUresult cuFuncSetAttribute(void* function, int attribute, int value) {
  if (function != &stream_or_event) return kInvalidHandle;
  std::lock_guard<std::mutex> lock(mu);
  if (attribute == 14 && (value == 0 || value == 1)) {
    non_portable_clusters = value == 1;
    return kSuccess;
  }
  if (attribute != 8 || value < 0 || value > (228 << 10)) return kInvalidValue;
  dynamic_shared_optin = value;
  return kSuccess;
}
// Launches seen: [0] plain (cuLaunchKernel), [1] through cuLaunchKernelEx (with the
// cooperative or the cluster attribute and a packed parameter buffer), [2] the last such
// grid's blocks, [3] cooperative ones, [4] the last cluster's shape (x | y << 8 | z << 16;
// 0: the launch named none).
uint64_t launches[5] = {0, 0, 0, 0, 0};
uint64_t fake_cuda_launches(int which) {
  std::lock_guard<std::mutex> lock(mu);
  return which >= 0 && which < 5 ? launches[which] : 0;
}
CUresult cuLaunchKernel(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned shared, void*,
                        void**, void**) {
  std::lock_guard<std::mutex> lock(mu);
  if (shared > static_cast<unsigned>(std::max(dynamic_shared_optin, 48 << 10))) return kInvalidValue;
  ++launches[0];
  return kSuccess;
}
// CUlaunchConfig and CUlaunchAttribute as cuda.h lays them out (this file does not include
// it): 72-byte attributes, the id at 0 and the value at 8; CU_LAUNCH_ATTRIBUTE_COOPERATIVE 2,
// CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION 4 (x, y, z: three unsigned).
struct FakeLaunchConfig {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared;
  void* stream;
  const unsigned char* attrs;
  unsigned attr_count;
};
CUresult cuLaunchKernelEx(const FakeLaunchConfig* config, void*, void** params, void** extra) {
  std::lock_guard<std::mutex> lock(mu);
  bool cooperative = false;
  uint64_t cluster = 0;
  for (unsigned i = 0; i < config->attr_count; ++i) {
    int id = 0, value = 0;
    std::memcpy(&id, config->attrs + 72 * i, sizeof(id));
    std::memcpy(&value, config->attrs + 72 * i + 8, sizeof(value));
    if (id == 2 && value == 1) cooperative = true;
    if (id == 4) {
      unsigned dim[3];
      std::memcpy(dim, config->attrs + 72 * i + 8, sizeof(dim));
      for (int d = 0; d < 3; ++d) {
        if (dim[d] == 0 || dim[d] > 255 || config->grid[d] % dim[d] != 0) return 912;  // INVALID_CLUSTER_SIZE
      }
      if (dim[0] * dim[1] * dim[2] > (non_portable_clusters ? 16u : 8u)) return 912;
      cluster = dim[0] | dim[1] << 8 | dim[2] << 16;
    }
  }
  if ((!cooperative && cluster == 0) || params != nullptr || extra == nullptr) return kInvalidValue;
  // GPUPOOL_FAKE_CUDA_REFUSE_CLUSTERS: every cluster launch answers INVALID_VALUE, so that a
  // program can tell a shape that reached the driver from one dropped on the way.
  if (cluster != 0 && std::getenv("GPUPOOL_FAKE_CUDA_REFUSE_CLUSTERS") != nullptr) return kInvalidValue;
  ++launches[1];
  launches[2] = uint64_t{config->grid[0]} * config->grid[1] * config->grid[2];
  if (cooperative) ++launches[3];
  launches[4] = cluster;
  return kSuccess;
}
// Texture objects: CUDA_RESOURCE_DESC as cuda.h lays it out (resType at 0, the union at 8:
// linear {devPtr, format, numChannels, sizeInBytes}, pitch2D {devPtr, format, numChannels,
// width, height, pitchInBytes}). Seen: [0] live objects, [1] the last one's devPtr, [2] its
// resource type, [3] objects made in all.
// A mipmapped array: its levels, each a FakeArray (below) listed with the arrays.
struct FakeArray;
struct FakeMipmapped {
  std::vector<const FakeArray*> levels;
};
std::map<const FakeMipmapped*, std::unique_ptr<FakeMipmapped>> mipmapped_arrays;
std::map<uint64_t, bool> texture_objects;
uint64_t textures_seen[4] = {0, 0, 0, 0};
uint64_t next_texture = 0x7e0001;
uint64_t fake_cuda_textures(int which) {
  std::lock_guard<std::mutex> lock(mu);
  if (which == 0) return texture_objects.size();
  return which > 0 && which < 4 ? textures_seen[which] : 0;
}
CUresult cuTexObjectCreate(uint64_t* handle, const unsigned char* resource, const void* texture, const void* view) {
  if (handle == nullptr || resource == nullptr || texture == nullptr || view != nullptr) return kInvalidValue;
  int type = 0;
  uint64_t pointer = 0;
  std::memcpy(&type, resource, sizeof(type));
  std::memcpy(&pointer, resource + 8, sizeof(pointer));  // devPtr, or an array's hArray
  if (type < 0 || type > 3) return kInvalidValue;        // array, mipmapped array, linear, pitch 2D
  std::lock_guard<std::mutex> lock(mu);
  if (type == 1 && mipmapped_arrays.count(reinterpret_cast<const FakeMipmapped*>(pointer)) == 0) return kInvalidValue;
  *handle = next_texture++;
  texture_objects[*handle] = true;
  textures_seen[1] = pointer;
  textures_seen[2] = static_cast<uint64_t>(type);
  ++textures_seen[3];
  return kSuccess;
}
CUresult cuTexObjectDestroy(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  return texture_objects.erase(handle) == 1 ? kSuccess : kInvalidValue;
}
// Tensor maps: the stand-in's layout, which a test reads back through the library: "FAKETMAP",
// the global address, then the rank, the data type and the swizzle (uint32_t each), then
// the dimensions (uint64_t each, as many as the rank). A rank past 5, an address that is
// no multiple of 16 or a map not its own answer CUDA_ERROR_INVALID_VALUE, as the driver's.
CUresult cuTensorMapEncodeTiled(unsigned char* map, int type, uint32_t rank, void* address, const uint64_t* dims,
                                const uint64_t* /*strides*/, const uint32_t* /*box*/, const uint32_t* /*steps*/,
                                int /*interleave*/, int swizzle, int /*l2*/, int /*fill*/) {
  const uint64_t at = reinterpret_cast<uintptr_t>(address);
  if (map == nullptr || dims == nullptr || rank < 1 || rank > 5 || at % 16 != 0) return kInvalidValue;
  std::memset(map, 0, 128);
  std::memcpy(map, "FAKETMAP", 8);
  std::memcpy(map + 8, &at, 8);
  const uint32_t fields[3] = {rank, static_cast<uint32_t>(type), static_cast<uint32_t>(swizzle)};
  std::memcpy(map + 16, fields, sizeof(fields));
  std::memcpy(map + 32, dims, rank * sizeof(uint64_t));
  return kSuccess;
}
CUresult cuTensorMapReplaceAddress(unsigned char* map, void* address) {
  const uint64_t at = reinterpret_cast<uintptr_t>(address);
  if (map == nullptr || std::memcmp(map, "FAKETMAP", 8) != 0 || at % 16 != 0) return kInvalidValue;
  std::memcpy(map + 8, &at, 8);
  return kSuccess;
}
// CUDA arrays: a descriptor (CUDA_ARRAY3D_DESCRIPTOR: Width, Height, Depth as size_t, then
// Format, NumChannels, Flags) and the texels in host memory, rows packed; a CUarray is the
// record's address. Live arrays: fake_cuda_textures(4).
struct FakeArrayDescriptor {
  uint64_t width, height, depth;
  int format;
  unsigned channels, flags;
};
struct FakeArray {
  uint64_t row_bytes, rows, slices;
  std::vector<unsigned char> bytes;
};
std::map<const FakeArray*, std::unique_ptr<FakeArray>> arrays;
uint64_t fake_cuda_arrays() {
  std::lock_guard<std::mutex> lock(mu);
  return arrays.size();
}
CUresult cuArray3DCreate_v2(void** array, const FakeArrayDescriptor* d) {
  const unsigned channel = d->format == 0x01 || d->format == 0x08                        ? 1
                           : d->format == 0x02 || d->format == 0x09 || d->format == 0x10 ? 2
                                                                                         : 4;
  if (d->width == 0 || (d->channels != 1 && d->channels != 2 && d->channels != 4)) return kInvalidValue;
  auto made = std::make_unique<FakeArray>();
  made->row_bytes = d->width * channel * d->channels;
  made->rows = std::max<uint64_t>(d->height, 1);
  made->slices = std::max<uint64_t>(d->depth, 1);
  made->bytes.assign(made->row_bytes * made->rows * made->slices, 0);
  std::lock_guard<std::mutex> lock(mu);
  *array = made.get();
  arrays[made.get()] = std::move(made);
  return kSuccess;
}
CUresult cuArrayDestroy(void* array) {
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [record, mipmapped] : mipmapped_arrays) {
    for (const FakeArray* level : mipmapped->levels) {
      if (level == array) return kInvalidValue;  // it goes with its mipmapped array
    }
  }
  return arrays.erase(static_cast<const FakeArray*>(array)) == 1 ? kSuccess : kInvalidHandle;
}
// Levels as a driver makes them: level 0's extent halved per level, at least 1 (a layered
// array's layers stay); at most as many as the largest dimension halves to 1 in, plus one.
CUresult cuMipmappedArrayCreate(void** handle, const FakeArrayDescriptor* d, unsigned levels) {
  const bool layered = d->flags & 0x01;
  uint64_t largest = std::max(d->width, d->height);
  if (!layered) largest = std::max(largest, d->depth);
  unsigned most = 1;
  while ((largest >> most) > 0) ++most;
  if (levels == 0 || levels > most) return kInvalidValue;
  auto made = std::make_unique<FakeMipmapped>();
  for (unsigned l = 0; l < levels; ++l) {
    FakeArrayDescriptor level = *d;
    level.width = std::max<uint64_t>(d->width >> l, 1);
    if (d->height > 0) level.height = std::max<uint64_t>(d->height >> l, 1);
    if (!layered && d->depth > 0) level.depth = std::max<uint64_t>(d->depth >> l, 1);
    void* array = nullptr;
    if (CUresult status = cuArray3DCreate_v2(&array, &level); status != kSuccess) {
      std::lock_guard<std::mutex> lock(mu);
      for (const FakeArray* made_level : made->levels) arrays.erase(made_level);
      return status;
    }
    made->levels.push_back(static_cast<const FakeArray*>(array));
  }
  std::lock_guard<std::mutex> lock(mu);
  *handle = made.get();
  mipmapped_arrays[made.get()] = std::move(made);
  return kSuccess;
}
CUresult cuMipmappedArrayGetLevel(void** level, void* handle, unsigned index) {
  std::lock_guard<std::mutex> lock(mu);
  auto found = mipmapped_arrays.find(static_cast<const FakeMipmapped*>(handle));
  if (found == mipmapped_arrays.end()) return kInvalidHandle;
  if (index >= found->second->levels.size()) return kInvalidValue;
  *level = const_cast<FakeArray*>(found->second->levels[index]);
  return kSuccess;
}
CUresult cuMipmappedArrayDestroy(void* handle) {
  std::lock_guard<std::mutex> lock(mu);
  auto found = mipmapped_arrays.find(static_cast<const FakeMipmapped*>(handle));
  if (found == mipmapped_arrays.end()) return kInvalidHandle;
  for (const FakeArray* level : found->second->levels) arrays.erase(level);
  mipmapped_arrays.erase(found);
  return kSuccess;
}
uint64_t fake_cuda_mipmapped_arrays() {
  std::lock_guard<std::mutex> lock(mu);
  return mipmapped_arrays.size();
}
// CUDA_MEMCPY3D as cuda.h lays it out: each side's x, y, z, LOD, memory type (host 1, device
// 2, array 3), host pointer, device pointer, array, reserved, pitch and height; then the
// extent.
struct FakeCopySide {
  uint64_t x, y, z, lod;
  int type;
  const void* host;
  uint64_t device;
  void* array;
  void* reserved;
  uint64_t pitch, height;
};
struct FakeMemcpy3D {
  FakeCopySide src, dst;
  uint64_t width, height, depth;
};
// The address of row (y, z) of a side, as host memory of this process (device memory and
// arrays are host memory here); nullptr outside what it names.
unsigned char* FakeRow(const FakeCopySide& side, uint64_t width, uint64_t row, uint64_t slice) {
  if (side.type == 3) {
    auto found = arrays.find(static_cast<const FakeArray*>(side.array));
    if (found == arrays.end()) return nullptr;
    FakeArray& a = *found->second;
    if (side.x + width > a.row_bytes || side.y + row >= a.rows || side.z + slice >= a.slices) return nullptr;
    return a.bytes.data() + ((side.z + slice) * a.rows + side.y + row) * a.row_bytes + side.x;
  }
  const uint64_t offset = ((side.z + slice) * side.height + side.y + row) * side.pitch + side.x;
  if (side.type == 1) return const_cast<unsigned char*>(static_cast<const unsigned char*>(side.host)) + offset;
  std::vector<Piece> pieces;
  if (!Find(side.device + offset, width, &pieces) || pieces.size() != 1) return nullptr;
  return pieces[0].first;
}
CUresult cuMemcpy3DAsync_v2(const FakeMemcpy3D* copy, void*) {
  std::lock_guard<std::mutex> lock(mu);
  ++memory_calls;
  for (uint64_t slice = 0; slice < copy->depth; ++slice) {
    for (uint64_t row = 0; row < copy->height; ++row) {
      unsigned char* to = FakeRow(copy->dst, copy->width, row, slice);
      unsigned char* from = FakeRow(copy->src, copy->width, row, slice);
      if (to == nullptr || from == nullptr) return kInvalidValue;
      std::memmove(to, from, copy->width);
    }
  }
  return kSuccess;
}
std::map<uint64_t, bool> surface_objects;
CUresult cuSurfObjectCreate(uint64_t* handle, const unsigned char* resource) {
  int type = -1;
  void* array = nullptr;
  std::memcpy(&type, resource, sizeof(type));
  std::memcpy(&array, resource + 8, sizeof(array));
  std::lock_guard<std::mutex> lock(mu);
  if (type != 0 || arrays.count(static_cast<const FakeArray*>(array)) == 0) return kInvalidValue;
  *handle = next_texture++;
  surface_objects[*handle] = true;
  return kSuccess;
}
CUresult cuSurfObjectDestroy(uint64_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  return surface_objects.erase(handle) == 1 ? kSuccess : kInvalidValue;
}
uint64_t fake_cuda_surfaces() {
  std::lock_guard<std::mutex> lock(mu);
  return surface_objects.size();
}
CUresult cuStreamCreateWithPriority(void** stream, unsigned, int) {
  *stream = &stream_or_event;
  return kSuccess;
}
CUresult cuStreamDestroy_v2(void*) { return kSuccess; }
CUresult cuStreamSynchronize(void*) { return kSuccess; }
CUresult cuStreamQuery(void*) { return kSuccess; }
CUresult cuStreamWaitEvent(void*, void*, unsigned) { return kSuccess; }
CUresult cuEventCreate(void** event, unsigned) {
  *event = &stream_or_event;
  return kSuccess;
}
CUresult cuEventDestroy_v2(void*) { return kSuccess; }
CUresult cuEventRecord(void*, void*) { return kSuccess; }
CUresult cuEventSynchronize(void*) { return kSuccess; }
CUresult cuEventQuery(void*) { return kSuccess; }
CUresult cuEventElapsedTime(float* ms, void*, void*) {
  *ms = 0;
  return kSuccess;
}

}  // extern "C"
