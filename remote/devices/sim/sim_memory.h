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
//
// A large host-to-device copy received in place (the transport writes straight into a
// block: Executor::ReceiveView) would fault in a fresh block one 4 KiB page at a time on
// the receiving thread: for 1 GiB that is 262144 faults, most of what writing it costs.
// PopulateForWrite has helper threads fault the destination in (madvise
// MADV_POPULATE_WRITE, which allocates the pages without writing a byte) while the bytes
// arrive, so the receiver finds them present. The helpers never change what a page holds,
// only whether it is present: a byte the receiver wrote first stays as it wrote it.
// Release (and the destructor) stop and join them before a block is unmapped.
// Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

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

  // Starts faulting in the pages of [host, host + size), a part of one block that a
  // host-to-device copy is about to write whole, on helper threads; returns at once. Copies
  // under kPopulateMin bytes are left to fault as they are written (a thread costs more).
  // Stops the previous copy's helpers first.
  void PopulateForWrite(char* host, uint64_t size);
  // Stops the helpers (each ends within one kPopulateChunk) and joins them.
  void StopPopulating();
  // Bytes the helpers have faulted in so far, all copies together (for tests).
  uint64_t populated_bytes() const { return populated_.load(); }

  static constexpr uint64_t kPopulateMin = uint64_t{32} << 20;
  static constexpr uint64_t kPopulateChunk = uint64_t{4} << 20;
  static constexpr unsigned kMaxPopulateHelpers = 3;

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

  // The helpers of PopulateForWrite. Lock order: populate_mu_ before mu_ (Release).
  void JoinHelpersLocked();  // populate_mu_ held
  std::mutex populate_mu_;
  std::vector<std::thread> populating_;  // guarded by populate_mu_
  std::atomic<bool> stop_populating_{false};
  std::atomic<uint64_t> populated_{0};
};

}  // namespace gpupool::devices
