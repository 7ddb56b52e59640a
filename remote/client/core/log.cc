#include "remote/client/core/log.h"

#include <cuda.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>

namespace gpupool::client {
namespace {

void Print(const char* format, va_list args) {
  char line[1024];
  vsnprintf(line, sizeof(line), format, args);
  std::fprintf(stderr, "gpupool-cuda: %s\n", line);
}

std::atomic<unsigned long> unsupported_calls{0};

}  // namespace

bool DebugEnabled() {
  static const bool enabled = [] {
    const char* value = std::getenv("GPUPOOL_CUDA_DEBUG");
    return value != nullptr && value[0] != '\0' && value[0] != '0';
  }();
  return enabled;
}

void LogError(const char* format, ...) {
  va_list args;
  va_start(args, format);
  Print(format, args);
  va_end(args);
}

void LogDebug(const char* format, ...) {
  if (!DebugEnabled()) return;
  va_list args;
  va_start(args, format);
  Print(format, args);
  va_end(args);
}

int ReportUnsupported(const char* name) { return ReportUnsupported(name, nullptr); }

int ReportUnsupported(const char* name, const char* why) {
  unsupported_calls.fetch_add(1);
  static std::mutex mu;
  static auto* reported = new std::set<std::string>();
  bool first;
  {
    std::lock_guard<std::mutex> lock(mu);
    first = reported->insert(name).second;
  }
  if (first && why != nullptr) {
    LogError("%s is not supported by remote GPUs (%s): returning CUDA_ERROR_NOT_SUPPORTED", name, why);
  } else if (first) {
    LogError("%s is not supported by remote GPUs: returning CUDA_ERROR_NOT_SUPPORTED", name);
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

unsigned long UnsupportedCallCount() { return unsupported_calls.load(); }

}  // namespace gpupool::client
