// Memsets: linear, and 2D as one memset per row (ops/memory.h).
#include "remote/client/core/api_common.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client::ops {

namespace dp = gpupool::dataplane;

CUresult Memset(CUdeviceptr dst, uint32_t value, uint32_t element_size, size_t count, CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (count == 0) return CUDA_SUCCESS;
  int device = DeviceOf(dst, count * element_size);
  if (device < 0) {
    return ForEachPiece(dst, count * element_size, [&](size_t offset, size_t length) {
      if (offset % element_size != 0 || length % element_size != 0) return CUDA_ERROR_INVALID_VALUE;
      return Memset(dst + offset, value, element_size, length / element_size, stream);
    });
  }
  dp::MemsetArgs args{dst, count, value, element_size, 0};
  if (CUresult status = StreamId(stream, &args.stream); status != CUDA_SUCCESS) return status;
  return Runtime::Get().Post(device, dp::kOpMemset, &args, sizeof(args));
}

CUresult Memset2D(CUdeviceptr dst, size_t pitch, uint32_t value, uint32_t element_size, size_t width, size_t height,
                  CUstream stream) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (height > 1 && pitch < width * element_size) return CUDA_ERROR_INVALID_VALUE;
  if (pitch == width * element_size) {
    return Memset(dst, value, element_size, width * height, stream);
  }
  for (size_t row = 0; row < height; ++row) {
    if (CUresult status = Memset(dst + row * pitch, value, element_size, width, stream); status != CUDA_SUCCESS) {
      return status;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace gpupool::client::ops
