#include "remote/agentd/lease_table.h"

namespace gpupool::agentd {
namespace {

bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  // The length is not secret (tokens have a fixed length); the contents are.
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

bool SameGrant(const LeaseGrant& a, const LeaseGrant& b) {
  return a.gpu_uuid == b.gpu_uuid && a.lease_id == b.lease_id && a.token == b.token && a.generation == b.generation &&
         a.moved_from == b.moved_from;
}

}  // namespace

Result<std::vector<LeaseGrant>> ParseLeaseGrants(const nlohmann::json& answer) {
  std::vector<LeaseGrant> grants;
  if (!answer.is_object() || !answer.contains("leases")) return grants;
  const nlohmann::json& leases = answer["leases"];
  if (!leases.is_array()) return Status::InvalidArgument("heartbeat answer: 'leases' is not an array");
  for (size_t i = 0; i < leases.size(); ++i) {
    const nlohmann::json& e = leases[i];
    std::string where = "heartbeat answer: leases[" + std::to_string(i) + "]";
    if (!e.is_object()) return Status::InvalidArgument(where + " is not an object");
    for (const char* key : {"gpu", "lease", "token"}) {
      if (!e.contains(key) || !e[key].is_string() || e[key].get<std::string>().empty()) {
        return Status::InvalidArgument(where + ": '" + key + "' must be a non-empty string");
      }
    }
    LeaseGrant g;
    g.gpu_uuid = e["gpu"].get<std::string>();
    g.lease_id = e["lease"].get<std::string>();
    g.token = e["token"].get<std::string>();
    if (e.contains("generation")) {
      if (!e["generation"].is_number_unsigned()) {
        return Status::InvalidArgument(where + ": 'generation' must be a non-negative integer");
      }
      g.generation = e["generation"].get<uint64_t>();
    }
    if (e.contains("moved_from")) {
      if (!e["moved_from"].is_string()) {
        return Status::InvalidArgument(where + ": 'moved_from' must be a string");
      }
      g.moved_from = e["moved_from"].get<std::string>();
    }
    grants.push_back(std::move(g));
  }
  return grants;
}

Result<std::set<std::string>> ParseFailedGpus(const nlohmann::json& answer) {
  std::set<std::string> failed;
  if (!answer.is_object() || !answer.contains("failed")) return failed;
  const nlohmann::json& list = answer["failed"];
  if (!list.is_array()) return Status::InvalidArgument("heartbeat answer: 'failed' is not an array");
  for (const nlohmann::json& uuid : list) {
    if (!uuid.is_string()) {
      return Status::InvalidArgument("heartbeat answer: 'failed' must list GPU uuids");
    }
    failed.insert(uuid.get<std::string>());
  }
  return failed;
}

void LeaseTable::SetFailed(std::set<std::string> uuids) {
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = std::move(uuids);
}

std::string LeaseTable::MovedFrom(const std::string& gpu_uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = by_gpu_.find(gpu_uuid);
  return it == by_gpu_.end() ? std::string() : it->second.moved_from;
}

bool LeaseTable::Failed(const std::string& gpu_uuid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_.count(gpu_uuid) != 0;
}

void LeaseTable::Replace(const std::vector<LeaseGrant>& grants) {
  std::unordered_map<std::string, LeaseGrant> next;
  for (const LeaseGrant& g : grants) next[g.gpu_uuid] = g;
  std::lock_guard<std::mutex> l(mu_);
  bool changed = next.size() != by_gpu_.size();
  for (auto it = next.begin(); !changed && it != next.end(); ++it) {
    auto old = by_gpu_.find(it->first);
    changed = old == by_gpu_.end() || !SameGrant(old->second, it->second);
  }
  if (!changed) return;
  by_gpu_ = std::move(next);
  version_.fetch_add(1, std::memory_order_release);
}

bool LeaseTable::Authorize(const std::string& lease_id, const std::string& token, const std::string& gpu_uuid,
                           uint64_t* generation) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_gpu_.find(gpu_uuid);
  if (it == by_gpu_.end() || token.empty()) return false;
  // Both comparisons always run, so timing does not say which one failed.
  bool lease_ok = it->second.lease_id == lease_id;
  bool token_ok = ConstantTimeEquals(it->second.token, token);
  if (!(lease_ok && token_ok)) return false;
  if (generation != nullptr) *generation = it->second.generation;
  return true;
}

bool LeaseTable::Find(const std::string& gpu_uuid, LeaseGrant* out) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = by_gpu_.find(gpu_uuid);
  if (it == by_gpu_.end()) return false;
  if (out != nullptr) *out = it->second;
  return true;
}

std::vector<LeaseGrant> LeaseTable::Snapshot() const {
  std::lock_guard<std::mutex> l(mu_);
  std::vector<LeaseGrant> out;
  for (const auto& [uuid, grant] : by_gpu_) out.push_back(grant);
  return out;
}

size_t LeaseTable::size() const {
  std::lock_guard<std::mutex> l(mu_);
  return by_gpu_.size();
}

}  // namespace gpupool::agentd
