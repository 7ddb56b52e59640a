#include "poold/inventory.h"

#include <fnmatch.h>

#include <algorithm>

namespace gpupool::poold {

const char* GpuStateName(GpuState state) {
  switch (state) {
    case GpuState::kIdle:
      return "IDLE";
    case GpuState::kLeased:
      return "LEASED";
    case GpuState::kDraining:
      return "DRAINING";
    case GpuState::kDrained:
      return "DRAINED";
    case GpuState::kFailed:
      return "FAILED";
    case GpuState::kUnreachable:
      return "UNREACHABLE";
  }
  return "UNKNOWN";
}

bool ParseGpuState(const std::string& name, GpuState* out) {
  static const GpuState kAll[] = {GpuState::kIdle,    GpuState::kLeased, GpuState::kDraining,
                                  GpuState::kDrained, GpuState::kFailed, GpuState::kUnreachable};
  for (GpuState s : kAll) {
    if (name == GpuStateName(s)) {
      *out = s;
      return true;
    }
  }
  return false;
}

Inventory::Inventory(std::vector<PoolConfig> pools, std::vector<GpuAssignment> assignments)
    : pools_(std::move(pools)),
      assignments_(std::move(assignments)),
      pool_index_(pools_.size()),
      pool_total_(pools_.size(), 0) {}

NameId Inventory::Intern(const std::string& name) {
  auto it = name_ids_.find(name);
  if (it != name_ids_.end()) return it->second;
  NameId id = static_cast<NameId>(names_.size());
  names_.push_back(name);
  name_ids_.emplace(name, id);
  return id;
}

NameId Inventory::FindName(const std::string& name) const {
  auto it = name_ids_.find(name);
  return it == name_ids_.end() ? kNone : it->second;
}

uint32_t Inventory::FindPool(const std::string& name) const {
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    if (pools_[i].name == name) return i;
  }
  return kNone;
}

PoolCounts Inventory::Counts(uint32_t pool) const {
  PoolCounts c;
  for (const Gpu& g : gpus_) {
    if (g.pool != pool) continue;
    ++c.total;
    switch (g.state) {
      case GpuState::kIdle:
        ++c.idle;
        break;
      case GpuState::kLeased:
        ++c.leased;
        break;
      case GpuState::kDraining:
        ++c.draining;
        break;
      case GpuState::kDrained:
        ++c.drained;
        break;
      case GpuState::kFailed:
        ++c.failed;
        break;
      case GpuState::kUnreachable:
        ++c.unreachable;
        break;
    }
  }
  return c;
}

GpuIndex Inventory::AddGpu(Gpu gpu) {
  auto it = by_uuid_.find(gpu.uuid);
  if (it != by_uuid_.end()) return it->second;
  GpuIndex i = static_cast<GpuIndex>(gpus_.size());
  GpuState state = gpu.state;
  gpu.state = GpuState::kUnreachable;  // not indexed as idle until SetState
  by_uuid_.emplace(gpu.uuid, i);
  by_host_index_[{gpu.host, gpu.index}] = i;
  if (gpu.pool != kNone) ++pool_total_[gpu.pool];
  gpus_.push_back(std::move(gpu));
  SetState(i, state);
  return i;
}

GpuIndex Inventory::FindGpu(const std::string& id_or_uuid) const {
  auto it = by_uuid_.find(id_or_uuid);
  if (it != by_uuid_.end()) return it->second;
  size_t colon = id_or_uuid.rfind(':');
  if (colon == std::string::npos || colon == 0) return kNone;
  NameId host = FindName(id_or_uuid.substr(0, colon));
  std::string idx = id_or_uuid.substr(colon + 1);
  if (host == kNone || idx.empty() || idx.size() > 5 || idx.find_first_not_of("0123456789") != std::string::npos) {
    return kNone;
  }
  auto hit = by_host_index_.find({host, static_cast<uint16_t>(std::stoi(idx))});
  return hit == by_host_index_.end() ? kNone : hit->second;
}

std::string Inventory::GpuId(GpuIndex i) const { return names_[gpus_[i].host] + ":" + std::to_string(gpus_[i].index); }

void Inventory::SetState(GpuIndex i, GpuState state) {
  Gpu& g = gpus_[i];
  if (g.state == state) return;
  if (g.state == GpuState::kIdle) RemoveIdle(i);
  g.state = state;
  if (state == GpuState::kIdle) AddIdle(i);
}

void Inventory::AddIdle(GpuIndex i) {
  const Gpu& g = gpus_[i];
  if (g.pool == kNone) return;
  PoolIndex& p = pool_index_[g.pool];
  std::set<GpuIndex>& rack = p.idle_by_rack[g.rack];
  int before = static_cast<int>(rack.size());
  if (!rack.insert(i).second) return;
  if (before > 0) p.racks_by_idle.erase({before, g.rack});
  p.racks_by_idle.insert({before + 1, g.rack});
  ++p.idle;
}

void Inventory::RemoveIdle(GpuIndex i) {
  const Gpu& g = gpus_[i];
  if (g.pool == kNone) return;
  PoolIndex& p = pool_index_[g.pool];
  auto rit = p.idle_by_rack.find(g.rack);
  if (rit == p.idle_by_rack.end()) return;
  int before = static_cast<int>(rit->second.size());
  if (rit->second.erase(i) == 0) return;
  p.racks_by_idle.erase({before, g.rack});
  if (before > 1) p.racks_by_idle.insert({before - 1, g.rack});
  --p.idle;
}

uint32_t Inventory::PoolFor(const std::string& uuid, const std::string& gpu_id, const std::string& model,
                            const std::string& rack, const std::string& host, uint64_t memory_mib) const {
  for (const GpuAssignment& a : assignments_) {
    if (a.gpu == uuid || a.gpu == gpu_id) return FindPool(a.pool);
  }
  auto listed = [](const std::vector<std::string>& list, const std::string& value) {
    return list.empty() || std::find(list.begin(), list.end(), value) != list.end();
  };
  for (uint32_t i = 0; i < pools_.size(); ++i) {
    const PoolConfig& p = pools_[i];
    bool model_ok = p.models.empty();
    for (const std::string& pattern : p.models) {
      model_ok = model_ok || fnmatch(pattern.c_str(), model.c_str(), 0) == 0;
    }
    if (model_ok && listed(p.racks, rack) && listed(p.hosts, host) && memory_mib >= p.min_memory_mib) {
      return i;
    }
  }
  return kNone;
}

Host* Inventory::FindHost(NameId name) {
  auto it = hosts_.find(name);
  return it == hosts_.end() ? nullptr : &it->second;
}

const Host* Inventory::FindHost(NameId name) const {
  auto it = hosts_.find(name);
  return it == hosts_.end() ? nullptr : &it->second;
}

Host& Inventory::UpsertHost(NameId name) {
  Host& h = hosts_[name];
  h.name = name;
  return h;
}

std::vector<Host*> Inventory::AllHosts() {
  std::vector<Host*> out;
  out.reserve(hosts_.size());
  for (auto& [name, host] : hosts_) out.push_back(&host);
  return out;
}

int Inventory::IdleCount(uint32_t pool) const { return pool < pool_index_.size() ? pool_index_[pool].idle : 0; }

void Inventory::TakeFromRack(const PoolIndex& index, NameId rack, int want, uint64_t min_memory_mib,
                             std::vector<GpuIndex>* out) const {
  auto it = index.idle_by_rack.find(rack);
  if (it == index.idle_by_rack.end()) return;
  for (GpuIndex i : it->second) {
    if (want == 0) return;
    if (gpus_[i].memory_mib < min_memory_mib) continue;
    out->push_back(i);
    --want;
  }
}

std::vector<GpuIndex> Inventory::Place(uint32_t pool, int count, Spread spread, NameId rack, uint64_t min_memory_mib,
                                       NameId prefer_rack) const {
  std::vector<GpuIndex> chosen;
  if (pool >= pool_index_.size() || count <= 0) return chosen;
  const PoolIndex& p = pool_index_[pool];
  if (p.idle < count) return chosen;

  if (rack != kNone) {
    TakeFromRack(p, rack, count, min_memory_mib, &chosen);
    if (static_cast<int>(chosen.size()) < count) chosen.clear();
    return chosen;
  }
  if (prefer_rack != kNone) {
    TakeFromRack(p, prefer_rack, count, min_memory_mib, &chosen);
    if (static_cast<int>(chosen.size()) == count) return chosen;
  }
  auto already = [&chosen](GpuIndex i) { return std::find(chosen.begin(), chosen.end(), i) != chosen.end(); };

  if (spread == Spread::kSpread) {
    // One GPU per rack, racks with most idle first, and again until `count` are chosen.
    // At most `count` racks can take part: the ones with the most idle GPUs.
    std::vector<NameId> racks;
    for (auto it = p.racks_by_idle.rbegin(); it != p.racks_by_idle.rend() && static_cast<int>(racks.size()) < count;
         ++it) {
      racks.push_back(it->second);
    }
    bool progress = true;
    while (static_cast<int>(chosen.size()) < count && progress) {
      progress = false;
      for (NameId r : racks) {
        if (static_cast<int>(chosen.size()) == count) break;
        const std::set<GpuIndex>& idle = p.idle_by_rack.at(r);
        for (GpuIndex i : idle) {
          if (gpus_[i].memory_mib < min_memory_mib || already(i)) continue;
          chosen.push_back(i);
          progress = true;
          break;
        }
      }
    }
  } else {
    // Pack: the smallest rack that can hold what is left (best fit), else the largest racks
    // first, so the lease spans the fewest racks.
    while (static_cast<int>(chosen.size()) < count) {
      int left = count - static_cast<int>(chosen.size());
      size_t before = chosen.size();
      for (auto it = p.racks_by_idle.lower_bound({left, 0}); it != p.racks_by_idle.end(); ++it) {
        std::vector<GpuIndex> part;
        TakeFromRack(p, it->second, left, min_memory_mib, &part);
        part.erase(std::remove_if(part.begin(), part.end(), already), part.end());
        if (static_cast<int>(part.size()) == left) {
          chosen.insert(chosen.end(), part.begin(), part.end());
          break;
        }
      }
      if (static_cast<int>(chosen.size()) == count) break;
      // No single rack fits the rest: take all we can from the largest rack not yet used.
      for (auto it = p.racks_by_idle.rbegin(); it != p.racks_by_idle.rend(); ++it) {
        std::vector<GpuIndex> part;
        TakeFromRack(p, it->second, it->first, min_memory_mib, &part);
        part.erase(std::remove_if(part.begin(), part.end(), already), part.end());
        if (part.empty()) continue;
        if (static_cast<int>(part.size()) > left) part.resize(left);
        chosen.insert(chosen.end(), part.begin(), part.end());
        break;
      }
      if (chosen.size() == before) break;  // nothing more matches
    }
  }
  if (static_cast<int>(chosen.size()) < count) chosen.clear();
  return chosen;
}

size_t Inventory::ApproximateBytes() const {
  size_t bytes = sizeof(*this) + gpus_.capacity() * sizeof(Gpu);
  for (const Gpu& g : gpus_) {
    if (g.uuid.capacity() > 15) bytes += g.uuid.capacity() + 1;
    if (g.pci_bus_id.capacity() > 15) bytes += g.pci_bus_id.capacity() + 1;
    if (g.reason.capacity() > 15) bytes += g.reason.capacity() + 1;
  }
  // Hash and tree nodes: key + value + node overhead (pointers, hash, colour).
  bytes += by_uuid_.size() * (sizeof(std::string) + sizeof(GpuIndex) + 2 * sizeof(void*) + 48);
  bytes += by_host_index_.size() * (sizeof(std::pair<NameId, uint16_t>) + sizeof(GpuIndex) + 32);
  for (const PoolIndex& p : pool_index_) {
    bytes += p.idle * (sizeof(GpuIndex) + 32);
    bytes += p.racks_by_idle.size() * (sizeof(std::pair<int, NameId>) + 32);
    bytes += p.idle_by_rack.size() * (sizeof(std::set<GpuIndex>) + 32);
  }
  bytes += names_.size() * (2 * sizeof(std::string) + 48);
  bytes += hosts_.size() * (sizeof(Host) + 32);
  return bytes;
}

}  // namespace gpupool::poold
