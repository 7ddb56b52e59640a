// srun, sbatch and salloc (local and allocator contexts, as the user).
//
// Each option was already checked on its own by its callback; here the three are checked
// together, and so is the plugin's own configuration, so that a job that could never get
// its GPUs is refused at submit rather than failing when it starts.
#include "spank/plugin_state.h"

namespace gpupool::spank {

int SubmitInitPostOpt(spank_t sp, int ac, char** av) {
  const RawOptions& raw = State().options;
  if (!raw.any()) return 0;
  Result<JobRequest> request = ParseJobRequest(raw);
  if (!request.ok()) {
    slurm_error("gpupool: %s", request.status().message().c_str());
    return -1;
  }
  Result<PluginConfig> config = LoadPluginConfig(ac, av);
  if (!config.ok()) {
    slurm_error("gpupool: cannot use --gpu-pool: %s (ask your administrator)", config.status().message().c_str());
    return -1;
  }
  return 0;
}

}  // namespace gpupool::spank
