// slurmstepd spank epilog (job_script context, root, once per node at job end).
//
// The epilog runs on every path a job can end by (normal end, scancel, time limit, failed
// job, a job whose lease never came), so release happens here. It always returns 0: a
// failing epilog of a required plugin drains the node. If gpupoold cannot be reached the
// lease stays until gpupoold's reaper finds the job gone (or its TTL runs out), and the
// slurmd log says so. Releasing is idempotent, so every node of the job may ask.
#include <glob.h>
#include <unistd.h>

#include <string>

#include "spank/lease_service.h"
#include "spank/plugin_state.h"

namespace gpupool::spank {

bool JobAskedForPoolGpus(spank_t sp);  // options.cc

namespace {

void RemoveJobFiles(const std::string& lease_dir, uint32_t job_id) {
  std::string prefix = lease_dir + "/job" + std::to_string(job_id);
  unlink((prefix + ".json").c_str());
  glob_t g;
  if (glob((prefix + ".*.lock").c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) unlink(g.gl_pathv[i]);
  }
  globfree(&g);
}

}  // namespace

int JobEpilog(spank_t sp, int ac, char** av) {
  if (!JobAskedForPoolGpus(sp)) return 0;
  uint32_t job_id = 0;
  if (spank_get_item(sp, S_JOB_ID, &job_id) != ESPANK_SUCCESS) {
    slurm_error("gpupool: epilog: cannot read the job id");
    return 0;
  }
  Result<PluginConfig> config = LoadPluginConfig(ac, av);
  if (!config.ok()) {
    slurm_error("gpupool: epilog of job %u: %s", job_id, config.status().message().c_str());
    return 0;
  }
  LeaseService service(*config);
  Status released = service.Release(job_id);
  if (!released.ok()) {
    slurm_error(
        "gpupool: epilog of job %u: cannot release its lease (gpupoold reaps it "
        "later): %s",
        job_id, released.message().c_str());
  } else {
    slurm_verbose("gpupool: epilog of job %u: lease released", job_id);
  }
  RemoveJobFiles(config->lease_dir, job_id);
  return 0;
}

}  // namespace gpupool::spank
