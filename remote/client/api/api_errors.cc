// Driver API: cuGetErrorName / cuGetErrorString (the table: core/errors.cc).
#include "remote/client/core/api_common.h"
#include "remote/client/core/errors.h"

using gpupool::client::ErrorText;
using gpupool::client::FindError;

GPUPOOL_CUDA_API CUresult CUDAAPI cuGetErrorName(CUresult error, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* found = FindError(error);
  *name = found ? found->name : nullptr;
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuGetErrorString(CUresult error, const char** text) {
  if (text == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* found = FindError(error);
  *text = found ? found->text : nullptr;
  return found ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
