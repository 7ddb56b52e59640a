#include "remote/devices/sim/sim_memory.h"

#include <sys/mman.h>

#include "remote/protocol/protocol.h"

namespace gpupool::devices {
namespace {

// Device addresses of GPU i start at (16 + i) TiB: far from where Linux puts a process's
// heap (0x55..) and mappings (0x7f..), and 1 TiB of address space per GPU.
constexpr uint64_t kTiB = 1ull << 40;
constexpr uint64_t kAlignment = 512;  // cudaMalloc guarantees at least 256
// Client-chosen addresses stay below 2^48, where x86-64 and arm64 user pointers live.
constexpr uint64_t kMaxAddress = 1ull << 48;

}  // namespace

SimDeviceMemory::SimDeviceMemory(int gpu_index, uint64_t capacity)
    : capacity_(capacity), next_address_((16 + static_cast<uint64_t>(gpu_index)) * kTiB) {}

SimDeviceMemory::~SimDeviceMemory() {
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

uint64_t SimDeviceMemory::used() {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

}  // namespace gpupool::devices
