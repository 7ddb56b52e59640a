#include "remote/devices/cuda/cuda_kind.h"

#ifdef GPUPOOL_HAVE_CUDA_DEVICE
#include "remote/devices/cuda/cuda_backend.h"
#include "remote/devices/cuda/cuda_executor.h"
#endif

namespace gpupool::devices {
namespace {

class CudaExecutors : public device::ExecutorSource {
 public:
  Result<std::unique_ptr<dataplane::Executor>> Create(const backend::GpuInfo& gpu) override {
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    return dataplane::CudaExecutor::Create(gpu.uuid);
#else
    (void)gpu;
    return Status::Unavailable("this agent was built without the cuda executor");
#endif
  }

  // The driver API answers the driver's CUDA version, and nothing of utilisation,
  // temperature or power; the GPU host's NVML would, but this executor does not ask it
  // yet: those figures stay unknown (the job's NVML answers NOT_SUPPORTED), never guessed.
  device::GpuActivity Activity(const backend::GpuInfo& /*gpu*/) override {
    device::GpuActivity activity;
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    activity.cuda_driver_version = dataplane::CudaExecutor::DriverVersion();
#endif
    activity.why_not =
        "the cuda executor reads no utilisation, temperature, power or driver version "
        "string: the driver API has none, and the GPU host's NVML is not asked yet";
    return activity;
  }
};

class CudaKind : public device::DeviceKind {
 public:
  std::string name() const override { return "cuda"; }

  Result<std::unique_ptr<backend::GpuBackend>> OpenBackend(const AgentConfig& config) const override {
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    return backend::OpenCudaBackend(config);
#else
    (void)config;
    return Status::InvalidArgument("backend 'cuda' is not built into this gpupool-agentd (no cuda.h at build time)");
#endif
  }

  std::unique_ptr<device::ExecutorSource> NewExecutorSource() const override {
    return std::make_unique<CudaExecutors>();
  }
};

}  // namespace

std::unique_ptr<device::DeviceKind> MakeCudaKind() { return std::make_unique<CudaKind>(); }

}  // namespace gpupool::devices
