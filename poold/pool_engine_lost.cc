// PoolEngine, a client's report of a lost agent: a process that lost its connection to one
// of its lease's agents says so at once (POST /v1/leases/agent-lost), and gpupoold looks at
// the agent itself before it believes anything: only an agent that does not answer
// gpupoold's own probe has its host marked UNREACHABLE (and its leased GPUs swapped), which
// without the report would wait for unreachable_timeout. See pool_engine.h (AgentLost).
#include <algorithm>

#include "common/constant_time.h"
#include "poold/agent_probe.h"
#include "poold/pool_engine.h"
#include "poold/pool_engine_internal.h"

namespace gpupool::poold {

using engine_internal::Usable;

Result<nlohmann::json> PoolEngine::AgentLost(const std::string& lease_id, const std::string& token,
                                             const std::string& gpu_uuid) {
  std::string endpoint;
  NameId host_id = kNone;
  uint64_t number = 0;
  int64_t asked_at = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Store::Hold hold(store_);
    Status why;
    Lease* l = FindLease(lease_id, 0, &why);
    if (l == nullptr && why.code() == Status::Code::kInvalidArgument) return why;
    // One answer for an unknown lease and a wrong token: a caller learns nothing of leases
    // it holds no token of.
    if (l == nullptr || l->token.empty() || !EqualInConstantTime(token, l->token)) {
      return Status::PermissionDenied("the token is not lease '" + lease_id +
                                      "''s: only the lease's own processes may report its agents");
    }
    const GpuIndex g = inventory_.FindGpu(gpu_uuid);
    if (g == kNone || std::find(l->gpus.begin(), l->gpus.end(), g) == l->gpus.end()) {
      return nlohmann::json{{"probe", "none: the lease no longer holds GPU " + gpu_uuid},
                            {"agent_lost", false},
                            {"lease", LeaseJson(*l, /*with_token=*/false)}};
    }
    const Gpu& gpu = inventory_.gpu(g);
    const Host* host = inventory_.FindHost(gpu.host);
    if (!Usable(gpu.state) || host == nullptr || !host->reachable) {
      // Already known (a degraded lease keeps its failed GPU until a spare frees up).
      return nlohmann::json{{"probe", std::string("none: GPU ") + gpu_uuid + " is " + GpuStateName(gpu.state)},
                            {"agent_lost", gpu.state == GpuState::kUnreachable},
                            {"lease", LeaseJson(*l, false)}};
    }
    // A client's word costs a probe: a bounded number per lease.
    auto& [minute, count] = lost_reports_per_minute_[l->number];
    if (minute != clock_() / 60) {
      minute = clock_() / 60;
      count = 0;
    }
    if (++count > kLostReportsPerMinute) {
      ++counters_.agent_lost_dropped;
      return Status::Unavailable("lease '" + lease_id + "' has reported lost agents " +
                                 std::to_string(kLostReportsPerMinute) +
                                 " times this minute; wait for the next minute");
    }
    auto answered = agent_answered_.find(gpu.host);
    const auto since = answered == agent_answered_.end() ? std::chrono::milliseconds::max()
                                                         : std::chrono::duration_cast<std::chrono::milliseconds>(
                                                               std::chrono::steady_clock::now() - answered->second);
    if (since < std::chrono::milliseconds(kAgentProbeFreshMs)) {
      ++counters_.agent_lost_refuted;
      return nlohmann::json{{"probe", "none: the agent at " + host->endpoint + " answered a probe " +
                                          std::to_string(since.count()) + " ms ago"},
                            {"agent_lost", false},
                            {"lease", LeaseJson(*l, false)}};
    }
    endpoint = host->endpoint;
    host_id = gpu.host;
    number = l->number;
    asked_at = clock_();
  }

  // Without the lock: the probe may take up to its timeout.
  const Status seen = agent_probe_ ? agent_probe_(endpoint)
                                   : ProbeAgentEndpoint(endpoint, std::chrono::milliseconds(kAgentProbeTimeoutMs));

  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  Host* host = inventory_.FindHost(host_id);
  std::string probe;
  bool lost = false;
  if (seen.ok()) {
    agent_answered_[host_id] = std::chrono::steady_clock::now();
    ++counters_.agent_lost_refuted;
    probe = "the agent at " + endpoint + " answered: nothing changes";
  } else if (host == nullptr || host->last_seen > asked_at) {
    // It heartbeated while the probe ran (restarted, say): its word is newer than the probe's.
    ++counters_.agent_lost_refuted;
    probe =
        "the agent at " + endpoint + " did not answer (" + seen.message() + ") but heartbeated since: nothing changes";
  } else {
    lost = true;
    probe = "the agent at " + endpoint + " did not answer (" + seen.message() + ")";
    if (host->reachable) {
      ++counters_.agent_lost_confirmed;
      MarkHostUnreachable(host, "its agent at " + endpoint + " did not answer gpupoold's probe (" + seen.message() +
                                    ") after a process of lease L" + std::to_string(number) +
                                    " lost its connection to it");
    }
  }
  auto it = leases_.find(number);
  if (it == leases_.end()) return Status::NotFound("lease '" + LeaseName(number) + "' was released meanwhile");
  return nlohmann::json{{"probe", probe}, {"agent_lost", lost}, {"lease", LeaseJson(it->second, false)}};
}

}  // namespace gpupool::poold
