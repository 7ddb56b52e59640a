// SimDeviceMemory: the "device memory" of one simulated GPU, kept in host RAM.
//
// Shared by every session (client) of that GPU: capacity accounting is per GPU, like real
// device memory. Device addresses are handed out from a range of their own (never reused
// within a process lifetime) so that a client cannot mistake them for its host pointers,
// and so that a stale or forged pointer is detected instead of touching freed RAM.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace gpupool::dataplane {

class SimDeviceMemory {
 public:
  SimDeviceMemory(int gpu_index, uint64_t capacity);
  ~SimDeviceMemory();
  SimDeviceMemory(const SimDeviceMemory&) = delete;
  SimDeviceMemory& operator=(const SimDeviceMemory&) = delete;

  // Returns a CUresult: kCuOutOfMemory over capacity, kCuInvalidValue for size 0.
  int32_t Allocate(uint64_t size, uint64_t* dptr);
  int32_t Release(uint64_t dptr);  // kCuInvalidValue unless dptr is an allocation's start

  // Host address of [dptr, dptr+size) if that range lies inside one allocation, else null.
  char* Translate(uint64_t dptr, uint64_t size);

  uint64_t used();
  uint64_t capacity() const { return capacity_; }

 private:
  struct Block {
    char* host;
    uint64_t size;
  };
  const uint64_t capacity_;
  std::mutex mu_;
  std::map<uint64_t, Block> blocks_;  // by device address; guarded by mu_
  uint64_t next_address_;             // guarded by mu_
  uint64_t used_ = 0;                 // guarded by mu_
};

}  // namespace gpupool::dataplane
