// PoolEngine, agents: a GPU host's agent registers its GPUs and heartbeats their health;
// what it reports moves GPUs between states (and may swap them out of leases, see
// pool_engine_health.cc). See pool_engine.h.
#include "poold/pool_engine.h"

#include <cstdio>

#include <algorithm>

namespace gpupool::poold {

// ---------------------------------------------------------------- agents

Status PoolEngine::CheckAgentSender(NameId host, const AgentSender& from, bool registering) {
  if (from.address.empty() || host == kNone) return Status::OK();
  auto it = agent_sender_.find(host);
  if (it == agent_sender_.end() || (it->second.address == from.address && it->second.uid == from.uid)) {
    agent_sender_[host] = from;
    return Status::OK();
  }
  const Host* h = inventory_.FindHost(host);
  if (registering && h != nullptr && !h->reachable) {  // silent, then back from elsewhere: it moved
    it->second = from;
    return Status::OK();
  }
  return Status::PermissionDenied("host '" + inventory_.Name(host) + "' is served by the agent at " +
                                  it->second.address + " (uid " + std::to_string(it->second.uid) + "); uid " +
                                  std::to_string(from.uid) + " at " + from.address +
                                  " may not report for it (an agent speaks for its own host only)");
}

Result<nlohmann::json> PoolEngine::Register(const AgentRegistration& reg, const AgentSender& from) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  GPUPOOL_RETURN_IF_ERROR(CheckAgentSender(inventory_.FindName(reg.host), from, /*registering=*/true));
  // Refuse before changing anything: a refused registration leaves memory and disk as
  // they were.
  std::set<std::string> uuids;
  for (const AgentGpu& a : reg.gpus) {
    if (!uuids.insert(a.uuid).second) {
      return Status::InvalidArgument("GPU " + a.uuid + " is listed twice in the registration");
    }
    GpuIndex g = inventory_.FindGpu(a.uuid);
    NameId registered_on = g == kNone ? kNone : inventory_.gpu(g).host;
    if (registered_on != kNone && inventory_.Name(registered_on) != reg.host) {
      return Status::Conflict("GPU " + a.uuid + " is registered on host '" + inventory_.Name(registered_on) +
                              "', not '" + reg.host + "'");
    }
  }
  int64_t now = clock_();
  NameId host_id = inventory_.Intern(reg.host);
  NameId rack_id = inventory_.Intern(reg.rack);
  if (!from.address.empty()) agent_sender_[host_id] = from;  // allowed above
  Host& host = inventory_.UpsertHost(host_id);
  reported_failed_.resize(inventory_.gpu_count(), false);
  host.rack = rack_id;
  host.endpoint = reg.endpoint;
  host.last_seen = now;
  host.reachable = true;

  std::set<GpuIndex> reported;
  for (const AgentGpu& a : reg.gpus) {
    GpuIndex g = inventory_.FindGpu(a.uuid);  // on this host, if anywhere (checked above)
    if (g == kNone) {
      Gpu gpu;
      gpu.uuid = a.uuid;
      gpu.host = host_id;
      gpu.rack = rack_id;
      gpu.model = inventory_.Intern(a.model);
      gpu.index = static_cast<uint16_t>(a.index);
      gpu.memory_mib = a.memory_mib;
      gpu.pci_bus_id = a.pci_bus_id;
      gpu.numa_node = static_cast<int16_t>(a.numa_node);
      gpu.pool = inventory_.PoolFor(a.uuid, reg.host + ":" + std::to_string(a.index), a.model, reg.rack, reg.host,
                                    a.memory_mib);
      gpu.state = a.failed ? GpuState::kFailed : GpuState::kIdle;
      gpu.reason = a.failed ? a.reason : "";
      g = inventory_.AddGpu(std::move(gpu));
      reported_failed_.resize(inventory_.gpu_count(), false);
      reported_failed_[g] = a.failed;
      host.gpus.push_back(g);
      PersistGpu(g);
      Event("registered", g, nullptr,
            a.model + " " + std::to_string(a.memory_mib) + " MiB in pool " +
                (inventory_.gpu(g).pool == kNone ? "(none)" : inventory_.pools()[inventory_.gpu(g).pool].name));
      if (!a.failed) HealDegraded();
    } else {
      Gpu& gpu = inventory_.gpu(g);
      gpu.memory_mib = a.memory_mib;
      gpu.pci_bus_id = a.pci_bus_id;
      gpu.numa_node = static_cast<int16_t>(a.numa_node);
      if (std::find(host.gpus.begin(), host.gpus.end(), g) == host.gpus.end()) host.gpus.push_back(g);
      reported_failed_[g] = a.failed;
      PersistGpu(g);
      if (a.failed) {
        if (gpu.state != GpuState::kFailed) FailGpu(g, GpuState::kFailed, a.reason, "failed");
      } else if (gpu.state == GpuState::kUnreachable) {
        RecoverGpu(g, "agent registered again");
      }
    }
    reported.insert(g);
  }
  for (GpuIndex g : host.gpus) {
    if (reported.count(g) == 0 && inventory_.gpu(g).state != GpuState::kUnreachable) {
      FailGpu(g, GpuState::kUnreachable, "no longer reported by its agent", "unreachable");
    }
  }
  nlohmann::json out = nlohmann::json::array();
  for (GpuIndex g : host.gpus) out.push_back(GpuJson(g));
  return nlohmann::json{{"gpus", out}};
}

PoolEngine::Lease* PoolEngine::ReportedLease(NameId host_id, const std::string& uuid, const std::string& lease,
                                             GpuIndex* gpu) {
  GpuIndex g = inventory_.FindGpu(uuid);
  if (g == kNone || inventory_.gpu(g).host != host_id || inventory_.gpu(g).lease == 0) return nullptr;
  auto it = leases_.find(inventory_.gpu(g).lease);
  if (it == leases_.end() || LeaseName(it->second.number) != lease) return nullptr;
  // Written on a client's word (through its agent): a bounded number per lease, so that a
  // client cannot flood the event log.
  auto& [minute, count] = recoveries_per_minute_[it->second.number];
  if (minute != clock_() / 60) {
    minute = clock_() / 60;
    count = 0;
  }
  if (++count > kRecoveriesPerMinute) {
    ++counters_.recoveries_dropped;
    return nullptr;
  }
  *gpu = g;
  return &it->second;
}

Status PoolEngine::RecordTenantFaults(const std::string& host_name, const std::vector<TenantFaultReport>& reports,
                                      const AgentSender& from) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  NameId host_id = inventory_.FindName(host_name);
  if (host_id == kNone || inventory_.FindHost(host_id) == nullptr) {
    return Status::NotFound("unknown host '" + host_name + "': register first");
  }
  GPUPOOL_RETURN_IF_ERROR(CheckAgentSender(host_id, from, /*registering=*/false));
  for (const TenantFaultReport& r : reports) {
    GpuIndex g = kNone;
    Lease* lease = ReportedLease(host_id, r.uuid, r.lease, &g);
    if (lease == nullptr) continue;
    ++counters_.tenant_faults;
    Event("tenant_fault", g, lease,
          "a session of this lease ended through its own work (its worker " + r.how + "); the GPU stays healthy");
  }
  return Status::OK();
}

Result<nlohmann::json> PoolEngine::Heartbeat(const std::string& host_name, const std::vector<GpuHealthReport>& gpus,
                                             const std::vector<RecoveryReport>& recoveries, const AgentSender& from) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  NameId host_id = inventory_.FindName(host_name);
  Host* host = host_id == kNone ? nullptr : inventory_.FindHost(host_id);
  if (host == nullptr) return Status::NotFound("unknown host '" + host_name + "': register first");
  GPUPOOL_RETURN_IF_ERROR(CheckAgentSender(host_id, from, /*registering=*/false));
  host->last_seen = clock_();
  if (!host->reachable) {
    host->reachable = true;
    for (GpuIndex g : host->gpus) {
      if (inventory_.gpu(g).state == GpuState::kUnreachable) RecoverGpu(g, "agent heartbeats again");
    }
  }
  for (const GpuHealthReport& r : gpus) {
    GpuIndex g = inventory_.FindGpu(r.uuid);
    if (g == kNone || inventory_.gpu(g).host != host_id) {
      return Status::NotFound("GPU " + r.uuid + " is not registered on host '" + host_name + "'");
    }
    reported_failed_[g] = r.failed;
    if (r.failed && inventory_.gpu(g).state != GpuState::kFailed) {
      FailGpu(g, GpuState::kFailed, r.reason.empty() ? "reported failed by agent" : r.reason, "failed");
    }
  }
  for (const RecoveryReport& r : recoveries) {
    GpuIndex g = kNone;
    Lease* lease = ReportedLease(host_id, r.uuid, r.lease, &g);
    if (lease == nullptr) continue;
    ++counters_.recovered;
    char detail[320];
    if (r.copied_bytes > 0) {
      std::snprintf(detail, sizeof(detail),
                    "a process moved here from %s, its memory copied agent to agent: paused %llu "
                    "ms, copied %.1f MiB, replayed %llu operation(s)",
                    r.from.c_str(), static_cast<unsigned long long>(r.pause_ms),
                    static_cast<double>(r.copied_bytes) / (1 << 20), static_cast<unsigned long long>(r.replayed));
    } else {
      std::snprintf(detail, sizeof(detail),
                    "a process recovered here from %s: paused %llu ms, restored %.1f MiB, "
                    "replayed %llu operation(s)",
                    r.from.c_str(), static_cast<unsigned long long>(r.pause_ms),
                    static_cast<double>(r.restored_bytes) / (1 << 20), static_cast<unsigned long long>(r.replayed));
    }
    std::string said = detail;
    if (!from.address.empty()) {
      said +=
          "; reported by the agent of " + host_name + " at " + from.address + " (uid " + std::to_string(from.uid) + ")";
    }
    Event("recovered", g, lease, said);
  }
  nlohmann::json leases = nlohmann::json::array();
  // The host's GPUs gpupoold holds FAILED (also by an admin): their agent hands no memory
  // from them to another GPU (gpupool-remote(7), Planned moves).
  nlohmann::json failed = nlohmann::json::array();
  for (GpuIndex g : host->gpus) {
    const Gpu& gpu = inventory_.gpu(g);
    if (gpu.state == GpuState::kFailed) failed.push_back(gpu.uuid);
    if (gpu.lease == 0) continue;
    const Lease& l = leases_.at(gpu.lease);
    nlohmann::json entry = {
        {"gpu", gpu.uuid}, {"lease", LeaseName(l.number)}, {"token", l.token}, {"generation", l.generation}};
    // The agent the slot moved from, the one agent a handoff may pull this GPU's memory from.
    for (size_t slot = 0; slot < l.gpus.size() && slot < l.moved_from.size(); ++slot) {
      if (l.gpus[slot] != g || l.moved_from[slot] == kNone) continue;
      const Host* from = inventory_.FindHost(inventory_.gpu(l.moved_from[slot]).host);
      if (from != nullptr && !from->endpoint.empty()) entry["moved_from"] = from->endpoint;
    }
    leases.push_back(std::move(entry));
  }
  return nlohmann::json{{"ok", true}, {"leases", leases}, {"failed", failed}};
}

}  // namespace gpupool::poold
