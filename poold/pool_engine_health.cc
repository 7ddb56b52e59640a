// PoolEngine, health and swap: a leased GPU that fails or becomes unreachable is replaced
// in its lease by a healthy one of the same pool (a swap, which bumps the lease's
// generation); a lease that finds no spare stays degraded until one frees up; a GPU that
// recovers goes back to IDLE (or to its lease). See pool_engine.h.
#include "poold/pool_engine.h"

#include "poold/pool_engine_internal.h"

namespace gpupool::poold {

using engine_internal::Usable;

// ---------------------------------------------------------------- health and swap

bool PoolEngine::ReplaceSlot(Lease* l, size_t slot, const std::string& reason, GpuIndex to, const char* event) {
  GpuIndex old = l->gpus[slot];
  GpuIndex repl = to;
  if (repl == kNone) {
    NameId rack = kNone;
    if (l->place.rfind("rack:", 0) == 0) rack = inventory_.FindName(l->place.substr(5));
    std::vector<GpuIndex> pick = inventory_.Place(l->slot_pool[slot], 1, Inventory::Spread::kPack, rack,
                                                  l->min_memory_mib, inventory_.gpu(old).rack);
    if (pick.empty()) return false;
    repl = pick[0];
  }
  Gpu& o = inventory_.gpu(old);
  if (o.lease == l->number) o.lease = 0;
  // A healthy GPU moved away from (a migration) is free again, or drained.
  if (o.state == GpuState::kLeased || o.state == GpuState::kDraining) {
    inventory_.SetState(old, o.admin_drain ? GpuState::kDrained : GpuState::kIdle);
  }
  PersistGpu(old);
  inventory_.gpu(repl).lease = l->number;
  inventory_.SetState(repl, GpuState::kLeased);
  PersistGpu(repl);
  l->gpus[slot] = repl;
  l->moved_from.resize(l->gpus.size(), kNone);
  l->moved_from[slot] = old;
  ++l->generation;
  ++(std::string(event) == "migrated" ? counters_.migrated : counters_.swapped);
  Event(event, old, l,
        inventory_.GpuId(old) + " -> " + inventory_.GpuId(repl) + ": " + reason + " (generation " +
            std::to_string(l->generation) + ")");
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

// Also moves the leases of drained GPUs (MoveDrainingLeases), after the degraded ones:
// a failed GPU is the more urgent to replace.
void PoolEngine::HealDegraded() {
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
  MoveDrainingLeases();
}

// A DRAINING GPU of a movable lease: the lease moves to a GPU placement chooses (a
// migrated event) and the GPU becomes DRAINED; one that finds no GPU waits in
// draining_movable_ for the next call.
void PoolEngine::MoveDrainingLeases() {
  for (auto it = draining_movable_.begin(); it != draining_movable_.end();) {
    const GpuIndex g = *it;
    const Gpu& gpu = inventory_.gpu(g);
    auto held = gpu.state == GpuState::kDraining ? leases_.find(gpu.lease) : leases_.end();
    if (held == leases_.end() || !held->second.movable) {
      it = draining_movable_.erase(it);  // resumed, failed, released, or not movable
      continue;
    }
    Lease* l = &held->second;
    size_t slot = 0;
    while (slot < l->gpus.size() && l->gpus[slot] != g) ++slot;
    if (slot == l->gpus.size()) {
      it = draining_movable_.erase(it);
      continue;
    }
    if (!ReplaceSlot(l, slot, "drained by admin: " + gpu.reason, kNone, "migrated")) {
      ++it;  // nowhere to go yet
      continue;
    }
    UpdateLeaseHealth(l);
    it = draining_movable_.erase(it);
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
  if (gpu.lease != 0)
    to = gpu.admin_drain ? GpuState::kDraining : GpuState::kLeased;
  else
    to = gpu.admin_drain ? GpuState::kDrained : GpuState::kIdle;
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

}  // namespace gpupool::poold
