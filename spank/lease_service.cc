#include "spank/lease_service.h"

#include <chrono>
#include <thread>

namespace gpupool::spank {

LeaseService::LeaseService(const PluginConfig& config) : retry_s_(config.retry_s) {
  ApiClientOptions options;
  options.server = config.server;
  options.timeout_ms = config.timeout_s * 1000;
  options.munge_socket = config.munge_socket;
  // Each slurmstepd makes one or two calls in its life (and the watcher one per interval
  // on a fresh client): a session would double the round trips of job start.
  options.use_session = false;
  client_ = std::make_unique<ApiClient>(options);
}

Result<Lease> LeaseService::Acquire(const nlohmann::json& body, bool* created) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(retry_s_);
  Result<nlohmann::json> answer = client_->Post("/v1/leases", body);
  int tries = 1;
  while (!answer.ok() && answer.status().code() == Status::Code::kUnavailable && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    answer = client_->Post("/v1/leases", body);
    ++tries;
  }
  if (!answer.ok()) {
    if (tries == 1 || answer.status().code() != Status::Code::kUnavailable) {
      return answer.status();
    }
    return Status::Unavailable(answer.status().message() + " (" + std::to_string(tries) + " tries in " +
                               std::to_string(retry_s_) + " s)");
  }
  const nlohmann::json& a = answer.value();
  if (!a.is_object() || !a.contains("lease")) {
    return Status::Internal("gpupoold's acquire answer has no 'lease'");
  }
  if (created != nullptr) *created = a.value("created", false);
  return ParseLease(a["lease"]);
}

Result<Lease> LeaseService::Renew(uint32_t job_id) {
  Result<nlohmann::json> answer = client_->Post("/v1/leases/renew", {{"job_id", job_id}});
  if (!answer.ok()) return answer.status();
  const nlohmann::json& a = answer.value();
  if (!a.is_object() || !a.contains("lease")) {
    return Status::Internal("gpupoold's renew answer has no 'lease'");
  }
  return ParseLease(a["lease"]);
}

Status LeaseService::Release(uint32_t job_id) {
  Result<nlohmann::json> answer = client_->Post("/v1/leases/release", {{"job_id", job_id}});
  if (!answer.ok() && answer.status().code() != Status::Code::kNotFound) return answer.status();
  return Status::OK();
}

}  // namespace gpupool::spank
