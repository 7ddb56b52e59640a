// SimDeviceMemory: the "device memory" of one simulated GPU, kept in host RAM.
//
// Shared by every session (client) of that GPU: capacity accounting is per GPU, like real
// device memory. Device addresses are handed out from a range of their own (never reused
// within a process lifetime) so that a client cannot mistake them for its host pointers,
// and so that a stale or forged pointer is detected instead of touching freed RAM.
// Every allocation belongs to one owner (a session, see NewOwner): an owner reaches only
// its own allocations, so one client cannot read or write another's memory by address.
// Each owner has an address space of its own: a client may ask for an allocation at an
// address of its choosing (AllocateAt), which is how a client keeps its device pointers
// when it moves to another GPU; two owners may then use the same addresses.
// Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>

namespace gpupool::devices {

class SimDeviceMemory {
 public:
  SimDeviceMemory(int gpu_index, uint64_t capacity);
  ~SimDeviceMemory();
  SimDeviceMemory(const SimDeviceMemory&) = delete;
  SimDeviceMemory& operator=(const SimDeviceMemory&) = delete;

  using Owner = uint64_t;
  // A new owner id, never handed out before by this object.
  Owner NewOwner();

  // Returns a CUresult: kCuOutOfMemory over capacity, kCuInvalidValue for size 0.
  int32_t Allocate(uint64_t size, Owner owner, uint64_t* dptr);
  // The same at `address` (256-byte aligned, not overlapping the owner's allocations):
  // kCuInvalidValue when it cannot be placed there.
  int32_t AllocateAt(uint64_t address, uint64_t size, Owner owner);
  // kCuInvalidValue unless dptr is the start of an allocation of `owner`.
  int32_t Release(uint64_t dptr, Owner owner);

  // Host address of [dptr, dptr+size) if that range lies inside one allocation of
  // `owner`, else null (whether the range is someone else's or nobody's).
  char* Translate(uint64_t dptr, uint64_t size, Owner owner);

  uint64_t used();
  uint64_t capacity() const { return capacity_; }

 private:
  struct Block {
    char* host;
    uint64_t size;
    Owner owner;
  };
  const uint64_t capacity_;
  std::mutex mu_;
  int32_t Place(uint64_t address, uint64_t size, Owner owner);  // mu_ held

  std::map<std::pair<Owner, uint64_t>, Block> blocks_;  // by owner, address; guarded by mu_
  uint64_t next_address_;                               // guarded by mu_
  uint64_t used_ = 0;                                   // guarded by mu_
  Owner last_owner_ = 0;                                // guarded by mu_
};

}  // namespace gpupool::devices
