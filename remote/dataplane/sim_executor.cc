#include "remote/dataplane/sim_executor.h"

#include <cstring>

#include "remote/dataplane/protocol.h"

namespace gpupool::dataplane {
namespace {

// CUDA_EVENT_DISABLE_TIMING: elapsed time on such events is CUDA_ERROR_INVALID_HANDLE.
constexpr uint32_t kEventDisableTiming = 0x2;

}  // namespace

SimExecutor::SimExecutor(SimDeviceMemory* memory)
    : memory_(memory), owner_(memory->NewOwner()) {}

SimExecutor::~SimExecutor() {
  for (uint64_t dptr : allocations_) memory_->Release(dptr, owner_);
}

int32_t SimExecutor::Allocate(uint64_t size, uint64_t* dptr) {
  int32_t status = memory_->Allocate(size, owner_, dptr);
  if (status == kCuSuccess) allocations_.insert(*dptr);
  return status;
}

int32_t SimExecutor::Free(uint64_t dptr) {
  if (dptr == 0) return kCuSuccess;
  if (allocations_.erase(dptr) == 0) return kCuInvalidValue;  // not ours (or not a start)
  return memory_->Release(dptr, owner_);
}

void SimExecutor::MemoryInfo(uint64_t* free, uint64_t* total) {
  *total = memory_->capacity();
  *free = *total - memory_->used();
}

void* SimExecutor::HostView(uint64_t dptr, uint64_t size) {
  return memory_->Translate(dptr, size, owner_);
}

bool SimExecutor::KnownStream(uint64_t stream) const {
  return stream == 0 || streams_.count(stream) > 0;
}

int32_t SimExecutor::CopyToDevice(uint64_t dst, const void* src, uint64_t size, uint64_t stream) {
  if (!KnownStream(stream)) return kCuInvalidHandle;
  if (size == 0) return kCuSuccess;
  char* host = memory_->Translate(dst, size, owner_);
  if (host == nullptr) return kCuInvalidValue;
  if (host != src) std::memcpy(host, src, size);  // the server may have received in place
  return kCuSuccess;
}

int32_t SimExecutor::CopyFromDevice(uint64_t src, uint64_t size, uint64_t stream,
                                    const void** data) {
  if (!KnownStream(stream)) return kCuInvalidHandle;
  *data = nullptr;
  if (size == 0) return kCuSuccess;
  char* host = memory_->Translate(src, size, owner_);
  if (host == nullptr) return kCuInvalidValue;
  *data = host;  // sent in place; the server finishes sending before the next request
  return kCuSuccess;
}

int32_t SimExecutor::CopyDeviceToDevice(uint64_t dst, uint64_t src, uint64_t size,
                                        uint64_t stream) {
  if (!KnownStream(stream)) return kCuInvalidHandle;
  if (size == 0) return kCuSuccess;
  char* to = memory_->Translate(dst, size, owner_);
  char* from = memory_->Translate(src, size, owner_);
  if (to == nullptr || from == nullptr) return kCuInvalidValue;
  std::memmove(to, from, size);
  return kCuSuccess;
}

int32_t SimExecutor::Memset(uint64_t dst, uint32_t value, uint32_t element_size, uint64_t count,
                            uint64_t stream) {
  if (!KnownStream(stream)) return kCuInvalidHandle;
  if (element_size != 1 && element_size != 2 && element_size != 4) return kCuInvalidValue;
  if (count == 0) return kCuSuccess;
  if (count > UINT64_MAX / element_size) return kCuInvalidValue;
  char* host = memory_->Translate(dst, count * element_size, owner_);
  if (host == nullptr) return kCuInvalidValue;
  if (element_size == 1) {
    std::memset(host, static_cast<int>(value & 0xff), count);
  } else {
    // Byte copies: `dst` need not be aligned to the element (found by the wire_agent fuzz
    // target: a uint32_t store there is undefined behaviour).
    uint16_t value16 = static_cast<uint16_t>(value);
    const void* element = element_size == 2 ? static_cast<const void*>(&value16)
                                             : static_cast<const void*>(&value);
    for (uint64_t i = 0; i < count; ++i) std::memcpy(host + i * element_size, element, element_size);
  }
  return kCuSuccess;
}

int32_t SimExecutor::LoadModule(uint64_t module, const void* image, size_t image_size,
                                const std::vector<KernelInfo>& kernels) {
  if (modules_.count(module)) return kCuInvalidValue;
  // The sim cannot run the image's GPU code: it only needs the kernel names, and runs the
  // CPU twins of those it knows (an unknown one fails at GetFunction).
  modules_[module] = kernels;
  return kCuSuccess;
}

int32_t SimExecutor::UnloadModule(uint64_t module) {
  return modules_.erase(module) ? kCuSuccess : kCuInvalidHandle;
}

int32_t SimExecutor::GetFunction(uint64_t module, uint64_t function, const std::string& name) {
  auto found = modules_.find(module);
  if (found == modules_.end()) return kCuInvalidHandle;
  bool in_module = false;
  for (const KernelInfo& kernel : found->second) in_module |= kernel.name == name;
  if (!in_module) return kCuNotFound;
  const SimKernelSpec* spec = FindSimKernel(name);
  if (spec == nullptr) return kCuNotFound;
  functions_[function] = spec;
  return kCuSuccess;
}

int32_t SimExecutor::Launch(uint64_t function, const LaunchConfig& config, const void* params,
                            size_t param_size) {
  auto found = functions_.find(function);
  if (found == functions_.end()) return kCuInvalidHandle;
  if (!KnownStream(config.stream)) return kCuInvalidHandle;
  uint64_t threads = uint64_t{config.block[0]} * config.block[1] * config.block[2];
  if (threads == 0 || threads > 1024 || config.block[2] > 64 || config.grid[0] == 0 ||
      config.grid[1] == 0 || config.grid[2] == 0 || config.grid[1] > 65535 ||
      config.grid[2] > 65535) {
    return kCuInvalidValue;
  }
  if (param_size < found->second->param_size) return kCuInvalidValue;
  SimLaunch launch{&config, static_cast<const uint8_t*>(params), param_size, memory_, owner_};
  return found->second->run(launch);
}

int32_t SimExecutor::CreateStream(uint64_t stream, uint32_t flags, int32_t priority) {
  if (stream == 0 || !streams_.insert(stream).second) return kCuInvalidValue;
  return kCuSuccess;
}

int32_t SimExecutor::DestroyStream(uint64_t stream) {
  return streams_.erase(stream) ? kCuSuccess : kCuInvalidHandle;
}

int32_t SimExecutor::SynchronizeStream(uint64_t stream) {
  return KnownStream(stream) ? kCuSuccess : kCuInvalidHandle;
}

int32_t SimExecutor::QueryStream(uint64_t stream) { return SynchronizeStream(stream); }

int32_t SimExecutor::StreamWaitEvent(uint64_t stream, uint64_t event) {
  if (!KnownStream(stream) || !events_.count(event)) return kCuInvalidHandle;
  return kCuSuccess;  // everything before the event already ran
}

int32_t SimExecutor::CreateEvent(uint64_t event, uint32_t flags) {
  if (event == 0 || events_.count(event)) return kCuInvalidValue;
  events_[event].flags = flags;
  return kCuSuccess;
}

int32_t SimExecutor::DestroyEvent(uint64_t event) {
  return events_.erase(event) ? kCuSuccess : kCuInvalidHandle;
}

int32_t SimExecutor::RecordEvent(uint64_t event, uint64_t stream) {
  auto found = events_.find(event);
  if (found == events_.end() || !KnownStream(stream)) return kCuInvalidHandle;
  found->second.recorded = true;
  found->second.when = std::chrono::steady_clock::now();
  return kCuSuccess;
}

int32_t SimExecutor::SynchronizeEvent(uint64_t event) {
  return events_.count(event) ? kCuSuccess : kCuInvalidHandle;
}

int32_t SimExecutor::QueryEvent(uint64_t event) { return SynchronizeEvent(event); }

int32_t SimExecutor::ElapsedTime(uint64_t start, uint64_t end, float* milliseconds) {
  auto first = events_.find(start);
  auto second = events_.find(end);
  if (first == events_.end() || second == events_.end()) return kCuInvalidHandle;
  if ((first->second.flags | second->second.flags) & kEventDisableTiming) {
    return kCuInvalidHandle;
  }
  if (!first->second.recorded || !second->second.recorded) return kCuInvalidHandle;
  *milliseconds = std::chrono::duration<float, std::milli>(second->second.when -
                                                           first->second.when).count();
  return kCuSuccess;
}

}  // namespace gpupool::dataplane
