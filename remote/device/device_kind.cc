#include "remote/device/device_kind.h"

#include <mutex>
#include <vector>

namespace gpupool::device {
namespace {

// Registered at the start of main, read from any thread afterwards: a mutex, not an
// ordering rule, keeps a late registration (a test's) safe.
std::mutex registry_mu;
std::vector<std::unique_ptr<DeviceKind>>& Registry() {
  static auto* kinds = new std::vector<std::unique_ptr<DeviceKind>>();  // never destroyed:
  return *kinds;  // worker threads may look a kind up while the process exits
}

}  // namespace

bool RegisterDeviceKind(std::unique_ptr<DeviceKind> kind) {
  std::lock_guard<std::mutex> lock(registry_mu);
  for (const auto& known : Registry()) {
    if (known->name() == kind->name()) return false;
  }
  Registry().push_back(std::move(kind));
  return true;
}

const DeviceKind* FindDeviceKind(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mu);
  for (const auto& known : Registry()) {
    if (known->name() == name) return known.get();
  }
  return nullptr;
}

std::string DeviceKindNames() {
  std::lock_guard<std::mutex> lock(registry_mu);
  const auto& kinds = Registry();
  if (kinds.empty()) return "none registered";
  std::string names;
  for (size_t i = 0; i < kinds.size(); ++i) {
    if (i > 0) names += i + 1 == kinds.size() ? " or " : ", ";
    names += kinds[i]->name();
  }
  return names;
}

Result<std::unique_ptr<GpuBackend>> OpenBackend(const std::string& name, const AgentConfig& config) {
  const DeviceKind* kind = FindDeviceKind(name);
  if (kind == nullptr) {
    return Status::InvalidArgument("unknown backend '" + name + "' (expected " + DeviceKindNames() + ")");
  }
  return kind->OpenBackend(config);
}

}  // namespace gpupool::device
