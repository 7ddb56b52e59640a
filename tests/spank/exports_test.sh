#!/bin/bash
# The plugin exports only what Slurm looks up (plugin_*, spank_plugin_version,
# slurm_spank_*; in an ASan build also __asan_default_options, common/asan_defaults.c) and does not link libslurm (which would load a second, conflicting copy
# of Slurm's library into srun/sbatch/slurmstepd).
set -euo pipefail
so=$1
[[ -f $so ]] || { echo "no plugin at $so"; exit 1; }
bad=$(nm -D --defined-only "$so" | awk '{print $3}' \
  | grep -Ev '^(plugin_name|plugin_type|plugin_version|spank_plugin_version|slurm_spank_[a-z_]+|__asan_default_options)$' || true)
if [[ -n $bad ]]; then
  echo "unexpected exported symbols:"; echo "$bad"; exit 1
fi
for sym in plugin_name plugin_type plugin_version spank_plugin_version slurm_spank_init \
    slurm_spank_init_post_opt slurm_spank_task_init slurm_spank_exit slurm_spank_job_epilog; do
  nm -D --defined-only "$so" | awk '{print $3}' | grep -x "$sym" >/dev/null || { echo "missing $sym"; exit 1; }
done
if ldd "$so" | grep -q 'libslurm'; then
  echo "plugin links libslurm:"; ldd "$so" | grep libslurm; exit 1
fi
# plugin_type must be "spank" for Slurm to accept it.
strings -a "$so" | grep -x spank >/dev/null || { echo "plugin_type 'spank' not found"; exit 1; }
echo "ok: exports and links as a SPANK plugin"
