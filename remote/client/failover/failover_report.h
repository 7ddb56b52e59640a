// Tells gpupoold at once that this process lost its connection to the agent of one of its
// lease's GPUs (POST /v1/leases/agent-lost, docs/api.md), so that gpupoold probes that
// agent and, when it does not answer, swaps the GPU without waiting for the agent's
// heartbeats to stop for unreachable_timeout. Authenticated with the lease's token
// (GPUPOOL_LEASE_TOKEN): a job's process has no MUNGE credential at hand.
//
// A small HTTP/1.1 client of its own: the remoting library links no HTTP library, and this
// one request (a few hundred bytes each way, Connection: close) is all it sends gpupoold.
#pragma once

#include <chrono>
#include <string>

#include <nlohmann/json.hpp>

#include "remote/client/failover/failover.h"

namespace gpupool::client {

struct LostAgentReporter {
  std::string servers;  // GPUPOOL_SERVER: "http://host:port" or "host:port", comma separated
  std::string lease_id, token;
  std::chrono::milliseconds timeout{3000};  // per server: connect, send and answer

  // From GPUPOOL_SERVER, GPUPOOL_LEASE_ID and GPUPOOL_LEASE_TOKEN; false when one is unset
  // (a process outside a pooled job: nobody to tell).
  static bool FromEnvironment(LostAgentReporter* reporter);

  // Reports `lost` (the GPU whose agent this process lost); on gpupoold's answer fills
  // *answer ({"probe", "agent_lost", "lease"}) and returns true. The servers are tried in
  // order until one answers 200; false with *why naming what each said otherwise.
  bool Report(const GpuLocation& lost, nlohmann::json* answer, std::string* why) const;
};

// Entry `slot` of the "gpus" array of a lease object (the lease file's, or gpupoold's
// answer's "lease"); false when it has no such entry with a uuid and an endpoint.
bool LeaseSlot(const nlohmann::json& lease, int slot, GpuLocation* location);

}  // namespace gpupool::client
