#include "remote/devices/cuda/cuda_kind.h"

#include "remote/devices/cuda/nvml_activity.h"

#ifdef GPUPOOL_HAVE_CUDA_DEVICE
#include "remote/devices/cuda/cuda_backend.h"
#include "remote/devices/cuda/cuda_executor.h"
#endif

namespace gpupool::devices {
namespace {

class CudaExecutors : public device::ExecutorSource {
 public:
  Result<std::unique_ptr<device::Executor>> Create(const device::GpuInfo& gpu) override {
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    return CudaExecutor::Create(gpu.uuid);
#else
    (void)gpu;
    return Status::Unavailable("this agent was built without the cuda executor");
#endif
  }

  // The driver API answers the driver's CUDA version; utilisation, temperature, power and
  // NVIDIA's driver version string come from the GPU host's NVML (nvml_activity.h), and
  // what it does not answer stays unknown (the job's NVML answers NOT_SUPPORTED).
  device::GpuActivity Activity(const device::GpuInfo& gpu) override {
    device::GpuActivity activity;
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    activity.cuda_driver_version = CudaExecutor::DriverVersion();
#endif
    nvml_.Read(gpu.uuid, &activity);
    return activity;
  }

 private:
  NvmlActivity nvml_;
};

class CudaKind : public device::DeviceKind {
 public:
  std::string name() const override { return "cuda"; }

  Result<std::unique_ptr<device::GpuBackend>> OpenBackend(const AgentConfig& config) const override {
#ifdef GPUPOOL_HAVE_CUDA_DEVICE
    return OpenCudaBackend(config);
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
