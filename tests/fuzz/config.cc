// gpupool.conf: the loader every daemon and tool runs at start (common/config.cc).
// Input: the file's text. Half the inputs go through LoadConfig (a path, as the daemons
// read it), the other half through ParseConfig (text); both must only ever return a
// Status. ParseMemoryMib and IsValidName get the text too: the --gpu-pool-mem and name
// rules share them.
#include <cstdint>
#include <string>

#include "common/config.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpupool::fuzz::MemFile file;
  std::string text(gpupool::fuzz::AsText(data, size));
  gpupool::Result<gpupool::Config> config =
      (size % 2 == 0) ? gpupool::LoadConfig(file.Write(text)) : gpupool::ParseConfig(text, "fuzz.conf");
  if (config.ok()) {
    // What the daemons do next with a loaded config: look pools up by name.
    for (const gpupool::PoolConfig& pool : config->pools) {
      if (!gpupool::IsValidName(pool.name)) __builtin_trap();
    }
  } else if (config.status().message().empty()) {
    __builtin_trap();  // every error must say what is wrong
  }
  (void)gpupool::ParseMemoryMib(text);
  (void)gpupool::IsValidName(text);
  return 0;
}
