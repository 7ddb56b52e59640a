// Copy-on-write snapshots of page-locked memory this library allocated (cuMemHostAlloc,
// cuMemAllocHost): how the failover journal keeps a large upload's bytes without copying
// them at the call (gpupool-remote(7), FAILOVER).
//
// The journal must keep the bytes an upload sent until the next checkpoint. An upload from
// page-locked memory that this library mapped is logged as a snapshot instead of a copy:
// its pages are write-protected with userfaultfd (UFFDIO_WRITEPROTECT), and the bytes are
// copied only
//  - when anything writes one of those pages: the program, the kernel on its behalf (a
//    read(2) into the buffer) or another process (process_vm_writev). The write waits
//    while this file's fault thread copies the snapshot whole into a buffer of its own,
//    then lifts the protection, and goes on;
//  - when the program frees the memory (RemoveRegion, before the munmap);
//  - when a checkpoint applies them (HostSnapshot::MoveInto). A recovery sends them from
//    the program's pages (BeginRead), and copies only one that a write copied meanwhile.
// A snapshot that a later upload of the same range makes unnecessary is released unread:
// its pages are unprotected unless another snapshot still covers them. A loop that uploads
// one unchanged buffer copies nothing; a loop that rewrites it before each upload copies
// each upload once, at the first write, as the journal did at the call before.
//
// Only where the write of any kind can be caught: a userfaultfd that handles faults taken
// in the kernel too (created by a process with CAP_SYS_PTRACE, where
// vm.unprivileged_userfaultfd is 1, or through /dev/userfaultfd: a descriptor of it that
// spank_gpupool opened for the job, named in GPUPOOL_USERFAULTFD, where plugstack.conf says
// userfaultfd=yes, or the node itself where the site lets the job open it), with write-protection of anonymous memory
// (Linux 5.7 or later). A descriptor limited to faults in user mode (UFFD_USER_MODE_ONLY) would make the kernel's
// writes fail with EFAULT, so it is never used: without the rest, Enable() says why and the journal copies as before. A
// region is populated when it is mapped (as the driver's page-locked memory is) so that every page can be
// write-protected.
//
// Who may use it: only this process, on its own memory. The fault thread reads
// nothing from the wire; it copies bytes the program already owns.
//
// Thread safety: every method may be called from any thread. Lock order: a Failover's mu()
// before this registry's lock; the fault thread takes only the registry's lock and never
// writes protected memory, and nothing writes protected memory while holding that lock.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "remote/client/failover/journal_bytes.h"

namespace gpupool::client {

class PinnedSnapshots;

// The bytes of [start, start + size) as they were when the snapshot was taken. Copyable
// (shared); the last copy's end releases the snapshot.
class HostSnapshot {
 public:
  HostSnapshot() = default;
  explicit operator bool() const { return record_ != nullptr; }
  size_t size() const;
  // Puts the snapshot's bytes in *bytes (replacing what it held): the copy the fault
  // thread made, or a copy of the still protected pages made now (then true). Then lets go
  // of it (the snapshot ends with its last copy).
  bool MoveInto(JournalBytes* bytes);

  // The snapshot's bytes where they lie, for a send that would otherwise copy them first
  // (a recovery's restore and replay): the pages of a snapshot not copied yet, whose region
  // is then not unmapped (RemoveRegion waits) until EndRead; null where it was copied
  // (MoveInto then gives the bytes). EndRead says whether the pages held the snapshot's
  // bytes throughout: false where a write had it copied meanwhile, and the read may have
  // seen the new bytes (the caller sends again from MoveInto).
  const char* BeginRead();
  bool EndRead();

  struct Record;

 private:
  friend class PinnedSnapshots;
  explicit HostSnapshot(std::shared_ptr<Record> record) : record_(std::move(record)) {}
  std::shared_ptr<Record> record_;
};

class PinnedSnapshots {
 public:
  // The process's registry (never destroyed: its fault thread runs until exit).
  static PinnedSnapshots& Get();

  // Opens the userfaultfd and starts the fault thread; once. False, with *why, where this
  // process cannot catch every write (see the header comment); snapshots stay off.
  bool Enable(std::string* why);
  bool enabled() const { return enabled_.load(std::memory_order_acquire); }

  // Page-locked memory just mapped at `start` (page aligned, `size` bytes rounded up to
  // pages): registered for write-protection. Does nothing while disabled.
  void AddRegion(void* start, size_t size);
  // Before `start`'s region is unmapped: copies every snapshot in it into its own buffer,
  // then forgets the region. Does nothing for memory never added.
  void RemoveRegion(void* start);

  // A snapshot of [bytes, bytes + size), which must lie in one region; an empty one where
  // it does not, or the protection failed (the caller copies instead).
  HostSnapshot Take(const void* bytes, size_t size);

  // For tests: snapshots copied because their memory was written or freed, and the
  // write faults the fault thread has handled.
  uint64_t materialized() const { return materialized_.load(); }
  uint64_t faults() const { return faults_.load(); }

 private:
  friend class HostSnapshot;
  friend struct HostSnapshot::Record;
  PinnedSnapshots() = default;
  struct State;
  void Release(HostSnapshot::Record* record);
  void FaultLoop();

  std::atomic<bool> enabled_{false};
  std::atomic<bool> any_region_{false};
  std::atomic<uint64_t> materialized_{0};
  std::atomic<uint64_t> faults_{0};
  State* state_ = nullptr;  // made by Enable; never freed (see Get)
};

}  // namespace gpupool::client
