// Inventory: every pool GPU gpupoold knows, grouped pools → racks → hosts → GPUs, with the
// index that placement needs (idle GPUs per pool and rack, racks ordered by idle count).
//
// Not thread-safe: PoolEngine owns the Inventory and guards it with its mutex.
// GPUs are never removed (a GPU that disappears stays as UNREACHABLE), so a GpuIndex is
// stable for the daemon's lifetime.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/config.h"

namespace gpupool::poold {

enum class GpuState : uint8_t { kIdle, kLeased, kDraining, kDrained, kFailed, kUnreachable };
const char* GpuStateName(GpuState state);
bool ParseGpuState(const std::string& name, GpuState* out);

using GpuIndex = uint32_t;
using NameId = uint32_t;  // an interned string (rack, host, model, pool)
inline constexpr uint32_t kNone = UINT32_MAX;

struct Gpu {
  std::string uuid;
  std::string pci_bus_id;
  std::string reason;  // why FAILED/DRAINED/UNREACHABLE; empty otherwise
  uint64_t memory_mib = 0;
  uint64_t lease = 0;  // lease number holding it, 0 = none
  NameId host = kNone;
  NameId rack = kNone;
  NameId model = kNone;
  uint32_t pool = kNone;  // index into pools(); kNone = in no pool
  uint16_t index = 0;     // host-local index
  int16_t numa_node = -1;
  GpuState state = GpuState::kIdle;
  bool admin_drain = false;  // admin asked drain; cleared by resume
  bool admin_fail = false;   // admin set state=fail; cleared by resume
};

struct Host {
  NameId name = kNone;
  NameId rack = kNone;
  std::string endpoint;   // data-path address served to jobs
  int64_t last_seen = 0;  // unix seconds of the last register/heartbeat
  bool reachable = true;
  std::vector<GpuIndex> gpus;  // by host-local index order of registration
};

// Counts per state for one pool.
struct PoolCounts {
  int total = 0, idle = 0, leased = 0, draining = 0, drained = 0, failed = 0, unreachable = 0;
  int usable() const { return total - failed - drained - unreachable - draining; }
};

class Inventory {
 public:
  explicit Inventory(std::vector<PoolConfig> pools = {}, std::vector<GpuAssignment> assignments = {});

  // Interning of names (racks, hosts, models).
  NameId Intern(const std::string& name);
  const std::string& Name(NameId id) const { return names_[id]; }
  NameId FindName(const std::string& name) const;  // kNone if never seen

  // Pools from the config, in config order.
  const std::vector<PoolConfig>& pools() const { return pools_; }
  uint32_t FindPool(const std::string& name) const;  // kNone if unknown
  PoolCounts Counts(uint32_t pool) const;            // O(GPUs): for listings and metrics
  int Total(uint32_t pool) const { return pool < pool_total_.size() ? pool_total_[pool] : 0; }  // O(1)

  // Adds a GPU (new uuid) or returns the existing one's index. The caller sets its state
  // through SetState so that the idle index stays right.
  GpuIndex AddGpu(Gpu gpu);
  GpuIndex FindGpu(const std::string& id_or_uuid) const;  // "host:index" or uuid; kNone
  Gpu& gpu(GpuIndex i) { return gpus_[i]; }
  const Gpu& gpu(GpuIndex i) const { return gpus_[i]; }
  size_t gpu_count() const { return gpus_.size(); }
  std::string GpuId(GpuIndex i) const;  // "host:index"

  // Every state change goes through here: keeps the per-pool idle index in step.
  void SetState(GpuIndex i, GpuState state);

  // Which pool a GPU with these attributes belongs to (assignments first, then selectors).
  uint32_t PoolFor(const std::string& uuid, const std::string& gpu_id, const std::string& model,
                   const std::string& rack, const std::string& host, uint64_t memory_mib) const;

  Host* FindHost(NameId name);
  const Host* FindHost(NameId name) const;
  Host& UpsertHost(NameId name);
  std::vector<Host*> AllHosts();

  // Placement over idle GPUs of `pool`. Returns the chosen GPUs or an empty vector when
  // not enough idle GPUs match. `rack` != kNone restricts to that rack. `prefer_rack` is
  // tried first (swaps keep a job in the same rack). pack = fewest racks, best fit.
  enum class Spread { kPack, kSpread };
  std::vector<GpuIndex> Place(uint32_t pool, int count, Spread spread, NameId rack, uint64_t min_memory_mib,
                              NameId prefer_rack) const;

  // Number of idle GPUs in `pool` (any rack).
  int IdleCount(uint32_t pool) const;

  // Bytes the inventory uses, approximately (for the memory benchmark and metrics).
  size_t ApproximateBytes() const;

 private:
  struct PoolIndex {
    std::unordered_map<NameId, std::set<GpuIndex>> idle_by_rack;
    std::set<std::pair<int, NameId>> racks_by_idle;  // (idle count, rack), racks with idle > 0
    int idle = 0;
  };
  void AddIdle(GpuIndex i);
  void RemoveIdle(GpuIndex i);
  // Appends up to `want` idle GPUs of `rack` with enough memory to `out`.
  void TakeFromRack(const PoolIndex& index, NameId rack, int want, uint64_t min_memory_mib,
                    std::vector<GpuIndex>* out) const;

  std::vector<PoolConfig> pools_;
  std::vector<GpuAssignment> assignments_;
  std::vector<PoolIndex> pool_index_;
  std::vector<int> pool_total_;  // GPUs per pool, any state
  std::vector<std::string> names_;
  std::unordered_map<std::string, NameId> name_ids_;
  std::vector<Gpu> gpus_;
  std::unordered_map<std::string, GpuIndex> by_uuid_;
  std::map<std::pair<NameId, uint16_t>, GpuIndex> by_host_index_;
  std::unordered_map<NameId, Host> hosts_;
};

}  // namespace gpupool::poold
