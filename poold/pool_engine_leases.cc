// PoolEngine, leases: finding a lease and checking who may touch it, acquire (placement
// and the lease's token), renew, release, and listing. See pool_engine.h.
#include "poold/pool_engine.h"

#include <algorithm>

#include "common/random.h"

namespace gpupool::poold {

// ---------------------------------------------------------------- leases

PoolEngine::Lease* PoolEngine::FindLease(const std::string& id, int64_t job_id, Status* why) {
  if (!id.empty()) {
    if (id.size() < 2 || id[0] != 'L' || id.size() > 20 || id.find_first_not_of("0123456789", 1) != std::string::npos) {
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

Status PoolEngine::CheckJob(const Caller& caller, const AcquireRequest& req) const {
  std::string job = "job " + std::to_string(req.job_id);
  const bool licenses = config_.poold.enforce_licenses;
  if (!licenses && caller.is_admin()) return Status::OK();
  if (!job_owner_) {
    if (licenses) {
      return Status::PermissionDenied("cannot ask Slurm which gpupool licences " + job +
                                      " holds (gpupoold has no slurm.conf); a site without Slurm licences "
                                      "sets enforce_licenses = false (gpupool.conf(5))");
    }
    return Status::PermissionDenied("cannot ask Slurm who owns " + job +
                                    " (gpupoold has no slurm.conf): only root or SlurmUser may acquire");
  }
  Result<SlurmJobOwner> owner = job_owner_(req.job_id);
  if (!owner.ok()) {
    if (owner.status().code() == Status::Code::kNotFound) {
      return Status::PermissionDenied(job + " is not a pending or running Slurm job: " + owner.status().message());
    }
    return Status::Unavailable("cannot confirm who owns " + job + ": " + owner.status().message());
  }
  if (!caller.is_admin() && owner->uid != caller.uid) {
    return Status::PermissionDenied(job + " belongs to uid " + std::to_string(owner->uid) + ", not to uid " +
                                    std::to_string(caller.uid) + ": users may acquire only for their own jobs");
  }
  if (caller.is_admin() && req.has_owner && owner->uid != req.uid) {
    return Status::PermissionDenied(job + " belongs to uid " + std::to_string(owner->uid) + ", not to uid " +
                                    std::to_string(req.uid) + " named in the request");
  }
  // gpupoold reaps the leases of jobs that are not running (the reaper, daemon.cc), so a
  // lease for a pending job would vanish within a reap interval: refuse it instead. (A
  // pending job's licences are not allocated yet either.)
  if (!owner->running) {
    return Status::Conflict(job + " is pending: its lease is acquired when it starts");
  }
  if (!licenses) return Status::OK();
  // Slurm scheduled the job, and counts the pools' use, by its gpupool_<pool> licences: a
  // lease beyond them would take GPUs that Slurm has promised to other jobs.
  Result<std::map<std::string, int64_t>> held = PoolLicenses(owner->licenses);
  if (!held.ok()) return Status::Unavailable("cannot read " + job + "'s licences: " + held.status().message());
  if (held->empty()) {
    return Status::PermissionDenied(
        job + " holds no gpupool licences (Slurm: Licenses=" + (owner->licenses.empty() ? "(null)" : owner->licenses) +
        "): gpupoold leases a job only the pool GPUs Slurm allocated it; "
        "submit it with --gpu-pool=POOL:COUNT");
  }
  for (const PoolRequest& p : req.request) {
    auto it = held->find(p.pool);
    int64_t have = it == held->end() ? 0 : it->second;
    if (p.count > have) {
      return Status::PermissionDenied(job + " holds " + std::to_string(have) + " gpupool_" + p.pool + " licences, " +
                                      std::to_string(p.count) + " GPUs of pool '" + p.pool +
                                      "' requested: a lease may not exceed what Slurm allocated the job");
    }
  }
  return Status::OK();
}

Result<nlohmann::json> PoolEngine::Acquire(const Caller& caller, const AcquireRequest& req, bool* created) {
  *created = false;
  if (req.has_owner && !caller.is_admin()) {
    return Status::PermissionDenied("only admins may acquire on behalf of another user (uid/user)");
  }
  // Another step of a job that holds this very lease: hand it back without asking Slurm
  // again (it was checked when made, and its request cannot change since).
  {
    std::lock_guard<std::mutex> lock(mu_);
    Store::Hold hold(store_);
    auto existing = lease_by_job_.find(req.job_id);
    if (existing != lease_by_job_.end()) {
      const Lease& l = leases_.at(existing->second);
      if (CheckOwner(caller, l).ok() && (!req.has_owner || l.uid == req.uid) && l.request == req.request &&
          l.place == req.place && l.min_memory_mib == req.min_memory_mib) {
        return LeaseJson(l, true);
      }
    }
    // A pool gpupoold does not know is the clearer answer than Slurm's licences for it.
    for (const PoolRequest& p : req.request) {
      if (inventory_.FindPool(p.pool) == kNone) return Status::InvalidArgument("unknown pool '" + p.pool + "'");
    }
  }
  // A user may hold a lease only for a job of their own: otherwise anyone could take the
  // lease (and its token) of another user's queued job before it starts; and no lease may
  // exceed the job's licences. Ask Slurm before taking the lock: slurmctld may be slow.
  GPUPOOL_RETURN_IF_ERROR(CheckJob(caller, req));
  // Drawn before anything changes, so that a failing random source changes nothing.
  std::string token, stored_token;
  GPUPOOL_RETURN_IF_ERROR(tokens_.Issue(&token, &stored_token));

  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
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
                    "held by uid " + std::to_string(l.uid) + ", not by job " + std::to_string(req.job_id) +
                        "'s user uid " + std::to_string(owner));
      ++counters_.released;
    } else {
      if (l.request != req.request || l.place != req.place || l.min_memory_mib != req.min_memory_mib) {
        return Status::Conflict("job " + std::to_string(req.job_id) + " already holds lease " + LeaseName(l.number) +
                                " with a different request");
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
  l.movable = req.movable;
  l.gpus = chosen;
  l.slot_pool = slot_pool;
  l.token = std::move(token);
  l.stored_token = std::move(stored_token);
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
  Store::Hold hold(store_);
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
    if (gpu.state == GpuState::kLeased)
      inventory_.SetState(g, GpuState::kIdle);
    else if (gpu.state == GpuState::kDraining)
      inventory_.SetState(g, GpuState::kDrained);
    PersistGpu(g);
  }
  // One event says all an accounting needs: which GPUs, for how long, and why it ended.
  std::string gpus;
  for (GpuIndex g : l->gpus) gpus += (gpus.empty() ? "" : ",") + inventory_.GpuId(g);
  Event(type, kNone, l, gpus + " held " + std::to_string(clock_() - l->created) + " s; " + detail);
  store_->Enqueue(LeaseDelete{l->number});
  if (l->job_id > 0) lease_by_job_.erase(l->job_id);
  degraded_.erase(l->number);
  recoveries_per_minute_.erase(l->number);
  leases_.erase(l->number);
  HealDegraded();
}

Result<nlohmann::json> PoolEngine::Release(const Caller& caller, const std::string& lease_id, int64_t job_id,
                                           const std::string& why_text) {
  std::lock_guard<std::mutex> lock(mu_);
  Store::Hold hold(store_);
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
  Store::Hold hold(store_);
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

}  // namespace gpupool::poold
