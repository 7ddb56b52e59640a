// Checkpoints: the GPU's memory read back, so the journal can start afresh.
#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

void Failover::MaybeCheckpoint(ClientConnection* connection, bool synchronised) {
  if (!protecting_ || log_.empty()) return;
  // A log that keeps growing between synchronisations is cut short here instead
  // of holding host memory without bound.
  bool large = log_bytes_ > config_.checkpoint_mem / 4;
  if (large) {
    Checkpoint(connection);
    return;
  }
  if (!synchronised) return;
  bool due = std::chrono::steady_clock::now() - last_checkpoint_ >= config_.checkpoint_interval;
  // A long log of small requests (a stream of launches between synchronisations) is cut
  // at a synchronisation before the interval when the checkpoint is cheap, that is when
  // little device memory may need reading back: otherwise a second's worth of launches
  // (a million of them) is held, costs the host its memory, and takes as long again to
  // replay after a failure.
  bool long_and_cheap = log_.size() >= kLongLog && WrittenBytesBound() <= kCheapReadback;
  if (due || long_and_cheap) Checkpoint(connection);
}

uint64_t Failover::WrittenBytesBound() const {
  uint64_t bytes = 0;
  for (const auto& [start, dirty] : written_) {
    if (auto range = ranges_.find(start); range != ranges_.end()) bytes += range->second;
  }
  return bytes;
}

// The requests whose bytes ApplyLog puts in the images on the host (the other requests
// it looks at only classify what is known).
static bool WritesImages(uint32_t op) {
  return op == dp::kOpMemcpyHtoD || op == dp::kOpMemset || op == dp::kOpMemcpyDtoD;
}

bool Failover::Checkpoint(ClientConnection* connection) {
  CaptureHeld();  // the checkpoint applies the log's bytes
  if (config_.mode == FailoverConfig::Mode::kMigrate) {
    // No memory image: a move's memory comes from the old agent. The log is cut where
    // every request before has run (the device idle), which keeps only live resources.
    Reply idle;
    Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
    if (!connection->Call(synchronise, &idle).ok() || idle.status != 0 || idle.async_status != 0) {
      return false;
    }
    ShowOutput(idle.out);
    StartLogAfresh();
    return true;
  }
  uint64_t total = 0;
  for (const auto& [start, size] : ranges_) total += size;
  if (total > config_.checkpoint_mem) {
    Unprotect("its device memory (" + Size(total) + ") is over checkpoint_mem (" + Size(config_.checkpoint_mem) + ")");
    return false;
  }
  // Idle: every stream's work has run, so the memory read below is the log's
  // end state.
  Reply idle;
  Request synchronise{dp::kOpContextSynchronize, nullptr, 0, nullptr, 0, nullptr, 0};
  if (!connection->Call(synchronise, &idle).ok() || idle.status != 0 || idle.async_status != 0) {
    return false;  // the failure shows at the application's next request
  }
  ShowOutput(idle.out);
  // What the log tells is known without the GPU (ApplyLog); the rest is read
  // into fresh buffers first. Only then, when nothing can fail any more, is the
  // log applied to the previous images in place and the reads put in: a
  // failure in the middle leaves the previous checkpoint and its log intact.
  // The log's snapshots are copied only where the second pass needs their bytes: a whole
  // range's last upload kept as a snapshot becomes its image uncopied (image_snapshots_),
  // and a migrate checkpoint (above) or one over checkpoint_mem drops them uncopied.
  std::set<uint64_t> unknown, made;
  ApplyLog(false, &unknown, &made);
  std::set<uint64_t> reads(unknown);
  for (const auto& [start, dirty] : written_) {
    if (made.count(start) == 0) reads.insert(start);
  }
  std::map<uint64_t, JournalBytes> fresh;
  for (uint64_t start : reads) {
    auto range = ranges_.find(start);
    if (range == ranges_.end()) continue;
    JournalBytes bytes(range->second);  // the read fills it whole (checked below)
    dp::MemcpyDtoHArgs args{start, range->second, 0};
    Request read{dp::kOpMemcpyDtoH, &args, sizeof(args), nullptr, 0, bytes.data(), bytes.size()};
    Reply reply;
    if (!connection->Call(read, &reply).ok() || reply.status != 0 || reply.async_status != 0 ||
        reply.bulk_received != bytes.size()) {
      return false;
    }
    ShowOutput(reply.out);
    readback_bytes_ += bytes.size();
    fresh[start] = std::move(bytes);
  }
  // The second pass only puts in the images what copies and memsets wrote: a log without
  // any (a stream of launches) has nothing to apply, and is walked once.
  if (std::any_of(log_.begin(), log_.end(), [](const Entry& entry) { return WritesImages(entry.op); })) {
    std::set<uint64_t> unknown_again, made_again;
    ApplyLog(true, &unknown_again, &made_again);
  }
  for (auto& [start, bytes] : fresh) {
    image_snapshots_.erase(start);
    saved_[start] = std::move(bytes);
  }
  checkpoint_bytes_ = 0;
  for (auto it = saved_.begin(); it != saved_.end();) {
    if (ranges_.count(it->first) == 0) {
      it = saved_.erase(it);
    } else {
      checkpoint_bytes_ += it->second.size();
      ++it;
    }
  }
  for (auto it = image_snapshots_.begin(); it != image_snapshots_.end();) {
    if (ranges_.count(it->first) == 0) {
      it = image_snapshots_.erase(it);  // freed: its pages are let go
    } else {
      checkpoint_bytes_ += it->second.size();
      ++it;
    }
  }
  StartLogAfresh();
  return true;
}

bool Failover::CreateCheckpointResources(ClientConnection* connection, std::string* why) {
  std::vector<const Resource*> resources;
  for (const auto& [key, resource] : base_) resources.push_back(&resource);
  std::sort(resources.begin(), resources.end(), [](const Resource* a, const Resource* b) { return a->seq < b->seq; });
  for (const Resource* resource : resources) {
    Entry creation = resource->creation;
    creation.call = creation.call || creation.op == dp::kOpMemAlloc || creation.op == dp::kOpModuleLoad ||
                    creation.op == dp::kOpGetFunction;
    if (!Send(connection, creation, why, false)) return false;
  }
  return true;
}

}  // namespace gpupool::client
