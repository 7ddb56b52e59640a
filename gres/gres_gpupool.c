/*
 * gres_gpupool.c: the "gres/gpupool" Slurm GRES plugin (gres_gpupool.so).
 *
 * A node's gpupool GRES count is the number of remote pool GPUs that node can drive
 * (its NIC bandwidth and memory set the limit; the admin writes it in slurm.conf as
 * Gres=gpupool:N). There are no device files: the GPUs live in GPU hosts and are leased
 * per job by spank_gpupool from gpupoold. Capacity of the pools themselves is tracked
 * with cluster licenses (see man/gpupool-gres.8), not here.
 *
 * What the plugin adds over a count-only GRES: every job, step, task, prolog and epilog
 * on a node sees
 *     GPUPOOL_GRES_COUNT=<pool GPUs this node was allotted for it>
 * and it is unset when the job or step has none, so a step started with --gres=none
 * inside a pooled job does not inherit it. spank_gpupool checks it against the lease.
 *
 * Loaded by slurmctld, slurmd and slurmstepd (C ABI; this file is C so nothing can
 * throw). Built out of tree against the configured source of the exact installed
 * release (gres/fetch-slurm-source); Slurm refuses a GRES plugin of another release.
 */

#include <inttypes.h>
#include <stdio.h>

#include "slurm/slurm.h"
#include "slurm/slurm_errno.h"

#include "src/common/slurm_xlator.h"
#include "src/common/env.h"
#include "src/common/gres.h"
#include "src/common/list.h"
#include "src/common/xmalloc.h"
#include "src/common/xstring.h"

/*
 * Set by gres/CMakeLists.txt from `slurmd -V` at configure time: the installed release.
 * GRES plugins must match it exactly, so a source tree of another release is refused here.
 */
#if !defined(GPUPOOL_INSTALLED_SLURM) || !defined(GPUPOOL_INSTALLED_MAJOR)
#error "GPUPOOL_INSTALLED_* are not defined: build through gres/CMakeLists.txt"
#endif
#if SLURM_VERSION_NUMBER != SLURM_VERSION_NUM(GPUPOOL_INSTALLED_MAJOR, GPUPOOL_INSTALLED_MINOR, GPUPOOL_INSTALLED_MICRO)
#error "the Slurm source tree is not the installed Slurm release: rerun cmake (gres/fetch-slurm-source)"
#endif

const char plugin_name[] = "gpupool pool-GPU GRES plugin";
const char plugin_type[] = "gres/gpupool";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;

/* The variable every job, step, task, prolog and epilog environment gets. */
#define GPUPOOL_COUNT_VAR "GPUPOOL_GRES_COUNT"

/* Exported so that `strings`/tests can read which release this .so was built for. */
const char gpupool_gres_built_for[] = "gpupool gres built for Slurm " SLURM_VERSION_STRING;

/* Writes or clears GPUPOOL_GRES_COUNT in *env_ptr. */
static void set_count_env(char*** env_ptr, uint64_t count) {
  char value[32];

  if (!env_ptr) return;
  if (count == 0) {
    unsetenvp(*env_ptr, GPUPOOL_COUNT_VAR);
    return;
  }
  snprintf(value, sizeof(value), "%" PRIu64, count);
  env_array_overwrite(env_ptr, GPUPOOL_COUNT_VAR, value);
}

extern int init(void) {
  /* The release check a loader cannot miss: in the daemon's own log. */
  if (xstrcmp(SLURM_VERSION_STRING, GPUPOOL_INSTALLED_SLURM) || (plugin_version != SLURM_VERSION_NUMBER)) {
    error("%s: built for Slurm %s, refusing to run under another release", plugin_type, SLURM_VERSION_STRING);
    return SLURM_ERROR;
  }
  info("%s: loaded, built for Slurm %s", plugin_type, SLURM_VERSION_STRING);
  return SLURM_SUCCESS;
}

extern int fini(void) { return SLURM_SUCCESS; }

/*
 * Nothing to discover: the count comes from slurm.conf/gres.conf and there are no
 * device files. A File= line for gpupool would be a configuration mistake.
 */
extern int gres_p_node_config_load(List gres_conf_list, node_config_load_t* config) {
  ListIterator iter;
  gres_slurmd_conf_t* conf;
  int rc = SLURM_SUCCESS;

  if (!gres_conf_list) return SLURM_SUCCESS;
  iter = list_iterator_create(gres_conf_list);
  while ((conf = list_next(iter))) {
    if (xstrcmp(conf->name, "gpupool")) continue;
    if (conf->file) {
      error("%s: gres.conf gives File=%s for gpupool; pool GPUs are remote and have no device files", plugin_type,
            conf->file);
      rc = SLURM_ERROR;
    }
  }
  list_iterator_destroy(iter);
  return rc;
}

extern void gres_p_job_set_env(char*** job_env_ptr, bitstr_t* gres_bit_alloc, uint64_t gres_cnt,
                               gres_internal_flags_t flags) {
  set_count_env(job_env_ptr, gres_cnt);
}

extern void gres_p_step_set_env(char*** step_env_ptr, bitstr_t* gres_bit_alloc, uint64_t gres_cnt,
                                gres_internal_flags_t flags) {
  set_count_env(step_env_ptr, gres_cnt);
}

/* Every task of a step may drive all of the step's pool GPUs: same count per task. */
extern void gres_p_task_set_env(char*** step_env_ptr, bitstr_t* gres_bit_alloc, uint64_t gres_cnt,
                                bitstr_t* usable_gres, gres_internal_flags_t flags) {
  set_count_env(step_env_ptr, gres_cnt);
}

/* No per-node device state to hand from slurmd to slurmstepd. */
extern void gres_p_send_stepd(buf_t* buffer) {}

extern void gres_p_recv_stepd(buf_t* buffer) {}

extern int gres_p_get_job_info(gres_job_state_t* gres_js, uint32_t node_inx, enum gres_job_data_type data_type,
                               void* data) {
  return EINVAL;
}

extern int gres_p_get_step_info(gres_step_state_t* gres_ss, uint32_t node_inx, enum gres_step_data_type data_type,
                                void* data) {
  return EINVAL;
}

extern List gres_p_get_devices(void) { return NULL; }

extern void gres_p_step_hardware_init(bitstr_t* usable_gres, char* settings) {}

extern void gres_p_step_hardware_fini(void) {}

/* Copies the per-node counts; Slurm frees the record (and sets plugin_id, node_list). */
extern gres_epilog_info_t* gres_p_epilog_build_env(gres_job_state_t* gres_js) {
  gres_epilog_info_t* gres_ei;
  uint32_t i;

  if (!gres_js || !gres_js->gres_cnt_node_alloc || !gres_js->node_cnt) return NULL;
  gres_ei = xmalloc(sizeof(*gres_ei));
  gres_ei->node_cnt = gres_js->node_cnt;
  gres_ei->gres_cnt_node_alloc = xcalloc(gres_ei->node_cnt, sizeof(uint64_t));
  for (i = 0; i < gres_ei->node_cnt; i++) gres_ei->gres_cnt_node_alloc[i] = gres_js->gres_cnt_node_alloc[i];
  return gres_ei;
}

extern void gres_p_epilog_set_env(char*** epilog_env_ptr, gres_epilog_info_t* gres_ei, int node_inx) {
  if (!gres_ei || !gres_ei->gres_cnt_node_alloc || node_inx < 0 || (uint32_t)node_inx >= gres_ei->node_cnt) return;
  set_count_env(epilog_env_ptr, gres_ei->gres_cnt_node_alloc[node_inx]);
}
