// Managed (unified) memory: cuMemAllocManaged.
//
// A managed allocation is one address valid on the host and on the GPU. The process
// chooses its device addresses (Runtime::ChooseAddress), so the host's pages are mapped
// at the very address the agent places the allocation at: the pointer the application
// holds works in its own code and in its kernels. The two copies are kept coherent at
// call boundaries, as a GPU without concurrent managed access requires of a program
// (CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS is 0: the host touches managed memory
// only while no GPU work is outstanding):
//   - before work that reaches device memory (a launch, a copy, a memset), a device
//     whose managed memory the host may have written since gets every managed
//     allocation of it uploaded whole;
//   - after a synchronisation (context, stream or event, or a blocking device-to-host
//     copy), a device that ran such work since has its managed allocations read back
//     whole into the host's pages, once the whole device is idle.
// So a program that alternates host and GPU phases moves its managed bytes twice per
// phase change, whatever it touched: faithful, not fast (no page-level tracking).
// Mapped ("zero-copy") host memory, cuMemHostAlloc with CU_MEMHOSTALLOC_DEVICEMAP, is
// made the same way, its device pointer the host pointer as under UVA: coherent at the
// same call boundaries, so a host thread that polls it while a kernel runs, calling no
// CUDA function, does not see the kernel's writes (on a GPU it would).
// A module's __managed__ variables (cuLibraryGetManaged) are managed ranges too, their
// host pages mapped at the variable's address among the module's globals.
// Registered host memory mapped for a device (cuMemHostRegister with DEVICEMAP) is the
// program's own pages: device memory is placed over them at their addresses
// (MapRegistered), and only the registered bytes are copied either way, so bytes that
// share its first or last page stay the program's alone.
// Needs an executor that places memory at the process's addresses (the sim); on
// another, cuMemAllocManaged answers CUDA_ERROR_NOT_SUPPORTED and logs why.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "remote/client/core/log.h"
#include "remote/client/core/runtime.h"

namespace gpupool::client {

namespace dp = dataplane;

namespace {

constexpr uint64_t kPage = 4096;

uint64_t RoundUp(uint64_t value, uint64_t to) { return (value + to - 1) / to * to; }

// Requests that read or write device memory, before which the device needs the host's
// managed bytes.
bool ReachesDeviceMemory(uint32_t op) {
  switch (op) {
    case dp::kOpLaunch:
    case dp::kOpMemset:
    case dp::kOpMemcpyHtoD:
    case dp::kOpMemcpyDtoH:
    case dp::kOpMemcpyDtoD:
      return true;
    default:
      return false;
  }
}

}  // namespace

CUresult Runtime::AllocateAtOwnAddress(int device, uint64_t address, uint64_t size, const char* api, const char* why) {
  dp::MemAllocArgs args{size, address};
  dp::MemAllocResult result{0};
  std::string out;
  CUresult status = Call(device, dp::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
  if (status == CUDA_SUCCESS && out.size() != sizeof(result)) status = CUDA_ERROR_UNKNOWN;
  if (status == CUDA_SUCCESS) std::memcpy(&result, out.data(), sizeof(result));
  if (status == CUDA_SUCCESS && result.dptr != address) {
    dp::MemFreeArgs free_args{result.dptr};
    (void)Call(device, dp::kOpMemFree, &free_args, sizeof(free_args));
    return static_cast<CUresult>(ReportUnsupported(api, why));
  }
  return status;
}

CUresult Runtime::AllocManaged(int device, size_t size, Context* context, CUdeviceptr* dptr, const char* api) {
  const uint64_t mapped = RoundUp(size, kPage);
  const uint64_t reserved_size = mapped + kPage;  // room to align the start to a page
  const uint64_t reserved = ChooseAddress(reserved_size);
  const uint64_t address = RoundUp(reserved, kPage);
  void* host = mmap(reinterpret_cast<void*>(address), mapped, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (host == MAP_FAILED || host != reinterpret_cast<void*>(address)) {
    if (host != MAP_FAILED) munmap(host, mapped);
    ReleaseAddress(reserved, reserved_size);
    LogError("%s: cannot map %zu bytes of host memory at 0x%llx: %s", api, size,
             static_cast<unsigned long long>(address), std::strerror(errno));
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  CUresult status = AllocateAtOwnAddress(device, address, size, api,
                                         "managed and mapped host memory need a GPU whose executor places "
                                         "memory at this process's addresses (the sim); this one does not");
  if (status != CUDA_SUCCESS) {
    munmap(host, mapped);
    ReleaseAddress(reserved, reserved_size);
    return status;
  }
  AddContextAllocation(address, size, device, context);
  {
    std::lock_guard<std::mutex> lock(managed_mu_);
    managed_[address] = ManagedRange{size, device, reserved, reserved_size, mapped, {}};
    managed_count_.store(static_cast<int>(managed_.size()));
  }
  *dptr = address;
  return CUDA_SUCCESS;
}

bool Runtime::IsManaged(uint64_t ptr) {
  if (managed_count_.load() == 0) return false;
  std::lock_guard<std::mutex> lock(managed_mu_);
  auto after = managed_.upper_bound(ptr);
  if (after == managed_.begin()) return false;
  auto& [start, range] = *std::prev(after);
  return ptr - start < range.size;
}

CUresult Runtime::AddManagedVariable(int device, uint64_t address, size_t size) {
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(managed_mu_);
  if (auto found = managed_.find(address); found != managed_.end()) {
    return found->second.size == size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  // The globals sit at addresses this process chose for the module (nothing of the host's
  // is there); variables may share pages.
  const uint64_t first = address / kPage * kPage;
  for (uint64_t page = first; page < address + size; page += kPage) {
    if (managed_variable_pages_.count(page) != 0) continue;
    void* host = mmap(reinterpret_cast<void*>(page), kPage, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (host != reinterpret_cast<void*>(page)) {
      if (host != MAP_FAILED) munmap(host, kPage);
      LogError("__managed__ variable at 0x%llx: cannot map host memory at 0x%llx: %s",
               static_cast<unsigned long long>(address), static_cast<unsigned long long>(page), std::strerror(errno));
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    managed_variable_pages_.insert(page);
  }
  // Its value (the initialiser, or what kernels wrote) once the device is idle.
  CUresult status = CallNow(device, dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0, nullptr);
  if (status != CUDA_SUCCESS) return status;
  dp::MemcpyDtoHArgs args{address, size, 0};
  status = CallNow(device, dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, reinterpret_cast<void*>(address), size,
                   nullptr);
  if (status != CUDA_SUCCESS) return status;
  // Host and device now agree on it, whatever the device's other managed ranges are.
  managed_[address] = ManagedRange{size, device, 0, 0, 0, {}};
  managed_count_.store(static_cast<int>(managed_.size()));
  return CUDA_SUCCESS;
}

namespace {

// Calls `visit(range, first_page, end_page)` for each managed range [ptr, ptr + count)
// meets, in address order; false unless the ranges cover it without a gap.
template <typename Ranges, typename Visit>
bool ForEachManagedPage(Ranges& ranges, uint64_t ptr, size_t count, Visit visit) {
  if (count == 0 || ptr + count < ptr) return false;
  const uint64_t end = ptr + count;
  uint64_t at = ptr;
  auto it = ranges.upper_bound(ptr);
  if (it == ranges.begin()) return false;
  for (--it; at < end; ++it) {
    if (it == ranges.end()) return false;
    auto& [start, range] = *it;
    if (at < start || at - start >= range.size) return false;  // a gap
    const uint64_t stop = std::min<uint64_t>(end, start + range.size);
    visit(range, (at - start) / kPage, (stop - 1 - start) / kPage + 1);
    at = stop;
  }
  return true;
}

}  // namespace

CUresult Runtime::AdviseManaged(uint64_t ptr, size_t count, const std::function<void(ManagedPageAdvice*)>& change) {
  std::lock_guard<std::mutex> lock(managed_mu_);
  // Checked whole first: a range that is not managed throughout changes nothing.
  if (!ForEachManagedPage(managed_, ptr, count, [](auto&, uint64_t, uint64_t) {})) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ForEachManagedPage(managed_, ptr, count, [&](ManagedRange& range, uint64_t first, uint64_t end) {
    if (range.advice.empty()) range.advice.resize(RoundUp(range.size, kPage) / kPage);
    for (uint64_t page = first; page < end; ++page) change(&range.advice[page]);
  });
  return CUDA_SUCCESS;
}

CUresult Runtime::ManagedAdviceOf(uint64_t ptr, size_t count, std::vector<ManagedPageAdvice>* pages) {
  std::lock_guard<std::mutex> lock(managed_mu_);
  pages->clear();
  bool covered = ForEachManagedPage(managed_, ptr, count, [&](const ManagedRange& range, uint64_t first, uint64_t end) {
    for (uint64_t page = first; page < end; ++page) {
      pages->push_back(range.advice.empty() ? ManagedPageAdvice{} : range.advice[page]);
    }
  });
  return covered ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

bool Runtime::ForgetManaged(uint64_t address) {
  ManagedRange range{};
  {
    std::lock_guard<std::mutex> lock(managed_mu_);
    auto found = managed_.find(address);
    if (found == managed_.end()) {
      // A registered range's device memory starts at its first page, before the range
      // when the program registered an unaligned pointer.
      found = std::find_if(managed_.begin(), managed_.end(), [address](const auto& entry) {
        return entry.second.registered && entry.second.reserved == address;
      });
    }
    if (found == managed_.end()) return false;
    range = std::move(found->second);  // its advice too, not copied
    managed_.erase(found);
    managed_count_.store(static_cast<int>(managed_.size()));
  }
  // A __managed__ variable (no pages or addresses of its own): its module's pages stay;
  // registered memory: the program's pages and host range stay (it unregisters them).
  if (range.mapped == 0) return true;
  // Mapped host memory (cuMemHostAlloc with DEVICEMAP) is a managed range too: its pages
  // go, and with them the host range (a context's destruction frees it this way).
  RemoveHostRange(reinterpret_cast<const void*>(address));
  PinnedSnapshots::Get().RemoveRegion(reinterpret_cast<void*>(address));  // page-locked memory handed to a kernel
  munmap(reinterpret_cast<void*>(address), range.mapped);
  if (InPinnedWindow(address)) {
    ReleasePinnedAddress(range.reserved, range.reserved_size);
  } else {
    ReleaseAddress(range.reserved, range.reserved_size);
  }
  return true;
}

void* Runtime::AllocPinned(size_t size) {
  // The userfaultfd and its thread only in a process that has page-locked memory.
  if (want_snapshots_) {
    std::call_once(snapshots_once_, [] {
      if (std::string why; !PinnedSnapshots::Get().Enable(&why)) {
        LogDebug("uploads from page-locked memory are copied into the failover journal at the call: %s", why.c_str());
      }
    });
  }
  const uint64_t mapped = RoundUp(size, kPage);
  uint64_t address = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto reuse = free_pinned_.find(mapped); reuse != free_pinned_.end()) {
      address = reuse->second;
      free_pinned_.erase(reuse);
    } else if (next_pinned_ + mapped + kPage <= kPinnedWindowEnd) {
      address = next_pinned_;
      next_pinned_ += mapped + kPage;  // a gap: an overrun does not reach the next buffer
    }
  }
  if (address != 0) {
    void* host = mmap(reinterpret_cast<void*>(address), mapped, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (host == reinterpret_cast<void*>(address)) {
      any_pinned_.store(true);
      PinnedSnapshots::Get().AddRegion(host, mapped);
      return host;
    }
    if (host != MAP_FAILED) munmap(host, mapped);
    ReleasePinnedAddress(address, mapped);
    LogDebug(
        "page-locked memory: 0x%llx is taken; %zu bytes placed elsewhere, where kernels "
        "cannot reach them",
        static_cast<unsigned long long>(address), size);
  }
  void* host = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) return nullptr;
  PinnedSnapshots::Get().AddRegion(host, mapped);
  return host;
}

void Runtime::FreePinned(void* pointer, size_t size) {
  const uint64_t mapped = RoundUp(size, kPage);
  PinnedSnapshots::Get().RemoveRegion(pointer);  // the journal's snapshots of it are copied
  munmap(pointer, mapped);
  const auto address = reinterpret_cast<uint64_t>(pointer);
  if (InPinnedWindow(address)) ReleasePinnedAddress(address, mapped);
}

void Runtime::ReleasePinnedAddress(uint64_t address, uint64_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  free_pinned_.emplace(size, address);
}

CUresult Runtime::MapPinnedArguments(int device, Context* context, const char* params, size_t size) {
  const bool pinned = any_pinned_.load(std::memory_order_relaxed);
  const bool registered = any_registered_.load(std::memory_order_relaxed);
  if (!pinned && !registered) return CUDA_SUCCESS;
  for (size_t at = 0; at + sizeof(uint64_t) <= size; at += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, params + at, sizeof(word));
    CUresult status = CUDA_SUCCESS;
    if (pinned && InPinnedWindow(word)) status = MapPinned(device, context, word);
    // The program's heap may lie in the window too (it is only where ours are placed).
    if (status == CUDA_SUCCESS && registered && word != 0) status = MapRegisteredOnUse(device, context, word);
    if (status != CUDA_SUCCESS) return status;
  }
  return CUDA_SUCCESS;
}

CUresult Runtime::MapRegisteredOnUse(int device, Context* context, uint64_t address) {
  unsigned flags = 0;
  uintptr_t start = 0;
  size_t size = 0;
  auto unmapped = [&] {
    return FindHostRange(reinterpret_cast<const void*>(address), &flags, &start, &size) &&
           (flags & kRegisteredHostMemory) != 0 && (flags & (CU_MEMHOSTREGISTER_DEVICEMAP | kHostMappedOnUse)) == 0;
  };
  if (!unmapped()) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(pinned_mu_);  // one mapping however many threads ask
  if (!unmapped()) return CUDA_SUCCESS;
  CUresult status = MapRegistered(device, context, start, size, (flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0);
  if (status == CUDA_ERROR_INVALID_VALUE) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  if (status != CUDA_SUCCESS) return status;
  AddHostRangeFlags(reinterpret_cast<const void*>(start), kHostMappedOnUse);
  LogDebug("registered host memory 0x%llx (%zu bytes) mapped on GPU %d, coherent at CUDA calls from now on",
           static_cast<unsigned long long>(start), size, device);
  return CUDA_SUCCESS;
}

CUresult Runtime::MapPinned(int device, Context* context, uint64_t address) {
  std::lock_guard<std::mutex> lock(pinned_mu_);
  unsigned flags = 0;
  uintptr_t start = 0;
  size_t size = 0;
  if (!FindHostRange(reinterpret_cast<const void*>(address), &flags, &start, &size) ||
      (flags & (CU_MEMHOSTALLOC_DEVICEMAP | kHostMappedOnUse)) != 0 || !InPinnedWindow(start)) {
    return CUDA_SUCCESS;  // not a page-locked buffer of ours, or mapped already
  }
  // The allocation is a synchronous call: the replies of asynchronous copies into the
  // buffer sent before it come first on the connection, so they have landed in its pages
  // before its bytes go to the device (mapped_memory.cu copies into one just before).
  if (CUresult status = AllocateAtOwnAddress(
          device, start, size, "a kernel handed page-locked host memory",
          "reaching page-locked host memory from a kernel needs a GPU whose executor places memory at this "
          "process's addresses (the sim); this one does not");
      status != CUDA_SUCCESS) {
    return status;
  }
  AddContextAllocation(start, size, device, context);
  AddHostRangeFlags(reinterpret_cast<const void*>(start), kHostMappedOnUse);
  {
    std::lock_guard<std::mutex> managed_lock(managed_mu_);
    const uint64_t mapped = RoundUp(size, kPage);
    managed_[start] = ManagedRange{size, device, start, mapped, mapped, {}};
    managed_count_.store(static_cast<int>(managed_.size()));
    if (device_holds_managed_.count(device) != 0) {
      // The device's managed copies are current (another thread's work since the
      // synchronisation above): this one joins them now; else the next work uploads all.
      dp::MemcpyHtoDArgs upload{start, size, 0};
      if (CUresult uploaded =
              PostNow(device, dp::kOpMemcpyHtoD, &upload, sizeof(upload), reinterpret_cast<const void*>(start), size);
          uploaded != CUDA_SUCCESS) {
        return uploaded;
      }
    }
  }
  LogDebug(
      "page-locked buffer 0x%llx (%zu bytes) handed to a kernel: mapped on GPU %d, "
      "coherent at CUDA calls from now on",
      static_cast<unsigned long long>(start), size, device);
  return CUDA_SUCCESS;
}

CUresult Runtime::MapRegistered(int device, Context* context, uintptr_t start, size_t size, bool read_only) {
  const uint64_t first_page = start / kPage * kPage;
  const uint64_t pages = RoundUp(start + size, kPage) - first_page;  // the caller checked start + size
  if (CUresult status = AllocateAtOwnAddress(
          device, first_page, pages, "cuMemHostRegister(CU_MEMHOSTREGISTER_DEVICEMAP)",
          "mapping registered host memory needs a GPU whose executor places memory at this process's addresses "
          "(the sim); this one does not");
      status != CUDA_SUCCESS) {
    return status;
  }
  AddContextAllocation(first_page, pages, device, context);
  std::lock_guard<std::mutex> lock(managed_mu_);
  ManagedRange range{size, device, first_page, pages, 0, {}};
  range.registered = true;
  range.read_only = read_only;
  managed_[start] = std::move(range);
  managed_count_.store(static_cast<int>(managed_.size()));
  if (device_holds_managed_.count(device) != 0) {
    // The device's managed copies are current: this one joins them now (as MapPinned).
    dp::MemcpyHtoDArgs upload{start, size, 0};
    return PostNow(device, dp::kOpMemcpyHtoD, &upload, sizeof(upload), reinterpret_cast<const void*>(start), size);
  }
  return CUDA_SUCCESS;
}

CUresult Runtime::UnmapRegistered(uintptr_t start) {
  ManagedRange range{};
  {
    std::lock_guard<std::mutex> lock(managed_mu_);
    auto found = managed_.find(start);
    // None: never mapped, or its context freed the device memory already.
    if (found == managed_.end() || !found->second.registered) return CUDA_SUCCESS;
    range = found->second;  // kept there until it is read back
    if (device_holds_managed_.count(range.device) != 0 && !range.read_only) {
      // What kernels wrote, once the device is idle: the program's bytes from now on.
      CUresult status = CallNow(range.device, dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0, nullptr);
      dp::MemcpyDtoHArgs args{start, range.size, 0};
      if (status == CUDA_SUCCESS) {
        status = CallNow(range.device, dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0,
                         reinterpret_cast<void*>(start), range.size, nullptr);
      }
      if (status != CUDA_SUCCESS) return status;
    }
    managed_.erase(found);
    managed_count_.store(static_cast<int>(managed_.size()));
  }
  int device = 0;
  if (!RemoveAllocation(range.reserved, &device)) return CUDA_SUCCESS;
  dp::MemFreeArgs args{range.reserved};
  return Call(device, dp::kOpMemFree, &args, sizeof(args));
}

CUresult Runtime::ManagedBefore(int device, uint32_t op) {
  if (managed_count_.load() == 0 || !ReachesDeviceMemory(op)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(managed_mu_);
  if (device_holds_managed_.count(device) != 0) return CUDA_SUCCESS;
  for (const auto& [address, range] : managed_) {
    if (range.device != device) continue;
    dp::MemcpyHtoDArgs args{address, range.size, 0};
    CUresult status =
        PostNow(device, dp::kOpMemcpyHtoD, &args, sizeof(args), reinterpret_cast<const void*>(address), range.size);
    if (status != CUDA_SUCCESS) return status;
  }
  device_holds_managed_.insert(device);
  return CUDA_SUCCESS;
}

CUresult Runtime::ManagedAfter(int device, uint32_t op) {
  if (managed_count_.load() == 0 || !dp::Synchronises(op)) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(managed_mu_);
  if (device_holds_managed_.count(device) == 0) return CUDA_SUCCESS;
  if (op != dp::kOpContextSynchronize) {
    // Work on the device's other streams may still write managed memory.
    CUresult idle = CallNow(device, dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0, nullptr);
    if (idle != CUDA_SUCCESS) return idle;
  }
  for (const auto& [address, range] : managed_) {
    if (range.device != device || range.read_only) continue;
    dp::MemcpyDtoHArgs args{address, range.size, 0};
    CUresult status = CallNow(device, dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0,
                              reinterpret_cast<void*>(address), range.size, nullptr);
    if (status != CUDA_SUCCESS) return status;
  }
  device_holds_managed_.erase(device);
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client
