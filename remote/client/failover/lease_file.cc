// The lease file: where a GPU of the lease is now (after a swap), watched while a call
// waits, and what poold is asked when an agent falls silent.
#include "remote/client/failover/failover_internal.h"

namespace gpupool::client {

bool ReadLeaseFileSlot(const std::string& path, int slot, GpuLocation* location) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json lease = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  return LeaseSlot(lease, slot, location);
}

// A call waiting on a hung GPU gives up once the lease names another GPU in its place
// (the agent's watchdog reported the hang, gpupoold swapped the GPU, spank_gpupool's
// watcher rewrote the lease file): the wait ends as a lost connection, and Deliver
// recovers from it.
// A call waiting on an agent whose host stopped answering (its connections open, nothing
// sent) asks gpupoold after SilentThreshold(): see AskAboutSilentAgent.
void Failover::WatchLease(Channel* channel) {
  if (!protecting_ || (lease_file_.empty() && !report_lost_) || channel->connection.get() == watched_) {
    return;
  }
  watched_ = channel->connection.get();
  channel->connection->SetAbandonCheck([this, channel]() -> std::string {
    GpuLocation named;
    if (!lease_file_.empty() && ReadLeaseFileSlot(lease_file_, slot_, &named) && named.uuid != channel->location.uuid) {
      return "the lease names " + named.uuid + " in place of " + channel->location.uuid;
    }
    return AskAboutSilentAgent(channel->location);
  });
}

std::string Failover::AskAboutSilentAgent(const GpuLocation& waiting_on) {
  if (!report_lost_) return "";
  const auto now = std::chrono::steady_clock::now();
  if (sending_seq_ != silent_wait_seq_) {
    // A new wait, at its first check (the transport checks once it has slept 200 ms).
    silent_wait_seq_ = sending_seq_;
    silent_backoff_ = std::chrono::milliseconds(0);
    silent_next_report_ = now + SilentThreshold() - std::chrono::milliseconds(200);
    return "";
  }
  if (now < silent_next_report_) return "";
  silent_backoff_ = std::clamp(silent_backoff_ * 2, std::chrono::milliseconds(1000), std::chrono::milliseconds(30000));
  GpuLocation named;
  std::string problem;
  const bool answered = report_lost_(waiting_on, slot_, &named, &problem);
  // Measured from after the answer: a report takes up to gpupoold's probe's second.
  silent_next_report_ = std::chrono::steady_clock::now() + silent_backoff_;
  if (!answered) {
    LogDebug("GPU %d (%s): a call has waited %lld ms; could not ask gpupoold (%s)", device_, waiting_on.uuid.c_str(),
             static_cast<long long>(SilentThreshold().count()), problem.c_str());
    return "";
  }
  if (named.uuid.empty() || named.uuid == waiting_on.uuid) return "";  // the agent answered
  silent_named_ = named;
  return "its agent is silent: gpupoold's probe got no answer, and it names " + named.uuid + " in place of " +
         waiting_on.uuid;
}

std::chrono::milliseconds Failover::SilentThreshold() const {
  const auto twice = std::chrono::duration_cast<std::chrono::milliseconds>(2 * longest_call_);
  return std::clamp(twice, kSilentBeforeReport, kSilentAtMost);
}

void Failover::NoteAnsweredCall(std::chrono::steady_clock::duration waited) {
  const auto now = std::chrono::steady_clock::now();
  if (waited >= longest_call_ || now - longest_call_since_ > std::chrono::minutes(1)) {
    longest_call_ = waited;
    longest_call_since_ = now;
  }
}

bool Failover::Locate(const GpuLocation& failed, int32_t why, GpuLocation* next) {
  GpuLocation named = failed;
  if (!lease_file_.empty() && !ReadLeaseFileSlot(lease_file_, slot_, &named) && server_named_.uuid.empty()) {
    return false;
  }
  // gpupoold's answer to this process's report is newer than a file that still names the
  // failed GPU (the job's watcher rewrites it at its next renewal, seconds later).
  if (named.uuid == failed.uuid && !server_named_.uuid.empty()) named = server_named_;
  // A GPU that failed (or whose session the agent revoked) is not tried again
  // until the lease names another; an agent that went away may come back with
  // the same GPU.
  if (named.uuid == failed.uuid && why != dp::kCuDeviceUnavailable) return false;
  *next = named;
  return true;
}

bool Failover::MaybeReportLost(const GpuLocation& failed) {
  const auto now = std::chrono::steady_clock::now();
  if (!report_lost_ || !server_named_.uuid.empty() || now < next_report_) return false;
  report_backoff_ = std::clamp(report_backoff_ * 2, std::chrono::milliseconds(1000), std::chrono::milliseconds(8000));
  GpuLocation named;
  std::string problem;
  if (!report_lost_(failed, slot_, &named, &problem)) {
    LogError("GPU %d (%s): could not tell gpupoold (%s); waiting for the lease to move", device_, failed.uuid.c_str(),
             problem.c_str());
  } else if (named.uuid != failed.uuid) {
    server_named_ = named;
    LogDebug("GPU %d: gpupoold names %s at %s in place of %s", device_, named.uuid.c_str(), named.endpoint.c_str(),
             failed.uuid.c_str());
  }
  // Measured from after the answer: a report takes up to the probe's second.
  next_report_ = std::chrono::steady_clock::now() + report_backoff_;
  return !server_named_.uuid.empty();
}

}  // namespace gpupool::client
