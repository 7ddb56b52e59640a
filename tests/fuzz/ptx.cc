// PTX text as the sim GPU's engine reads it (remote/ptx): a job's module image reaches the
// agent over the wire, and the agent parses its PTX and decodes each kernel before the
// first launch. The input is the PTX text; every kernel it declares is decoded with its
// module variables at made-up addresses. Kernels are not run (a fuzzed kernel may loop
// for ever, as a real one may); what decoding accepts, the executor runs with the checks
// that the engine tests cover. Variables' initial values are filled in (addresses).
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "remote/ptx/ptx_engine.h"
#include "tests/fuzz/fuzz_input.h"

// A text with several `.version` directives is several translation units (a program built
// with -rdc=true), linked into one module as the agent links them.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text = gpupool::fuzz::AsText(data, size);
  std::vector<std::string_view> units;
  for (size_t start = 0; start < text.size();) {
    size_t next = text.find(".version", start + 1);
    if (next == std::string_view::npos) next = text.size();
    units.push_back(text.substr(start, next - start));
    start = next;
  }
  if (units.empty()) units.push_back(text);
  auto module = gpupool::sim::PtxModule::ParseLinked(units);
  if (!module.ok()) return 0;
  std::map<std::string, uint64_t> addresses;
  uint64_t next = 0x7f0000000000;
  for (const gpupool::sim::ModuleVariable& variable : (*module)->variables()) {
    addresses[variable.name] = next;
    next += (variable.size + 255) / 256 * 256 + 256;
  }
  for (const gpupool::sim::ModuleVariable& variable : (*module)->variables()) {
    (void)(*module)->InitialBytes(variable, addresses);
  }
  for (const std::string& name : (*module)->KernelNames()) {
    (void)(*module)->Decode(name, addresses);
  }
  return 0;
}
