// SlurmJobs: asks slurmctld (through libslurm) whether a job has ended, so that gpupoold
// can reap leases left behind by jobs whose node crashed or whose epilog never ran.
//
// Thread safety: call from one thread (the reaper).
#pragma once

#include <cstdint>
#include <string>

namespace gpupool::poold {

class SlurmJobs {
 public:
  enum class JobState { kRunning, kEnded, kUnknown };  // kUnknown: slurmctld did not answer

  // Returns false (with *why) when libslurm cannot be used here: no slurm.conf.
  bool Init(std::string* why);
  JobState Query(int64_t job_id);

 private:
  bool initialised_ = false;
};

}  // namespace gpupool::poold
