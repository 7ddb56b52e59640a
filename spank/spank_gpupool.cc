// spank_gpupool: the SPANK plugin that gives Slurm jobs GPUs from gpupool's pools.
//
// This file holds only SPANK_PLUGIN() and the dispatch: each callback switches on
// spank_context() to the file that owns that context, so a reader knows at once which code
// runs where:
//   options.cc             option table and callbacks (every context)
//   submit_context.cc      srun, sbatch, salloc (as the user): reject bad options at submit
//   step_context.cc        slurmstepd (every step): lease, environment, lease watcher
//   job_script_context.cc  slurmstepd spank epilog (root): release at job end
//
// gpupool never drains a node: the callbacks that run in slurmstepd outside a task
// (init, init_post_opt, exit, job_epilog) always return 0, because a failure there drains
// the node or requeues the job held. A job whose lease failed is ended from task_init,
// which fails the job and nothing else. No C++ exception crosses into Slurm.
#include <exception>

#include "spank/plugin_state.h"

extern "C" {
SPANK_PLUGIN(gpupool, 1)
}

namespace {

using gpupool::spank::State;

// Runs `body`, turning any exception into a log line and `on_error`.
template <typename F>
int Guard(const char* callback, int on_error, F body) {
  try {
    return body();
  } catch (const std::exception& e) {
    slurm_error("gpupool: %s: %s", callback, e.what());
  } catch (...) {
    slurm_error("gpupool: %s: unknown exception", callback);
  }
  return on_error;
}

bool InSubmitCommand() {
  spank_context_t c = spank_context();
  return c == S_CTX_LOCAL || c == S_CTX_ALLOCATOR;
}

}  // namespace

extern "C" {

int slurm_spank_init(spank_t sp, int ac, char** av) {
  spank_context_t c = spank_context();
  if (c != S_CTX_LOCAL && c != S_CTX_ALLOCATOR && c != S_CTX_REMOTE) return 0;
  // In slurmstepd a failed init would drain the node: log and carry on; the step then
  // simply sees no --gpu-pool option.
  int on_error = InSubmitCommand() ? -1 : 0;
  return Guard("init", on_error, [&] {
    int rc = gpupool::spank::RegisterOptions(sp);
    return rc == 0 ? 0 : on_error;
  });
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char** av) {
  switch (spank_context()) {
    case S_CTX_LOCAL:
    case S_CTX_ALLOCATOR:
      return Guard("init_post_opt", -1, [&] { return gpupool::spank::SubmitInitPostOpt(sp, ac, av); });
    case S_CTX_REMOTE:
      return Guard("init_post_opt", 0, [&] {
        gpupool::spank::StepInitPostOpt(sp, ac, av);
        return 0;
      });
    default:
      return 0;
  }
}

// In the task's process, as root, before Slurm drops to the job's user. Never fails the
// task: what it opens is an optimisation the library does without.
int slurm_spank_task_init_privileged(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return Guard("task_init_privileged", 0, [&] {
    gpupool::spank::StepTaskInitPrivileged(sp, ac, av);
    return 0;
  });
}

int slurm_spank_task_init(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return Guard("task_init", -1, [&] { return gpupool::spank::StepTaskInit(sp); });
}

int slurm_spank_exit(spank_t sp, int ac, char** av) {
  if (spank_context() != S_CTX_REMOTE) return 0;
  return Guard("exit", 0, [&] {
    gpupool::spank::StepExit(sp);
    return 0;
  });
}

int slurm_spank_job_epilog(spank_t sp, int ac, char** av) {
  return Guard("job_epilog", 0, [&] {
    gpupool::spank::JobEpilog(sp, ac, av);
    return 0;
  });
}

}  // extern "C"
