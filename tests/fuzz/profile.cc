// Remoting profiles (spank/profile.cc): parsed, then rendered for a two-GPU lease as a
// job step's environment is.
// Input: the profile's text.
#include <cstdint>
#include <string>

#include "spank/profile.h"
#include "tests/fuzz/fuzz_input.h"

namespace sp = gpupool::spank;

namespace {

sp::Lease TwoGpuLease() {
  sp::Lease lease;
  lease.id = "L-fuzz";
  lease.job_id = 42;
  lease.generation = 3;
  lease.state = "ACTIVE";
  lease.token = "t0k3n";
  lease.ttl_s = 600;
  for (int i = 0; i < 2; ++i) {
    sp::LeaseGpu gpu;
    gpu.host = "gpuhost" + std::to_string(i);
    gpu.index = i;
    gpu.id = gpu.host + ":" + std::to_string(i);
    gpu.uuid = "GPU-0000000" + std::to_string(i);
    gpu.pool = "a100";
    gpu.rack = "r1";
    gpu.endpoint = gpu.host + ":7100";
    lease.gpus.push_back(gpu);
  }
  return lease;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const sp::Lease lease = TwoGpuLease();
  gpupool::Result<sp::Profile> profile =
      sp::ParseProfile(std::string(gpupool::fuzz::AsText(data, size)), "fuzz.profile");
  if (!profile.ok()) {
    if (profile.status().message().empty()) __builtin_trap();
    return 0;
  }
  sp::ProfileContext context;
  context.lease = &lease;
  context.job_id = 42;
  context.lib_dir = "/usr/lib/gpupool/remoting";
  context.lease_file = "/run/gpupool/job42.json";
  context.server = "http://127.0.0.1:6830";
  context.current = [](const std::string& name) { return name == "PATH" ? "/usr/bin" : ""; };
  (void)sp::RenderProfile(*profile, context);
  return 0;
}
