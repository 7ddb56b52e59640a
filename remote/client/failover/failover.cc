// Failover: the door every request passes (Deliver), and the choice to stop protecting a
// GPU whose state can no longer be kept recoverable (failover.h). The other concerns are
// one file each: settings.cc, lease_file.cc, journal.cc, live_resources.cc,
// checkpoint.cc, recovery.cc.
#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

Failover::Failover(FailoverConfig config, int device, int slot, std::string lease_file, OpenSession open_session)
    : config_(config),
      device_(device),
      slot_(slot),
      lease_file_(std::move(lease_file)),
      open_session_(std::move(open_session)) {
  protecting_ = config_.mode != FailoverConfig::Mode::kOff;
}

Failover::~Failover() { StopBackground(); }

void Failover::Unprotect(const std::string& why) {
  if (!protecting_) return;
  protecting_ = false;
  live_.clear();
  base_.clear();
  ranges_.clear();
  module_globals_.clear();
  saved_.clear();
  image_snapshots_.clear();
  written_.clear();
  log_.clear();
  held_.clear();
  any_held_.store(false, std::memory_order_relaxed);
  last_upload_.clear();
  spare_.clear();
  spare_bytes_ = 0;
  started_.clear();
  log_bytes_ = 0;
  checkpoint_bytes_ = 0;
  if (!unprotected_logged_) {
    unprotected_logged_ = true;
    LogError(
        "GPU %d: this process is not protected against a failure of its "
        "GPU: %s",
        device_, why.c_str());
  }
}

int32_t Failover::Deliver(Channel* channel, Delivery how, const Request& request, Reply* reply, Status* transport_error,
                          bool* moved) {
  std::lock_guard<std::mutex> wire(mu_);
  *moved = false;
  if (recovered_ != nullptr) {
    // A background recovery replaced the GPU while the program was busy elsewhere; the old,
    // broken connection closes here.
    channel->connection.swap(recovered_);
    channel->location = recovered_location_;
    channel->description = recovered_description_;
    recovered_.reset();
    *moved = true;
  }
  WatchLease(channel);
  // Any two-way request may tell the program that its asynchronous copies are done (a
  // synchronisation, a query, an event), after which it may change their sources. A call
  // copies them while the server works on it (the program sees its reply only after);
  // a started request before it is sent.
  const bool capture_while_waiting = how == Delivery::kCall && !held_.empty();
  if (how == Delivery::kStart && !held_.empty()) CaptureHeld();
  // An asynchronous upload from page-locked memory under kOverlappedPayload is logged by
  // reference (Sent); another large upload has its journal copy made while its bytes are in
  // flight, not before.
  const bool held = how == Delivery::kPost && HeldByReference(request);
  const bool large = how == Delivery::kPost && protecting_ && !held && request.payload_len >= kOverlappedPayload &&
                     ChangesState(request.op);
  // A large upload from page-locked memory this library allocated is kept as a snapshot of
  // its source, where one can be taken; another has its journal copy made in flight.
  HostSnapshot snapshot;
  if (large && config_.copy_on_write && request.payload_len >= kSnapshotUpload) {
    snapshot = PinnedSnapshots::Get().Take(request.payload, request.payload_len);
  }
  const bool overlapped = large && !snapshot;
  // Made only for an overlapped upload: an Entry (also an empty std::optional<Entry>) costs
  // its zeroing on every call.
  std::unique_ptr<Entry> upload;
  sending_seq_ = protecting_ ? channel->connection->next_sequence() : 0;
  // Only a call's wait is timed (SilentThreshold): posts, every kernel launch among them,
  // read no clock.
  const auto delivered_at =
      how == Delivery::kCall ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point{};
  if (snapshot) {
    LogSnapshot(request, std::move(snapshot));
  } else if (overlapped) {
    upload = std::make_unique<Entry>(StartOverlappedEntry(request));
  } else if (how != Delivery::kCall) {
    Sent(request, how == Delivery::kStart);
  }
  // A replacement that fails too is replaced in turn, a few times at most.
  for (int attempt = 0;; ++attempt) {
    int32_t status = dp::kCuSuccess;
    Status sent;
    if (overlapped && attempt == 0) {
      const char* source = static_cast<const char*>(request.payload);
      size_t copied = 0;
      sent = channel->connection->PostOverlapped(request, [&]() {
        size_t take = std::min(kOverlapSlice, request.payload_len - copied);
        AppendBytes(&upload->payload, source + copied, take, request.payload_len);
        copied += take;
        return copied < request.payload_len;
      });
      LogSent(std::move(*upload));  // before a recovery, which replays the log
    } else {
      if (capture_while_waiting && attempt == 0) {
        sent = channel->connection->CallOverlapped(request, reply, [this]() { CaptureHeld(); });
      } else {
        sent = how == Delivery::kCall   ? channel->connection->Call(request, reply)
               : how == Delivery::kPost ? channel->connection->Post(request)
                                        : channel->connection->Start(request);
      }
    }
    if (!sent.ok()) {
      status = dp::kCuDeviceUnavailable;
    } else if (how == Delivery::kCall) {
      status = reply->async_status != 0 ? reply->async_status : reply->status;
    }
    // A request that lost the connection again right after a recovery sent it anew ended
    // a second session's process: its own input is the cause (a tenant fault), and no
    // third GPU is tried with it.
    const bool ended_twice = attempt > 0 && !sent.ok();
    if (ended_twice) {
      LogError(
          "GPU %d: request %u ended the new session on %s too: the program's own work "
          "ends the sessions that run it; not recovering again",
          device_, request.op, channel->location.uuid.c_str());
    }
    // A background recovery already failed for this connection (its error logged): this
    // request returns that error, as the request that ran the recovery would have.
    const bool abandoned = status != dp::kCuSuccess && abandoned_ != nullptr && abandoned_ == channel->connection.get();
    if (abandoned) abandoned_ = nullptr;
    if (status != dp::kCuSuccess && attempt < 4 && !ended_twice && !abandoned && Recoverable(status) &&
        Recover(&channel->connection, &channel->location, &channel->description, status)) {
      *moved = true;
      if (how != Delivery::kCall) return dp::kCuSuccess;
      *reply = Reply();
      continue;
    }
    if (!sent.ok()) {
      *transport_error = sent;
      return status;
    }
    if (how == Delivery::kCall) {
      if (attempt == 0) NoteAnsweredCall(std::chrono::steady_clock::now() - delivered_at);
      Answered(request, *reply);
      if (status == dp::kCuSuccess) {
        MaybeCheckpoint(channel->connection.get(), dp::Synchronises(request.op));
      }
    } else {
      MaybeCheckpoint(channel->connection.get(), false);
    }
    return status;
  }
}

bool Failover::Recoverable(int32_t status) const {
  if (!protecting_) return false;
  // With migrate, only a planned move (the session revoked, its memory kept) is followed.
  if (config_.mode == FailoverConfig::Mode::kMigrate) return status == dp::kCuNotPermitted;
  return status == dp::kCuDeviceUnavailable || status == dp::kCuEccUncorrectable || status == dp::kCuNotPermitted;
}

}  // namespace gpupool::client
