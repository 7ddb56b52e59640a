// Option callbacks (like pyxis's args.c): --gpu-pool, --gpu-pool-place, --gpu-pool-mem.
//
// Options are registered from slurm_spank_init in every context (a static spank_options
// table is not seen by sbatch/salloc). At submit (remote == 0) each value is checked on
// its own and a bad one fails the command; in slurmstepd (remote == 1) the value is only
// stored: step_context.cc parses all three together and fails the tasks, never the node.
//
// How a value reaches slurmstepd (Slurm 22.05, src/common/plugstack.c): srun sends it in
// the launch message, whatever --export says. A batch step gets it only from the job's
// environment, as _SLURM_SPANK_OPTION_gpupool_<opt>, which sbatch --export=NONE (or a list
// without ALL) leaves out. What survives every --export form is the copy sbatch and salloc
// keep in the job's SPANK environment and export as SLURM_SPANK__SLURM_SPANK_OPTION_...:
// every variable whose name starts with SLURM is kept (env_array_merge_slurm). That is
// the variable srun itself reads options from inside a job (spank_process_env_options),
// and ReadOptionsFromJobEnvironment reads it for a step whose callbacks did not run.
// spank_option_getopt cannot: in slurmstepd it answers from the option cache, where an
// option registered but not seen in the launch message or environment is "not given".
#include <dlfcn.h>
#include <libgen.h>

#include <cctype>
#include <cstring>
#include <string>
#include <vector>

#include "spank/plugin_state.h"

namespace gpupool::spank {
namespace {

enum OptionId { kPool = 1, kPlace = 2, kMem = 3 };

Status Check(int id, const std::string& value) {
  switch (id) {
    case kPool:
      return ParsePoolOption(value).status();
    case kPlace:
      return ParsePlaceOption(value).status();
    case kMem:
      return ParseMemOption(value).status();
  }
  return Status::Internal("unknown option id " + std::to_string(id));
}

int OnOption(int id, const char* optarg, int remote) {
  try {
    std::string value = optarg != nullptr ? optarg : "";
    if (!remote) {
      Status s = Check(id, value);
      if (!s.ok()) {
        slurm_error("gpupool: %s", s.message().c_str());
        return -1;
      }
    }
    RawOptions& o = State().options;
    switch (id) {
      case kPool:
        o.has_pool = true;
        o.pool = value;
        break;
      case kPlace:
        o.has_place = true;
        o.place = value;
        break;
      case kMem:
        o.has_mem = true;
        o.mem = value;
        break;
    }
    return 0;
  } catch (...) {
    // Only std::bad_alloc can get here (the parsers return Status). In slurmstepd a failed
    // callback must not fail the launch (the node could drain): the request fails later
    // with a message, when step_context.cc parses it.
    const char* name = id == kPool ? kOptPool : id == kPlace ? kOptPlace : kOptMem;
    slurm_error("gpupool: the value of --%s could not be stored (out of memory)", name);
    State().options.lost = name;
    return remote ? 0 : -1;
  }
}

struct spank_option g_options[] = {
    {const_cast<char*>(kOptPool), const_cast<char*>("POOL:COUNT[,POOL:COUNT...]"),
     const_cast<char*>("GPUs from gpupool's pools for this job (e.g. a100:2,h100:1)."), 1, kPool, OnOption},
    {const_cast<char*>(kOptPlace), const_cast<char*>("pack|spread|rack:NAME"),
     const_cast<char*>("Where the pool GPUs should come from: fewest racks (pack, default), "
                       "as many racks as possible (spread), or one named rack."),
     1, kPlace, OnOption},
    {const_cast<char*>(kOptMem), const_cast<char*>("SIZE"),
     const_cast<char*>("Minimum memory of each pool GPU (e.g. 40G, 81920M)."), 1, kMem, OnOption},
};

// The directory holding this plugin, for install-relative defaults.
std::string PluginDir() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&PluginDir), &info) == 0 || info.dli_fname == nullptr) {
    return ".";
  }
  std::vector<char> path(info.dli_fname, info.dli_fname + std::strlen(info.dli_fname) + 1);
  return dirname(path.data());
}

}  // namespace

PluginState& State() {
  static PluginState* state = new PluginState();  // never destroyed: callbacks may outlive statics
  return *state;
}

int RegisterOptions(spank_t sp) {
  for (struct spank_option& opt : g_options) {
    spank_err_t rc = spank_option_register(sp, &opt);
    if (rc != ESPANK_SUCCESS) {
      slurm_error("gpupool: cannot register --%s: %s", opt.name, spank_strerror(rc));
      return -1;
    }
  }
  return 0;
}

Result<PluginConfig> LoadPluginConfig(int ac, char** av) {
  std::vector<std::string> args;
  for (int i = 0; i < ac; ++i) args.emplace_back(av[i]);
  Result<PluginConfig> config = ParsePluginConfig(args);
  if (config.ok()) ApplyInstallDefaults(PluginDir(), &config.value());
  return config;
}

}  // namespace gpupool::spank

namespace gpupool::spank {

void ReadOptionsFromJobEnvironment(spank_t sp) {
  RawOptions& o = State().options;
  for (struct spank_option& opt : g_options) {
    bool seen = opt.val == kPool ? o.has_pool : opt.val == kPlace ? o.has_place : o.has_mem;
    if (seen) continue;
    // Slurm's name for the option's variable: non-alphanumerics become '_'.
    std::string name = std::string("SLURM_SPANK__SLURM_SPANK_OPTION_") + "gpupool_" + opt.name;
    for (char& c : name) {
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    }
    char value[4096];
    if (spank_getenv(sp, name.c_str(), value, sizeof(value)) != ESPANK_SUCCESS) continue;
    OnOption(opt.val, value, /*remote=*/1);
  }
}

// In the epilog (job_script context) the options are not parsed again; Slurm hands them
// over as SPANK_-prefixed variables, which spank_option_getopt reads.
bool JobAskedForPoolGpus(spank_t sp) {
  char* value = nullptr;
  return spank_option_getopt(sp, &g_options[0], &value) == ESPANK_SUCCESS;
}

}  // namespace gpupool::spank
