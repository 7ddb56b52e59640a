#include "remote/devices/sim/sim_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <exception>
#include <memory>

#include "remote/protocol/protocol.h"

namespace gpupool::devices {
namespace {

// Device addresses of GPU i start at (16 + i) TiB: far from where Linux puts a process's
// heap (0x55..) and mappings (0x7f..), and 1 TiB of address space per GPU.
constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kAlignment = 512;  // cudaMalloc guarantees at least 256
// Client-chosen addresses stay below 2^48, where x86-64 and arm64 user pointers live.
constexpr uint64_t kMaxAddress = 1ull << 48;

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23  // Linux 5.14; older kernels answer EINVAL and nothing is done
#endif

}  // namespace

SimDeviceMemory::SimDeviceMemory(int gpu_index, uint64_t capacity)
    : capacity_(capacity), next_address_((16 + static_cast<uint64_t>(gpu_index)) * kTiB) {}

SimDeviceMemory::~SimDeviceMemory() {
  StopPopulating();
  for (auto& [address, block] : blocks_) munmap(block.host, block.size);
}

SimDeviceMemory::Owner SimDeviceMemory::NewOwner() {
  std::lock_guard<std::mutex> lock(mu_);
  return ++last_owner_;
}

int32_t SimDeviceMemory::Allocate(uint64_t size, Owner owner, uint64_t* dptr) {
  if (size == 0) return dataplane::kCuInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t address = next_address_;
  int32_t status = Place(address, size, owner);
  if (status != dataplane::kCuSuccess) return status;
  next_address_ += (size + kAlignment - 1) / kAlignment * kAlignment + kAlignment;
  *dptr = address;
  return dataplane::kCuSuccess;
}

int32_t SimDeviceMemory::AllocateAt(uint64_t address, uint64_t size, Owner owner) {
  if (size == 0 || address == 0 || address % 256 != 0) return dataplane::kCuInvalidValue;
  if (address > kMaxAddress || size > kMaxAddress - address) return dataplane::kCuInvalidValue;
  std::lock_guard<std::mutex> lock(mu_);
  // No overlap with the owner's allocation below or above.
  auto after = blocks_.lower_bound({owner, address});
  if (after != blocks_.end() && after->first.first == owner && after->first.second < address + size) {
    return dataplane::kCuInvalidValue;
  }
  if (after != blocks_.begin()) {
    auto before = std::prev(after);
    if (before->first.first == owner && before->first.second + before->second.size > address) {
      return dataplane::kCuInvalidValue;
    }
  }
  return Place(address, size, owner);
}

int32_t SimDeviceMemory::Place(uint64_t address, uint64_t size, Owner owner) {
  if (size > capacity_ - used_) return dataplane::kCuOutOfMemory;
  // mmap: zero pages that cost nothing until touched, returned to the OS on release.
  void* host = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (host == MAP_FAILED) return dataplane::kCuOutOfMemory;
  blocks_[{owner, address}] = Block{static_cast<char*>(host), size, owner};
  used_ += size;
  return dataplane::kCuSuccess;
}

int32_t SimDeviceMemory::Release(uint64_t dptr, Owner owner) {
  StopPopulating();  // no helper faults in a block being unmapped, or one mapped in its place
  std::lock_guard<std::mutex> lock(mu_);
  auto found = blocks_.find({owner, dptr});
  if (found == blocks_.end()) return dataplane::kCuInvalidValue;
  munmap(found->second.host, found->second.size);
  used_ -= found->second.size;
  blocks_.erase(found);
  return dataplane::kCuSuccess;
}

char* SimDeviceMemory::Translate(uint64_t dptr, uint64_t size, Owner owner) {
  std::lock_guard<std::mutex> lock(mu_);
  auto after = blocks_.upper_bound({owner, dptr});
  if (after == blocks_.begin()) return nullptr;
  auto& [key, block] = *std::prev(after);
  if (key.first != owner) return nullptr;
  uint64_t offset = dptr - key.second;
  if (offset > block.size || size > block.size - offset) return nullptr;
  return block.host + offset;
}

void SimDeviceMemory::PopulateForWrite(char* host, uint64_t size) {
  if (host == nullptr || size < kPopulateMin) return;
  // Whole pages inside the range only: a page the copy writes in part may hold bytes of
  // the block outside it, and is left to the receiver.
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t begin = (reinterpret_cast<uint64_t>(host) + page - 1) / page * page;
  const uint64_t end = (reinterpret_cast<uint64_t>(host) + size) / page * page;
  if (end <= begin) return;
  std::lock_guard<std::mutex> lock(populate_mu_);
  JoinHelpersLocked();
  // The helpers take chunks from the front, where the receiver writes first, and stay
  // ahead of it: one helper faults pages in faster than one receiver fills them.
  const uint64_t chunks = (end - begin + kPopulateChunk - 1) / kPopulateChunk;
  auto next = std::make_shared<std::atomic<uint64_t>>(0);
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned helpers = std::min(kMaxPopulateHelpers, std::max(1u, cores - 1));
  for (unsigned i = 0; i < helpers; ++i) {
    // A thread that cannot start (a worker at its cgroup's pids.max) leaves its share to the
    // others, or to the receiver: never an error of the copy.
    try {
      populating_.emplace_back([this, begin, end, chunks, next] {
        for (uint64_t chunk = (*next)++; chunk < chunks && !stop_populating_.load(); chunk = (*next)++) {
          const uint64_t at = begin + chunk * kPopulateChunk;
          const uint64_t length = std::min(kPopulateChunk, end - at);
          if (madvise(reinterpret_cast<void*>(at), length, MADV_POPULATE_WRITE) != 0) return;
          populated_.fetch_add(length);
        }
      });
    } catch (const std::exception&) {  // std::system_error, or no memory for the list
      break;
    }
  }
}

void SimDeviceMemory::StopPopulating() {
  std::lock_guard<std::mutex> lock(populate_mu_);
  JoinHelpersLocked();
}

void SimDeviceMemory::JoinHelpersLocked() {
  if (populating_.empty()) return;
  stop_populating_.store(true);
  for (std::thread& helper : populating_) helper.join();
  populating_.clear();
  stop_populating_.store(false);
}

uint64_t SimDeviceMemory::used() {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace gpupool::devices
