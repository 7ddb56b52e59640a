#include "remote/client/core/runtime.h"

#include <dlfcn.h>
#include <pthread.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "common/split.h"
#include "remote/client/core/device_attributes.h"
#include "remote/client/core/errors.h"
#include "remote/client/failover/failover_report.h"
#include "remote/client/core/log.h"
#include "remote/image/fatbin.h"
#include "remote/transport/rpc_client_module.h"

namespace gpupool::client {

// Device addresses grow up from kDeviceAddresses towards the page-locked window.
static_assert(Runtime::kDeviceAddresses < Runtime::kPinnedWindow && Runtime::kPinnedWindow < Runtime::kPinnedWindowEnd);
// ThreadSanitizer's lowest application range on x86-64 ends at 512 GiB or above.
static_assert(!GPUPOOL_THREAD_SANITIZER || Runtime::kPinnedWindowEnd <= (uint64_t{512} << 30));

using dataplane::DeviceDescription;
using dataplane::HelloArgs;

namespace {

thread_local std::vector<Context*> context_stack;
// context_stack's top, read by every call: a thread_local of a trivial type is reached
// without the initialisation check a vector's (with its destructor to register) costs.
thread_local Context* current_context = nullptr;

// After fork() the child must not use the parent's UCX state; CUDA itself does not
// support using a context across fork either. The child sees no usable device.
std::atomic<bool> forked_child{false};

// "GPU-1234abcd-..." -> 16 bytes; names that are not hex UUIDs get a stable hash instead.
CUuuid UuidBytes(const std::string& uuid) {
  CUuuid bytes{};
  std::string hex;
  for (char c : uuid.rfind("GPU-", 0) == 0 ? uuid.substr(4) : uuid) {
    if (std::isxdigit(static_cast<unsigned char>(c))) hex += c;
  }
  if (hex.size() == 32) {
    for (int i = 0; i < 16; ++i) {
      bytes.bytes[i] = static_cast<char>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
    }
  } else {
    uint64_t h1 = 1469598103934665603ull, h2 = 1099511628211ull;
    for (char c : uuid) {
      h1 = (h1 ^ static_cast<unsigned char>(c)) * 1099511628211ull;
      h2 = (h2 + static_cast<unsigned char>(c)) * 6364136223846793005ull;
    }
    std::memcpy(bytes.bytes, &h1, 8);
    std::memcpy(bytes.bytes + 8, &h2, 8);
  }
  return bytes;
}

void CopyString(char* to, size_t capacity, const std::string& from) { std::snprintf(to, capacity, "%s", from.c_str()); }

// Loads the UCX transport module from the directory this library was loaded from.
Result<GpupoolUcxConnectFunction> LoadTransport() {
  Dl_info self{};
  if (dladdr(reinterpret_cast<void*>(&LoadTransport), &self) == 0 || self.dli_fname == nullptr) {
    return Status::Internal("cannot locate libcuda.so.1 itself");
  }
  std::string path = self.dli_fname;
  size_t slash = path.rfind('/');
  path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/" + kGpupoolUcxModuleName;
  transport::SetInjectedLibraryUcxDefaults();
  void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (module == nullptr) return Status::Internal(std::string("cannot load ") + dlerror());
  auto connect = reinterpret_cast<GpupoolUcxConnectFunction>(dlsym(module, "gpupool_ucx_connect"));
  if (connect == nullptr) return Status::Internal(path + " has no gpupool_ucx_connect");
  return connect;
}

Result<std::unique_ptr<transport::ClientConnection>> ConnectTransport(const std::string& endpoint) {
  static auto* loaded = new Result<GpupoolUcxConnectFunction>(LoadTransport());
  if (!loaded->ok()) return loaded->status();
  char error[512] = "";
  transport::ClientConnection* connection = loaded->value()(endpoint.c_str(), error, sizeof(error));
  if (connection == nullptr) {
    std::string why = error;
    if (why.rfind(kRefusedPrefix, 0) == 0) {
      return Status::PermissionDenied(why.substr(sizeof(kRefusedPrefix) - 1));
    }
    return Status::Unavailable(why);
  }
  return std::unique_ptr<transport::ClientConnection>(connection);
}

}  // namespace

Runtime& Runtime::Get() {
  static Runtime* runtime = new Runtime();  // never destroyed: atexit order is unknowable
  return *runtime;
}

CUresult Runtime::Init(unsigned flags) {
  if (forked_child) return CUDA_ERROR_NOT_INITIALIZED;
  std::call_once(init_once_, [this] {
    pthread_atfork(nullptr, nullptr, [] { forked_child = true; });
    // At exit: queued work is finished and the connections are closed, so that the agent
    // sees a clean close rather than a vanished peer, also for a program that exits
    // without synchronising. CUDA runtime teardown calls that come after this (its exit
    // handler may run before or after this one) answer CUDA_ERROR_DEINITIALIZED, as a
    // real driver does while it shuts down. Before shared libraries' destructors: the
    // transport module and UCX must still be there to close.
    std::atexit([] {
      if (!forked_child) Runtime::Get().Shutdown();
      if (unsigned long calls = UnsupportedCallCount(); calls > 0 && !forked_child) {
        LogError(
            "%lu call(s) to unsupported driver entry points returned "
            "CUDA_ERROR_NOT_SUPPORTED",
            calls);
      }
    });
    init_status_ = Connect();
  });
  return init_status_;
}

CUresult Runtime::Connect() {
  const char* gpus = std::getenv("GPUPOOL_GPUS");
  if (gpus == nullptr || gpus[0] == '\0') {
    LogError(
        "GPUPOOL_GPUS is not set: this process has no leased GPUs "
        "(run it in a job with --gpu-pool, or set GPUPOOL_GPUS=UUID@HOST:PORT,...)");
    return CUDA_ERROR_NO_DEVICE;
  }
  std::vector<std::pair<std::string, std::string>> leased;
  for (const std::string& entry : SplitNonEmpty(gpus, ',')) {
    size_t at = entry.find('@');
    if (at == std::string::npos || at == 0 || at + 1 == entry.size()) {
      LogError("GPUPOOL_GPUS entry '%s' is not UUID@HOST:PORT", entry.c_str());
      return CUDA_ERROR_INVALID_VALUE;
    }
    leased.emplace_back(entry.substr(0, at), entry.substr(at + 1));
  }
  // CUDA_VISIBLE_DEVICES selects among the leased GPUs by index.
  std::vector<int> visible;
  const char* visible_env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible_env != nullptr) {
    for (const std::string& item : SplitNonEmpty(visible_env, ',')) {
      char* end = nullptr;
      long index = std::strtol(item.c_str(), &end, 10);
      if (*end != '\0' || index < 0 || index >= static_cast<long>(leased.size())) break;
      visible.push_back(static_cast<int>(index));
    }
  } else {
    for (size_t i = 0; i < leased.size(); ++i) visible.push_back(static_cast<int>(i));
  }
  if (visible.empty()) {
    LogError("CUDA_VISIBLE_DEVICES='%s' selects none of the %zu leased GPUs", visible_env ? visible_env : "",
             leased.size());
    return CUDA_ERROR_NO_DEVICE;
  }
  std::vector<std::string> config_errors;
  FailoverConfig failover_config = FailoverConfig::FromEnvironment(&config_errors);
  for (const std::string& error : config_errors) LogError("%s", error.c_str());
  // Page-locked memory (cuMemHostAlloc needs cuInit) turns snapshots on (AllocPinned).
  want_snapshots_ = failover_config.mode != FailoverConfig::Mode::kOff && failover_config.copy_on_write;
  const char* lease_file = std::getenv("GPUPOOL_LEASE_FILE");
  for (int index : visible) {
    auto device = std::make_unique<Device>();
    device->ordinal = static_cast<int>(devices_.size());
    device->slot = index;
    device->channel.location = {leased[index].first, leased[index].second};
    device->primary.device = device->ordinal;
    device->primary.is_primary = true;
    std::string why;
    int32_t refusal = 0;
    device->channel.connection = OpenSession(device->channel.location, &device->channel.description, &why, &refusal);
    if (device->channel.connection == nullptr) {
      LogError("%s", why.c_str());
      return refusal == dataplane::kCuNotPermitted ? CUDA_ERROR_NOT_PERMITTED : CUDA_ERROR_NO_DEVICE;
    }
    DescribeDevice(device.get());
    device->failover = std::make_unique<Failover>(
        failover_config, device->ordinal, index, lease_file ? lease_file : "",
        [this](const GpuLocation& location, DeviceDescription* description, std::string* why, int32_t* refusal) {
          return OpenSession(location, description, why, refusal);
        });
    // A large checkpoint is restored over several connections at once (protocol.h).
    device->failover->SetRestoreStreamOpener(
        [](const GpuLocation& location, std::string* why) -> std::unique_ptr<transport::ClientConnection> {
          auto rpc = ConnectTransport(location.uuid + dataplane::kRestoreLaneSuffix + "@" + location.endpoint);
          if (!rpc.ok()) {
            *why = rpc.status().message();
            return nullptr;
          }
          return std::move(rpc.value());
        });
    // A lost agent is told to gpupoold at once (failover_report.h), in a pooled job.
    LostAgentReporter reporter;
    if (LostAgentReporter::FromEnvironment(&reporter)) {
      device->failover->SetLostReporter(
          [reporter](const GpuLocation& lost, int slot, GpuLocation* named, std::string* why) {
            nlohmann::json answer;
            if (!reporter.Report(lost, &answer, why)) return false;
            if (!LeaseSlot(answer.value("lease", nlohmann::json()), slot, named)) {
              *why = "gpupoold's answer names no GPU for slot " + std::to_string(slot);
              return false;
            }
            LogError("GPU %s: told gpupoold; its probe: %s", lost.uuid.c_str(),
                     answer.value("probe", std::string("?")).c_str());
            return true;
          });
    }
    LogDebug("device %d = %s (%s) at %s", device->ordinal, device->description().uuid, device->description().name,
             device->endpoint().c_str());
    devices_.push_back(std::move(device));
  }
  // A recovery from a lost agent starts those of the other GPUs whose connections broke with
  // it, each on its own thread (failover.h: recovering together). devices_ is complete now
  // and never changes again.
  if (devices_.size() > 1) {
    for (const auto& device : devices_) {
      device->failover->SetAgentLostHook([this, ordinal = device->ordinal](const GpuLocation& lost, bool confirmed) {
        for (const auto& other : devices_) {
          if (other->ordinal != ordinal) other->failover->RecoverInBackground(&other->channel, lost, confirmed);
        }
      });
    }
  }
  return CUDA_SUCCESS;
}

std::unique_ptr<transport::ClientConnection> Runtime::OpenSession(const GpuLocation& location,
                                                                  DeviceDescription* description, std::string* why,
                                                                  int32_t* refusal) {
  *refusal = 0;
  auto rpc = ConnectTransport(location.uuid + "@" + location.endpoint);  // the GPU's thread
  if (!rpc.ok() && rpc.status().code() == Status::Code::kPermissionDenied) {
    // The agent checked the lease at the handshake (bootstrap.h), as it once did at hello.
    *refusal = dataplane::kCuNotPermitted;
    *why = "GPU " + location.uuid + " at " + location.endpoint + " refused this process: " + rpc.status().message();
    return nullptr;
  }
  if (!rpc.ok()) {
    *why = "GPU " + location.uuid + ": " + rpc.status().message();
    return nullptr;
  }
  const char* lease_id = std::getenv("GPUPOOL_LEASE_ID");
  const char* token = std::getenv("GPUPOOL_LEASE_TOKEN");
  HelloArgs hello;
  CopyString(hello.lease_id, sizeof(hello.lease_id), lease_id ? lease_id : "");
  CopyString(hello.token, sizeof(hello.token), token ? token : "");
  CopyString(hello.gpu_uuid, sizeof(hello.gpu_uuid), location.uuid);
  transport::Request request;
  request.op = dataplane::kOpHello;
  request.args = &hello;
  request.args_len = sizeof(hello);
  transport::Reply reply;
  Status status = rpc.value()->Call(request, &reply);
  if (!status.ok()) {
    *why = "GPU " + location.uuid + " at " + location.endpoint + ": " + status.message();
    return nullptr;
  }
  if (reply.status != CUDA_SUCCESS) {
    *refusal = reply.status;
    *why = "GPU " + location.uuid + " at " + location.endpoint + " refused this process: " + reply.out;
    return nullptr;
  }
  if (reply.out.size() != sizeof(DeviceDescription)) {
    *why = "GPU " + location.uuid + ": malformed answer from " + location.endpoint;
    return nullptr;
  }
  std::memcpy(description, reply.out.data(), sizeof(DeviceDescription));
  return std::move(rpc.value());
}

void Runtime::DescribeDevice(Device* device) {
  device->uuid_bytes = UuidBytes(device->description().uuid);
  unsigned domain = 0, bus = 0, slot = 0, function = 0;
  if (std::sscanf(device->description().pci_bus_id, "%x:%x:%x.%x", &domain, &bus, &slot, &function) == 4) {
    device->pci_domain = static_cast<int>(domain);
    device->pci_bus = static_cast<int>(bus);
    device->pci_device = static_cast<int>(slot);
  }
}

Device* Runtime::device(int ordinal) {
  if (init_status_ != CUDA_SUCCESS || forked_child || shut_down_) return nullptr;
  if (ordinal < 0 || ordinal >= static_cast<int>(devices_.size())) return nullptr;
  return devices_[ordinal].get();
}

Device* Runtime::Connected(int ordinal) {
  if (init_status_ != CUDA_SUCCESS || forked_child) return nullptr;
  if (ordinal < 0 || ordinal >= static_cast<int>(devices_.size())) return nullptr;
  Device* d = devices_[ordinal].get();
  return d->channel.connection != nullptr ? d : nullptr;
}

CUresult Runtime::Transport(const Status& status, int device) {
  static std::once_flag logged;
  std::call_once(logged, [&] { LogError("GPU %d unreachable: %s", device, status.message().c_str()); });
  return CUDA_ERROR_DEVICE_UNAVAILABLE;
}

namespace {
// Installed by graph/ when the library loads (InstallCaptureCheck); constant-initialised,
// so no load order can see it unset after it was installed.
std::atomic<CaptureCheck> capture_check{nullptr};
}  // namespace

void InstallCaptureCheck(CaptureCheck check) { capture_check.store(check); }

CUresult Runtime::Admit(int device_ordinal, uint32_t op, const void* args, size_t args_len) {
  if (shut_down_) return CUDA_ERROR_DEINITIALIZED;
  if (CaptureCheck check = capture_check.load(std::memory_order_relaxed); check != nullptr) {
    if (CUresult refused = check(device_ordinal, op, args, args_len); refused != CUDA_SUCCESS) {
      return refused;
    }
  }
  return ManagedBefore(device_ordinal, op);
}

CUresult Runtime::Call(int device_ordinal, uint32_t op, const void* args, size_t args_len, const void* payload,
                       size_t payload_len, void* result, size_t result_capacity, std::string* out) {
  InFlight in_flight(calls_in_flight_);
  if (CUresult refused = Admit(device_ordinal, op, args, args_len); refused != CUDA_SUCCESS) {
    return refused;
  }
  CUresult answer = CUDA_SUCCESS;
  if (!DeferOrWait(device_ordinal, op, args, args_len, payload, payload_len, Delivery::kWaitForReply, nullptr, 0,
                   &answer)) {
    answer = CallNow(device_ordinal, op, args, args_len, payload, payload_len, result, result_capacity, out);
  }
  if (answer != CUDA_SUCCESS) return answer;
  return ManagedAfter(device_ordinal, op);
}

CUresult Runtime::CallNow(int device_ordinal, uint32_t op, const void* args, size_t args_len, const void* payload,
                          size_t payload_len, void* result, size_t result_capacity, std::string* out) {
  Device* d = Connected(device_ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  transport::Request request{op, args, args_len, payload, payload_len, result, result_capacity};
  transport::Reply reply;
  CUresult status = SendRequest(d, Failover::Delivery::kCall, request, &reply);
  if (out != nullptr) {
    *out = std::move(reply.out);
  } else if (!reply.out.empty() && dataplane::Synchronises(op)) {
    // Device printf output, delivered at synchronisation as on a GPU.
    std::fwrite(reply.out.data(), 1, reply.out.size(), stdout);
    std::fflush(stdout);
  }
  return status;
}

CUresult Runtime::SendRequest(Device* d, Failover::Delivery how, const transport::Request& request,
                              transport::Reply* reply) {
  transport::Reply ignored;
  Status transport_error;
  bool moved = false;
  int32_t status = d->failover->Deliver(&d->channel, how, request, reply ? reply : &ignored, &transport_error, &moved);
  if (moved) DescribeDevice(d);
  if (!transport_error.ok()) return Transport(transport_error, d->ordinal);
  return static_cast<CUresult>(status);
}

CUresult Runtime::Post(int device_ordinal, uint32_t op, const void* args, size_t args_len, const void* payload,
                       size_t payload_len, bool payload_held_until_sync) {
  InFlight in_flight(calls_in_flight_);
  if (CUresult refused = Admit(device_ordinal, op, args, args_len); refused != CUDA_SUCCESS) {
    return refused;
  }
  CUresult answer = CUDA_SUCCESS;
  if (DeferOrWait(device_ordinal, op, args, args_len, payload, payload_len, Delivery::kOneWay, nullptr, 0, &answer)) {
    return answer;
  }
  return PostNow(device_ordinal, op, args, args_len, payload, payload_len, payload_held_until_sync);
}

CUresult Runtime::PostNow(int device_ordinal, uint32_t op, const void* args, size_t args_len, const void* payload,
                          size_t payload_len, bool payload_held_until_sync) {
  Device* d = Connected(device_ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  transport::Request request{op, args, args_len, payload, payload_len, nullptr, 0};
  request.payload_held_until_sync = payload_held_until_sync;
  return SendRequest(d, Failover::Delivery::kPost, request, nullptr);
}

void Runtime::CaptureHeldUploads() {
  // Devices are made once, at cuInit, and live until exit.
  for (const auto& d : devices_) {
    if (d->failover) d->failover->CaptureHeldUploads();
  }
}

CUresult Runtime::Start(int device_ordinal, uint32_t op, const void* args, size_t args_len, void* result,
                        size_t result_capacity) {
  InFlight in_flight(calls_in_flight_);
  if (CUresult refused = Admit(device_ordinal, op, args, args_len); refused != CUDA_SUCCESS) {
    return refused;
  }
  CUresult answer = CUDA_SUCCESS;
  if (DeferOrWait(device_ordinal, op, args, args_len, nullptr, 0, Delivery::kReplyLater, result, result_capacity,
                  &answer)) {
    return answer;
  }
  return StartNow(device_ordinal, op, args, args_len, result, result_capacity);
}

CUresult Runtime::StartNow(int device_ordinal, uint32_t op, const void* args, size_t args_len, void* result,
                           size_t result_capacity) {
  Device* d = Connected(device_ordinal);
  if (d == nullptr) return CUDA_ERROR_INVALID_DEVICE;
  transport::Request request{op, args, args_len, nullptr, 0, result, result_capacity};
  return SendRequest(d, Failover::Delivery::kStart, request, nullptr);
}

uint64_t Runtime::ChooseAddress(uint64_t size) {
  uint64_t rounded = (std::max<uint64_t>(size, 1) + 511) / 512 * 512;
  std::lock_guard<std::mutex> lock(mu_);
  if (auto reuse = free_addresses_.find(rounded); reuse != free_addresses_.end()) {
    uint64_t address = reuse->second;
    free_addresses_.erase(reuse);
    return address;
  }
  uint64_t address = next_address_;
  next_address_ += rounded + 512;  // a gap: an overrun does not reach the next allocation
  return address;
}

void Runtime::ReleaseAddress(uint64_t address, uint64_t size) {
  uint64_t rounded = (std::max<uint64_t>(size, 1) + 511) / 512 * 512;
  std::lock_guard<std::mutex> lock(mu_);
  // Not one we chose: an address an agent's driver chose (the cuda executor's, when it
  // cannot place memory; a GPU's driver puts it anywhere, 0x7f... on an H100) must not
  // be handed out again as ours, or a later allocation would be asked for at it.
  if (address < kDeviceAddresses || address >= next_address_) return;
  free_addresses_.emplace(rounded, address);
}

void Runtime::AddAllocation(uint64_t dptr, uint64_t size, int device) {
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[dptr] = Allocation{size, device, nullptr};
}

void Runtime::AddContextAllocation(uint64_t dptr, uint64_t size, int device, Context* context) {
  std::lock_guard<std::mutex> lock(mu_);
  allocations_[dptr] = Allocation{size, device, context};
}

bool Runtime::RemoveAllocation(uint64_t dptr, int* device) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = allocations_.find(dptr);
  if (found == allocations_.end()) return false;
  *device = found->second.device;
  allocations_.erase(found);
  return true;
}

bool Runtime::FindAllocation(uint64_t ptr, uint64_t size, uint64_t* start, Allocation* found) {
  std::lock_guard<std::mutex> lock(mu_);
  auto after = allocations_.upper_bound(ptr);
  if (after == allocations_.begin()) return false;
  auto& [begin, allocation] = *std::prev(after);
  uint64_t offset = ptr - begin;
  if (offset >= allocation.size || size > allocation.size - offset) return false;
  if (start) *start = begin;
  if (found) *found = allocation;
  return true;
}

void Runtime::AddHostRange(const void* ptr, size_t size, unsigned flags) {
  if (flags & kRegisteredHostMemory) any_registered_.store(true);
  std::lock_guard<std::mutex> lock(mu_);
  host_ranges_[reinterpret_cast<uintptr_t>(ptr)] = HostRange{size, flags};
}

void Runtime::AddHostRangeFlags(const void* start, unsigned flags) {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = host_ranges_.find(reinterpret_cast<uintptr_t>(start));
  if (found != host_ranges_.end()) found->second.flags |= flags;
}

bool Runtime::RemoveHostRange(const void* ptr) {
  std::lock_guard<std::mutex> lock(mu_);
  return host_ranges_.erase(reinterpret_cast<uintptr_t>(ptr)) > 0;
}

bool Runtime::OverlapsHostRange(const void* ptr, size_t size) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  auto after = host_ranges_.upper_bound(address);
  if (after != host_ranges_.end() && after->first - address < size) return true;  // one starts inside
  if (after == host_ranges_.begin()) return false;
  auto& [begin, range] = *std::prev(after);
  return address - begin < range.size;  // one holds the start
}

bool Runtime::FindHostRange(const void* ptr, unsigned* flags, uintptr_t* start, size_t* size) {
  std::lock_guard<std::mutex> lock(mu_);
  auto address = reinterpret_cast<uintptr_t>(ptr);
  auto after = host_ranges_.upper_bound(address);
  if (after == host_ranges_.begin()) return false;
  auto& [begin, range] = *std::prev(after);
  if (address - begin >= range.size) return false;
  if (flags) *flags = range.flags;
  if (start) *start = begin;
  if (size) *size = range.size;
  return true;
}

CUresult Runtime::ReleaseContextResources(Context* context) {
  const int device = context->device;
  WaitAllHostWork(device, std::chrono::seconds(30));
  std::vector<uint64_t> allocations;
  std::set<Stream*> streams;
  std::set<Event*> events;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = allocations_.begin(); it != allocations_.end();) {
      if (it->second.context == context) {
        allocations.push_back(it->first);
        it = allocations_.erase(it);
      } else {
        ++it;
      }
    }
    streams.swap(context->streams);
    events.swap(context->events);
  }
  // Only a lost agent is worth reporting: a sticky error of earlier work, or memory the
  // agent already forgot, must not make the destroy or reset fail (a reset is how a
  // program clears a sticky error).
  CUresult first_error = CUDA_SUCCESS;
  auto keep = [&first_error](CUresult status) {
    if (status == CUDA_ERROR_DEVICE_UNAVAILABLE) first_error = status;
  };
  // Handles stay allocated (marked dead) rather than freed: the application may still
  // pass them, and then gets CUDA_ERROR_INVALID_HANDLE instead of reading freed memory.
  for (Stream* stream : streams) {
    dataplane::StreamArgs args{stream->id, 0, 0};
    keep(Post(device, dataplane::kOpStreamDestroy, &args, sizeof(args)));
    stream->magic = 0;
  }
  for (Event* event : events) {
    dataplane::EventArgs args{event->id, 0, 0};
    keep(Post(device, dataplane::kOpEventDestroy, &args, sizeof(args)));
    event->magic = 0;
  }
  for (uint64_t dptr : allocations) {
    dataplane::MemFreeArgs args{dptr};
    keep(Call(device, dataplane::kOpMemFree, &args, sizeof(args)));
    ForgetManaged(dptr);
  }
  LogDebug("context %llu on GPU %d: freed %zu allocation(s), %zu stream(s), %zu event(s)",
           static_cast<unsigned long long>(context->id), device, allocations.size(), streams.size(), events.size());
  return first_error;
}

void Runtime::Shutdown() {
  if (init_status_ != CUDA_SUCCESS || shut_down_.exchange(true)) return;
  // Host functions still queued run first (bounded: one that never returns must not keep
  // the process from exiting).
  bool host_work_done = WaitAllHostWork(-1, std::chrono::seconds(10));
  if (!host_work_done) {
    LogError("host functions still pending at exit: their streams' connections are left open");
  }
  // Other threads may still be inside a call (new ones are refused now): give them a
  // moment; a connection still in use is left to close with the process.
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (calls_in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  const bool idle = calls_in_flight_.load() == 0;
  // A background recovery stops waiting for a replacement and its thread is joined before
  // the connections close (failover.h: recovering together).
  for (auto& device : devices_) device->failover->StopBackground();
  for (auto& device : devices_) {
    if (device->channel.connection == nullptr) continue;
    int32_t first_error = 0;
    Status drained = device->channel.connection->Drain(&first_error);
    if (!drained.ok()) continue;  // the agent is gone: nothing to close cleanly
    if (!host_work_done || !idle) continue;
    // Closing the connection tells the agent this is a clean exit (the transport closes
    // its bootstrap socket before the UCX endpoint).
    device->channel.connection.reset();
  }
}

CUresult Runtime::EnsureModuleLoaded(Module* module, int device, uint64_t* remote_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = module->remote_ids.find(device);
    if (found != module->remote_ids.end()) {
      *remote_id = found->second;
      return CUDA_SUCCESS;
    }
  }
  // Payload: header, image, then the kernel table (names and parameter sizes).
  std::vector<char> payload(sizeof(dataplane::ModuleImageHeader));
  dataplane::ModuleImageHeader header{module->image.size(), static_cast<uint32_t>(module->kernels.size()), 0};
  std::memcpy(payload.data(), &header, sizeof(header));
  payload.insert(payload.end(), module->image.begin(), module->image.end());
  for (const auto& [name, layout] : module->kernels) {
    dataplane::KernelEntry entry{static_cast<uint32_t>(name.size()), layout.param_size};
    const char* raw = reinterpret_cast<const char*>(&entry);
    payload.insert(payload.end(), raw, raw + sizeof(entry));
    payload.insert(payload.end(), name.begin(), name.end());
  }
  // Its variables go in a window of our address range (the same on a replacement GPU).
  // The heap of device-side malloc, where the executor makes one per module (the sim), is
  // as large as the current context's limit says now, as a GPU sizes its heap when first
  // used. So is its device runtime's pool of pending launches. What the device runtime
  // says of its device (cudaDeviceGetAttribute, cudaDeviceGetLimit, cudaGetDeviceCount,
  // cudaDeviceGetCacheConfig in device code) is what we say of it on the host.
  uint64_t device_heap = 0;
  uint64_t pending_launches = 0;
  dataplane::DeviceRuntimeFacts facts;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Context* context = CurrentContext();
    const size_t* limits = nullptr;
    if (context != nullptr && context->device == device) {
      limits = context->limits;
      facts.cache_config = static_cast<uint32_t>(context->cache_config);
    } else if (device >= 0 && device < static_cast<int>(devices_.size())) {
      limits = devices_[device]->primary.limits;
      facts.cache_config = static_cast<uint32_t>(devices_[device]->primary.cache_config);
    }
    if (limits != nullptr) {
      device_heap = limits[CU_LIMIT_MALLOC_HEAP_SIZE];
      pending_launches = limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT];
      static_assert(dataplane::kDeviceLimitCount == CU_LIMIT_PERSISTING_L2_CACHE_SIZE + 1);
      for (uint32_t limit = 0; limit < dataplane::kDeviceLimitCount; ++limit) facts.limits[limit] = limits[limit];
    }
    if (device >= 0 && device < static_cast<int>(devices_.size())) {
      static_assert(CU_DEVICE_ATTRIBUTE_MAX <= dataplane::kDeviceAttributeSlots);
      facts.attribute_count = CU_DEVICE_ATTRIBUTE_MAX;
      facts.device_count = static_cast<int32_t>(devices_.size());
      // As cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_BINARY_VERSION) says it (api_function.cc).
      const ModelProperties model = PropertiesOf(*devices_[device]);
      const uint32_t arch = static_cast<uint32_t>(model.cc_major * 10 + model.cc_minor);
      const image::CodeChoice chosen = image::ChooseCode(module->ptx_archs, module->sass, arch);
      facts.binary_version = static_cast<int32_t>(chosen.sass_arch != 0 ? chosen.sass_arch : arch);
      for (int attribute = 1; attribute < CU_DEVICE_ATTRIBUTE_MAX; ++attribute) {
        DeviceAttribute(*devices_[device], attribute, &facts.attributes[attribute]);
      }
    }
  }
  const auto pending = static_cast<uint32_t>(std::min<uint64_t>(pending_launches, UINT32_MAX));
  dataplane::ModuleLoadArgs args{NewId(), ChooseAddress(kModuleGlobalsWindow), device_heap, pending, device, facts};
  std::string out;
  CUresult status =
      Call(device, dataplane::kOpModuleLoad, &args, sizeof(args), payload.data(), payload.size(), nullptr, 0, &out);
  dataplane::ModuleLoadResult loaded{0, 0};
  if (status == CUDA_SUCCESS && out.size() == sizeof(loaded)) {
    std::memcpy(&loaded, out.data(), sizeof(loaded));
  }
  if (status != CUDA_SUCCESS || loaded.globals_size == 0) {
    ReleaseAddress(args.globals_base, kModuleGlobalsWindow);
  } else if (loaded.globals_size > kModuleGlobalsWindow) {
    // Past its window: later allocations must not be placed over it.
    std::lock_guard<std::mutex> lock(mu_);
    next_address_ = std::max(next_address_, loaded.globals_base + loaded.globals_size + 512);
  }
  if (status != CUDA_SUCCESS) return status;
  if (loaded.globals_size == 0 && device >= 0 && device < static_cast<int>(devices_.size()) &&
      std::strcmp(devices_[device]->description().executor, "sim") != 0 && ModuleKeepsState(module->image)) {
    // The cuda executor places allocations at this process's addresses, but the driver
    // places a module's variables and its device-malloc heap itself: on a replacement GPU
    // they would lose their values and move.
    devices_[device]->failover->Unprotect(
        "a module it loaded has variables or calls device malloc, which its GPU's driver "
        "places itself ('" +
        std::string(devices_[device]->description().executor) + "' executor)");
  }
  std::lock_guard<std::mutex> lock(mu_);
  module->remote_ids[device] = args.module;
  *remote_id = args.module;
  return CUDA_SUCCESS;
}

bool ModuleKeepsState(const std::vector<uint8_t>& image) {
  auto parsed = gpupool::image::ParseModuleImageBytes(image.data(), image.size());
  // SASS only: nothing to tell by.
  return !parsed.ok() || parsed->ptx.empty() || gpupool::image::PtxKeepsState(parsed->ptx);
}

CUresult Runtime::EnsureFunction(Function* function, int device, uint64_t* remote_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto found = function->remote_ids.find(device);
    if (found != function->remote_ids.end()) {
      *remote_id = found->second;
      return CUDA_SUCCESS;
    }
  }
  uint64_t module_id = 0;
  CUresult status = EnsureModuleLoaded(function->module, device, &module_id);
  if (status != CUDA_SUCCESS) {
    // Said once per module on stderr too: libraries that launch kernels do not always look
    // at the launch's error, and their results are then silently wrong.
    bool first = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      first = !function->module->load_failure_told;
      function->module->load_failure_told = true;
    }
    const ErrorText* error = FindError(status);
    if (first && error != nullptr) {
      LogError(
          "kernel %s: its module cannot be loaded on GPU %d (%s; the agent's log says why): "
          "its launches fail",
          function->name.c_str(), device, error->name);
    }
    return status;
  }
  dataplane::GetFunctionArgs args{};
  args.module = module_id;
  args.function = NewId();
  CopyString(args.name, sizeof(args.name), function->name);
  std::string out;
  status = Call(device, dataplane::kOpGetFunction, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
  if (status != CUDA_SUCCESS) {
    if (status == CUDA_ERROR_NOT_FOUND) {
      // Once per kernel and GPU: a program may retry the launch in a loop.
      static std::mutex reported_mu;
      static auto* reported = new std::set<std::pair<std::string, int>>();
      bool first;
      {
        std::lock_guard<std::mutex> lock(reported_mu);
        first = reported->insert({function->name, device}).second;
      }
      if (first) {
        LogError("kernel %s cannot run on GPU %d: the agent has no implementation of it", function->name.c_str(),
                 device);
      }
    }
    return status;
  }
  std::lock_guard<std::mutex> lock(mu_);
  function->remote_ids[device] = args.function;
  if (out.size() == sizeof(dataplane::FunctionResources)) {
    std::memcpy(&function->resources[device], out.data(), out.size());
  }
  *remote_id = args.function;
  return CUDA_SUCCESS;
}

Context* CurrentContext() { return current_context; }

void SetCurrentContext(Context* context) {
  if (context_stack.empty()) {
    if (context != nullptr) context_stack.push_back(context);
  } else if (context == nullptr) {
    context_stack.pop_back();
  } else {
    context_stack.back() = context;
  }
  current_context = context_stack.empty() ? nullptr : context_stack.back();
}

void PushContext(Context* context) {
  context_stack.push_back(context);
  current_context = context;
}

Context* PopContext() {
  if (context_stack.empty()) return nullptr;
  Context* popped = context_stack.back();
  context_stack.pop_back();
  current_context = context_stack.empty() ? nullptr : context_stack.back();
  return popped;
}

bool ContextStackEmpty() { return context_stack.empty(); }

Context* AsContext(CUcontext context) {
  auto* candidate = reinterpret_cast<Context*>(context);
  return candidate != nullptr && candidate->magic == kContextMagic ? candidate : nullptr;
}

bool IsDefaultStream(CUstream stream) {
  return stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD;
}

Stream* AsStream(CUstream stream) {
  if (IsDefaultStream(stream)) return nullptr;
  auto* candidate = reinterpret_cast<Stream*>(stream);
  return candidate->magic == kStreamMagic ? candidate : nullptr;
}

Event* AsEvent(CUevent event) {
  auto* candidate = reinterpret_cast<Event*>(event);
  return candidate != nullptr && candidate->magic == kEventMagic ? candidate : nullptr;
}

Module* AsModule(const void* handle) {
  auto* candidate = static_cast<Module*>(const_cast<void*>(handle));
  return candidate != nullptr && candidate->magic == kModuleMagic ? candidate : nullptr;
}

Function* AsFunction(const void* handle) {
  auto* candidate = static_cast<Function*>(const_cast<void*>(handle));
  return candidate != nullptr && candidate->magic == kFunctionMagic ? candidate : nullptr;
}

CUresult ResolveDevice(CUstream stream, int* device, uint64_t* stream_id) {
  if (Runtime::Get().initialized() != CUDA_SUCCESS) return CUDA_ERROR_NOT_INITIALIZED;
  if (!IsDefaultStream(stream)) {
    Stream* s = AsStream(stream);
    if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    *device = s->context->device;
    if (stream_id) *stream_id = s->id;
    return CUDA_SUCCESS;
  }
  Context* context = CurrentContext();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context->magic == kDestroyedContextMagic) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = context->device;
  if (stream_id) *stream_id = 0;
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client
