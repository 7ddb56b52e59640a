// Leases as the SPANK plugin reads them (spank/lease.cc): the lease object of gpupoold's
// answers (ParseLease, then the job environment built from it) and the per-job lease file
// in the node's lease directory (ReadLeaseFileGeneration, by path).
// Input: JSON text, used both as a lease object and as a lease file's content.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "spank/lease.h"
#include "tests/fuzz/fuzz_input.h"

namespace sp = gpupool::spank;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static gpupool::fuzz::MemFile file;
  std::string_view text = gpupool::fuzz::AsText(data, size);
  (void)sp::ReadLeaseFileGeneration(file.Write(text));

  nlohmann::json object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (object.is_discarded()) return 0;
  gpupool::Result<sp::Lease> lease = sp::ParseLease(object);
  if (!lease.ok()) {
    if (lease.status().message().empty()) __builtin_trap();
    return 0;
  }
  (void)sp::GpusVariable(*lease);
  (void)sp::VisibleDevices(lease->gpus.size());
  sp::EnvList env =
      sp::BaseEnvironment(*lease, "http://127.0.0.1:6830", sp::LeaseFilePath("/run/gpupool", lease->job_id));
  for (const auto& [name, value] : env) {
    if (name.empty()) __builtin_trap();
  }
  return 0;
}
