// gpupoolctl's command line (poold/ctl/args.cc), then the API request it turns into
// (poold/ctl/request.cc). Input: one argument per line.
#include <cstdint>
#include <string>
#include <vector>

#include "poold/ctl/args.h"
#include "poold/ctl/request.h"
#include "tests/fuzz/fuzz_input.h"

namespace ctl = gpupool::ctl;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args = gpupool::fuzz::SplitLines(gpupool::fuzz::AsText(data, size));
  gpupool::Result<ctl::CtlArgs> parsed = ctl::ParseArgs(args);
  if (!parsed.ok()) {
    if (parsed.status().message().empty()) __builtin_trap();
    return 0;
  }
  if (parsed->verb != ctl::Verb::kHelp && parsed->verb != ctl::Verb::kVersion) {
    ctl::ApiRequest request = ctl::BuildRequest(*parsed);
    // Whatever the user typed, the path stays one request to gpupoold's API.
    if (request.path.rfind("/v1/", 0) != 0) __builtin_trap();
    for (char c : request.path) {
      if (c == ' ' || c == '\r' || c == '\n' || c == '#') __builtin_trap();
    }
    if (request.post) (void)request.body.dump();
  }
  return 0;
}
