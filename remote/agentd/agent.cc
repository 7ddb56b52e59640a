#include "remote/agentd/agent.h"

#include <algorithm>
#include <chrono>

#include "common/api_client.h"
#include "common/log.h"

namespace gpupool::agentd {

Agent::Agent(AgentOptions options, device::GpuBackend* backend, LeaseTable* leases)
    : options_(std::move(options)), backend_(backend), leases_(leases) {}

Agent::~Agent() { Stop(); }

void Agent::Start() {
  std::shared_ptr<Wake> wake = wake_;  // the listener must not touch `this`
  backend_->SetHealthListener([wake](int index) {
    log::Verbose("GPU " + std::to_string(index) + " changed health; heartbeating now");
    {
      std::lock_guard<std::mutex> l(wake->mu);
      wake->heartbeat_soon = true;
    }
    wake->cv.notify_all();
  });
  thread_ = std::thread([this] { Run(); });
}

void Agent::Stop() {
  {
    std::lock_guard<std::mutex> l(wake_->mu);
    if (wake_->stopping && !thread_.joinable()) return;
    wake_->stopping = true;
  }
  wake_->cv.notify_all();
  if (thread_.joinable()) thread_.join();
  backend_->SetHealthListener(nullptr);
}

void Agent::HeartbeatSoon() {
  {
    std::lock_guard<std::mutex> l(wake_->mu);
    wake_->heartbeat_soon = true;
  }
  wake_->cv.notify_all();
}

void Agent::ReportRecovery(const std::string& gpu_uuid, const std::string& lease, const std::string& from,
                           uint64_t pause_ms, uint64_t restored_bytes, uint64_t replayed, uint64_t copied_bytes) {
  {
    std::lock_guard<std::mutex> l(recoveries_mu_);
    // Bounded: a flood of reports while gpupoold is away keeps the first thousand.
    if (recoveries_.size() < 1000) {
      recoveries_.push_back({{"uuid", gpu_uuid},
                             {"lease", lease},
                             {"from", from},
                             {"pause_ms", pause_ms},
                             {"restored_bytes", restored_bytes},
                             {"replayed", replayed},
                             {"copied_bytes", copied_bytes}});
    }
  }
  HeartbeatSoon();
}

void Agent::ReportTenantFault(const std::string& gpu_uuid, const std::string& lease, const std::string& how) {
  {
    std::lock_guard<std::mutex> l(recoveries_mu_);
    if (tenant_faults_.size() < 1000) {
      tenant_faults_.push_back({{"uuid", gpu_uuid}, {"lease", lease}, {"how", how.substr(0, 128)}});
    }
  }
  HeartbeatSoon();
}

bool Agent::RefreshLeases(int timeout_ms) {
  std::unique_lock<std::mutex> l(wake_->mu);
  // A heartbeat in flight may have been sent before the caller's lease existed: wait for
  // the next one.
  const uint64_t wanted = wake_->heartbeats_started + 1;
  wake_->heartbeat_soon = true;
  wake_->cv.notify_all();
  return wake_->cv.wait_for(l, std::chrono::milliseconds(timeout_ms), [&] {
    return wake_->stopping || wake_->heartbeats_answered >= wanted;
  }) && !wake_->stopping;
}

bool Agent::Wait(int ms) {
  std::unique_lock<std::mutex> l(wake_->mu);
  wake_->cv.wait_for(l, std::chrono::milliseconds(ms), [this] { return wake_->stopping || wake_->heartbeat_soon; });
  return !wake_->stopping;
}

nlohmann::json Agent::RegisterBody() const {
  nlohmann::json gpus = nlohmann::json::array();
  for (const device::GpuInfo& g : backend_->Discover()) {
    device::HealthState h = backend_->Health(g.index);
    gpus.push_back({{"uuid", g.uuid},
                    {"index", g.index},
                    {"model", g.model},
                    {"memory_mib", g.memory_bytes / (1024 * 1024)},
                    {"pci_bus_id", g.pci_bus_id},
                    {"numa_node", g.numa_node},
                    {"health", device::HealthName(h.health)}});
  }
  return {{"host", options_.config.host},
          {"rack", options_.config.rack},
          {"endpoint", options_.config.listen},
          {"gpus", gpus}};
}

nlohmann::json Agent::HeartbeatBody() const {
  nlohmann::json gpus = nlohmann::json::array();
  for (const device::GpuInfo& g : backend_->Discover()) {
    device::HealthState h = backend_->Health(g.index);
    nlohmann::json gpu = {{"uuid", g.uuid}, {"health", device::HealthName(h.health)}};
    if (!h.reason.empty()) gpu["reason"] = h.reason;
    gpus.push_back(gpu);
  }
  return {{"host", options_.config.host}, {"gpus", gpus}};
}

void Agent::Trouble(const std::string& what, const Status& status) {
  std::string text = what + ": " + status.message();
  if (text == trouble_) {
    log::Debug(text + " (still)");
    return;
  }
  trouble_ = text;
  log::Warning(text + "; retrying");
}

void Agent::Recovered(const std::string& message) {
  if (!trouble_.empty()) log::Info(message);
  trouble_.clear();
}

int Agent::HeartbeatIntervalMs() const {
  int interval_ms = options_.config.heartbeat_interval * 1000;
  if (options_.leases_in_use && options_.leases_in_use()) {
    interval_ms = std::min(interval_ms, options_.lease_refresh_ms);
  }
  return interval_ms;
}

void Agent::Run() {
  ApiClientOptions api;
  api.server = options_.config.server;
  api.munge_socket = options_.munge_socket;
  api.timeout_ms = std::clamp(options_.config.heartbeat_interval * 1000, 1000, 5000);
  ApiClient client(api);

  int backoff_ms = options_.initial_backoff_ms;
  auto last_heartbeat = std::chrono::steady_clock::now() - std::chrono::hours(1);
  while (true) {
    {
      std::lock_guard<std::mutex> l(wake_->mu);
      if (wake_->stopping) return;
    }
    if (!registered_.load()) {
      {
        std::lock_guard<std::mutex> l(wake_->mu);
        wake_->heartbeat_soon = false;  // the registration carries the current health
      }
      nlohmann::json body = RegisterBody();
      Result<nlohmann::json> answer = client.Post("/v1/agents/register", body);
      if (!answer.ok()) {
        Trouble("cannot register with gpupoold at " + options_.config.server, answer.status());
        if (!Wait(backoff_ms)) return;
        backoff_ms = std::min(backoff_ms * 2, options_.max_backoff_ms);
        continue;
      }
      backoff_ms = options_.initial_backoff_ms;
      registered_.store(true);
      registrations_.fetch_add(1);
      trouble_.clear();
      log::Info("registered " + std::to_string(body["gpus"].size()) + " GPUs of host " + options_.config.host +
                " (rack " + options_.config.rack + ") with gpupoold at " + options_.config.server);
      last_heartbeat -= std::chrono::hours(1);  // fetch leases at once
    }

    // Evaluated on every pass: clients attaching during a long wait shorten it.
    auto next_heartbeat = last_heartbeat + std::chrono::milliseconds(HeartbeatIntervalMs());
    auto now = std::chrono::steady_clock::now();
    if (now < next_heartbeat) {
      int wait_ms =
          static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(next_heartbeat - now).count());
      if (!Wait(std::min(wait_ms, options_.lease_refresh_ms))) return;
      std::lock_guard<std::mutex> l(wake_->mu);
      if (!wake_->heartbeat_soon) continue;  // look again at the interval and the time
    }
    uint64_t sequence;
    {
      std::lock_guard<std::mutex> l(wake_->mu);
      wake_->heartbeat_soon = false;
      sequence = ++wake_->heartbeats_started;
    }
    // Tells RefreshLeases() waiters when this heartbeat is done, on every path below.
    struct Answered {
      Wake* wake;
      uint64_t sequence;
      ~Answered() {
        {
          std::lock_guard<std::mutex> l(wake->mu);
          wake->heartbeats_answered = sequence;
        }
        wake->cv.notify_all();
      }
    } answered{wake_.get(), sequence};
    last_heartbeat = std::chrono::steady_clock::now();
    nlohmann::json body = HeartbeatBody();
    nlohmann::json recoveries = nlohmann::json::array();
    nlohmann::json tenant_faults = nlohmann::json::array();
    {
      std::lock_guard<std::mutex> l(recoveries_mu_);
      recoveries.swap(recoveries_);
      tenant_faults.swap(tenant_faults_);
    }
    if (!recoveries.empty()) body["recoveries"] = recoveries;
    if (!tenant_faults.empty()) body["tenant_faults"] = tenant_faults;
    Result<nlohmann::json> answer = client.Post("/v1/agents/heartbeat", body);
    if (!answer.ok() && (!recoveries.empty() || !tenant_faults.empty())) {
      // Sent again with the next heartbeat.
      std::lock_guard<std::mutex> l(recoveries_mu_);
      for (auto& r : recoveries_) recoveries.push_back(std::move(r));
      recoveries_.swap(recoveries);
      for (auto& r : tenant_faults_) tenant_faults.push_back(std::move(r));
      tenant_faults_.swap(tenant_faults);
    }
    if (!answer.ok()) {
      if (answer.status().code() == Status::Code::kNotFound) {
        log::Warning("gpupoold does not know host " + options_.config.host + " (" + answer.status().message() +
                     "); registering again");
        registered_.store(false);
        continue;
      }
      Trouble("heartbeat to gpupoold at " + options_.config.server + " failed", answer.status());
      continue;
    }
    heartbeats_.fetch_add(1);
    Recovered("heartbeats to gpupoold at " + options_.config.server + " succeed again");
    Result<std::vector<LeaseGrant>> grants = ParseLeaseGrants(answer.value());
    if (!grants.ok()) {
      log::Warning(grants.status().message() + "; keeping the previous lease table");
      continue;
    }
    Result<std::set<std::string>> failed = ParseFailedGpus(answer.value());
    if (!failed.ok()) {
      log::Warning(failed.status().message() + "; keeping the previous lease table");
      continue;
    }
    leases_->SetFailed(std::move(failed.value()));
    uint64_t before = leases_->version();
    leases_->Replace(grants.value());
    if (leases_->version() != before) {
      log::Verbose("lease table now has " + std::to_string(leases_->size()) + " GPU(s) leased");
    }
  }
}

}  // namespace gpupool::agentd
