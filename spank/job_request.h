// JobRequest: what a job asked for with --gpu-pool, --gpu-pool-place and --gpu-pool-mem.
//
// The parsers are pure functions shared by every context: sbatch/salloc/srun reject a
// malformed value at submit, and slurmstepd parses the same text again (the options reach
// it through the job's environment, which a user could edit) before it asks for a lease.
// Every error names the option and says what is wrong with the value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace gpupool::spank {

inline constexpr char kOptPool[] = "gpu-pool";
inline constexpr char kOptPlace[] = "gpu-pool-place";
inline constexpr char kOptMem[] = "gpu-pool-mem";

// More than this many GPUs in one request is certainly a typo.
inline constexpr int kMaxCountPerPool = 4096;

struct PoolCount {
  std::string pool;
  int count = 0;
};

struct JobRequest {
  std::vector<PoolCount> pools;  // empty: the job asked for no pool GPUs
  std::string place = "pack";    // "pack", "spread" or "rack:NAME"
  uint64_t min_memory_mib = 0;   // per GPU
  int TotalCount() const;
};

// --gpu-pool=POOL:COUNT[,POOL:COUNT...]
Result<std::vector<PoolCount>> ParsePoolOption(const std::string& value);
// --gpu-pool-place=pack|spread|rack:NAME
Result<std::string> ParsePlaceOption(const std::string& value);
// --gpu-pool-mem=SIZE (M, G or T; plain numbers are MiB)
Result<uint64_t> ParseMemOption(const std::string& value);

// The raw option values as Slurm hands them over; an empty optional means "not given".
struct RawOptions {
  bool has_pool = false, has_place = false, has_mem = false;
  std::string pool, place, mem;
  // Set when an option's value could not be stored (options.cc): the request then fails
  // with it rather than running the job without the GPUs it asked for.
  const char* lost = nullptr;
  bool any() const { return has_pool || has_place || has_mem || lost != nullptr; }
};

// Parses all three together and checks that they fit (place/mem need --gpu-pool).
Result<JobRequest> ParseJobRequest(const RawOptions& raw);

// The body of POST /v1/leases (docs/api.md). uid/user name the job's owner: the
// plugin acquires as root on the owner's behalf. ttl 0 leaves gpupoold's default.
// movable: the job's processes follow a move of its GPUs (ProcessesFollowMoves).
nlohmann::json AcquireBody(const JobRequest& request, uint32_t job_id, uint32_t uid, const std::string& user, int ttl_s,
                           bool movable = false);

}  // namespace gpupool::spank
