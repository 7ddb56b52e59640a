// The API's request parsers (docs/api.md): query strings and JSON bodies into the engine's
// request structs. Strict: an unknown field or query parameter, a wrong type or an
// out-of-range value is InvalidArgument naming it. Pure (no engine, no I/O), so the fuzz
// targets (tests/fuzz/api_request.cc) call them exactly as ApiServer's routes do.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"
#include "poold/pool_engine.h"

namespace httplib {
struct Request;
}  // namespace httplib

namespace gpupool::poold {

// Query parameter `key` as a decimal number >= min; *out unchanged when absent.
Status QueryInt(const httplib::Request& req, const char* key, int64_t min, int64_t* out);
// Every query parameter of `req` must be in `allowed`.
Status CheckQuery(const httplib::Request& req, std::initializer_list<const char*> allowed);

// POST /v1/leases.
Result<AcquireRequest> ParseAcquire(const nlohmann::json& body, int64_t max_ttl);
// {"id": L} or {"job_id": N} (exactly one); POST /v1/leases/renew.
Status ParseLeaseRef(const nlohmann::json& body, std::initializer_list<const char*> allowed, std::string* id,
                     int64_t* job_id);
// POST /v1/leases/release: a lease reference and an optional reason.
Status ParseRelease(const nlohmann::json& body, std::string* id, int64_t* job_id, std::string* reason);
// POST /v1/leases/agent-lost: {"id": L, "gpu": UUID}, both required.
Status ParseAgentLost(const nlohmann::json& body, std::string* id, std::string* gpu);
// POST /v1/agents/register.
Result<AgentRegistration> ParseRegistration(const nlohmann::json& body);
// POST /v1/agents/heartbeat.
// `recoveries` (optional): the heartbeat's "recoveries" list; `tenant_faults` (optional):
// its "tenant_faults" list.
Result<std::vector<GpuHealthReport>> ParseHeartbeat(const nlohmann::json& body, std::string* host,
                                                    std::vector<RecoveryReport>* recoveries = nullptr,
                                                    std::vector<TenantFaultReport>* tenant_faults = nullptr);

// POST /v1/gpus/update.
struct GpuUpdate {
  std::string gpu;
  std::string state;  // drain, resume or fail
  std::string reason;
};
Status ParseGpuUpdate(const nlohmann::json& body, GpuUpdate* update);

// POST /v1/leases/migrate {"lease":"L7","gpu":"g1:0","to":"g3:1","reason":"..."}: lease
// required; gpu, to and reason optional.
struct MigrateRequest {
  std::string lease, gpu, to, reason;
};
Status ParseMigrate(const nlohmann::json& body, MigrateRequest* request);

}  // namespace gpupool::poold
