#include "remote/nvml/pool_gpus.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "common/split.h"
#include "remote/transport/rpc_client_module.h"

namespace gpupool::nvml {

// LoadTransport and VisibleGpus's parsing are copies of remote/client/core/runtime.cc's
// (LoadTransport, Runtime::Connect), some 30 lines: the client's core/ is an OBJECT library
// of libcuda.so.1, with its logger, not a library this one can link. nvml_query checks
// that the two libraries still pick the same GPUs in the same order; once the client's
// core is a library of its own, this file should call it instead.
namespace {

// The transport module beside this library (libcuda.so.1 loads the same file the same way,
// so a process that uses both loads it once); empty when this library cannot locate itself.
std::string TransportPath() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&TransportPath), &self) == 0 || self.dli_fname == nullptr) {
    return "";
  }
  std::string path = self.dli_fname;
  size_t slash = path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" + kGpupoolUcxModuleName;
}

GpupoolUcxConnectFunction LoadTransport(std::string* why) {
  std::string path = TransportPath();
  if (path.empty()) {
    *why = "cannot locate libnvidia-ml.so.1 itself";
    return nullptr;
  }
  transport::SetInjectedLibraryUcxDefaults();
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) {
    *why = std::string("cannot load ") + dlerror();
    return nullptr;
  }
  auto connect = reinterpret_cast<GpupoolUcxConnectFunction>(dlsym(module, "gpupool_ucx_connect"));
  if (connect == nullptr) *why = path + " has no gpupool_ucx_connect";
  return connect;
}

void CopyString(char* to, size_t capacity, const char* from) {
  std::snprintf(to, capacity, "%s", from != nullptr ? from : "");
}

// Opens the GPU's session: the handshake presents the lease (the module reads it from the
// environment), Hello names the GPU and answers its description.
OpenError OpenSession(GpupoolUcxConnectFunction connect, PoolGpu* gpu, std::string* why) {
  char error[512] = "";
  std::string target = gpu->uuid + "@" + gpu->endpoint;  // the GPU's own lane at the agent
  std::unique_ptr<transport::ClientConnection> session(connect(target.c_str(), error, sizeof(error)));
  if (session == nullptr) {
    std::string reason = error;
    if (reason.rfind(kRefusedPrefix, 0) == 0) {
      *why = "GPU " + gpu->uuid + " at " + gpu->endpoint +
             " refused this process: " + reason.substr(sizeof(kRefusedPrefix) - 1);
      return OpenError::kRefused;
    }
    *why = "GPU " + gpu->uuid + " at " + gpu->endpoint + ": " + reason;
    return OpenError::kTransport;
  }
  dataplane::HelloArgs hello;
  CopyString(hello.lease_id, sizeof(hello.lease_id), std::getenv("GPUPOOL_LEASE_ID"));
  CopyString(hello.token, sizeof(hello.token), std::getenv("GPUPOOL_LEASE_TOKEN"));
  CopyString(hello.gpu_uuid, sizeof(hello.gpu_uuid), gpu->uuid.c_str());
  hello.flags = dataplane::kHelloMonitorOnly;  // NVML watches: not one of the GPU's processes
  transport::Request request;
  request.op = dataplane::kOpHello;
  request.args = &hello;
  request.args_len = sizeof(hello);
  transport::Reply reply;
  Status status = session->Call(request, &reply);
  if (!status.ok()) {
    *why = "GPU " + gpu->uuid + " at " + gpu->endpoint + ": " + status.message();
    return OpenError::kTransport;
  }
  if (reply.status != dataplane::kCuSuccess) {
    *why = "GPU " + gpu->uuid + " at " + gpu->endpoint + " refused this process: " + reply.out;
    return OpenError::kRefused;
  }
  if (reply.out.size() != sizeof(dataplane::DeviceDescription)) {
    *why = "GPU " + gpu->uuid + ": malformed answer from " + gpu->endpoint;
    return OpenError::kTransport;
  }
  std::memcpy(&gpu->description, reply.out.data(), sizeof(gpu->description));
  gpu->description.uuid[sizeof(gpu->description.uuid) - 1] = '\0';
  gpu->description.name[sizeof(gpu->description.name) - 1] = '\0';
  gpu->description.pci_bus_id[sizeof(gpu->description.pci_bus_id) - 1] = '\0';
  unsigned function = 0;
  if (std::sscanf(gpu->description.pci_bus_id, "%x:%x:%x.%x", &gpu->pci_domain, &gpu->pci_bus, &gpu->pci_device,
                  &function) != 4) {
    gpu->pci_domain = gpu->pci_bus = gpu->pci_device = 0;
  }
  gpu->session = std::move(session);
  return OpenError::kNone;
}

}  // namespace

bool VisibleGpus(const char* gpupool_gpus, const char* cuda_visible_devices,
                 std::vector<std::pair<std::string, std::string>>* visible, std::string* why) {
  visible->clear();
  if (gpupool_gpus == nullptr || gpupool_gpus[0] == '\0') {
    *why =
        "GPUPOOL_GPUS is not set: this process has no leased GPUs "
        "(run it in a job with --gpu-pool)";
    return false;
  }
  std::vector<std::pair<std::string, std::string>> leased;
  for (const std::string& entry : SplitNonEmpty(gpupool_gpus, ',')) {
    size_t at = entry.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == entry.size()) {
      *why = "GPUPOOL_GPUS entry '" + entry + "' is not UUID@HOST:PORT";
      return false;
    }
    leased.emplace_back(entry.substr(0, at), entry.substr(at + 1));
  }
  // The same selection as libcuda.so.1's: indices into the lease, up to the first item
  // that is not one (CUDA stops at an invalid entry too).
  if (cuda_visible_devices != nullptr) {
    for (const std::string& item : SplitNonEmpty(cuda_visible_devices, ',')) {
      char* end = nullptr;
      long index = std::strtol(item.c_str(), &end, 10);
      if (*end != '\0' || index < 0 || index >= static_cast<long>(leased.size())) break;
      visible->push_back(leased[index]);
    }
  } else {
    *visible = leased;
  }
  if (visible->empty()) {
    *why = "CUDA_VISIBLE_DEVICES='" + std::string(cuda_visible_devices ? cuda_visible_devices : "") +
           "' selects none of the " + std::to_string(leased.size()) + " leased GPUs";
    return false;
  }
  return true;
}

OpenError PoolGpus::Open(std::string* why) {
  Close();
  std::vector<std::pair<std::string, std::string>> visible;
  if (!VisibleGpus(std::getenv("GPUPOOL_GPUS"), std::getenv("CUDA_VISIBLE_DEVICES"), &visible, why)) {
    return std::getenv("GPUPOOL_GPUS") == nullptr ? OpenError::kNoGpus : OpenError::kBadEnvironment;
  }
  static GpupoolUcxConnectFunction connect = nullptr;
  static std::string load_error;
  static std::once_flag loaded;
  std::call_once(loaded, [] { connect = LoadTransport(&load_error); });
  if (connect == nullptr) {
    *why = load_error;
    return OpenError::kTransport;
  }
  std::vector<std::unique_ptr<PoolGpu>> gpus;
  for (size_t i = 0; i < visible.size(); ++i) {
    auto gpu = std::make_unique<PoolGpu>();
    gpu->index = static_cast<int>(i);
    gpu->uuid = visible[i].first;
    gpu->endpoint = visible[i].second;
    std::string reason;
    OpenError error = OpenSession(connect, gpu.get(), &reason);
    if (error == OpenError::kRefused) {
      *why = reason;
      return error;
    }
    if (error != OpenError::kNone) gpu->why_lost = reason;
    gpus.push_back(std::move(gpu));
  }
  gpus_ = std::move(gpus);
  return OpenError::kNone;
}

void PoolGpus::Close() { gpus_.clear(); }

void PoolGpus::AbandonAfterFork() {
  for (auto& gpu : gpus_) {
    if (gpu->session == nullptr) continue;
    (void)gpu->session.release();  // the parent's: neither used nor closed here
    gpu->why_lost = "this process was forked after nvmlInit: the GPUs' sessions are its parent's";
  }
}

bool PoolGpus::TransportLoaded() {
  std::string path = TransportPath();
  if (path.empty()) return false;
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (module == nullptr) return false;
  dlclose(module);  // drops the reference RTLD_NOLOAD took
  return true;
}

PoolGpu* PoolGpus::Find(const void* candidate) {
  for (const auto& gpu : gpus_) {
    if (gpu.get() == candidate) return gpu.get();
  }
  return nullptr;
}

bool PoolGpus::MemoryInfo(PoolGpu* gpu, uint64_t* free, uint64_t* total, std::string* why) {
  std::lock_guard<std::mutex> lock(gpu->mu);
  if (gpu->session == nullptr) {
    *why = gpu->why_lost;
    return false;
  }
  transport::Request request;
  request.op = dataplane::kOpMemGetInfo;
  transport::Reply reply;
  Status status = gpu->session->Call(request, &reply);
  dataplane::MemInfoResult result{};
  if (!status.ok() || reply.status != dataplane::kCuSuccess || reply.out.size() != sizeof(result)) {
    *why = status.ok() ? "malformed memory answer from " + gpu->endpoint : status.message();
    return false;
  }
  std::memcpy(&result, reply.out.data(), sizeof(result));
  *free = result.free;
  *total = result.total;
  return true;
}

bool PoolGpus::GpuStatus(PoolGpu* gpu, uint32_t max_processes, dataplane::GpuStatusResult* result,
                         std::vector<dataplane::GpuProcess>* processes, std::string* why) {
  processes->clear();
  std::lock_guard<std::mutex> lock(gpu->mu);
  if (gpu->session == nullptr) {
    *why = gpu->why_lost;
    return false;
  }
  dataplane::GpuStatusArgs args;
  args.max_processes = std::min(max_processes, dataplane::kMaxGpuProcesses);
  transport::Request request;
  request.op = dataplane::kOpGpuStatus;
  request.args = &args;
  request.args_len = sizeof(args);
  transport::Reply reply;
  ::gpupool::Status sent = gpu->session->Call(request, &reply);
  if (!sent.ok()) {
    *why = sent.message();
    return false;
  }
  if (reply.status != dataplane::kCuSuccess) {
    *why = gpu->endpoint + " answered CUDA error " + std::to_string(reply.status) + ": " + reply.out;
    return false;
  }
  // The result, then whole process records, no more than were asked for.
  const size_t records =
      reply.out.size() >= sizeof(*result) ? (reply.out.size() - sizeof(*result)) / sizeof(dataplane::GpuProcess) : 0;
  if (reply.out.size() < sizeof(*result) ||
      reply.out.size() != sizeof(*result) + records * sizeof(dataplane::GpuProcess) || records > args.max_processes) {
    *why = "malformed GPU status answer from " + gpu->endpoint;
    return false;
  }
  std::memcpy(result, reply.out.data(), sizeof(*result));
  result->driver_version[sizeof(result->driver_version) - 1] = '\0';
  result->why_not[sizeof(result->why_not) - 1] = '\0';
  if (records > result->process_count) {
    *why = "malformed GPU status answer from " + gpu->endpoint;
    return false;
  }
  processes->resize(records);
  if (records > 0) {
    std::memcpy(processes->data(), reply.out.data() + sizeof(*result), records * sizeof(dataplane::GpuProcess));
  }
  for (auto& process : *processes) process.host[sizeof(process.host) - 1] = '\0';
  return true;
}

}  // namespace gpupool::nvml
