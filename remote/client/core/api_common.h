// The helpers every layer's calls share: Guard, RequireInit, CurrentDevice; and, for the
// exported functions (api/ only), GPUPOOL_CUDA_API and GPUPOOL_BODY.
//
// Every exported function body runs inside Guard: no C++ exception may cross the C ABI
// into the application, so an unexpected one becomes CUDA_ERROR_UNKNOWN (and is logged).
#pragma once

#include <cuda.h>

#include <exception>

#include "remote/client/core/log.h"
#include "remote/client/core/runtime.h"

#define GPUPOOL_CUDA_API extern "C" __attribute__((visibility("default")))

namespace gpupool::client {

template <typename Body>
CUresult Guard(const char* name, Body&& body) noexcept {
  try {
    return body();
  } catch (const std::exception& e) {
    LogError("%s: internal error: %s", name, e.what());
  } catch (...) {
    LogError("%s: internal error", name);
  }
  return CUDA_ERROR_UNKNOWN;
}

// CUDA_SUCCESS once cuInit succeeded; otherwise what the caller must return.
inline CUresult RequireInit() {
  CUresult status = Runtime::Get().initialized();
  return status == CUDA_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

// The current context's device, or an error.
inline CUresult CurrentDevice(int* device) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  Context* context = CurrentContext();
  if (context == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (context->magic == kDestroyedContextMagic) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *device = context->device;
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client

// Wraps a function body: GPUPOOL_BODY({ ...; return CUDA_SUCCESS; })
#define GPUPOOL_BODY(...) return ::gpupool::client::Guard(__func__, [&]() -> CUresult __VA_ARGS__)
