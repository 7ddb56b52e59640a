// Lease: the part of a gpupoold lease (docs/api.md "Lease") that a job's environment is
// built from, and the per-job lease file that tells running processes about swaps.
//
// ParseLease reads only the fields it needs and ignores others (gpupoold may add some);
// a missing or mistyped needed field is an error naming it. Everything but the file
// helpers is pure.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::spank {

struct LeaseGpu {
  std::string id;  // "<host>:<index>"
  std::string uuid;
  std::string pool, rack, host;
  int index = 0;         // the GPU's index on its host
  std::string endpoint;  // the agent's "HOST:PORT" that serves this GPU
};

struct Lease {
  std::string id;
  uint32_t job_id = 0;
  int64_t generation = 0;
  std::string state;  // ACTIVE or DEGRADED
  std::string token;  // lease credential for the remoting library; may be empty
  int ttl_s = 0;
  std::vector<LeaseGpu> gpus;  // device order: CUDA device i is gpus[i]
  nlohmann::json raw;          // the object as gpupoold sent it (written to the lease file)
};

Result<Lease> ParseLease(const nlohmann::json& object);

using EnvList = std::vector<std::pair<std::string, std::string>>;

// "UUID@HOST:PORT,..." in device order.
std::string GpusVariable(const Lease& lease);
// "0,1,...,N-1".
std::string VisibleDevices(size_t count);

// The variables every step of a job gets, before the profile's own.
EnvList BaseEnvironment(const Lease& lease, const std::string& server, const std::string& lease_file);

// <lease_dir>/job<ID>.json
std::string LeaseFilePath(const std::string& lease_dir, uint32_t job_id);

// Writes the lease file atomically (temp file + rename), owned by uid:gid, mode 0600
// because it holds the lease token. Creates lease_dir (0755) when missing.
Status WriteLeaseFile(const std::string& path, const Lease& lease, uid_t uid, gid_t gid);

// The generation recorded in an existing lease file; NotFound when there is none.
Result<int64_t> ReadLeaseFileGeneration(const std::string& path);

}  // namespace gpupool::spank
