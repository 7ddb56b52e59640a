// LeaseService: the three gpupoold calls a job makes (acquire, renew, release), with
// answers turned into a Lease and errors into one line a user can act on.
//
// Not thread-safe (one ApiClient, one keep-alive connection): each thread that talks to
// gpupoold owns its own LeaseService.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "common/api_client.h"
#include "common/status.h"
#include "spank/lease.h"
#include "spank/plugin_config.h"

namespace gpupool::spank {

class LeaseService {
 public:
  explicit LeaseService(const PluginConfig& config);

  // POST /v1/leases. Idempotent per job: every step on every node of a job gets the same
  // lease. `created` (may be null) tells whether this call made it. While gpupoold cannot
  // be reached (Unavailable: a restart, a failover) the call is repeated for up to the
  // config's retry_s; being idempotent, a repeat after a lost answer returns the lease.
  Result<Lease> Acquire(const nlohmann::json& body, bool* created);
  // POST /v1/leases/renew {"job_id":N}: extends the TTL and returns the lease as it is now
  // (a swap shows as a higher generation). NotFound when the job holds no lease.
  Result<Lease> Renew(uint32_t job_id);
  // POST /v1/leases/release {"job_id":N}. A job that holds no lease is not an error.
  Status Release(uint32_t job_id);

 private:
  std::unique_ptr<ApiClient> client_;
  int retry_s_;
};

}  // namespace gpupool::spank
