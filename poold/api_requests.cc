#include "poold/api_requests.h"

#include <httplib.h>

#include <set>

#include "common/json_fields.h"

namespace gpupool::poold {

using nlohmann::json;
namespace jf = json_fields;

// Query parameter as int64, or InvalidArgument naming it.
Status QueryInt(const httplib::Request& req, const char* key, int64_t min, int64_t* out) {
  if (!req.has_param(key)) return Status::OK();
  std::string v = req.get_param_value(key);
  if (v.empty() || v.size() > 18 || v.find_first_not_of("0123456789") != std::string::npos) {
    return Status::InvalidArgument(std::string("query parameter '") + key + "' must be a number, not '" + v + "'");
  }
  *out = std::stoll(v);
  if (*out < min) return Status::InvalidArgument(std::string("query parameter '") + key + "' is too small");
  return Status::OK();
}

Status CheckQuery(const httplib::Request& req, std::initializer_list<const char*> allowed) {
  for (const auto& [key, value] : req.params) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || key == a;
    if (!ok) return Status::InvalidArgument("unknown query parameter '" + key + "'");
  }
  return Status::OK();
}

Result<AcquireRequest> ParseAcquire(const json& body, int64_t max_ttl) {
  GPUPOOL_RETURN_IF_ERROR(
      jf::CheckObject(body, {"job_id", "request", "place", "min_memory_mib", "ttl", "uid", "user", "movable"}));
  AcquireRequest r;
  GPUPOOL_RETURN_IF_ERROR(jf::GetInt(body, "job_id", true, 1, (int64_t{1} << 53), &r.job_id));
  auto it = body.find("request");
  if (it == body.end() || !it->is_array() || it->empty()) {
    return Status::InvalidArgument("field 'request' must be a non-empty list of {\"pool\":..., \"count\":...}");
  }
  if (it->size() > 64) return Status::InvalidArgument("field 'request' names more than 64 pools");
  for (const json& p : *it) {
    GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(p, {"pool", "count"}, "request entry"));
    PoolRequest pr;
    int64_t count = 0;
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(p, "pool", true, &pr.pool));
    auto c = p.find("count");
    if (c == p.end() || !c->is_number_integer()) return Status::InvalidArgument("field 'count' must be an integer");
    count = c->get<int64_t>();
    if (count <= 0) {
      return Status::InvalidArgument("count for pool '" + pr.pool + "' must be at least 1, not " +
                                     std::to_string(count));
    }
    if (count > 100000) return Status::Conflict("count for pool '" + pr.pool + "' is larger than any pool");
    pr.count = static_cast<int>(count);
    r.request.push_back(pr);
  }
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "place", false, &r.place));
  int64_t mem = 0;
  GPUPOOL_RETURN_IF_ERROR(jf::GetInt(body, "min_memory_mib", false, 0, int64_t{1} << 40, &mem));
  r.min_memory_mib = static_cast<uint64_t>(mem);
  GPUPOOL_RETURN_IF_ERROR(jf::GetInt(body, "ttl", false, 1, max_ttl, &r.ttl));
  GPUPOOL_RETURN_IF_ERROR(jf::GetBool(body, "movable", false, &r.movable));
  if (body.contains("uid")) {
    int64_t uid = 0;
    GPUPOOL_RETURN_IF_ERROR(jf::GetInt(body, "uid", true, 0, 4294967294LL, &uid));
    r.has_owner = true;
    r.uid = static_cast<uid_t>(uid);
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "user", false, &r.user));
  } else if (body.contains("user")) {
    return Status::InvalidArgument("field 'user' needs 'uid'");
  }
  return r;
}

// {"id": L} or {"job_id": N} (exactly one).
Status ParseLeaseRef(const json& body, std::initializer_list<const char*> allowed, std::string* id, int64_t* job_id) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, allowed));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "id", false, id));
  GPUPOOL_RETURN_IF_ERROR(jf::GetInt(body, "job_id", false, 1, int64_t{1} << 53, job_id));
  if (id->empty() == (*job_id == 0)) return Status::InvalidArgument("give exactly one of 'id' and 'job_id'");
  return Status::OK();
}

Status ParseAgentLost(const json& body, std::string* id, std::string* gpu) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, {"id", "gpu"}));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "id", true, id));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "gpu", true, gpu));
  if (gpu->empty() || gpu->size() > 255) {
    return Status::InvalidArgument("field 'gpu' must be a GPU uuid of at most 255 characters");
  }
  return Status::OK();
}

Result<AgentRegistration> ParseRegistration(const json& body) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, {"host", "rack", "endpoint", "gpus"}));
  AgentRegistration r;
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "host", true, &r.host));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "rack", true, &r.rack));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "endpoint", false, &r.endpoint));
  if (r.host.empty() || r.host.size() > 255 || r.host.find(':') != std::string::npos) {
    return Status::InvalidArgument("field 'host' must be a host name without ':'");
  }
  if (r.rack.empty() || r.rack.size() > 255) return Status::InvalidArgument("field 'rack' must not be empty");
  auto it = body.find("gpus");
  if (it == body.end() || !it->is_array()) return Status::InvalidArgument("field 'gpus' must be a list");
  if (it->size() > 1024) return Status::InvalidArgument("field 'gpus' lists more than 1024 GPUs");
  std::set<std::string> uuids;
  std::set<int64_t> indexes;
  for (const json& g : *it) {
    GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(
        g, {"uuid", "index", "model", "memory_mib", "pci_bus_id", "numa_node", "health", "reason"}, "gpu entry"));
    AgentGpu a;
    int64_t index = 0, mem = 0, numa = -1;
    std::string health = "OK";
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "uuid", true, &a.uuid));
    GPUPOOL_RETURN_IF_ERROR(jf::GetInt(g, "index", true, 0, 65535, &index));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "model", true, &a.model));
    GPUPOOL_RETURN_IF_ERROR(jf::GetInt(g, "memory_mib", true, 0, int64_t{1} << 40, &mem));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "pci_bus_id", false, &a.pci_bus_id));
    GPUPOOL_RETURN_IF_ERROR(jf::GetInt(g, "numa_node", false, -1, 4096, &numa));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "health", false, &health));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "reason", false, &a.reason));
    if (health != "OK" && health != "FAILED") {
      return Status::InvalidArgument("field 'health' must be OK or FAILED, not '" + health + "'");
    }
    if (a.uuid.empty() || a.uuid.size() > 128) return Status::InvalidArgument("field 'uuid' must not be empty");
    if (!uuids.insert(a.uuid).second) return Status::InvalidArgument("duplicate GPU uuid '" + a.uuid + "'");
    if (!indexes.insert(index).second) {
      return Status::InvalidArgument("duplicate GPU index " + std::to_string(index));
    }
    a.index = static_cast<int>(index);
    a.memory_mib = static_cast<uint64_t>(mem);
    a.numa_node = static_cast<int>(numa);
    a.failed = health == "FAILED";
    r.gpus.push_back(std::move(a));
  }
  return r;
}

Result<std::vector<GpuHealthReport>> ParseHeartbeat(const json& body, std::string* host,
                                                    std::vector<RecoveryReport>* recoveries,
                                                    std::vector<TenantFaultReport>* tenant_faults) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, {"host", "gpus", "recoveries", "tenant_faults"}));
  if (auto list = body.find("tenant_faults"); list != body.end()) {
    if (!list->is_array()) return Status::InvalidArgument("field 'tenant_faults' must be a list");
    if (list->size() > 1000) {
      return Status::InvalidArgument("field 'tenant_faults' has more than 1000 entries");
    }
    for (const json& e : *list) {
      GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(e, {"uuid", "lease", "how"}, "tenant fault entry"));
      TenantFaultReport r;
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "uuid", true, &r.uuid));
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "lease", true, &r.lease));
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "how", true, &r.how));
      if (r.how.size() > 128) return Status::InvalidArgument("field 'how' is longer than 128 characters");
      if (tenant_faults != nullptr) tenant_faults->push_back(std::move(r));
    }
  }
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "host", true, host));
  if (auto list = body.find("recoveries"); list != body.end()) {
    if (!list->is_array()) return Status::InvalidArgument("field 'recoveries' must be a list");
    if (list->size() > 1000) return Status::InvalidArgument("field 'recoveries' has more than 1000 entries");
    for (const json& e : *list) {
      GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(
          e, {"uuid", "lease", "from", "pause_ms", "restored_bytes", "replayed", "copied_bytes"}, "recovery entry"));
      RecoveryReport r;
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "uuid", true, &r.uuid));
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "lease", true, &r.lease));
      GPUPOOL_RETURN_IF_ERROR(jf::GetString(e, "from", true, &r.from));
      if (r.from.size() > 128) return Status::InvalidArgument("field 'from' is longer than 128 characters");
      for (auto [name, field] :
           {std::pair{"pause_ms", &r.pause_ms}, {"restored_bytes", &r.restored_bytes}, {"replayed", &r.replayed}}) {
        auto v = e.find(name);
        if (v == e.end() || !v->is_number_unsigned()) {
          return Status::InvalidArgument(std::string("recovery entry: field '") + name +
                                         "' must be a non-negative integer");
        }
        *field = v->get<uint64_t>();
      }
      // Optional (agents before handoffs do not send it).
      if (auto v = e.find("copied_bytes"); v != e.end()) {
        if (!v->is_number_unsigned()) {
          return Status::InvalidArgument("recovery entry: field 'copied_bytes' must be a non-negative integer");
        }
        r.copied_bytes = v->get<uint64_t>();
      }
      if (recoveries != nullptr) recoveries->push_back(std::move(r));
    }
  }
  std::vector<GpuHealthReport> out;
  auto it = body.find("gpus");
  if (it == body.end()) return out;
  if (!it->is_array()) return Status::InvalidArgument("field 'gpus' must be a list");
  for (const json& g : *it) {
    GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(g, {"uuid", "health", "reason"}, "gpu entry"));
    GpuHealthReport r;
    std::string health = "OK";
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "uuid", true, &r.uuid));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "health", false, &health));
    GPUPOOL_RETURN_IF_ERROR(jf::GetString(g, "reason", false, &r.reason));
    if (health != "OK" && health != "FAILED") {
      return Status::InvalidArgument("field 'health' must be OK or FAILED, not '" + health + "'");
    }
    r.failed = health == "FAILED";
    out.push_back(std::move(r));
  }
  return out;
}

Status ParseGpuUpdate(const json& body, GpuUpdate* update) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, {"gpu", "state", "reason"}));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "gpu", true, &update->gpu));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "state", true, &update->state));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "reason", false, &update->reason));
  if (update->state != "drain" && update->state != "resume" && update->state != "fail") {
    return Status::InvalidArgument("bad state '" + update->state + "' (expected drain, resume or fail)");
  }
  if (update->reason.size() > 1024) return Status::InvalidArgument("field 'reason' is longer than 1024 characters");
  return Status::OK();
}

Status ParseMigrate(const json& body, MigrateRequest* request) {
  GPUPOOL_RETURN_IF_ERROR(jf::CheckObject(body, {"lease", "gpu", "to", "reason"}));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "lease", true, &request->lease));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "gpu", false, &request->gpu));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "to", false, &request->to));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "reason", false, &request->reason));
  if (request->reason.size() > 1024) {
    return Status::InvalidArgument("field 'reason' is longer than 1024 characters");
  }
  return Status::OK();
}

Status ParseRelease(const json& body, std::string* id, int64_t* job_id, std::string* reason) {
  GPUPOOL_RETURN_IF_ERROR(ParseLeaseRef(body, {"id", "job_id", "reason"}, id, job_id));
  GPUPOOL_RETURN_IF_ERROR(jf::GetString(body, "reason", false, reason));
  if (reason->size() > 1024) return Status::InvalidArgument("field 'reason' is longer than 1024 characters");
  return Status::OK();
}

}  // namespace gpupool::poold
