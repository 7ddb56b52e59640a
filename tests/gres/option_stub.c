/*
 * option_stub.c: a stand-in SPANK plugin named "gpupool" that only registers
 * --gpu-pool=POOL:COUNT (and does nothing with it). The dev cluster loads it instead of
 * spank_gpupool.so while that is not built, so that tests/gres can drive job_submit.lua
 * through the real option path (sbatch/srun put the value into the job's spank env as
 * _SLURM_SPANK_OPTION_gpupool_gpu_pool). Test-only: never installed.
 */
#include <slurm/spank.h>

SPANK_PLUGIN(gpupool, 1);

static int accept_option(int val, const char* optarg, int remote) { return 0; }

static struct spank_option gpu_pool_option = {
    "gpu-pool", "POOL:COUNT[,...]", "stub of spank_gpupool's --gpu-pool", 1, 0, accept_option,
};

int slurm_spank_init(spank_t sp, int ac, char** av) {
  return spank_option_register(sp, &gpu_pool_option) == ESPANK_SUCCESS ? 0 : -1;
}
