#include "poold/pool_engine.h"

#include <algorithm>
#include <cstdio>

#include "common/log.h"
#include "common/random.h"

namespace gpupool::poold {
namespace {

constexpr size_t kEventMemory = 100000;  // events kept in memory for `show events`

bool Usable(GpuState s) { return s == GpuState::kLeased || s == GpuState::kDraining; }

}  // namespace

PoolEngine::PoolEngine(const Config& config, Store* store, Clock clock)
    : config_(config), store_(store), clock_(std::move(clock)), inventory_(config.pools, config.gpus) {}

// ---------------------------------------------------------------- recovery

Status PoolEngine::Recover(const LoadedState& state) {
  std::lock_guard<std::mutex> lock(mu_);
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
    g.pool = inventory_.PoolFor(r.uuid, r.host + ":" + std::to_string(r.index), r.model, r.rack,
                                r.host, r.memory_mib);
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
    l.generation = r.generation;
    l.degraded = r.state == "DEGRADED";
    l.token = r.token;
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
        return Status::Internal("GPU " + gpu.uuid + " is in two leases on disk: L" +
                                std::to_string(gpu.lease) + " and " + LeaseName(r.number));
      }
      gpu.lease = l.number;
      if (gpu.state == GpuState::kIdle) inventory_.SetState(g, GpuState::kLeased);
      else if (gpu.state == GpuState::kDrained) inventory_.SetState(g, GpuState::kDraining);
      l.gpus.push_back(g);
    }
    if (l.degraded) degraded_.insert(l.number);
    if (l.job_id > 0) lease_by_job_[l.job_id] = l.number;
    leases_.emplace(l.number, std::move(l));
  }
  for (const EventRow& e : state.recent_events) events_.push_back(e);
  next_lease_ = state.next_lease;
  next_event_ = state.next_event;
  log::Info("recovered " + std::to_string(inventory_.gpu_count()) + " GPUs, " +
            std::to_string(leases_.size()) + " leases, next event " + std::to_string(next_event_));
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
  nlohmann::json gpus = nlohmann::json::array();
  for (GpuIndex g : l.gpus) gpus.push_back(inventory_.gpu(g).uuid);
  r.gpus_json = gpus.dump();
  r.generation = l.generation;
  r.state = l.degraded ? "DEGRADED" : "ACTIVE";
  r.token = l.token;
  r.created = l.created;
  r.renewed = l.renewed;
  r.expires = l.expires;
  r.ttl = l.ttl;
  store_->Enqueue(std::move(r));
}

void PoolEngine::Event(const std::string& type, GpuIndex gpu, const Lease* lease,
                       const std::string& detail) {
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
                      {"gpus", gpus},
                      {"created", l.created},
                      {"renewed", l.renewed},
                      {"expires", l.expires},
                      {"ttl", l.ttl}};
  if (with_token) j["token"] = l.token;
  return j;
}

nlohmann::json PoolEngine::EventJson(const EventRow& e) const {
  return {{"seq", e.seq}, {"time", e.time}, {"type", e.type}, {"gpu", e.gpu},
          {"job_id", e.job_id}, {"lease", e.lease}, {"detail", e.detail}};
}

// ---------------------------------------------------------------- leases

PoolEngine::Lease* PoolEngine::FindLease(const std::string& id, int64_t job_id, Status* why) {
  if (!id.empty()) {
    if (id.size() < 2 || id[0] != 'L' || id.size() > 20 ||
        id.find_first_not_of("0123456789", 1) != std::string::npos) {
      *why = Status::InvalidArgument("bad lease id '" + id + "' (expected L<number>)");
      return nullptr;
    }
    auto it = leases_.find(std::stoull(id.substr(1)));
    if (it == leases_.end()) {
      *why = Status::NotFound("no such lease '" + id + "'");
      return nullptr;
    }
    return &it->second;
  }
  auto it = lease_by_job_.find(job_id);
  if (it == lease_by_job_.end()) {
    *why = Status::NotFound("job " + std::to_string(job_id) + " holds no lease");
    return nullptr;
  }
  return &leases_.at(it->second);
}

Status PoolEngine::CheckOwner(const Caller& caller, const Lease& lease) const {
  if (caller.is_admin() || caller.uid == lease.uid) return Status::OK();
  return Status::PermissionDenied("lease " + LeaseName(lease.number) + " belongs to another user");
}

Status PoolEngine::CheckJobIsCallers(const Caller& caller, int64_t job_id) const {
  std::string job = "job " + std::to_string(job_id);
  if (!job_owner_) {
    return Status::PermissionDenied("cannot ask Slurm who owns " + job +
                                    " (gpupoold has no slurm.conf): only root or SlurmUser may acquire");
  }
  Result<SlurmJobOwner> owner = job_owner_(job_id);
  if (!owner.ok()) {
    if (owner.status().code() == Status::Code::kNotFound) {
      return Status::PermissionDenied(job + " is not a pending or running Slurm job: " +
                                      owner.status().message());
    }
    return Status::Unavailable("cannot confirm who owns " + job + ": " + owner.status().message());
  }
  if (owner->uid != caller.uid) {
    return Status::PermissionDenied(job + " belongs to uid " + std::to_string(owner->uid) +
                                    ", not to uid " + std::to_string(caller.uid) +
                                    ": users may acquire only for their own jobs");
  }
  // gpupoold reaps the leases of jobs that are not running (the reaper, daemon.cc), so a
  // lease for a pending job would vanish within a reap interval: refuse it instead.
  if (!owner->running) {
    return Status::Conflict(job + " is pending: its lease is acquired when it starts");
  }
  return Status::OK();
}

Result<nlohmann::json> PoolEngine::Acquire(const Caller& caller, const AcquireRequest& req, bool* created) {
  *created = false;
  if (req.has_owner && !caller.is_admin()) {
    return Status::PermissionDenied("only admins may acquire on behalf of another user (uid/user)");
  }
  // A user may hold a lease only for a job of their own: otherwise anyone could take the
  // lease (and its token) of another user's queued job before it starts. Ask Slurm before
  // taking the lock: slurmctld may be slow.
  if (!caller.is_admin()) GPUPOOL_RETURN_IF_ERROR(CheckJobIsCallers(caller, req.job_id));
  // Drawn before anything changes, so that a failing random source changes nothing.
  Result<std::string> token = RandomHex(16);
  if (!token.ok()) return token.status();

  std::lock_guard<std::mutex> lock(mu_);
  uid_t owner = req.has_owner ? req.uid : caller.uid;

  // Idempotency: the job's existing lease is the answer.
  auto existing = lease_by_job_.find(req.job_id);
  if (existing != lease_by_job_.end()) {
    Lease& l = leases_.at(existing->second);
    GPUPOOL_RETURN_IF_ERROR(CheckOwner(caller, l));
    if (req.has_owner && l.uid != owner) {
      // Taken by someone who is not the job's user (a squatter, or state from before this
      // check existed): never hand it to the job. Revoke it and lease afresh below.
      ReleaseLocked(&l, "revoked",
                    "held by uid " + std::to_string(l.uid) + ", not by job " +
                        std::to_string(req.job_id) + "'s user uid " + std::to_string(owner));
      ++counters_.released;
    } else {
      if (l.request != req.request || l.place != req.place || l.min_memory_mib != req.min_memory_mib) {
        return Status::Conflict("job " + std::to_string(req.job_id) + " already holds lease " +
                                LeaseName(l.number) + " with a different request");
      }
      return LeaseJson(l, true);
    }
  }

  // Validate against the inventory before choosing anything.
  Inventory::Spread spread = Inventory::Spread::kPack;
  NameId rack = kNone;
  if (req.place == "spread") {
    spread = Inventory::Spread::kSpread;
  } else if (req.place.rfind("rack:", 0) == 0) {
    rack = inventory_.FindName(req.place.substr(5));
    if (rack == kNone) return Status::InvalidArgument("unknown rack '" + req.place.substr(5) + "'");
  } else if (req.place != "pack") {
    return Status::InvalidArgument("bad place '" + req.place + "' (expected pack, spread or rack:NAME)");
  }
  std::vector<uint32_t> pools;
  for (const PoolRequest& p : req.request) {
    uint32_t pool = inventory_.FindPool(p.pool);
    if (pool == kNone) return Status::InvalidArgument("unknown pool '" + p.pool + "'");
    if (std::find(pools.begin(), pools.end(), pool) != pools.end()) {
      return Status::InvalidArgument("pool '" + p.pool + "' named twice in the request");
    }
    pools.push_back(pool);
    int total = inventory_.Total(pool);
    if (p.count > total) {
      return Status::Conflict("pool '" + p.pool + "' has " + std::to_string(total) + " GPUs, " +
                              std::to_string(p.count) + " requested");
    }
  }

  // Choose every GPU first; change nothing unless all requests can be met.
  std::vector<GpuIndex> chosen;
  std::vector<uint32_t> slot_pool;
  for (size_t i = 0; i < req.request.size(); ++i) {
    std::vector<GpuIndex> part =
        inventory_.Place(pools[i], req.request[i].count, spread, rack, req.min_memory_mib, kNone);
    // Place() chooses among idle GPUs only; a multi-pool request cannot overlap.
    if (static_cast<int>(part.size()) != req.request[i].count) {
      std::string where = rack != kNone ? " in rack '" + inventory_.Name(rack) + "'" : "";
      std::string mem = req.min_memory_mib > 0 ? " with " + std::to_string(req.min_memory_mib) + " MiB" : "";
      return Status::Unavailable("pool '" + req.request[i].pool + "' has " +
                                 std::to_string(inventory_.IdleCount(pools[i])) + " idle GPUs, " +
                                 std::to_string(req.request[i].count) + " requested" + where + mem);
    }
    chosen.insert(chosen.end(), part.begin(), part.end());
    slot_pool.insert(slot_pool.end(), part.size(), pools[i]);
  }

  int64_t now = clock_();
  Lease l;
  l.number = next_lease_++;
  l.job_id = req.job_id;
  l.uid = owner;
  if (req.has_owner && !req.user.empty()) {
    l.user = req.user;
  } else {
    auto [name, fresh] = user_names_.try_emplace(owner);
    if (fresh) name->second = auth::UserName(owner);  // one passwd lookup per uid
    l.user = name->second;
  }
  l.request = req.request;
  l.place = req.place;
  l.min_memory_mib = req.min_memory_mib;
  l.gpus = chosen;
  l.slot_pool = slot_pool;
  l.token = std::move(token.value());
  l.created = l.renewed = now;
  l.ttl = req.ttl > 0 ? req.ttl : config_.poold.lease_ttl;
  l.expires = now + l.ttl;
  for (GpuIndex g : chosen) {
    inventory_.gpu(g).lease = l.number;
    inventory_.SetState(g, GpuState::kLeased);
    PersistGpu(g);
  }
  PersistLease(l);
  std::string gpu_list;
  for (GpuIndex g : chosen) gpu_list += (gpu_list.empty() ? "" : ",") + inventory_.GpuId(g);
  Event("leased", kNone, &l, gpu_list);
  ++counters_.acquired;
  if (l.job_id > 0) lease_by_job_[l.job_id] = l.number;
  auto [it, ok] = leases_.emplace(l.number, std::move(l));
  *created = true;
  return LeaseJson(it->second, true);
}

Result<nlohmann::json> PoolEngine::Renew(const Caller& caller, const std::string& lease_id, int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  Status why;
  Lease* l = FindLease(lease_id, job_id, &why);
  if (l == nullptr) return why;
  GPUPOOL_RETURN_IF_ERROR(CheckOwner(caller, *l));
  l->renewed = clock_();
  l->expires = l->renewed + l->ttl;
  PersistLease(*l);
  return LeaseJson(*l, true);
}

void PoolEngine::ReleaseLocked(Lease* l, const std::string& type, const std::string& detail) {
  for (GpuIndex g : l->gpus) {
    Gpu& gpu = inventory_.gpu(g);
    if (gpu.lease != l->number) continue;
    gpu.lease = 0;
    if (gpu.state == GpuState::kLeased) inventory_.SetState(g, GpuState::kIdle);
    else if (gpu.state == GpuState::kDraining) inventory_.SetState(g, GpuState::kDrained);
    PersistGpu(g);
  }
  // One event says all an accounting needs: which GPUs, for how long, and why it ended.
  std::string gpus;
  for (GpuIndex g : l->gpus) gpus += (gpus.empty() ? "" : ",") + inventory_.GpuId(g);
  Event(type, kNone, l, gpus + " held " + std::to_string(clock_() - l->created) + " s; " + detail);
  store_->Enqueue(LeaseDelete{l->number});
  if (l->job_id > 0) lease_by_job_.erase(l->job_id);
  degraded_.erase(l->number);
  leases_.erase(l->number);
  HealDegraded();
}

Result<nlohmann::json> PoolEngine::Release(const Caller& caller, const std::string& lease_id,
                                           int64_t job_id, const std::string& why_text) {
  std::lock_guard<std::mutex> lock(mu_);
  Status why;
  Lease* l = FindLease(lease_id, job_id, &why);
  if (l == nullptr) return why;
  GPUPOOL_RETURN_IF_ERROR(CheckOwner(caller, *l));
  std::string name = LeaseName(l->number);
  std::string who = why_text.empty() ? "by uid " + std::to_string(caller.uid) : why_text;
  ReleaseLocked(l, "released", who);
  ++counters_.released;
  return nlohmann::json{{"released", nlohmann::json::array({name})}};
}

Result<nlohmann::json> PoolEngine::ListLeases(const Caller& caller, const std::string& lease_id, int64_t job_id) {
  std::lock_guard<std::mutex> lock(mu_);
  nlohmann::json out = nlohmann::json::array();
  if (!lease_id.empty() || job_id > 0) {
    Status why;
    Lease* l = FindLease(lease_id, job_id, &why);
    if (l == nullptr) {
      if (why.code() == Status::Code::kNotFound) return nlohmann::json{{"leases", out}};
      return why;
    }
    if (l->job_id != job_id && job_id > 0) return nlohmann::json{{"leases", out}};
    if (CheckOwner(caller, *l).ok()) out.push_back(LeaseJson(*l, true));
    return nlohmann::json{{"leases", out}};
  }
  for (const auto& [n, l] : leases_) {
    if (CheckOwner(caller, l).ok()) out.push_back(LeaseJson(l, true));
  }
  return nlohmann::json{{"leases", out}};
}

// ---------------------------------------------------------------- health and swap

bool PoolEngine::ReplaceSlot(Lease* l, size_t slot, const std::string& reason) {
  GpuIndex old = l->gpus[slot];
  NameId rack = kNone;
  if (l->place.rfind("rack:", 0) == 0) rack = inventory_.FindName(l->place.substr(5));
  std::vector<GpuIndex> pick = inventory_.Place(l->slot_pool[slot], 1, Inventory::Spread::kPack, rack,
                                                l->min_memory_mib, inventory_.gpu(old).rack);
  if (pick.empty()) return false;
  GpuIndex repl = pick[0];
  Gpu& o = inventory_.gpu(old);
  if (o.lease == l->number) o.lease = 0;
  PersistGpu(old);
  inventory_.gpu(repl).lease = l->number;
  inventory_.SetState(repl, GpuState::kLeased);
  PersistGpu(repl);
  l->gpus[slot] = repl;
  ++l->generation;
  ++counters_.swapped;
  Event("swapped", old, l, inventory_.GpuId(old) + " -> " + inventory_.GpuId(repl) + ": " + reason +
                                " (generation " + std::to_string(l->generation) + ")");
  return true;
}

void PoolEngine::UpdateLeaseHealth(Lease* l) {
  bool bad = false;
  for (GpuIndex g : l->gpus) bad = bad || !Usable(inventory_.gpu(g).state);
  if (bad && !l->degraded) {
    l->degraded = true;
    degraded_.insert(l->number);
    ++counters_.degraded;
    Event("degraded", kNone, l, "no spare GPU in the pool; the lease keeps its failed GPU until one frees up");
  } else if (!bad && l->degraded) {
    l->degraded = false;
    degraded_.erase(l->number);
  }
  PersistLease(*l);
}

void PoolEngine::SwapOut(GpuIndex g, const std::string& reason) {
  uint64_t number = inventory_.gpu(g).lease;
  if (number == 0) return;
  auto it = leases_.find(number);
  if (it == leases_.end()) return;
  Lease* l = &it->second;
  for (size_t s = 0; s < l->gpus.size(); ++s) {
    if (l->gpus[s] == g) ReplaceSlot(l, s, reason);
  }
  UpdateLeaseHealth(l);
}

void PoolEngine::HealDegraded() {
  if (degraded_.empty()) return;
  std::vector<uint64_t> leases(degraded_.begin(), degraded_.end());
  for (uint64_t number : leases) {
    auto it = leases_.find(number);
    if (it == leases_.end()) continue;
    Lease* l = &it->second;
    bool changed = false;
    for (size_t s = 0; s < l->gpus.size(); ++s) {
      if (!Usable(inventory_.gpu(l->gpus[s]).state)) {
        changed |= ReplaceSlot(l, s, "spare GPU available for degraded lease");
      }
    }
    if (changed) UpdateLeaseHealth(l);
  }
}

void PoolEngine::FailGpu(GpuIndex g, GpuState to, const std::string& reason, const std::string& event_type) {
  Gpu& gpu = inventory_.gpu(g);
  if (gpu.state == to) return;
  inventory_.SetState(g, to);
  gpu.reason = reason;
  PersistGpu(g);
  if (to == GpuState::kFailed) ++counters_.failed;
  if (to == GpuState::kUnreachable) ++counters_.unreachable;
  const Lease* l = nullptr;
  if (gpu.lease != 0) {
    auto it = leases_.find(gpu.lease);
    if (it != leases_.end()) l = &it->second;
  }
  Event(event_type, g, l, reason);
  SwapOut(g, reason);
}

void PoolEngine::RecoverGpu(GpuIndex g, const std::string& detail) {
  Gpu& gpu = inventory_.gpu(g);
  GpuState to;
  if (gpu.admin_fail || (g < reported_failed_.size() && reported_failed_[g] && gpu.state == GpuState::kFailed)) {
    return;  // stays FAILED until an admin resumes it
  }
  if (gpu.lease != 0) to = gpu.admin_drain ? GpuState::kDraining : GpuState::kLeased;
  else to = gpu.admin_drain ? GpuState::kDrained : GpuState::kIdle;
  if (gpu.state == to) return;
  inventory_.SetState(g, to);
  gpu.reason = gpu.admin_drain ? gpu.reason : "";
  PersistGpu(g);
  const Lease* l = nullptr;
  if (gpu.lease != 0) {
    auto it = leases_.find(gpu.lease);
    if (it != leases_.end()) {
      UpdateLeaseHealth(&it->second);
      l = &it->second;
    }
  }
  Event("recovered", g, l, detail);
  HealDegraded();
}

void PoolEngine::MarkHostUnreachable(Host* host, const std::string& reason) {
  host->reachable = false;
  for (GpuIndex g : host->gpus) {
    GpuState s = inventory_.gpu(g).state;
    if (s == GpuState::kFailed || s == GpuState::kUnreachable) continue;
    FailGpu(g, GpuState::kUnreachable, reason, "unreachable");
  }
}

// ---------------------------------------------------------------- admin

Result<nlohmann::json> PoolEngine::UpdateGpu(const std::string& id, const std::string& state,
                                             const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  GpuIndex g = inventory_.FindGpu(id);
  if (g == kNone) return Status::NotFound("no such GPU '" + id + "'");
  Gpu& gpu = inventory_.gpu(g);
  std::string why = reason.empty() ? "admin" : reason;
  if (state == "drain") {
    gpu.admin_drain = true;
    gpu.reason = why;
    if (gpu.state == GpuState::kIdle) inventory_.SetState(g, GpuState::kDrained);
    else if (gpu.state == GpuState::kLeased) inventory_.SetState(g, GpuState::kDraining);
    PersistGpu(g);
    Event("state_changed", g, nullptr, std::string("drain: ") + why);
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

// ---------------------------------------------------------------- queries

Result<nlohmann::json> PoolEngine::ListPools(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
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
    out.push_back({{"name", pname}, {"total", c.total}, {"idle", c.idle}, {"leased", c.leased},
                   {"draining", c.draining}, {"drained", c.drained}, {"failed", c.failed},
                   {"unreachable", c.unreachable}, {"usable", c.usable()}, {"leases", lease_count[p]}});
  }
  if (!found) return Status::NotFound("no such pool '" + name + "'");
  return nlohmann::json{{"pools", out}};
}

Result<nlohmann::json> PoolEngine::ListGpus(const std::string& id, const std::string& pool) {
  std::lock_guard<std::mutex> lock(mu_);
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

// ---------------------------------------------------------------- agents

Result<nlohmann::json> PoolEngine::Register(const AgentRegistration& reg) {
  std::lock_guard<std::mutex> lock(mu_);
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
      gpu.pool = inventory_.PoolFor(a.uuid, reg.host + ":" + std::to_string(a.index), a.model, reg.rack,
                                    reg.host, a.memory_mib);
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

Result<nlohmann::json> PoolEngine::Heartbeat(const std::string& host_name,
                                             const std::vector<GpuHealthReport>& gpus) {
  std::lock_guard<std::mutex> lock(mu_);
  NameId host_id = inventory_.FindName(host_name);
  Host* host = host_id == kNone ? nullptr : inventory_.FindHost(host_id);
  if (host == nullptr) return Status::NotFound("unknown host '" + host_name + "': register first");
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
  nlohmann::json leases = nlohmann::json::array();
  for (GpuIndex g : host->gpus) {
    const Gpu& gpu = inventory_.gpu(g);
    if (gpu.lease == 0) continue;
    const Lease& l = leases_.at(gpu.lease);
    leases.push_back({{"gpu", gpu.uuid}, {"lease", LeaseName(l.number)}, {"token", l.token},
                      {"generation", l.generation}});
  }
  return nlohmann::json{{"ok", true}, {"leases", leases}};
}

// ---------------------------------------------------------------- periodic

void PoolEngine::Tick() {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t now = clock_();
  for (Host* h : inventory_.AllHosts()) {
    if (h->reachable && now - h->last_seen > config_.poold.unreachable_timeout) {
      MarkHostUnreachable(h, "no heartbeat from " + inventory_.Name(h->name) + " for " +
                                 std::to_string(now - h->last_seen) + " s");
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
  std::vector<std::pair<int64_t, uint64_t>> out;
  for (const auto& [job, n] : lease_by_job_) out.emplace_back(job, n);
  return out;
}

void PoolEngine::ReapJob(int64_t job_id, uint64_t number) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = leases_.find(number);
  if (it == leases_.end() || it->second.job_id != job_id) return;
  ReleaseLocked(&it->second, "reaped", "Slurm job " + std::to_string(job_id) + " has ended");
  ++counters_.reaped;
}

// ---------------------------------------------------------------- metrics and checks

std::vector<std::pair<std::string, PoolCounts>> PoolEngine::PoolSnapshot() {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::pair<std::string, PoolCounts>> out;
  for (uint32_t p = 0; p < inventory_.pools().size(); ++p) {
    out.emplace_back(inventory_.pools()[p].name, inventory_.Counts(p));
  }
  return out;
}

EngineCounters PoolEngine::counters() {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

size_t PoolEngine::lease_count() {
  std::lock_guard<std::mutex> lock(mu_);
  return leases_.size();
}

size_t PoolEngine::inventory_bytes() {
  std::lock_guard<std::mutex> lock(mu_);
  return inventory_.ApproximateBytes();
}

Status PoolEngine::CheckInvariants() {
  std::lock_guard<std::mutex> lock(mu_);
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
          return Status::Internal(inventory_.GpuId(g) + " is in two leases: " + LeaseName(it->second) +
                                  " and " + LeaseName(n));
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
