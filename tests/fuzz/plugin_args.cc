// plugstack.conf arguments of spank_gpupool (spank/plugin_config.cc), which every SPANK
// context parses from the argv Slurm hands it. Input: one argument per line.
#include <cstdint>
#include <string>
#include <vector>

#include "spank/plugin_config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = gpupool::fuzz::SplitLines(gpupool::fuzz::AsText(data, size));
  gpupool::Result<gpupool::spank::PluginConfig> config = gpupool::spank::ParsePluginConfig(args);
  if (!config.ok()) {
    if (config.status().message().empty()) __builtin_trap();
    return 0;
  }
  // What the plugin does next with them.
  gpupool::spank::ApplyInstallDefaults("/usr/lib/slurm", &config.value());
  (void)gpupool::spank::ProfilePath(config.value());
  return 0;
}
