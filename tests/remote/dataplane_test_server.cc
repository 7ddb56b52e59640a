// gpupool-dataplane-testd: a dataplane server with one fixed lease, for the CUDA program
// tests and the benchmark (the real agent is gpupool-agentd).
//
//   gpupool-dataplane-testd --listen HOST:PORT --lease ID --token HEX [--gpus N]
//                           [--memory-mib M] [--backend sim|cuda] [--model NAME]
// --model: the simulated GPUs' model (default A100-SXM4-80GB); a known one
// (common/gpu_models.h) sets their compute capability and SM count.
// --backend sim (default): N simulated GPUs (TestBackend); cuda: the machine's own GPUs
// through the agent's cuda backend (scripts/test --gpu), all of them, N ignored.
// Prints "gpu INDEX UUID" for each GPU, then "listening on PORT" once ready; runs until
// SIGTERM/SIGINT. SIGUSR1: the lease
// moved away (as gpupool-agentd learns from gpupoold when a lease is migrated or a GPU
// drained): every session is revoked (CUDA_ERROR_NOT_PERMITTED) and no hello succeeds.
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/log.h"
#include "remote/dataplane/server.h"
#include "remote/device/device_kind.h"
#include "remote/worker/device_kinds.h"
#include "tests/remote/test_backend.h"

namespace {

volatile std::sig_atomic_t stop = 0;
void OnSignal(int) { stop = 1; }
std::atomic<bool> moved_away{false};  // lock-free: set from a signal handler
void OnMovedAway(int) { moved_away = true; }

int Usage(const char* problem) {
  std::fprintf(stderr,
               "gpupool-dataplane-testd: %s\nusage: gpupool-dataplane-testd --listen "
               "HOST:PORT --lease ID --token HEX [--gpus N] [--memory-mib M] [--backend sim|cuda]\n"
               "       [--model NAME]\n",
               problem);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  gpupool::log::SetProgramName("gpupool-dataplane-testd");
  std::string listen, lease, token, backend_name = "sim", model = "A100-SXM4-80GB";
  int gpus = 1;
  long memory_mib = 16384;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (arg == "--listen" && (v = value()))
      listen = v;
    else if (arg == "--lease" && (v = value()))
      lease = v;
    else if (arg == "--token" && (v = value()))
      token = v;
    else if (arg == "--gpus" && (v = value()))
      gpus = std::atoi(v);
    else if (arg == "--memory-mib" && (v = value()))
      memory_mib = std::atol(v);
    else if (arg == "--backend" && (v = value()))
      backend_name = v;
    else if (arg == "--model" && (v = value()))
      model = v;
    else
      return Usage(("unknown or incomplete option '" + arg + "'").c_str());
  }
  if (listen.empty() || lease.empty() || token.empty()) return Usage("--listen, --lease and --token are required");
  if (gpus < 1 || memory_mib < 1) return Usage("--gpus and --memory-mib must be positive");
  if (backend_name != "sim" && backend_name != "cuda") {
    return Usage(("--backend '" + backend_name + "': expected sim or cuda").c_str());
  }

  gpupool::worker::RegisterDeviceKinds();  // this server stands in for the agent
  std::unique_ptr<gpupool::device::GpuBackend> backend;
  if (backend_name == "sim") {
    backend = std::make_unique<gpupool::testing::TestBackend>(gpus, static_cast<uint64_t>(memory_mib) << 20, model);
  } else {
    auto made = gpupool::device::OpenBackend("cuda", gpupool::AgentConfig{});
    if (!made.ok()) {
      std::fprintf(stderr, "gpupool-dataplane-testd: %s\n", made.status().message().c_str());
      return 1;
    }
    backend = std::move(made.value());
  }
  const std::vector<gpupool::device::GpuInfo> inventory = backend->Discover();
  if (inventory.empty()) {
    std::fprintf(stderr, "gpupool-dataplane-testd: the %s backend found no GPU\n", backend_name.c_str());
    return 1;
  }
  for (const auto& gpu : inventory) std::printf("gpu %d %s\n", gpu.index, gpu.uuid.c_str());
  gpupool::dataplane::ServerOptions options;
  options.listen = listen;
  options.backend = backend.get();
  options.authorize = [&](const std::string& l, const std::string& t, const std::string&) {
    return !moved_away && l == lease && t == token;
  };
  options.authorization_epoch = [] { return moved_away ? uint64_t{1} : uint64_t{0}; };
  auto server = gpupool::dataplane::Server::Start(options);
  if (!server.ok()) {
    std::fprintf(stderr, "gpupool-dataplane-testd: %s\n", server.status().message().c_str());
    return 1;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGUSR1, OnMovedAway);
  std::printf("listening on %d\n", server.value()->port());
  std::fflush(stdout);
  while (!stop) pause();
  return 0;
}
