// PTX text as the sim GPU's engine reads it (remote/sim): a job's module image reaches the
// agent over the wire, and the agent parses its PTX and decodes each kernel before the
// first launch. The input is the PTX text; every kernel it declares is decoded with its
// module variables at made-up addresses. Kernels are not run (a fuzzed kernel may loop
// for ever, as a real one may); what decoding accepts, the executor runs with the checks
// that the engine tests cover.
#include <cstdint>
#include <map>
#include <string>

#include "remote/sim/ptx_engine.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto module = gpupool::sim::PtxModule::Parse(gpupool::fuzz::AsText(data, size));
  if (!module.ok()) return 0;
  std::map<std::string, uint64_t> addresses;
  uint64_t next = 0x7f0000000000;
  for (const gpupool::sim::ModuleVariable& variable : (*module)->variables()) {
    addresses[variable.name] = next;
    next += (variable.size + 255) / 256 * 256 + 256;
  }
  for (const std::string& name : (*module)->KernelNames()) {
    (void)(*module)->Decode(name, addresses);
  }
  return 0;
}
