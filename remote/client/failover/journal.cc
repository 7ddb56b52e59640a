// The journal: the requests that changed a GPU's state since its last checkpoint, with the
// bytes they uploaded (copies made while the bytes are in flight), and its payload buffers.
#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

void Failover::Sent(const Request& request, bool started) {
  if (!protecting_) return;
  Entry entry;
  entry.op = request.op;
  entry.seq = sending_seq_;
  entry.args.assign(static_cast<const char*>(request.args), request.args_len);
  const bool held = !started && HeldByReference(request);
  if (held) {
    entry.held = static_cast<const char*>(request.payload);
    // Append drops the upload this one overwrites: its buffer is kept for this one's bytes
    // (CaptureHeld), as StartOverlappedEntry lends it to an overlapped copy.
    if (size_t previous = 0; OverwritesLastUpload(entry, &previous)) {
      SparePayload(&log_[previous]);
    }
  } else if (request.payload_len > 0) {
    const char* bytes = static_cast<const char*>(request.payload);
    entry.payload = TakePayloadBuffer(request.payload_len);
    AppendBytes(&entry.payload, bytes, request.payload_len, request.payload_len);
  }
  if (held) {
    LogSent(std::move(entry));
    // Track may have stopped protecting (then the log is gone).
    if (protecting_ && !log_.empty() && log_.back().held != nullptr) {
      held_.push_back(log_.size() - 1);
      any_held_.store(true, std::memory_order_relaxed);
    }
    return;
  }
  if (started) {
    started_.push_back(StartedRequest{std::move(entry), request.result_buffer, request.result_capacity});
    return;
  }
  if (!ChangesState(request.op)) return;
  LogSent(std::move(entry));
}

Failover::Entry Failover::StartOverlappedEntry(const Request& request) {
  Entry entry;
  entry.op = request.op;
  entry.seq = sending_seq_;
  entry.args.assign(static_cast<const char*>(request.args), request.args_len);
  size_t previous = 0;
  // Append drops that entry once this one is logged: its buffer takes this copy, unless it
  // has none (a snapshot: then a spare one does). (Log entries are only ever read under mu_,
  // which Deliver holds throughout.)
  if (OverwritesLastUpload(entry, &previous) && log_[previous].payload.capacity() >= request.payload_len) {
    entry.payload.swap(log_[previous].payload);
    log_bytes_ -= entry.payload.size();
    entry.payload.clear();
  } else {
    entry.payload = TakePayloadBuffer(request.payload_len);
  }
  entry.payload.reserve(request.payload_len);
  return entry;
}

void Failover::ArgBytes::assign(const char* bytes, size_t size) {
  if (size <= kInline) {
    heap_.reset();
    if (size > 0) std::memcpy(inline_, bytes, size);
  } else {
    heap_ = std::make_unique<char[]>(size);
    std::memcpy(heap_.get(), bytes, size);
  }
  size_ = size;
}

void Failover::LogSent(Entry entry) {
  if (!protecting_) return;
  Track(entry, nullptr);
  Append(std::move(entry));
}

// An upload of a whole range makes the range's previous whole upload unnecessary
// when nothing may have read the range in between, on the GPU or in the log: no
// kernel ran since (a kernel may read any memory), no device copy read the range,
// and both went on one stream. That entry is dropped from the log, so a loop of
// uploads into one buffer keeps one journal copy, not one per upload (and reuses
// its buffer: StartOverlappedEntry).
bool Failover::OverwritesLastUpload(const Entry& entry, size_t* index) const {
  if (entry.op != dp::kOpMemcpyHtoD) return false;
  dp::MemcpyHtoDArgs args{};
  if (!ReadStruct(entry.args, &args)) return false;
  auto range = ranges_.find(args.dst);
  if (range == ranges_.end() || range->second != args.size) return false;
  auto last = last_upload_.find(args.dst);
  if (last == last_upload_.end()) return false;
  dp::MemcpyHtoDArgs previous{};
  if (!ReadStruct(log_[last->second].args, &previous) || previous.stream != args.stream) {
    return false;
  }
  *index = last->second;
  return true;
}

void Failover::Append(Entry entry) {
  switch (entry.op) {
    case dp::kOpMemcpyHtoD: {
      dp::MemcpyHtoDArgs args{};
      if (!ReadStruct(entry.args, &args)) break;
      size_t previous = 0;
      if (OverwritesLastUpload(entry, &previous)) {
        Entry& dropped = log_[previous];
        // Released after this upload's snapshot was taken: pages both protect stay so.
        log_bytes_ -= dropped.args.size() + dropped.snapshot.size();
        dropped.snapshot = HostSnapshot();
        SparePayload(&dropped);  // takes its size off log_bytes_ when it keeps the buffer
        log_bytes_ -= dropped.payload.size();
        dropped_bytes_ += args.size;
        dropped.op = kDroppedEntry;
        dropped.payload = JournalBytes();
      }
      auto range = ranges_.find(args.dst);
      if (range != ranges_.end() && range->second == args.size) {
        last_upload_[args.dst] = log_.size();
      }
      break;
    }
    case dp::kOpMemcpyDtoD: {
      dp::MemcpyDtoDArgs args{};
      uint64_t source = 0;
      if (!ReadStruct(entry.args, &args)) {
        last_upload_.clear();
      } else if (RangeHolding(args.src, &source)) {
        last_upload_.erase(source);
      }
      break;
    }
    case dp::kOpMemAlloc: {
      dp::MemAllocArgs args{};
      if (ReadStruct(entry.args, &args)) last_upload_.erase(args.address);
      break;
    }
    case dp::kOpMemFree: {
      dp::MemFreeArgs args{};
      if (ReadStruct(entry.args, &args)) last_upload_.erase(args.dptr);
      break;
    }
    case dp::kOpMemset:
      break;  // reads nothing
    default:
      last_upload_.clear();  // a kernel, or what else may read device memory
      break;
  }
  log_bytes_ += entry.args.size() + entry.payload.size() + entry.snapshot.size();
  log_.push_back(std::move(entry));
}

void Failover::LogSnapshot(const Request& request, HostSnapshot snapshot) {
  Entry entry;
  entry.op = request.op;
  entry.seq = sending_seq_;
  entry.args.assign(static_cast<const char*>(request.args), request.args_len);
  entry.snapshot = std::move(snapshot);
  LogSent(std::move(entry));
}

void Failover::Answered(const Request& request, const Reply& reply) {
  // The server answers in order: every request started before this one has its
  // reply.
  started_.clear();
  if (!protecting_ || reply.status != 0 || reply.async_status != 0) return;
  if (ChangesState(request.op)) {
    Entry entry;
    entry.op = request.op;
    entry.call = true;
    entry.args.assign(static_cast<const char*>(request.args), request.args_len);
    if (request.payload_len > 0) {
      const char* bytes = static_cast<const char*>(request.payload);
      entry.payload = TakePayloadBuffer(request.payload_len);
      AppendBytes(&entry.payload, bytes, request.payload_len, request.payload_len);
    }
    Track(entry, &reply);
    if (!protecting_) return;
    Append(std::move(entry));
  }
  if (dp::Synchronises(request.op)) printf_delivered_ = log_.size();
}

void Failover::StartLogAfresh() {
  base_ = live_;
  RecyclePayloads();
  log_.clear();
  last_upload_.clear();
  log_bytes_ = 0;
  printf_delivered_ = 0;
  written_.clear();
  last_checkpoint_ = std::chrono::steady_clock::now();
  ++checkpoints_;
}

// Log entries whose writes a later entry overwrites whole before anything reads
// them on the host, found walking the log backwards. Only a device-to-device copy
// reads an image on the host (ApplyLog); a kernel reads the GPU's memory, and what
// it may write is read back. Writes on two streams are read back too, whatever
// is skipped here. A range allocated in the log ends what is known of it.
std::vector<bool> Failover::OverwrittenEntries() const {
  std::vector<bool> overwritten(log_.size(), false);
  std::set<uint64_t> covered;  // ranges a later entry writes whole before any read
  auto write = [&](size_t index, uint64_t address, uint64_t size) {
    uint64_t start = 0;
    if (!RangeHolding(address, &start) || size > ranges_.at(start) - (address - start)) return;
    if (covered.count(start) != 0) {
      overwritten[index] = true;
    } else if (address == start && size == ranges_.at(start)) {
      covered.insert(start);
    }
  };
  for (size_t index = log_.size(); index-- > 0;) {
    const Entry& entry = log_[index];
    switch (entry.op) {
      case dp::kOpMemcpyHtoD: {
        dp::MemcpyHtoDArgs args{};
        if (ReadStruct(entry.args, &args)) write(index, args.dst, args.size);
        break;
      }
      case dp::kOpMemset: {
        dp::MemsetArgs args{};
        uint64_t size = 0;
        if (ReadStruct(entry.args, &args) && !__builtin_mul_overflow(args.count, args.element_size, &size)) {
          write(index, args.dst, size);
        }
        break;
      }
      case dp::kOpMemcpyDtoD: {
        dp::MemcpyDtoDArgs args{};
        if (!ReadStruct(entry.args, &args)) {
          covered.clear();
          break;
        }
        write(index, args.dst, args.size);  // the write, then the read before it
        uint64_t source = 0;
        if (RangeHolding(args.src, &source)) covered.erase(source);
        break;
      }
      case dp::kOpMemAlloc: {
        dp::MemAllocArgs args{};
        if (ReadStruct(entry.args, &args)) covered.erase(args.address);
        break;
      }
      default:
        break;
    }
  }
  return overwritten;
}

// Keeps the log's payload buffers for the next entries. An upload's journal copy
// into fresh memory costs a page fault per page, which on a virtual machine can
// cost more than the copy (a loop of 1 MiB uploads ran at 0.5 GB/s; 13 GB/s with
// failover off), and glibc returns freed blocks of this size to the system. Kept:
// at most a quarter of checkpoint_mem (what the log itself may hold); buffers
// that stayed unused since the last checkpoint are let go, so a process that
// stops uploading gives them back at its next checkpoint.
constexpr size_t kRecycledPayload = size_t{64} << 10;

void Failover::CaptureHeldUploads() {
  // Without the lock when nothing is held: another thread's call may hold it for as long as
  // its GPU works. The store that marks an upload held happens before any free of its
  // memory that is ordered after the upload (same thread, or any synchronisation), so the
  // free sees it.
  if (!any_held_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> wire(mu_);
  CaptureHeld();
}

void Failover::CaptureHeld() {
  for (size_t index : held_) {
    if (index >= log_.size()) continue;
    Entry& entry = log_[index];
    dp::MemcpyHtoDArgs args{};
    // A held upload a later one overwrote unread was dropped (Append): nothing to keep.
    if (entry.held == nullptr || entry.op != dp::kOpMemcpyHtoD || !ReadStruct(entry.args, &args)) {
      entry.held = nullptr;
      continue;
    }
    entry.payload = TakePayloadBuffer(args.size);
    AppendBytes(&entry.payload, entry.held, args.size, args.size);
    entry.held = nullptr;
    log_bytes_ += args.size;
  }
  held_.clear();
  any_held_.store(false, std::memory_order_relaxed);
}

void Failover::RecyclePayloads() {
  spare_.clear();
  spare_bytes_ = 0;
  for (Entry& entry : log_) {
    const size_t capacity = entry.payload.capacity();
    if (capacity < kRecycledPayload || spare_bytes_ + capacity > config_.checkpoint_mem / 4) {
      continue;
    }
    spare_bytes_ += capacity;
    spare_.emplace(capacity, std::move(entry.payload));
  }
}

void Failover::SparePayload(Entry* entry) {
  const size_t capacity = entry->payload.capacity();
  if (capacity < kRecycledPayload || spare_bytes_ + capacity > config_.checkpoint_mem / 4) return;
  log_bytes_ -= entry->payload.size();
  spare_bytes_ += capacity;
  spare_.emplace(capacity, std::move(entry->payload));
  entry->payload = JournalBytes();
}

// The smallest spare buffer with room for `size` bytes (emptied), unless it is
// far larger than needed; else an empty one.
JournalBytes Failover::TakePayloadBuffer(size_t size) {
  if (size < kRecycledPayload) return {};
  auto best = spare_.lower_bound(size);
  if (best == spare_.end() || best->first > 4 * size + (size_t{1} << 20)) return {};
  JournalBytes buffer = std::move(best->second);
  spare_bytes_ -= best->first;
  spare_.erase(best);
  buffer.clear();
  return buffer;
}

}  // namespace gpupool::client
