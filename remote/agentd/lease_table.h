// LeaseTable: which lease may use which of this host's GPUs, as gpupoold last said.
//
// The agent replaces the whole table from each heartbeat answer ("leases" in
// POST /v1/agents/heartbeat); the data path calls Authorize() when a client connects,
// presenting the lease id and token from its job's environment. A GPU that gpupoold moved
// to another lease (swap) or released disappears at the next heartbeat. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::agentd {

struct LeaseGrant {
  std::string gpu_uuid;
  std::string lease_id;
  std::string token;
  uint64_t generation = 0;
  // The data endpoint of the agent whose GPU this lease held before it moved here; a
  // handoff may pull only from there ("" : none).
  std::string moved_from = {};
};

// Reads the heartbeat answer's "leases" array ([{"gpu","lease","token","generation"}]).
// A missing array is an empty table; a malformed entry is an error naming it.
Result<std::vector<LeaseGrant>> ParseLeaseGrants(const nlohmann::json& heartbeat_answer);
// Reads the heartbeat answer's "failed" array (uuids of this host's GPUs gpupoold holds
// FAILED). A missing array is none; anything but strings is an error.
Result<std::set<std::string>> ParseFailedGpus(const nlohmann::json& heartbeat_answer);

class LeaseTable {
 public:
  // Replaces the table. A GPU listed twice keeps its last entry.
  void Replace(const std::vector<LeaseGrant>& grants);

  // True when `gpu_uuid` is leased to `lease_id` and `token` matches; sets *generation
  // (if non-null) to the lease's generation. Tokens are compared in constant time.
  bool Authorize(const std::string& lease_id, const std::string& token, const std::string& gpu_uuid,
                 uint64_t* generation) const;

  // The lease holding `gpu_uuid`, if any (token included: callers must not expose it).
  bool Find(const std::string& gpu_uuid, LeaseGrant* out) const;
  std::vector<LeaseGrant> Snapshot() const;
  // The GPUs gpupoold holds FAILED (set before the Replace of the same heartbeat, so that a
  // session revoked by that Replace sees it).
  void SetFailed(std::set<std::string> uuids);
  bool Failed(const std::string& gpu_uuid) const;
  // The endpoint of the agent the lease holding `gpu_uuid` moved from ("" : none known).
  std::string MovedFrom(const std::string& gpu_uuid) const;
  size_t size() const;
  // Incremented by every Replace() that changed something; lets the data path notice
  // revoked leases cheaply (lock-free: read on every data-path request).
  uint64_t version() const { return version_.load(std::memory_order_acquire); }

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, LeaseGrant> by_gpu_;  // guarded by mu_
  std::set<std::string> failed_;                        // guarded by mu_
  // Bumped after by_gpu_ changed (under mu_): a reader that sees the new version finds
  // the new table.
  std::atomic<uint64_t> version_{0};
};

}  // namespace gpupool::agentd
