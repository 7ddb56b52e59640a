// The job options --gpu-pool, --gpu-pool-place and --gpu-pool-mem (spank/job_request.cc,
// checked one by one at submit by spank/options.cc and together in slurmstepd, where the
// values come from the job's environment, which the user controls).
// Input: up to three lines, the values of --gpu-pool, --gpu-pool-place and --gpu-pool-mem;
// a line that is exactly "-" means the option was not given.
#include <cstdint>
#include <string>
#include <vector>

#include "spank/job_request.h"
#include "tests/fuzz/fuzz_input.h"

namespace sp = gpupool::spank;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> lines = gpupool::fuzz::SplitLines(gpupool::fuzz::AsText(data, size));
  lines.resize(3, "-");
  sp::RawOptions raw;
  raw.has_pool = lines[0] != "-";
  raw.has_place = lines[1] != "-";
  raw.has_mem = lines[2] != "-";
  if (raw.has_pool) raw.pool = lines[0];
  if (raw.has_place) raw.place = lines[1];
  if (raw.has_mem) raw.mem = lines[2];

  // At submit (options.cc Check): each value on its own.
  auto pools = sp::ParsePoolOption(raw.pool);
  (void)sp::ParsePlaceOption(raw.place);
  (void)sp::ParseMemOption(raw.mem);
  if (pools.ok()) {
    for (const sp::PoolCount& p : *pools) {
      if (p.count < 1 || p.count > sp::kMaxCountPerPool) __builtin_trap();
    }
  }

  // In slurmstepd: all three together, then the body of the acquire request.
  gpupool::Result<sp::JobRequest> request = sp::ParseJobRequest(raw);
  if (request.ok()) {
    (void)request->TotalCount();
    nlohmann::json body = sp::AcquireBody(*request, 42, 1000, "user", 0);
    (void)body.dump();
  } else if (request.status().message().empty()) {
    __builtin_trap();
  }
  return 0;
}
