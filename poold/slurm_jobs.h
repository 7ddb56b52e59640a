// SlurmJobs: asks slurmctld (through libslurm) whether a job has ended, so that gpupoold
// can reap leases left behind by jobs whose node crashed or whose epilog never ran, and
// who owns a job, so that a user can acquire only for their own jobs.
//
// Thread safety: Init once, before other calls; Query and Owner may then be called from
// any thread (each call is one RPC to slurmctld; libslurm keeps no shared state for them).
#pragma once

#include <cstdint>
#include <sys/types.h>

#include <map>
#include <string>

#include "common/status.h"

namespace gpupool::poold {

// Who owns a live Slurm job, whether it runs now (running, suspended or completing; a
// pending job does not), and the licences it holds as slurmctld writes them
// ("gpupool_a100:2,other:1"; empty: none; a running job's licences are allocated).
struct SlurmJobOwner {
  uid_t uid = 0;
  bool running = false;
  std::string licenses;
};

// The gpupool_<pool> licences in Slurm's licence list `licenses` (items NAME[@SERVER][:COUNT],
// comma separated; COUNT 1 when absent): pool → count. Other licences are left out.
// InvalidArgument names an item whose count is not a number from 0 to 2^31-1.
Result<std::map<std::string, int64_t>> PoolLicenses(const std::string& licenses);

class SlurmJobs {
 public:
  enum class JobState { kRunning, kEnded, kUnknown };  // kUnknown: slurmctld did not answer

  // Returns false (with *why) when libslurm cannot be used here: no slurm.conf.
  bool Init(std::string* why);
  JobState Query(int64_t job_id);
  // The owner of a pending, running, suspended or completing job, and whether it runs (all
  // but pending). NotFound: no such job, or it has ended; Unavailable: slurmctld did not
  // answer.
  Result<SlurmJobOwner> Owner(int64_t job_id);

 private:
  bool initialised_ = false;
};

}  // namespace gpupool::poold
