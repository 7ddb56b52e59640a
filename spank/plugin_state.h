// PluginState: what spank_gpupool remembers between the callbacks of one process.
//
// Slurm loads the plugin once per process (srun, sbatch, salloc, each slurmstepd) and
// calls its callbacks from one thread, so the state is a process-wide singleton. The only
// other thread is the LeaseWatcher, which owns its own copy of what it needs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "spank/job_request.h"
#include "spank/lease_watcher.h"
#include "spank/plugin_config.h"
#include "spank_abi.h"

namespace gpupool::spank {

struct PluginState {
  RawOptions options;  // filled by the option callbacks (options.cc)

  // slurmstepd only. A non-empty step_error means the job asked for pool GPUs and did
  // not get them: every task of the step prints it and exits 1 (see step_context.cc).
  std::string step_error;
  std::unique_ptr<LeaseWatcher> watcher;
};

PluginState& State();

// The plugstack.conf arguments of this plugin, parsed, with install-relative defaults.
Result<PluginConfig> LoadPluginConfig(int ac, char** av);

// Option table and callbacks (options.cc).
int RegisterOptions(spank_t sp);
// slurmstepd: fills the options Slurm did not hand to the callbacks from the job's
// environment (sbatch --export=NONE; see options.cc).
void ReadOptionsFromJobEnvironment(spank_t sp);

// One function per context and callback; each returns a SPANK rc (0 or -1).
int SubmitInitPostOpt(spank_t sp, int ac, char** av);        // srun, sbatch, salloc
int StepInitPostOpt(spank_t sp, int ac, char** av);          // slurmstepd, root
void StepTaskInitPrivileged(spank_t sp, int ac, char** av);  // slurmstepd, task, root
int StepTaskInit(spank_t sp);                                // slurmstepd, task, the user
int StepExit(spank_t sp);                                    // slurmstepd, root
int JobEpilog(spank_t sp, int ac, char** av);                // slurmstepd spank epilog, root

}  // namespace gpupool::spank
