#include "poold/pool_engine.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "poold/pool_engine_internal.h"

// PoolEngine is split along its sections: this file holds construction, recovery,
// persistence, JSON, admin updates, queries, periodic work, metrics and the invariant
// check; pool_engine_leases.cc, pool_engine_health.cc (health and swap) and
// pool_engine_agents.cc hold the rest.
namespace gpupool::poold {
namespace {

constexpr size_t kEventMemory = 100000;  // events kept in memory for `show events`

}  // namespace

using engine_internal::Usable;

PoolEngine::PoolEngine(const Config& config, Store* store, Clock clock)
    : config_(config), store_(store), clock_(std::move(clock)), inventory_(config.pools, config.gpus) {}

// ---------------------------------------------------------------- recovery

Status PoolEngine::Recover(const LoadedState& state) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  int64_t now = clock_();
  for (const GpuRow& r : state.gpus) {
    Gpu g;
    g.uuid = r.uuid;
    g.host = inventory_.Intern(r.host);
    g.rack = inventory_.Intern(r.rack);
    g.model = inventory_.Intern(r.model);
    g.index = static_cast<uint16_t>(r.index);
    g.memory_mib = r.memory_mib;
    g.pci_bus_id = r.pci_bus_id;
    g.numa_node = static_cast<int16_t>(r.numa_node);
    g.reason = r.reason;
    g.admin_drain = r.admin_drain;
    g.admin_fail = r.admin_fail;
    g.pool = inventory_.PoolFor(r.uuid, r.host + ":" + std::to_string(r.index), r.model, r.rack, r.host, r.memory_mib);
    if (!ParseGpuState(r.state, &g.state)) g.state = GpuState::kUnreachable;
    // Leases are re-linked below; a GPU is LEASED only through a lease.
    if (g.state == GpuState::kLeased) g.state = GpuState::kIdle;
    if (g.state == GpuState::kDraining) g.state = GpuState::kDrained;
    inventory_.AddGpu(std::move(g));
    Host& h = inventory_.UpsertHost(inventory_.Intern(r.host));
    h.rack = inventory_.Intern(r.rack);
    h.endpoint = r.endpoint;
    h.last_seen = now;  // agents get a full timeout to heartbeat after a restart
    h.reachable = true;
    h.gpus.push_back(inventory_.FindGpu(r.uuid));
  }
  reported_failed_.assign(inventory_.gpu_count(), false);
  for (const LeaseRow& r : state.leases) {
    Lease l;
    l.number = r.number;
    l.job_id = r.job_id;
    l.uid = r.uid;
    l.user = r.user;
    l.place = r.place;
    l.min_memory_mib = r.min_memory_mib;
    l.movable = r.movable;
    l.generation = r.generation;
    l.degraded = r.state == "DEGRADED";
    Result<std::string> token = tokens_.Open(r.token);
    if (!token.ok()) {
      return Status::InvalidArgument("lease L" + std::to_string(r.number) + ": " + token.status().message());
    }
    l.token = token.value();
    l.stored_token = r.token;
    l.created = r.created;
    l.renewed = r.renewed;
    l.expires = r.expires;
    l.ttl = r.ttl;
    nlohmann::json req = nlohmann::json::parse(r.request_json, nullptr, false);
    nlohmann::json gpus = nlohmann::json::parse(r.gpus_json, nullptr, false);
    if (req.is_discarded() || gpus.is_discarded()) {
      return Status::Internal("lease L" + std::to_string(r.number) + " on disk is corrupt");
    }
    for (const auto& p : req) {
      l.request.push_back(PoolRequest{p.at("pool").get<std::string>(), p.at("count").get<int>()});
      uint32_t pool = inventory_.FindPool(l.request.back().pool);
      for (int i = 0; i < l.request.back().count; ++i) l.slot_pool.push_back(pool);
    }
    for (const auto& u : gpus) {
      GpuIndex g = inventory_.FindGpu(u.get<std::string>());
      if (g == kNone) return Status::Internal("lease " + LeaseName(r.number) + " holds unknown GPU " + u.dump());
      Gpu& gpu = inventory_.gpu(g);
      if (gpu.lease != 0) {
        return Status::Internal("GPU " + gpu.uuid + " is in two leases on disk: L" + std::to_string(gpu.lease) +
                                " and " + LeaseName(r.number));
      }
      gpu.lease = l.number;
      if (gpu.state == GpuState::kIdle)
        inventory_.SetState(g, GpuState::kLeased);
      else if (gpu.state == GpuState::kDrained)
        inventory_.SetState(g, GpuState::kDraining);
      if (gpu.state == GpuState::kDraining && l.movable) draining_movable_.insert(g);
      l.gpus.push_back(g);
    }
    if (l.degraded) degraded_.insert(l.number);
    if (l.job_id > 0) lease_by_job_[l.job_id] = l.number;
    leases_.emplace(l.number, std::move(l));
  }
  for (const EventRow& e : state.recent_events) events_.push_back(e);
  next_lease_ = state.next_lease;
  next_event_ = state.next_event;
  log::Info("recovered " + std::to_string(inventory_.gpu_count()) + " GPUs, " + std::to_string(leases_.size()) +
            " leases, next event " + std::to_string(next_event_));
  return Status::OK();
}

// ---------------------------------------------------------------- persistence helpers

void PoolEngine::PersistGpu(GpuIndex i) {
  const Gpu& g = inventory_.gpu(i);
  GpuRow r;
  r.uuid = g.uuid;
  r.host = inventory_.Name(g.host);
  r.rack = inventory_.Name(g.rack);
  r.model = inventory_.Name(g.model);
  r.index = g.index;
  r.numa_node = g.numa_node;
  r.memory_mib = g.memory_mib;
  r.pci_bus_id = g.pci_bus_id;
  Host* h = inventory_.FindHost(g.host);
  r.endpoint = h != nullptr ? h->endpoint : "";
  r.state = GpuStateName(g.state);
  r.reason = g.reason;
  r.admin_drain = g.admin_drain;
  r.admin_fail = g.admin_fail;
  store_->Enqueue(std::move(r));
}

void PoolEngine::PersistLease(const Lease& l) {
  LeaseRow r;
  r.number = l.number;
  r.job_id = l.job_id;
  r.uid = l.uid;
  r.user = l.user;
  nlohmann::json req = nlohmann::json::array();
  for (const PoolRequest& p : l.request) req.push_back({{"pool", p.pool}, {"count", p.count}});
  r.request_json = req.dump();
  r.place = l.place;
  r.min_memory_mib = l.min_memory_mib;
  r.movable = l.movable;
  nlohmann::json gpus = nlohmann::json::array();
  for (GpuIndex g : l.gpus) gpus.push_back(inventory_.gpu(g).uuid);
  r.gpus_json = gpus.dump();
  r.generation = l.generation;
  r.state = l.degraded ? "DEGRADED" : "ACTIVE";
  r.token = l.stored_token;
  r.created = l.created;
  r.renewed = l.renewed;
  r.expires = l.expires;
  r.ttl = l.ttl;
  store_->Enqueue(std::move(r));
}

void PoolEngine::Event(const std::string& type, GpuIndex gpu, const Lease* lease, const std::string& detail) {
  EventRow e;
  e.seq = next_event_++;
  e.time = clock_();
  e.type = type;
  e.gpu = gpu != kNone ? inventory_.GpuId(gpu) : "";
  e.job_id = lease != nullptr ? lease->job_id : 0;
  e.lease = lease != nullptr ? LeaseName(lease->number) : "";
  e.uid = lease != nullptr ? lease->uid : 0;
  e.detail = detail;
  if (log::Enabled(log::Level::kVerbose)) {
    log::Verbose("event " + type + " gpu=" + e.gpu + " lease=" + e.lease + " " + detail);
  }
  events_.push_back(e);
  if (events_.size() > kEventMemory) events_.pop_front();
  store_->Enqueue(std::move(e));
}

// ---------------------------------------------------------------- JSON

nlohmann::json PoolEngine::GpuJson(GpuIndex i) const {
  const Gpu& g = inventory_.gpu(i);
  const Host* h = inventory_.FindHost(g.host);
  nlohmann::json j = {
      {"id", inventory_.GpuId(i)},
      {"uuid", g.uuid},
      {"pool", g.pool == kNone ? "" : inventory_.pools()[g.pool].name},
      {"rack", inventory_.Name(g.rack)},
      {"host", inventory_.Name(g.host)},
      {"index", g.index},
      {"model", inventory_.Name(g.model)},
      {"memory_mib", g.memory_mib},
      {"pci_bus_id", g.pci_bus_id},
      {"numa_node", g.numa_node},
      {"state", GpuStateName(g.state)},
      {"health", i < reported_failed_.size() && reported_failed_[i] ? "FAILED" : "OK"},
      {"reason", g.reason},
      {"endpoint", h != nullptr ? h->endpoint : ""},
      {"last_seen", h != nullptr ? h->last_seen : 0},
  };
  if (g.lease != 0) {
    j["lease"] = LeaseName(g.lease);
    auto it = leases_.find(g.lease);
    j["job_id"] = it != leases_.end() ? it->second.job_id : 0;
  } else {
    j["lease"] = "";
    j["job_id"] = 0;
  }
  return j;
}

nlohmann::json PoolEngine::LeaseJson(const Lease& l, bool with_token) const {
  nlohmann::json req = nlohmann::json::array();
  for (const PoolRequest& p : l.request) req.push_back({{"pool", p.pool}, {"count", p.count}});
  nlohmann::json gpus = nlohmann::json::array();
  for (size_t s = 0; s < l.gpus.size(); ++s) {
    GpuIndex i = l.gpus[s];
    const Gpu& g = inventory_.gpu(i);
    const Host* h = inventory_.FindHost(g.host);
    gpus.push_back({{"id", inventory_.GpuId(i)},
                    {"uuid", g.uuid},
                    {"pool", l.slot_pool[s] == kNone ? "" : inventory_.pools()[l.slot_pool[s]].name},
                    {"rack", inventory_.Name(g.rack)},
                    {"host", inventory_.Name(g.host)},
                    {"index", g.index},
                    {"state", GpuStateName(g.state)},
                    {"endpoint", h != nullptr ? h->endpoint : ""}});
  }
  nlohmann::json j = {{"id", LeaseName(l.number)},
                      {"job_id", l.job_id},
                      {"uid", l.uid},
                      {"user", l.user},
                      {"state", l.degraded ? "DEGRADED" : "ACTIVE"},
                      {"generation", l.generation},
                      {"request", req},
                      {"place", l.place},
                      {"min_memory_mib", l.min_memory_mib},
                      {"movable", l.movable},
                      {"gpus", gpus},
                      {"created", l.created},
                      {"renewed", l.renewed},
                      {"expires", l.expires},
                      {"ttl", l.ttl}};
  if (with_token) j["token"] = l.token;
  return j;
}

nlohmann::json PoolEngine::EventJson(const EventRow& e) const {
  return {{"seq", e.seq},       {"time", e.time},   {"type", e.type},    {"gpu", e.gpu},
          {"job_id", e.job_id}, {"lease", e.lease}, {"detail", e.detail}};
}

// ---------------------------------------------------------------- admin

Result<nlohmann::json> PoolEngine::UpdateGpu(const std::string& id, const std::string& state,
                                             const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  GpuIndex g = inventory_.FindGpu(id);
  if (g == kNone) return Status::NotFound("no such GPU '" + id + "'");
  Gpu& gpu = inventory_.gpu(g);
  std::string why = reason.empty() ? "admin" : reason;
  if (state == "drain") {
    gpu.admin_drain = true;
    gpu.reason = why;
    if (gpu.state == GpuState::kIdle)
      inventory_.SetState(g, GpuState::kDrained);
    else if (gpu.state == GpuState::kLeased)
      inventory_.SetState(g, GpuState::kDraining);
    PersistGpu(g);
    Event("state_changed", g, nullptr, std::string("drain: ") + why);
    // A lease whose processes follow a move (movable) goes to another GPU now, and the
    // drained GPU is free at once (or as soon as a GPU of its pool is); any other waits
    // for its lease to end.
    auto held = gpu.state == GpuState::kDraining ? leases_.find(gpu.lease) : leases_.end();
    if (held != leases_.end() && held->second.movable) {
      draining_movable_.insert(g);
      MoveDrainingLeases();
      if (draining_movable_.count(g) != 0) {
        Event("state_changed", g, &held->second,
              "no IDLE GPU to move lease " + LeaseName(held->second.number) +
                  " to: it moves when one is free, or the GPU stays DRAINING until the lease ends");
      }
    }
  } else if (state == "resume") {
    gpu.admin_drain = false;
    gpu.admin_fail = false;
    if (g < reported_failed_.size()) reported_failed_[g] = false;
    Host* h = inventory_.FindHost(gpu.host);
    if (gpu.state == GpuState::kUnreachable && (h == nullptr || !h->reachable)) {
      PersistGpu(g);
      Event("state_changed", g, nullptr, "resume: stays UNREACHABLE until its agent heartbeats");
    } else {
      Event("state_changed", g, nullptr, "resume");
      RecoverGpu(g, "resumed by admin");
      PersistGpu(g);
    }
  } else if (state == "fail") {
    gpu.admin_fail = true;
    FailGpu(g, GpuState::kFailed, why, "failed");
  } else {
    return Status::InvalidArgument("bad state '" + state + "' (expected drain, resume or fail)");
  }
  return nlohmann::json{{"gpu", GpuJson(g)}};
}

Result<nlohmann::json> PoolEngine::Migrate(const std::string& lease_id, const std::string& gpu, const std::string& to,
                                           const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  Status why;
  Lease* l = FindLease(lease_id, 0, &why);
  if (l == nullptr) return why;
  const std::string name = LeaseName(l->number);
  size_t slot = l->gpus.size();
  if (gpu.empty()) {
    if (l->gpus.size() != 1) {
      return Status::InvalidArgument("lease " + name + " has " + std::to_string(l->gpus.size()) +
                                     " GPUs: name the one to move with gpu=ID");
    }
    slot = 0;
  } else {
    GpuIndex g = inventory_.FindGpu(gpu);
    if (g == kNone) return Status::NotFound("no such GPU '" + gpu + "'");
    for (size_t s = 0; s < l->gpus.size(); ++s) {
      if (l->gpus[s] == g) slot = s;
    }
    if (slot == l->gpus.size()) {
      return Status::InvalidArgument("GPU " + inventory_.GpuId(g) + " is not in lease " + name);
    }
  }
  GpuIndex target = kNone;
  if (!to.empty()) {
    target = inventory_.FindGpu(to);
    if (target == kNone) return Status::NotFound("no such GPU '" + to + "'");
    const Gpu& t = inventory_.gpu(target);
    if (t.pool != l->slot_pool[slot]) {
      return Status::InvalidArgument("GPU " + inventory_.GpuId(target) +
                                     " is not in the pool of the GPU it would replace");
    }
    if (t.state != GpuState::kIdle) {
      return Status::Conflict("GPU " + inventory_.GpuId(target) + " is " + GpuStateName(t.state) + ", not IDLE");
    }
    if (t.memory_mib < l->min_memory_mib) {
      return Status::Conflict("GPU " + inventory_.GpuId(target) + " has less memory than the lease asks for");
    }
  }
  const std::string why_text = "migrated by admin" + (reason.empty() ? "" : ": " + reason);
  if (!ReplaceSlot(l, slot, why_text, target, "migrated")) {
    return Status::Conflict("no IDLE GPU in the pool to move lease " + name + " to");
  }
  UpdateLeaseHealth(l);
  return nlohmann::json{{"lease", LeaseJson(*l, false)}};
}

// ---------------------------------------------------------------- queries

Result<nlohmann::json> PoolEngine::ListPools(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  nlohmann::json out = nlohmann::json::array();
  std::map<uint32_t, int> lease_count;
  for (const auto& [n, l] : leases_) {
    std::set<uint32_t> pools(l.slot_pool.begin(), l.slot_pool.end());
    for (uint32_t p : pools) ++lease_count[p];
  }
  bool found = name.empty();
  for (uint32_t p = 0; p < inventory_.pools().size(); ++p) {
    const std::string& pname = inventory_.pools()[p].name;
    if (!name.empty() && name != pname) continue;
    found = true;
    PoolCounts c = inventory_.Counts(p);
    out.push_back({{"name", pname},
                   {"total", c.total},
                   {"idle", c.idle},
                   {"leased", c.leased},
                   {"draining", c.draining},
                   {"drained", c.drained},
                   {"failed", c.failed},
                   {"unreachable", c.unreachable},
                   {"usable", c.usable()},
                   {"leases", lease_count[p]}});
  }
  if (!found) return Status::NotFound("no such pool '" + name + "'");
  return nlohmann::json{{"pools", out}};
}

Result<nlohmann::json> PoolEngine::ListGpus(const std::string& id, const std::string& pool) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  nlohmann::json out = nlohmann::json::array();
  if (!id.empty()) {
    GpuIndex g = inventory_.FindGpu(id);
    if (g == kNone) return Status::NotFound("no such GPU '" + id + "'");
    out.push_back(GpuJson(g));
    return nlohmann::json{{"gpus", out}};
  }
  uint32_t p = kNone;
  if (!pool.empty()) {
    p = inventory_.FindPool(pool);
    if (p == kNone) return Status::NotFound("no such pool '" + pool + "'");
  }
  // Sorted by rack, host, index for readable listings.
  std::vector<GpuIndex> order;
  for (GpuIndex g = 0; g < inventory_.gpu_count(); ++g) {
    if (p == kNone || inventory_.gpu(g).pool == p) order.push_back(g);
  }
  std::sort(order.begin(), order.end(), [&](GpuIndex a, GpuIndex b) {
    const Gpu& x = inventory_.gpu(a);
    const Gpu& y = inventory_.gpu(b);
    return std::tie(inventory_.Name(x.rack), inventory_.Name(x.host), x.index) <
           std::tie(inventory_.Name(y.rack), inventory_.Name(y.host), y.index);
  });
  for (GpuIndex g : order) out.push_back(GpuJson(g));
  return nlohmann::json{{"gpus", out}};
}

Result<nlohmann::json> PoolEngine::ListEvents(const Caller& caller, const EventFilter& f) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  std::string gpu_id;
  if (!f.gpu.empty()) {
    GpuIndex g = inventory_.FindGpu(f.gpu);
    if (g == kNone) return Status::NotFound("no such GPU '" + f.gpu + "'");
    gpu_id = inventory_.GpuId(g);
  }
  // Users see the events of their own leases (also after release) and those of no lease.
  auto visible = [&](const EventRow& e) { return caller.is_admin() || e.lease.empty() || e.uid == caller.uid; };
  nlohmann::json out = nlohmann::json::array();
  for (auto it = events_.begin(); it != events_.end(); ++it) {
    const EventRow& e = *it;
    if (e.seq <= f.since) continue;
    if (!gpu_id.empty() && e.gpu != gpu_id && e.detail.find(gpu_id) == std::string::npos) continue;
    if (f.job_id > 0 && e.job_id != f.job_id) continue;
    if (!visible(e)) continue;
    out.push_back(EventJson(e));
  }
  // Keep the newest `limit`.
  if (out.size() > f.limit) out.erase(out.begin(), out.begin() + static_cast<long>(out.size() - f.limit));
  return nlohmann::json{{"events", out}};
}

// ---------------------------------------------------------------- periodic

void PoolEngine::Tick(bool deaf) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  int64_t now = clock_();
  for (Host* h : inventory_.AllHosts()) {
    if (!deaf && h->reachable && now - h->last_seen > config_.poold.unreachable_timeout) {
      MarkHostUnreachable(
          h, "no heartbeat from " + inventory_.Name(h->name) + " for " + std::to_string(now - h->last_seen) + " s");
    }
  }
  std::vector<uint64_t> expired;
  for (const auto& [n, l] : leases_) {
    if (l.expires <= now) expired.push_back(n);
  }
  for (uint64_t n : expired) {
    ReleaseLocked(&leases_.at(n), "expired", "not renewed within its TTL");
    ++counters_.expired;
  }
}

std::vector<std::pair<int64_t, uint64_t>> PoolEngine::SlurmJobLeases() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  std::vector<std::pair<int64_t, uint64_t>> out;
  for (const auto& [job, n] : lease_by_job_) out.emplace_back(job, n);
  return out;
}

void PoolEngine::ReapJob(int64_t job_id, uint64_t number) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  auto it = leases_.find(number);
  if (it == leases_.end() || it->second.job_id != job_id) return;
  ReleaseLocked(&it->second, "reaped", "Slurm job " + std::to_string(job_id) + " has ended");
  ++counters_.reaped;
}

// ---------------------------------------------------------------- metrics and checks

std::vector<std::pair<std::string, PoolCounts>> PoolEngine::PoolSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  std::vector<std::pair<std::string, PoolCounts>> out;
  for (uint32_t p = 0; p < inventory_.pools().size(); ++p) {
    out.emplace_back(inventory_.pools()[p].name, inventory_.Counts(p));
  }
  return out;
}

EngineCounters PoolEngine::counters() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  return counters_;
}

size_t PoolEngine::lease_count() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  return leases_.size();
}

size_t PoolEngine::inventory_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  return inventory_.ApproximateBytes();
}

Status PoolEngine::CheckInvariants() {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
  std::map<GpuIndex, uint64_t> owner;
  for (const auto& [n, l] : leases_) {
    for (GpuIndex g : l.gpus) {
      if (!Usable(inventory_.gpu(g).state) && !l.degraded) {
        return Status::Internal(LeaseName(n) + " holds " + inventory_.GpuId(g) + " in state " +
                                GpuStateName(inventory_.gpu(g).state) + " but is not DEGRADED");
      }
      if (inventory_.gpu(g).lease != n && Usable(inventory_.gpu(g).state)) {
        return Status::Internal(inventory_.GpuId(g) + " is in " + LeaseName(n) + " but points to L" +
                                std::to_string(inventory_.gpu(g).lease));
      }
      if (Usable(inventory_.gpu(g).state)) {
        auto [it, fresh] = owner.emplace(g, n);
        if (!fresh) {
          return Status::Internal(inventory_.GpuId(g) + " is in two leases: " + LeaseName(it->second) + " and " +
                                  LeaseName(n));
        }
      }
    }
  }
  for (GpuIndex g = 0; g < inventory_.gpu_count(); ++g) {
    const Gpu& gpu = inventory_.gpu(g);
    if (Usable(gpu.state) && owner.count(g) == 0) {
      return Status::Internal(inventory_.GpuId(g) + " is " + GpuStateName(gpu.state) + " but in no lease");
    }
    if (gpu.state == GpuState::kIdle && gpu.lease != 0) {
      return Status::Internal(inventory_.GpuId(g) + " is IDLE but points to a lease");
    }
  }
  for (uint32_t p = 0; p < inventory_.pools().size(); ++p) {
    if (inventory_.IdleCount(p) != inventory_.Counts(p).idle) {
      return Status::Internal("idle index of pool " + inventory_.pools()[p].name + " is out of step");
    }
  }
  return Status::OK();
}

}  // namespace gpupool::poold
