// gpupoold's API requests (poold/api_requests.cc): the query string and the JSON body of
// every route, parsed into the engine's request structs exactly as ApiServer's routes do
// before they reach the engine. Anyone who can connect may send these (authentication
// comes first in the server, but a body is parsed for every authenticated user).
//
// Input: a request line "METHOD /path?query", a newline, then the body. The path and query
// are split and decoded as cpp-httplib does for the server.
#include <httplib.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "common/json_fields.h"
#include "poold/api_requests.h"
#include "tests/fuzz/fuzz_input.h"

namespace pd = gpupool::poold;
using nlohmann::json;

namespace {

constexpr int64_t kMaxLeaseTtl = 7 * 24 * 3600;

void Check(bool invariant) {
  if (!invariant) __builtin_trap();
}

// An error must say what is wrong.
void CheckError(const gpupool::Status& status) {
  if (!status.ok()) Check(!status.message().empty());
}

gpupool::Status Body(const httplib::Request& req, const std::string& path) {
  gpupool::Result<json> body = gpupool::json_fields::Parse(req.body);
  if (!body.ok()) return body.status();
  if (path == "/v1/leases") {
    gpupool::Result<pd::AcquireRequest> acquire = pd::ParseAcquire(*body, kMaxLeaseTtl);
    if (acquire.ok()) {
      Check(acquire->job_id >= 1 && !acquire->request.empty() && acquire->request.size() <= 64);
      for (const pd::PoolRequest& p : acquire->request) Check(p.count >= 1 && p.count <= 100000);
      Check(acquire->ttl == 0 || (acquire->ttl >= 1 && acquire->ttl <= kMaxLeaseTtl));
    }
    return acquire.status();
  }
  if (path == "/v1/leases/renew") {
    std::string id;
    int64_t job = 0;
    gpupool::Status s = pd::ParseLeaseRef(*body, {"id", "job_id"}, &id, &job);
    if (s.ok()) Check(id.empty() != (job == 0));
    return s;
  }
  if (path == "/v1/leases/release") {
    std::string id, reason;
    int64_t job = 0;
    gpupool::Status s = pd::ParseRelease(*body, &id, &job, &reason);
    if (s.ok()) Check(id.empty() != (job == 0) && reason.size() <= 1024);
    return s;
  }
  if (path == "/v1/gpus/update") {
    pd::GpuUpdate update;
    gpupool::Status s = pd::ParseGpuUpdate(*body, &update);
    if (s.ok()) Check(update.state == "drain" || update.state == "resume" || update.state == "fail");
    return s;
  }
  if (path == "/v1/agents/register") {
    gpupool::Result<pd::AgentRegistration> reg = pd::ParseRegistration(*body);
    if (reg.ok()) {
      Check(!reg->host.empty() && reg->host.find(':') == std::string::npos);
      Check(reg->gpus.size() <= 1024);
      for (const pd::AgentGpu& g : reg->gpus) Check(!g.uuid.empty() && g.index >= 0 && g.index <= 65535);
    }
    return reg.status();
  }
  if (path == "/v1/agents/heartbeat") {
    std::string host;
    return pd::ParseHeartbeat(*body, &host).status();
  }
  return gpupool::Status::NotFound("no such endpoint");
}

gpupool::Status Query(const httplib::Request& req, const std::string& path) {
  if (path == "/v1/pools") return pd::CheckQuery(req, {"name"});
  if (path == "/v1/gpus") return pd::CheckQuery(req, {"id", "pool"});
  if (path == "/v1/leases") {
    GPUPOOL_RETURN_IF_ERROR(pd::CheckQuery(req, {"job", "id"}));
    int64_t job = 0;
    GPUPOOL_RETURN_IF_ERROR(pd::QueryInt(req, "job", 1, &job));
    Check(job == 0 || job >= 1);
    return gpupool::Status::OK();
  }
  if (path == "/v1/events") {
    GPUPOOL_RETURN_IF_ERROR(pd::CheckQuery(req, {"gpu", "job", "since", "limit"}));
    int64_t job = 0, since = 0, limit = 1000;
    GPUPOOL_RETURN_IF_ERROR(pd::QueryInt(req, "job", 1, &job));
    GPUPOOL_RETURN_IF_ERROR(pd::QueryInt(req, "since", 0, &since));
    GPUPOOL_RETURN_IF_ERROR(pd::QueryInt(req, "limit", 1, &limit));
    Check(since >= 0 && limit >= 1);
    return gpupool::Status::OK();
  }
  return gpupool::Status::NotFound("no such endpoint");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text = gpupool::fuzz::AsText(data, size);
  size_t newline = text.find('\n');
  std::string_view line = text.substr(0, newline);
  httplib::Request req;
  if (newline != std::string_view::npos) req.body = std::string(text.substr(newline + 1));
  size_t space = line.find(' ');
  if (space == std::string_view::npos) return 0;
  req.method = std::string(line.substr(0, space));
  std::string target(line.substr(space + 1));
  size_t question = target.find('?');
  req.path = httplib::detail::decode_url(target.substr(0, question), false);
  if (question != std::string::npos) {
    httplib::detail::parse_query_text(target.substr(question + 1), req.params);
  }
  if (req.method == "POST") {
    CheckError(Body(req, req.path));
  } else if (req.method == "GET") {
    CheckError(Query(req, req.path));
  }
  return 0;
}
