// Device allocation and free (ops/memory.h).
#include <cstring>
#include <string>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/mem_pools.h"
#include "remote/client/ops/memory.h"

namespace gpupool::client::ops {

namespace dp = gpupool::dataplane;

CUresult AllocDeviceMemory(CUdeviceptr* dptr, size_t size) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int device = 0;
  if (CUresult status = CurrentDevice(&device); status != CUDA_SUCCESS) return status;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  // The address is ours to choose, so that it stays the same on a replacement GPU.
  dp::MemAllocArgs args{size, Runtime::Get().ChooseAddress(size)};
  dp::MemAllocResult result{0};
  std::string out;
  CUresult status = Runtime::Get().Call(device, dp::kOpMemAlloc, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
  if (status == CUDA_SUCCESS && out.size() != sizeof(result)) status = CUDA_ERROR_UNKNOWN;
  if (status == CUDA_SUCCESS) std::memcpy(&result, out.data(), sizeof(result));
  if (status != CUDA_SUCCESS || result.dptr != args.address) {
    Runtime::Get().ReleaseAddress(args.address, size);
  }
  if (status != CUDA_SUCCESS) return status;
  std::memcpy(&result, out.data(), sizeof(result));
  Runtime::Get().AddContextAllocation(result.dptr, size, device, CurrentContext());
  *dptr = result.dptr;
  return CUDA_SUCCESS;
}

CUresult FreeDeviceMemory(CUdeviceptr dptr) {
  if (CUresult status = RequireInit(); status != CUDA_SUCCESS) return status;
  if (dptr == 0) return CUDA_SUCCESS;
  int device = 0;
  Allocation allocation{};
  uint64_t start = 0;
  if (!Runtime::Get().FindAllocation(dptr, 1, &start, &allocation) || start != dptr ||
      !Runtime::Get().RemoveAllocation(dptr, &device)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ForgetPoolAllocation(dptr);
  dp::MemFreeArgs args{dptr};
  CUresult status = Runtime::Get().Call(device, dp::kOpMemFree, &args, sizeof(args));
  // Reused only once the GPU has freed it (a managed range's host pages with it).
  if (status == CUDA_SUCCESS && !Runtime::Get().ForgetManaged(dptr)) {
    Runtime::Get().ReleaseAddress(dptr, allocation.size);
  }
  return status;
}

}  // namespace gpupool::client::ops
