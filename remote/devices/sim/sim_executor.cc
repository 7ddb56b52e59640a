#include "remote/devices/sim/sim_executor.h"

#include <algorithm>
#include <deque>
#include <iterator>

#include <cstring>
#include <new>
#include <utility>

#include "remote/image/fatbin.h"
#include "remote/protocol/protocol.h"

namespace gpupool::devices {
namespace {

// CUDA_EVENT_DISABLE_TIMING: elapsed time on such events is CUDA_ERROR_INVALID_HANDLE.
constexpr uint32_t kEventDisableTiming = 0x2;

// A module's .global/.const variables together (one allocation): a bound far above any
// GPU's memory, below which sums of the parser's bounded sizes cannot wrap.
constexpr uint64_t kMaxModuleVariableBytes = uint64_t{1} << 48;

}  // namespace

SimExecutor::SimExecutor(SimDeviceMemory* memory, uint32_t sm_count, uint32_t arch, device::BusyMeter* meter)
    : meter_(meter), memory_(memory), owner_(memory->NewOwner()), sm_count_(sm_count ? sm_count : 1), arch_(arch) {}

SimExecutor::~SimExecutor() {
  for (auto& [dptr, size] : allocations_) memory_->Release(dptr, owner_);
}

int32_t SimExecutor::Failed(const char* call, int32_t otherwise) noexcept {
  int32_t status = otherwise;
  std::string why;
  try {
    throw;
  } catch (const std::bad_alloc&) {
    status = dataplane::kCuOutOfMemory;
    why = "out of host memory";
  } catch (const std::exception& error) {
    why = error.what();
  } catch (...) {
    why = "an unknown exception";
  }
  try {
    error_detail_ = std::string(call) + ": " + why;
  } catch (...) {
    error_detail_.clear();  // no memory even for the detail: the status says enough
  }
  return status;
}

int32_t SimExecutor::Allocate(uint64_t size, uint64_t* dptr) try {
  int32_t status = memory_->Allocate(size, owner_, dptr);
  if (status == dataplane::kCuSuccess) {
    try {
      allocations_[*dptr] = size;
    } catch (...) {
      memory_->Release(*dptr, owner_);  // not the session's unless it is on its list
      throw;
    }
    launch_memory_.clear();
  }
  return status;
} catch (...) {
  return Failed("Allocate", dataplane::kCuOutOfMemory);
}

int32_t SimExecutor::AllocateAt(uint64_t address, uint64_t size) try {
  int32_t status = memory_->AllocateAt(address, size, owner_);
  if (status == dataplane::kCuSuccess) {
    try {
      allocations_[address] = size;
    } catch (...) {
      memory_->Release(address, owner_);  // not the session's unless it is on its list
      throw;
    }
    launch_memory_.clear();
  }
  return status;
} catch (...) {
  return Failed("AllocateAt", dataplane::kCuOutOfMemory);
}

bool SimExecutor::GlobalsRange(uint64_t module, uint64_t* base, uint64_t* size) {
  auto found = modules_.find(module);
  if (found == modules_.end() || found->second.globals_base == 0) return false;
  *base = found->second.globals_base;
  *size = found->second.globals_size;
  return true;
}

int32_t SimExecutor::Free(uint64_t dptr) try {
  if (dptr == 0) return dataplane::kCuSuccess;
  if (allocations_.erase(dptr) == 0) return dataplane::kCuInvalidValue;  // not ours (or not a start)
  launch_memory_.clear();
  return memory_->Release(dptr, owner_);
} catch (...) {
  return Failed("Free", dataplane::kCuUnknown);
}

void SimExecutor::MemoryInfo(uint64_t* free, uint64_t* total) {
  *total = memory_->capacity();
  *free = *total - memory_->used();
}

void* SimExecutor::HostView(uint64_t dptr, uint64_t size) { return memory_->Translate(dptr, size, owner_); }

void* SimExecutor::ReceiveView(uint64_t dptr, uint64_t size) {
  char* view = memory_->Translate(dptr, size, owner_);
  memory_->PopulateForWrite(view, size);
  return view;
}

bool SimExecutor::KnownStream(uint64_t stream) const { return stream == 0 || streams_.count(stream) > 0; }

// Large copies and memsets go in chunks, each counted as progress: on a loaded host a
// 1 GiB copy (page faults included) can outlast the watchdog's timeout, and it is no hang.
// 1 MiB: a starved thread still finishes one well within a timeout (with 8 MiB chunks, a
// watchdog of 0.3 s once saw no progress during a 768 MiB memset on a loaded CI machine).
constexpr uint64_t kProgressChunk = 1 << 20;

void SimExecutor::ChunkedCopy(char* to, const char* from, uint64_t size) {
  for (uint64_t done = 0; done < size; done += kProgressChunk) {
    std::memmove(to + done, from + done, std::min(kProgressChunk, size - done));
    if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
  }
}

int32_t SimExecutor::CopyToDevice(uint64_t dst, const void* src, uint64_t size, uint64_t stream) try {
  if (!KnownStream(stream)) return dataplane::kCuInvalidHandle;
  if (size == 0) return dataplane::kCuSuccess;
  char* host = memory_->Translate(dst, size, owner_);
  if (host == nullptr) return dataplane::kCuInvalidValue;
  if (host == src) {
    // Received in place (ReceiveView): the transport moved the bytes, not the engine, and
    // the helpers that made room for them are done with.
    memory_->StopPopulating();
  } else {
    device::BusyMeter::Span busy(meter_, device::BusyMeter::kCopies);
    memory_->PopulateForWrite(host, size);  // ahead of the copy (a large one only)
    ChunkedCopy(host, static_cast<const char*>(src), size);
    memory_->StopPopulating();
  }
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("CopyToDevice", dataplane::kCuUnknown);
}

int32_t SimExecutor::CopyFromDevice(uint64_t src, uint64_t size, uint64_t stream, const void** data) try {
  if (!KnownStream(stream)) return dataplane::kCuInvalidHandle;
  *data = nullptr;
  if (size == 0) return dataplane::kCuSuccess;
  char* host = memory_->Translate(src, size, owner_);
  if (host == nullptr) return dataplane::kCuInvalidValue;
  *data = host;  // sent in place; the server finishes sending before the next request
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("CopyFromDevice", dataplane::kCuUnknown);
}

int32_t SimExecutor::CopyDeviceToDevice(uint64_t dst, uint64_t src, uint64_t size, uint64_t stream) try {
  if (!KnownStream(stream)) return dataplane::kCuInvalidHandle;
  if (size == 0) return dataplane::kCuSuccess;
  char* to = memory_->Translate(dst, size, owner_);
  char* from = memory_->Translate(src, size, owner_);
  if (to == nullptr || from == nullptr) return dataplane::kCuInvalidValue;
  device::BusyMeter::Span busy(meter_, device::BusyMeter::kCopies);
  if (to < from || to >= from + size) {
    ChunkedCopy(to, from, size);  // forward chunks are safe unless `to` starts inside `from`
  } else {
    std::memmove(to, from, size);
  }
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("CopyDeviceToDevice", dataplane::kCuUnknown);
}

int32_t SimExecutor::Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count, uint64_t stream) try {
  if (!KnownStream(stream)) return dataplane::kCuInvalidHandle;
  if (element_size != 1 && element_size != 2 && element_size != 4) return dataplane::kCuInvalidValue;
  if (count == 0) return dataplane::kCuSuccess;
  if (count > UINT64_MAX / element_size) return dataplane::kCuInvalidValue;
  char* host = memory_->Translate(dst, count * element_size, owner_);
  if (host == nullptr) return dataplane::kCuInvalidValue;
  device::BusyMeter::Span busy(meter_, device::BusyMeter::kCopies);
  if (element_size == 1) {
    for (uint64_t done = 0; done < count; done += kProgressChunk) {
      std::memset(host + done, static_cast<int>(value & 0xff), std::min(kProgressChunk, count - done));
      if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
    }
  } else {
    // Byte copies: `dst` need not be aligned to the element (found by the wire_agent fuzz
    // target: a uint32_t store there is undefined behaviour).
    uint16_t value16 = static_cast<uint16_t>(value);
    const void* element = element_size == 2 ? static_cast<const void*>(&value16) : static_cast<const void*>(&value);
    for (uint64_t i = 0; i < count; ++i) {
      std::memcpy(host + i * element_size, element, element_size);
      if (progress_ != nullptr && (i & 0x3ffff) == 0) {
        progress_->fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("Memset", dataplane::kCuUnknown);
}

int32_t SimExecutor::LoadModule(uint64_t module, const void* image, size_t image_size,
                                const std::vector<device::KernelInfo>& kernels, uint64_t globals_base,
                                uint64_t device_heap, uint32_t pending_launches, int32_t device_ordinal,
                                const dataplane::DeviceRuntimeFacts* facts) try {
  if (modules_.count(module)) return dataplane::kCuInvalidValue;
  if (device_heap == 0) device_heap = sim::kDeviceHeapBytes;
  if (device_heap > sim::kMaxDeviceHeapBytes) {
    error_detail_ = "a device malloc heap of " + std::to_string(device_heap) +
                    " bytes (CU_LIMIT_MALLOC_HEAP_SIZE) is more than the sim's " +
                    std::to_string(sim::kMaxDeviceHeapBytes >> 20) + " MiB";
    return dataplane::kCuOutOfMemory;
  }
  auto parsed = image::ParseModuleImageBytes(image, image_size);
  if (!parsed.ok()) {
    error_detail_ = "module image: " + parsed.status().message();
    return dataplane::kCuInvalidImage;
  }
  if (parsed->ptx.empty()) {
    // Only SASS: machine code for a real GPU, which the sim cannot execute.
    error_detail_ = parsed->has_sass() ? "the module holds only SASS (a cubin) "
                                         "and no PTX: the sim GPU runs PTX only"
                                       : "the module holds no PTX";
    return parsed->has_sass() ? dataplane::kCuNoBinaryForGpu : dataplane::kCuInvalidImage;
  }
  // What a real GPU of this model would run (image::ChooseCode): the PTX its driver would
  // JIT, or, where it would run the image's SASS and the PTX is all for newer GPUs, that
  // PTX in the SASS's place.
  std::vector<uint32_t> ptx_archs;
  for (const image::PtxEntry& entry : parsed->ptx) ptx_archs.push_back(entry.arch);
  const image::CodeChoice chosen = image::ChooseCode(ptx_archs, parsed->sass, arch_);
  if (!chosen.found) {
    uint32_t oldest = parsed->ptx.front().arch;
    for (const image::PtxEntry& entry : parsed->ptx) oldest = std::min(oldest, entry.arch);
    error_detail_ = "the module's PTX targets compute_" + std::to_string(oldest) + " or newer" +
                    (parsed->has_sass() ? " and its SASS is for other GPUs" : "") +
                    "; this GPU is compute capability " + std::to_string(arch_ / 10) + "." + std::to_string(arch_ % 10);
    // PTX text given as it is goes to the JIT, which refuses a target newer than the GPU
    // (CUDA_ERROR_INVALID_PTX, as driver 580 answers on an H100); a fatbin just has no
    // binary for this GPU.
    return image::IsFatbin(image, image_size) ? dataplane::kCuNoBinaryForGpu : dataplane::kCuInvalidPtx;
  }
  // Several entries for that architecture are the translation units of a program built
  // with -rdc=true (the client adds them, image::WithRelocatablePtx): linked into one, as
  // a driver JIT-links them.
  std::vector<std::string_view> units;
  for (const image::PtxEntry& entry : parsed->ptx) {
    if (entry.arch == chosen.ptx_arch) units.push_back(entry.text);
  }
  auto ptx = sim::PtxModule::ParseLinked(units, device_heap);
  if (!ptx.ok()) {
    error_detail_ = ptx.status().message();
    return dataplane::kCuInvalidPtx;
  }
  Module loaded;
  loaded.ptx = std::move(*ptx);
  loaded.pending_launches = pending_launches == 0 ? sim::kDefaultPendingLaunches : pending_launches;
  loaded.device_ordinal = device_ordinal;
  if (facts != nullptr) {
    loaded.facts = *facts;
  } else {
    std::copy(std::begin(sim::kDefaultDeviceLimits), std::end(sim::kDefaultDeviceLimits), loaded.facts.limits);
  }
  loaded.facts.attribute_count = std::min(loaded.facts.attribute_count, dataplane::kDeviceAttributeSlots);
  loaded.facts.limits[2] = device_heap;  // cudaLimitMallocHeapSize: the heap it has
  // Module variables: one allocation of this session holds them all, in declaration order
  // (the same image at the same base gives the same addresses on any GPU), initialised
  // from the PTX.
  // Checked: each size is bounded by the parser, but their sum is the module's, and a span
  // that wrapped would put a variable (and its initialiser) outside the allocation.
  std::map<std::string, uint64_t> offsets;
  uint64_t span = 0;
  for (const sim::ModuleVariable& variable : loaded.ptx->variables()) {
    const uint64_t align = std::max<uint64_t>(variable.align, 8);
    const uint64_t size = std::max<uint64_t>(variable.size, 1);
    if (align > sim::kMaxAlign || size > sim::kMaxDeclarationBytes || span > kMaxModuleVariableBytes - size - align) {
      error_detail_ = "the module's variables up to " + variable.name + " (" + std::to_string(variable.size) +
                      " bytes) take more than " + std::to_string(kMaxModuleVariableBytes) + " bytes";
      return dataplane::kCuInvalidPtx;
    }
    span = (span + align - 1) / align * align;
    offsets[variable.name] = span;
    span += size;
  }
  if (!offsets.empty()) {
    uint64_t base = globals_base;
    int32_t status = globals_base != 0 ? AllocateAt(globals_base, span) : Allocate(span, &base);
    if (status != dataplane::kCuSuccess) return status;
    loaded.globals_base = base;
    loaded.globals_size = span;
    char* host = memory_->Translate(base, span, owner_);
    if (host == nullptr) {
      error_detail_ = "the module's variables' memory cannot be reached";
      Free(base);
      return dataplane::kCuOutOfMemory;
    }
    for (const sim::ModuleVariable& variable : loaded.ptx->variables()) {
      loaded.globals[variable.name] = base + offsets[variable.name];
      loaded.global_sizes[variable.name] = variable.size;
    }
    // Initial values, with the addresses of variables and functions they hold (virtual
    // tables, pointer tables) filled in.
    for (const sim::ModuleVariable& variable : loaded.ptx->variables()) {
      auto init = loaded.ptx->InitialBytes(variable, loaded.globals);
      if (!init.ok()) {
        error_detail_ = init.status().message();
        Free(base);
        return dataplane::kCuInvalidPtx;
      }
      // Within the variable's place, and so within the allocation (the parser refuses an
      // initialiser longer than its variable; checked again where the bytes are written).
      const uint64_t offset = offsets[variable.name];
      const uint64_t bytes = std::min<uint64_t>(init->size(), variable.size);
      if (offset > span || bytes > span - offset) {
        error_detail_ = "the initialiser of " + variable.name + " lies outside the module's memory";
        Free(base);
        return dataplane::kCuInvalidPtx;
      }
      if (bytes != 0) std::memcpy(host + offset, init->data(), bytes);
    }
  }
  Module& placed = modules_[module] = std::move(loaded);
  placed.entry_needs = [&placed, sm_count = sm_count_](const std::string& name, sim::KernelNeeds* needs) {
    try {
      std::lock_guard<std::mutex> lock(*placed.decode_mu);
      auto kernel = placed.ptx->Decode(name, placed.globals);
      if (!kernel.ok()) return false;
      *needs = sim::NeedsOf(**kernel, sm_count);
      return true;
    } catch (...) {
      return false;  // out of memory: the kernel cannot be told
    }
  };
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("LoadModule", dataplane::kCuInvalidImage);
}

void SimExecutor::FreeModule(Module& module) {
  if (module.globals_base != 0) Free(module.globals_base);
  module.globals_base = 0;
  module.globals.clear();
}

int32_t SimExecutor::UnloadModule(uint64_t module) try {
  auto found = modules_.find(module);
  if (found == modules_.end()) return dataplane::kCuInvalidHandle;
  for (auto it = functions_.begin(); it != functions_.end();) {
    it = it->second.module == module ? functions_.erase(it) : std::next(it);
  }
  FreeModule(found->second);
  modules_.erase(found);
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("UnloadModule", dataplane::kCuUnknown);
}

int32_t SimExecutor::GetFunction(uint64_t module, uint64_t function, const std::string& name) try {
  auto found = modules_.find(module);
  if (found == modules_.end()) return dataplane::kCuInvalidHandle;
  Module& loaded = found->second;
  if (!loaded.ptx->HasKernel(name)) return dataplane::kCuNotFound;
  auto kernel = loaded.ptx->Decode(name, loaded.globals);
  if (!kernel.ok()) {
    error_detail_ = "kernel " + name + ": " + kernel.status().message();
    return dataplane::kCuInvalidPtx;
  }
  functions_[function] = Function{module, *kernel};
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("GetFunction", dataplane::kCuInvalidPtx);
}

bool SimExecutor::Resources(uint64_t function, dataplane::FunctionResources* resources) {
  auto found = functions_.find(function);
  if (found == functions_.end()) return false;
  const sim::KernelNeeds needs = sim::NeedsOf(*found->second.kernel, sm_count_);
  auto clamp = [](uint64_t value) { return static_cast<int32_t>(std::min<uint64_t>(value, INT32_MAX)); };
  resources->max_threads_per_block = clamp(needs.max_threads);
  resources->static_shared_bytes = clamp(needs.static_shared);
  resources->const_bytes = clamp(needs.const_bytes);
  resources->local_bytes = clamp(needs.local_bytes);
  // The sim allocates no registers: 0 (the library's assumption holds) but for a kernel whose
  // cooperative grid at the assumed occupancy would not fit the sim (KernelNeeds::registers).
  resources->registers = static_cast<int32_t>(needs.registers);
  return true;
}

int32_t SimExecutor::GetGlobal(uint64_t module, const std::string& name, uint64_t* dptr, uint64_t* size) try {
  auto found = modules_.find(module);
  if (found == modules_.end()) return dataplane::kCuInvalidHandle;
  auto global = found->second.globals.find(name);
  if (global == found->second.globals.end()) return dataplane::kCuNotFound;
  *dptr = global->second;
  *size = found->second.global_sizes[name];
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("GetGlobal", dataplane::kCuUnknown);
}

int32_t SimExecutor::Launch(uint64_t function, const device::LaunchConfig& config, const void* params,
                            size_t param_size) try {
  auto found = functions_.find(function);
  if (found == functions_.end()) return dataplane::kCuInvalidHandle;
  if (!KnownStream(config.stream)) return dataplane::kCuInvalidHandle;
  if (cancelled_.load(std::memory_order_relaxed)) {
    error_detail_ = sim::kCancelledDetail;
    return dataplane::kCuLaunchTimeout;
  }
  uint64_t threads = uint64_t{config.block[0]} * config.block[1] * config.block[2];
  if (threads == 0 || threads > 1024 || config.block[2] > 64 || config.grid[0] == 0 || config.grid[1] == 0 ||
      config.grid[2] == 0 || config.grid[1] > 65535 || config.grid[2] > 65535) {
    return dataplane::kCuInvalidValue;
  }
  device::BusyMeter::Span busy(meter_, device::BusyMeter::kKernels);  // its children too
  sim::LaunchSpec spec;
  std::memcpy(spec.grid, config.grid, sizeof(spec.grid));
  std::memcpy(spec.block, config.block, sizeof(spec.block));
  // A thread block cluster (the engine checks its shape against the grid and the kernel's).
  for (int axis = 0; axis < 3; ++axis) spec.cluster[axis] = config.cluster[axis];
  spec.dynamic_shared = config.shared_mem;
  spec.params = static_cast<const uint8_t*>(params);
  spec.param_size = param_size;
  spec.sm_count = sm_count_;
  spec.progress = progress_;
  spec.printf_out = &output_;
  spec.printf_dropped = &output_dropped_;
  spec.cancel = &cancelled_;
  spec.error_detail = &error_detail_;
  if (auto module = modules_.find(found->second.module); module != modules_.end()) {
    spec.pending_launch_limit = module->second.pending_launches;
    spec.device_ordinal = module->second.device_ordinal;
    spec.device_facts = &module->second.facts;
    spec.entry_needs = &module->second.entry_needs;
  }
  if (launch_memory_.empty() && !allocations_.empty()) {
    // What kernels may reach, made again only when this session's allocations change (a
    // block's host memory stays where it is while it lives).
    launch_memory_.reserve(allocations_.size());
    for (const auto& [dptr, size] : allocations_) {
      char* host = memory_->Translate(dptr, size, owner_);
      if (host != nullptr) launch_memory_.push_back(sim::MemoryRange{dptr, size, host});
    }
  }
  sim::DeviceLaunches children;
  spec.device_launches = &children;
  if (!config.cooperative) {
    // Lent to the launch, not copied: an allocation per launch otherwise.
    spec.memory.swap(launch_memory_);
    int32_t status = sim::RunKernel(*found->second.kernel, spec);
    if (status == dataplane::kCuSuccess && !children.queued.empty()) {
      status = RunChildren(found->second.module, spec, std::move(children.queued));
    }
    spec.memory.swap(launch_memory_);
    return status;
  }
  spec.memory = launch_memory_;
  // A cooperative launch gets a zeroed grid workspace of its own for as long as it runs
  // (grid.sync() counts the blocks that have arrived there).
  uint64_t workspace = 0;
  if (int32_t status = memory_->Allocate(sim::kGridWorkspaceBytes, owner_, &workspace);
      status != dataplane::kCuSuccess) {
    return status;
  }
  char* host = memory_->Translate(workspace, sim::kGridWorkspaceBytes, owner_);
  std::memset(host, 0, sim::kGridWorkspaceBytes);
  sim::MemoryRange range{workspace, sim::kGridWorkspaceBytes, host};
  spec.memory.insert(
      std::upper_bound(spec.memory.begin(), spec.memory.end(), range,
                       [](const sim::MemoryRange& a, const sim::MemoryRange& b) { return a.start < b.start; }),
      range);
  spec.cooperative = true;
  spec.grid_workspace = workspace;
  // Released however the launch ends (an exception included: it is no allocation of the
  // session's, so nothing else would free it).
  struct ReleaseWorkspace {
    SimDeviceMemory* memory;
    SimDeviceMemory::Owner owner;
    uint64_t address;  // 0: released
    ~ReleaseWorkspace() {
      if (address != 0) memory->Release(address, owner);
    }
  } release{memory_, owner_, workspace};
  int32_t status = sim::RunKernel(*found->second.kernel, spec);
  memory_->Release(std::exchange(release.address, 0), owner_);
  if (status == dataplane::kCuSuccess && !children.queued.empty()) {
    spec.memory = launch_memory_;
    spec.cooperative = false;
    status = RunChildren(found->second.module, spec, std::move(children.queued));
  }
  return status;
} catch (...) {
  return Failed("Launch", dataplane::kCuLaunchFailed);
}

int32_t SimExecutor::RunChildren(uint64_t module, const sim::LaunchSpec& parent,
                                 std::vector<sim::DeviceLaunch> queued) {
  auto found = modules_.find(module);
  if (found == modules_.end()) return dataplane::kCuInvalidHandle;
  // Runs one queued grid at `depth`; what it launches lands in *children.
  auto run = [&](sim::DeviceLaunch& launch, uint32_t depth, sim::LaunchSpec* spec,
                 sim::DeviceLaunches* children) -> int32_t {
    spec->memory = parent.memory;
    spec->error_detail = parent.error_detail;
    if (launch.kind != sim::DeviceLaunch::kGrid) return sim::RunDeviceCopy(launch, *spec);
    auto kernel = found->second.ptx->Decode(launch.kernel, found->second.globals);
    if (!kernel.ok()) {
      error_detail_ = "kernel " + launch.kernel + ", launched by a kernel: " + std::string(kernel.status().message());
      return dataplane::kCuLaunchFailed;
    }
    std::memcpy(spec->grid, launch.grid, sizeof(spec->grid));
    std::memcpy(spec->block, launch.block, sizeof(spec->block));
    spec->dynamic_shared = launch.dynamic_shared;
    spec->params = launch.params.data();
    spec->param_size = launch.params.size();
    spec->sm_count = parent.sm_count;
    spec->progress = parent.progress;
    spec->printf_out = parent.printf_out;
    spec->printf_dropped = parent.printf_dropped;
    spec->cancel = parent.cancel;
    spec->depth = depth;
    spec->pending_launch_limit = parent.pending_launch_limit;
    spec->device_ordinal = parent.device_ordinal;
    spec->device_facts = parent.device_facts;
    spec->entry_needs = parent.entry_needs;
    spec->device_launches = children;
    return sim::RunKernel(**kernel, *spec);
  };
  // The grid's other children first, in launch order, each with what it launches (nested
  // one deeper: bounded by kMaxLaunchDepth); then its tail launches in order, each in the
  // grid's place at its depth, each complete (its own tail launches run) before the next.
  // Tail launches are taken from a queue, not by recursion: a chain of them may be long.
  std::deque<sim::DeviceLaunch> tails;
  std::vector<sim::DeviceLaunch> others;
  for (sim::DeviceLaunch& launch : queued) {
    if (launch.tail) {
      tails.push_back(std::move(launch));
    } else {
      others.push_back(std::move(launch));
    }
  }
  for (sim::DeviceLaunch& launch : others) {
    sim::LaunchSpec spec;
    sim::DeviceLaunches children;
    int32_t status = run(launch, parent.depth + 1, &spec, &children);
    if (status == dataplane::kCuSuccess && !children.queued.empty()) {
      status = RunChildren(module, spec, std::move(children.queued));
    }
    if (status != dataplane::kCuSuccess) return status;
  }
  while (!tails.empty()) {
    sim::DeviceLaunch launch = std::move(tails.front());
    tails.pop_front();
    sim::LaunchSpec spec;
    sim::DeviceLaunches children;
    if (int32_t status = run(launch, parent.depth, &spec, &children); status != dataplane::kCuSuccess) return status;
    std::vector<sim::DeviceLaunch> its_tails;
    std::vector<sim::DeviceLaunch> its_others;
    for (sim::DeviceLaunch& child : children.queued) {
      (child.tail ? its_tails : its_others).push_back(std::move(child));
    }
    if (!its_others.empty()) {
      if (int32_t status = RunChildren(module, spec, std::move(its_others)); status != dataplane::kCuSuccess)
        return status;
    }
    tails.insert(tails.begin(), std::make_move_iterator(its_tails.begin()), std::make_move_iterator(its_tails.end()));
  }
  return dataplane::kCuSuccess;
}

std::string SimExecutor::TakeOutput() {
  std::string output = std::exchange(output_, {});
  if (const uint64_t dropped = std::exchange(output_dropped_, 0); dropped != 0) {
    output += "[gpupool: " + std::to_string(dropped) + " bytes of device printf output dropped: more than " +
              std::to_string(sim::kMaxPrintfBytes) +
              " bytes between synchronisations, the size of CUDA's printf buffer]\n";
  }
  return output;
}

std::string SimExecutor::TakeErrorDetail() { return std::exchange(error_detail_, {}); }

int32_t SimExecutor::CreateStream(uint64_t stream, uint32_t flags, int32_t priority) try {
  if (stream == 0 || !streams_.insert(stream).second) return dataplane::kCuInvalidValue;
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("CreateStream", dataplane::kCuUnknown);
}

int32_t SimExecutor::DestroyStream(uint64_t stream) {
  return streams_.erase(stream) ? dataplane::kCuSuccess : dataplane::kCuInvalidHandle;
}

int32_t SimExecutor::SynchronizeStream(uint64_t stream) {
  return KnownStream(stream) ? dataplane::kCuSuccess : dataplane::kCuInvalidHandle;
}

int32_t SimExecutor::QueryStream(uint64_t stream) { return SynchronizeStream(stream); }

int32_t SimExecutor::StreamWaitEvent(uint64_t stream, uint64_t event) {
  if (!KnownStream(stream) || !events_.count(event)) return dataplane::kCuInvalidHandle;
  return dataplane::kCuSuccess;  // everything before the event already ran
}

int32_t SimExecutor::CreateEvent(uint64_t event, uint32_t flags) try {
  if (event == 0 || events_.count(event)) return dataplane::kCuInvalidValue;
  events_[event].flags = flags;
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("CreateEvent", dataplane::kCuUnknown);
}

int32_t SimExecutor::DestroyEvent(uint64_t event) {
  return events_.erase(event) ? dataplane::kCuSuccess : dataplane::kCuInvalidHandle;
}

int32_t SimExecutor::RecordEvent(uint64_t event, uint64_t stream) try {
  auto found = events_.find(event);
  if (found == events_.end() || !KnownStream(stream)) return dataplane::kCuInvalidHandle;
  found->second.recorded = true;
  found->second.when = std::chrono::steady_clock::now();
  return dataplane::kCuSuccess;
} catch (...) {
  return Failed("RecordEvent", dataplane::kCuUnknown);
}

int32_t SimExecutor::SynchronizeEvent(uint64_t event) {
  return events_.count(event) ? dataplane::kCuSuccess : dataplane::kCuInvalidHandle;
}

int32_t SimExecutor::QueryEvent(uint64_t event) { return SynchronizeEvent(event); }

int32_t SimExecutor::ElapsedTime(uint64_t start, uint64_t end, float* milliseconds) {
  auto first = events_.find(start);
  auto second = events_.find(end);
  if (first == events_.end() || second == events_.end()) return dataplane::kCuInvalidHandle;
  if ((first->second.flags | second->second.flags) & kEventDisableTiming) {
    return dataplane::kCuInvalidHandle;
  }
  if (!first->second.recorded || !second->second.recorded) return dataplane::kCuInvalidHandle;
  *milliseconds = std::chrono::duration<float, std::milli>(second->second.when - first->second.when).count();
  return dataplane::kCuSuccess;
}

}  // namespace gpupool::devices
