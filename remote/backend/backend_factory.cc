#include "remote/backend/backend_factory.h"

#include <unistd.h>

#include "remote/sim/sim_backend.h"
#include "remote/backend/topology.h"
#ifdef GPUPOOL_HAVE_CUDA_BACKEND
#include "remote/backend/cuda_backend.h"
#endif

namespace gpupool::backend {

Result<std::unique_ptr<GpuBackend>> MakeBackend(const std::string& name, const AgentConfig& config) {
  if (name == "sim") {
    std::string host = config.host;
    if (host.empty()) {
      char buf[256] = {};
      gethostname(buf, sizeof(buf) - 1);
      host = buf;
    }
    int numa_nodes = Topology::Load(/*with_pci=*/false)->NumaNodeCount();
    Result<std::unique_ptr<SimBackend>> sim = SimBackend::Create(host, config.sim_gpus, numa_nodes);
    if (!sim.ok()) return sim.status();
    return std::unique_ptr<GpuBackend>(std::move(sim.value()));
  }
  if (name == "cuda") {
#ifdef GPUPOOL_HAVE_CUDA_BACKEND
    return OpenCudaBackend(config);
#else
    return Status::InvalidArgument("backend 'cuda' is not built into this gpupool-agentd (no cuda.h at build time)");
#endif
  }
  return Status::InvalidArgument("unknown backend '" + name + "' (expected sim or cuda)");
}

}  // namespace gpupool::backend
