#include "spank/job_request.h"

#include <cerrno>
#include <cstdlib>
#include <set>

#include "common/config.h"
#include "common/split.h"

namespace gpupool::spank {
namespace {

Status Bad(const char* option, const std::string& what) {
  return Status::InvalidArgument(std::string("--") + option + ": " + what);
}

}  // namespace

int JobRequest::TotalCount() const {
  int total = 0;
  for (const PoolCount& p : pools) total += p.count;
  return total;
}

Result<std::vector<PoolCount>> ParsePoolOption(const std::string& value) {
  if (value.empty()) return Bad(kOptPool, "empty value (expected POOL:COUNT[,POOL:COUNT...])");
  std::vector<PoolCount> out;
  std::set<std::string> seen;
  for (const std::string& item : Split(value, ',')) {
    if (item.empty()) return Bad(kOptPool, "empty entry in '" + value + "'");
    size_t colon = item.find(':');
    if (colon == std::string::npos) {
      return Bad(kOptPool, "'" + item + "' has no count (expected POOL:COUNT, e.g. a100:2)");
    }
    PoolCount pc;
    pc.pool = item.substr(0, colon);
    std::string count = item.substr(colon + 1);
    if (pc.pool.empty()) return Bad(kOptPool, "'" + item + "' has no pool name");
    if (!IsValidName(pc.pool)) {
      return Bad(kOptPool, "bad pool name '" + pc.pool + "' (letters, digits, '_', '-', '.')");
    }
    if (count.empty()) return Bad(kOptPool, "'" + item + "' has no count");
    errno = 0;
    char* end = nullptr;
    long n = std::strtol(count.c_str(), &end, 10);
    if (errno != 0 || *end != '\0' || !(count[0] >= '0' && count[0] <= '9')) {
      return Bad(kOptPool, "count '" + count + "' of pool '" + pc.pool + "' is not a number");
    }
    if (n <= 0) return Bad(kOptPool, "count of pool '" + pc.pool + "' must be at least 1");
    if (n > kMaxCountPerPool) {
      return Bad(kOptPool,
                 "count " + count + " of pool '" + pc.pool + "' is larger than " + std::to_string(kMaxCountPerPool));
    }
    if (!seen.insert(pc.pool).second) {
      return Bad(kOptPool, "pool '" + pc.pool + "' is named twice");
    }
    pc.count = static_cast<int>(n);
    out.push_back(pc);
  }
  return out;
}

Result<std::string> ParsePlaceOption(const std::string& value) {
  if (value == "pack" || value == "spread") return value;
  if (value.rfind("rack:", 0) == 0) {
    std::string rack = value.substr(5);
    if (rack.empty()) return Bad(kOptPlace, "'rack:' needs a rack name (rack:NAME)");
    if (!IsValidName(rack)) return Bad(kOptPlace, "bad rack name '" + rack + "'");
    return value;
  }
  if (value.empty()) return Bad(kOptPlace, "empty value (expected pack, spread or rack:NAME)");
  return Bad(kOptPlace, "'" + value + "' is not pack, spread or rack:NAME");
}

Result<uint64_t> ParseMemOption(const std::string& value) {
  Result<uint64_t> mib = ParseMemoryMib(value);
  if (!mib.ok()) return Bad(kOptMem, mib.status().message());
  if (*mib == 0) return Bad(kOptMem, "size must be larger than 0");
  return mib;
}

Result<JobRequest> ParseJobRequest(const RawOptions& raw) {
  JobRequest request;
  if (raw.lost != nullptr) {
    return Status::Internal(std::string("the value of --") + raw.lost + " was lost (out of memory)");
  }
  if (!raw.has_pool) {
    if (raw.has_place) return Bad(kOptPlace, "needs --gpu-pool=POOL:COUNT");
    if (raw.has_mem) return Bad(kOptMem, "needs --gpu-pool=POOL:COUNT");
    return request;
  }
  Result<std::vector<PoolCount>> pools = ParsePoolOption(raw.pool);
  if (!pools.ok()) return pools.status();
  request.pools = *pools;
  if (raw.has_place) {
    Result<std::string> place = ParsePlaceOption(raw.place);
    if (!place.ok()) return place.status();
    request.place = *place;
  }
  if (raw.has_mem) {
    Result<uint64_t> mem = ParseMemOption(raw.mem);
    if (!mem.ok()) return mem.status();
    request.min_memory_mib = *mem;
  }
  return request;
}

nlohmann::json AcquireBody(const JobRequest& request, uint32_t job_id, uint32_t uid, const std::string& user, int ttl_s,
                           bool movable) {
  nlohmann::json pools = nlohmann::json::array();
  for (const PoolCount& p : request.pools) pools.push_back({{"pool", p.pool}, {"count", p.count}});
  nlohmann::json body = {
      {"job_id", job_id}, {"request", pools}, {"place", request.place}, {"min_memory_mib", request.min_memory_mib},
      {"uid", uid},       {"user", user}};
  if (ttl_s > 0) body["ttl"] = ttl_s;
  if (movable) body["movable"] = true;
  return body;
}

}  // namespace gpupool::spank
