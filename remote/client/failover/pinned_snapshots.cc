// Copy-on-write snapshots of page-locked memory (pinned_snapshots.h): the userfaultfd, the
// regions it write-protects, and the thread that copies a snapshot when its pages are
// written.
#include "remote/client/failover/pinned_snapshots.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "remote/client/failover/failover_internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace gpupool::client {

namespace {

constexpr uintptr_t kPage = 4096;
uintptr_t PageDown(uintptr_t address) { return address & ~(kPage - 1); }
uintptr_t PageUp(uintptr_t address) { return (address + kPage - 1) & ~(kPage - 1); }

// A userfaultfd made through a descriptor of /dev/userfaultfd that spank_gpupool opened for
// this job as root (plugstack.conf userfaultfd=yes) and named in GPUPOOL_USERFAULTFD; -1,
// with why in *refused, where the variable names none. USERFAULTFD_IOC_NEW makes a
// userfaultfd for the caller's own memory, so the descriptor gives the job nothing over
// other processes.
int UserfaultfdFromGivenDevice(const char* given, std::string* refused) {
  char* end = nullptr;
  errno = 0;
  const long number = std::strtol(given, &end, 10);
  if (errno != 0 || end == given || *end != '\0' || number < 0 || number > INT_MAX) {
    *refused += std::string("; GPUPOOL_USERFAULTFD='") + given + "' is not a descriptor number";
    return -1;
  }
  const int device = static_cast<int>(number);
  struct stat opened = {};
  struct stat named = {};
  if (fstat(device, &opened) != 0) {
    *refused += "; GPUPOOL_USERFAULTFD=" + std::to_string(device) + ": " + std::strerror(errno);
    return -1;
  }
  // The same device as /dev/userfaultfd, or where a container hides that node, a misc
  // character device (major 10), as /dev/userfaultfd is.
  const bool is_userfaultfd =
      S_ISCHR(opened.st_mode) &&
      (stat("/dev/userfaultfd", &named) == 0 ? opened.st_rdev == named.st_rdev : major(opened.st_rdev) == 10);
  if (!is_userfaultfd) {
    *refused += "; GPUPOOL_USERFAULTFD=" + std::to_string(device) + " is not a descriptor of /dev/userfaultfd";
    return -1;
  }
  const int uffd = ioctl(device, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
  if (uffd < 0) *refused += "; GPUPOOL_USERFAULTFD=" + std::to_string(device) + ": " + std::strerror(errno);
  return uffd;
}

}  // namespace

struct HostSnapshot::Record {
  uintptr_t start = 0;
  size_t size = 0;
  uintptr_t first_page = 0, end_page = 0;  // the pages it protects: [first_page, end_page)
  JournalBytes bytes;                      // its copy, once made (copied)
  bool copied = false;
  // Listed in its region, its pages protected for it. Set and cleared under the registry's
  // lock; read without it only to skip the lock once cleared (it is never set again).
  std::atomic<bool> listed{false};
  ~Record() { PinnedSnapshots::Get().Release(this); }
};

struct PinnedSnapshots::State {
  int uffd = -1;
  std::string refused;  // why Enable failed
  // In a child after fork(2): the descriptor still acts on the parent's memory, and no
  // fault thread runs here, so nothing is protected or lifted any more.
  bool forked = false;
  std::mutex mu;
  struct Region {
    uintptr_t end = 0;
    std::vector<HostSnapshot::Record*> snapshots;  // listed, not yet copied
    // A program that fills a buffer before each upload writes every snapshot of it: the
    // write then waits for the whole copy, which is no longer made while the bytes are in
    // flight (scripts/bench/failover --uploads, "filled" rows). After a snapshot of the
    // region is written, the next `skip` uploads from it are copied by the journal instead
    // (Take declines them); `backoff` starts at kFirstDeclined, doubles with each written
    // snapshot up to kMostDeclined, and starts again once a snapshot ends unwritten.
    unsigned skip = 0;
    unsigned backoff = 0;
    unsigned readers = 0;  // HostSnapshot::BeginRead without its EndRead yet
  };
  std::condition_variable no_readers;  // a region's readers went to 0 (RemoveRegion waits)
  static constexpr unsigned kFirstDeclined = 8;
  static constexpr unsigned kMostDeclined = 64;
  static void Written(Region* region) {
    region->backoff = std::min(kMostDeclined, std::max(kFirstDeclined, region->backoff * 2));
    region->skip = region->backoff;
  }
  std::map<uintptr_t, Region> regions;  // by start
  // Buffers of copies no longer needed, for the next copies: a buffer of fresh memory costs
  // a page fault per page, which the writer waiting on the copy would pay (a loop of 16 MiB
  // uploads, each filled first, took 4,096 more faults per copy, and the first write 7 ms
  // instead of 1.6). At most kSpareBuffers holding at most kSpareBytes.
  std::multimap<size_t, JournalBytes> spare;  // by capacity
  size_t spare_bytes = 0;
  static constexpr size_t kSpareBuffers = 4;
  static constexpr size_t kSpareBytes = size_t{256} << 20;

  JournalBytes SpareBuffer(size_t size) {
    auto best = spare.lower_bound(size);
    if (best == spare.end() || best->first > 2 * size + (size_t{1} << 20)) return {};
    JournalBytes buffer = std::move(best->second);
    spare_bytes -= best->first;
    spare.erase(best);
    return buffer;
  }
  void Keep(JournalBytes* buffer) {
    const size_t capacity = buffer->capacity();
    if (capacity < (size_t{64} << 10) || capacity > kSpareBytes) return;
    while (!spare.empty() && (spare.size() >= kSpareBuffers || spare_bytes + capacity > kSpareBytes)) {
      spare_bytes -= spare.begin()->first;  // the smallest goes
      spare.erase(spare.begin());
    }
    spare_bytes += capacity;
    spare.emplace(capacity, std::move(*buffer));
  }

  // The region holding [address, address + size) whole (mu held).
  Region* Holding(uintptr_t address, size_t size) {
    auto after = regions.upper_bound(address);
    if (after == regions.begin()) return nullptr;
    Region& region = std::prev(after)->second;
    if (address >= region.end || size > region.end - address) return nullptr;
    return &region;
  }
  bool WriteProtect(uintptr_t first, uintptr_t end, bool on) {
    if (forked) return false;
    uffdio_writeprotect protect{};
    protect.range.start = first;
    protect.range.len = end - first;
    protect.mode = on ? UFFDIO_WRITEPROTECT_MODE_WP : 0;  // lifting it wakes the writers waiting
    return ioctl(uffd, UFFDIO_WRITEPROTECT, &protect) == 0;
  }
  // Sets (`on`) or lifts the protection of the pages of [first, end) that none of the
  // region's listed snapshots protects: those are protected already, and stay so. A loop of
  // uploads from one buffer then protects its pages once: each upload's snapshot is taken
  // before the previous one is released. (Protecting them again cost a page-table walk and
  // a TLB flush per upload, and the send's copy then missed the TLB on every page.)
  bool ProtectUncovered(Region* region, uintptr_t first, uintptr_t end, bool on) {
    std::vector<std::pair<uintptr_t, uintptr_t>> kept;
    for (const HostSnapshot::Record* other : region->snapshots) {
      if (other->first_page < end && first < other->end_page) kept.emplace_back(other->first_page, other->end_page);
    }
    std::sort(kept.begin(), kept.end());
    bool done = true;
    uintptr_t from = first;
    for (const auto& [kept_first, kept_end] : kept) {
      if (kept_first > from) done = WriteProtect(from, kept_first, on) && done;
      from = std::max(from, kept_end);
    }
    if (from < end) done = WriteProtect(from, end, on) && done;
    return done;
  }
  void Unprotect(Region* region, uintptr_t first, uintptr_t end) { ProtectUncovered(region, first, end, false); }
  // Copies `record` (listed, its pages protected: unchanged) and takes it off its region's
  // list; the caller lifts the protection.
  void CopyOut(Region* region, HostSnapshot::Record* record) {
    record->bytes = SpareBuffer(record->size);
    record->bytes.resize(record->size);
    std::memcpy(record->bytes.data(), reinterpret_cast<const void*>(record->start), record->size);
    record->copied = true;
    record->listed.store(false, std::memory_order_release);
    std::erase(region->snapshots, record);
  }
};

PinnedSnapshots& PinnedSnapshots::Get() {
  static PinnedSnapshots* registry = new PinnedSnapshots();  // NOLINT: lives until exit
  return *registry;
}

size_t HostSnapshot::size() const { return record_ ? record_->size : 0; }

bool HostSnapshot::MoveInto(JournalBytes* bytes) {
  if (!record_) return false;
  bool copied_now = false;
  PinnedSnapshots& registry = PinnedSnapshots::Get();
  {
    std::lock_guard<std::mutex> lock(registry.state_->mu);
    Record* record = record_.get();
    if (record->copied && record_.use_count() == 1) {
      bytes->swap(record->bytes);
    } else if (record->copied) {  // another copy of this handle may still ask for them
      bytes->assign(record->bytes.begin(), record->bytes.end());
    } else {
      // Still listed: its pages are protected, so they hold what was uploaded.
      bytes->resize(record->size);
      CopyBytes(bytes->data(), reinterpret_cast<const char*>(record->start), record->size, record->size);
      copied_now = true;
    }
  }
  record_.reset();  // releases it (Release)
  return copied_now;
}

const char* HostSnapshot::BeginRead() {
  if (!record_) return nullptr;
  PinnedSnapshots::State* state = PinnedSnapshots::Get().state_;
  std::lock_guard<std::mutex> lock(state->mu);
  Record* record = record_.get();
  if (!record->listed.load(std::memory_order_relaxed)) return nullptr;  // copied: MoveInto
  PinnedSnapshots::State::Region* region = state->Holding(record->start, record->size);
  if (region == nullptr) return nullptr;
  ++region->readers;
  return reinterpret_cast<const char*>(record->start);
}

bool HostSnapshot::EndRead() {
  PinnedSnapshots::State* state = PinnedSnapshots::Get().state_;
  std::lock_guard<std::mutex> lock(state->mu);
  Record* record = record_.get();
  // Still there: RemoveRegion waits for its readers.
  PinnedSnapshots::State::Region* region = state->Holding(record->start, record->size);
  if (region != nullptr && region->readers > 0 && --region->readers == 0) state->no_readers.notify_all();
  // Listed still: never copied, so its pages were protected throughout the read.
  return record->listed.load(std::memory_order_relaxed);
}

bool PinnedSnapshots::Enable(std::string* why) {
  static std::mutex enable_mu;
  std::lock_guard<std::mutex> once(enable_mu);
  if (enabled()) return true;
  if (state_ != nullptr) {  // an earlier attempt failed: the same reason
    *why = state_->refused;
    return false;
  }
  // Faults taken in the kernel too (no UFFD_USER_MODE_ONLY): see the header comment.
  int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
  std::string refused;
  if (uffd < 0) {
    refused = std::string("userfaultfd: ") + std::strerror(errno);
    if (const char* given = std::getenv("GPUPOOL_USERFAULTFD"); given != nullptr && *given != '\0') {
      uffd = UserfaultfdFromGivenDevice(given, &refused);
    }
  }
  if (uffd < 0) {
    int device = open("/dev/userfaultfd", O_RDWR | O_CLOEXEC);
    if (device >= 0) {
      uffd = ioctl(device, USERFAULTFD_IOC_NEW, O_CLOEXEC | O_NONBLOCK);
      if (uffd < 0) refused += std::string("; /dev/userfaultfd: ") + std::strerror(errno);
      close(device);
    } else {
      refused += std::string("; /dev/userfaultfd: ") + std::strerror(errno);
    }
  }
  state_ = new State();  // NOLINT: lives until exit, with the registry
  if (uffd < 0) {
    *why = state_->refused =
        refused +
        " (vm.unprivileged_userfaultfd is 0 and /dev/userfaultfd is not open to this user; spank_gpupool gives "
        "a job's tasks a descriptor of it where plugstack.conf says userfaultfd=yes)";
    return false;
  }
  uffdio_api api{};
  api.api = UFFD_API;
  api.features = UFFD_FEATURE_PAGEFAULT_FLAG_WP;
  if (ioctl(uffd, UFFDIO_API, &api) != 0 || (api.features & UFFD_FEATURE_PAGEFAULT_FLAG_WP) == 0) {
    *why = state_->refused =
        std::string("userfaultfd cannot write-protect anonymous memory here (Linux 5.7 or later): ") +
        std::strerror(errno);
    close(uffd);
    return false;
  }
  state_->uffd = uffd;
  // The registry's lock is held across fork(2), so that a child finds it free, and the
  // child takes no snapshot (State::forked).
  pthread_atfork([] { Get().state_->mu.lock(); }, [] { Get().state_->mu.unlock(); },
                 [] {
                   PinnedSnapshots& registry = Get();
                   registry.state_->forked = true;
                   registry.any_region_.store(false);
                   registry.enabled_.store(false);
                   registry.state_->mu.unlock();
                 });
  // The fault thread takes none of the program's signals (it starts with every signal
  // blocked): a handler the program runs there could write the memory the thread unblocks.
  sigset_t all, before;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &before);
  std::thread([this] { FaultLoop(); }).detach();
  pthread_sigmask(SIG_SETMASK, &before, nullptr);
  enabled_.store(true, std::memory_order_release);
  return true;
}

void PinnedSnapshots::AddRegion(void* start, size_t size) {
  const auto first = reinterpret_cast<uintptr_t>(start);
  if (!enabled() || start == nullptr || size == 0 || size > UINTPTR_MAX - kPage - first) return;
  const uintptr_t end = PageUp(first + size);
  // Every page present, as the driver's page-locked memory is: write-protection marks
  // present pages (and not every kernel marks absent ones).
  if (madvise(start, end - first, MADV_POPULATE_WRITE) != 0) {
    for (uintptr_t page = first; page < end; page += kPage) *reinterpret_cast<volatile char*>(page) = 0;
  }
  uffdio_register registration{};
  registration.range.start = first;
  registration.range.len = end - first;
  registration.mode = UFFDIO_REGISTER_MODE_WP;
  if (ioctl(state_->uffd, UFFDIO_REGISTER, &registration) != 0) {
    LogDebug("page-locked memory at 0x%llx: no copy-on-write snapshots of its uploads (UFFDIO_REGISTER: %s)",
             static_cast<unsigned long long>(first), std::strerror(errno));
    return;
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->regions[first] = State::Region{end, {}};
  any_region_.store(true, std::memory_order_release);
}

void PinnedSnapshots::RemoveRegion(void* start) {
  if (!enabled()) return;
  const auto first = reinterpret_cast<uintptr_t>(start);
  std::unique_lock<std::mutex> lock(state_->mu);
  auto found = state_->regions.find(first);
  // A recovery sending from its pages (HostSnapshot::BeginRead) finishes first.
  while (found != state_->regions.end() && found->second.readers > 0) {
    state_->no_readers.wait(lock);
    found = state_->regions.find(first);
  }
  if (found == state_->regions.end()) return;
  State::Region& region = found->second;
  while (!region.snapshots.empty()) {
    state_->CopyOut(&region, region.snapshots.back());
    materialized_.fetch_add(1);
  }
  // Wakes any writer still waiting on these pages (a program writing memory it frees).
  uffdio_range range{first, region.end - first};
  if (!state_->forked) ioctl(state_->uffd, UFFDIO_UNREGISTER, &range);
  state_->regions.erase(found);
}

HostSnapshot PinnedSnapshots::Take(const void* bytes, size_t size) {
  if (!any_region_.load(std::memory_order_acquire) || size == 0) return {};
  const auto start = reinterpret_cast<uintptr_t>(bytes);
  std::lock_guard<std::mutex> lock(state_->mu);
  State::Region* region = state_->Holding(start, size);
  if (region == nullptr) return {};
  if (region->skip > 0) {  // the program has been writing this buffer
    --region->skip;
    return {};
  }
  // Made under the lock: one never listed ends without taking it (Release).
  auto record = std::make_shared<HostSnapshot::Record>();
  record->start = start;
  record->size = size;
  record->first_page = PageDown(start);
  record->end_page = PageUp(start + size);  // within the region: no overflow
  if (!state_->ProtectUncovered(region, record->first_page, record->end_page, true)) {
    LogDebug("copy-on-write snapshot of 0x%llx: UFFDIO_WRITEPROTECT: %s; copied instead",
             static_cast<unsigned long long>(start), std::strerror(errno));
    // Pages it may have protected before failing are lifted, except the others' own.
    state_->Unprotect(region, record->first_page, record->end_page);
    return {};
  }
  region->snapshots.push_back(record.get());
  record->listed.store(true, std::memory_order_release);
  return HostSnapshot(std::move(record));
}

void PinnedSnapshots::Release(HostSnapshot::Record* record) {
  if (!record->listed.load(std::memory_order_acquire)) {
    if (record->bytes.capacity() == 0) return;
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->Keep(&record->bytes);  // a copy nobody took (its upload overwritten)
    return;
  }
  std::lock_guard<std::mutex> lock(state_->mu);
  if (!record->listed.load(std::memory_order_relaxed)) return;
  State::Region* region = state_->Holding(record->start, record->size);
  record->listed.store(false, std::memory_order_relaxed);
  if (region == nullptr) return;
  region->backoff = 0;  // it ended unwritten
  std::erase(region->snapshots, record);
  state_->Unprotect(region, record->first_page, record->end_page);
}

void PinnedSnapshots::FaultLoop() {
  pthread_setname_np(pthread_self(), "gpupool-cow");
  const int uffd = state_->uffd;
  for (;;) {
    pollfd ready{uffd, POLLIN, 0};
    if (poll(&ready, 1, -1) < 0) continue;  // EINTR: a writer may be waiting, never give up
    uffd_msg messages[16];
    ssize_t got = read(uffd, messages, sizeof(messages));
    if (got <= 0) continue;
    for (size_t i = 0; i < static_cast<size_t>(got) / sizeof(uffd_msg); ++i) {
      if (messages[i].event != UFFD_EVENT_PAGEFAULT) continue;
      faults_.fetch_add(1);
      const uintptr_t page = PageDown(messages[i].arg.pagefault.address);
      std::lock_guard<std::mutex> lock(state_->mu);
      State::Region* region = state_->Holding(page, kPage);
      if (region == nullptr) {  // its region went meanwhile: unregistering woke the writer
        state_->WriteProtect(page, page + kPage, false);
        continue;
      }
      // Every listed snapshot on the page is copied, and every one sharing a page with
      // those, so that lifting the protection of their pages leaves no listed one
      // unprotected.
      uintptr_t first = page, end = page + kPage;
      bool written = false;
      for (bool grew = true; grew;) {
        grew = false;
        for (size_t k = 0; k < region->snapshots.size();) {
          HostSnapshot::Record* record = region->snapshots[k];
          if (record->first_page < end && first < record->end_page) {
            first = std::min(first, record->first_page);
            end = std::max(end, record->end_page);
            state_->CopyOut(region, record);  // erases it from the list
            materialized_.fetch_add(1);
            grew = written = true;
          } else {
            ++k;
          }
        }
      }
      if (written) State::Written(region);
      state_->WriteProtect(first, end, false);  // wakes the writer
    }
  }
}

}  // namespace gpupool::client
