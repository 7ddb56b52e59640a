// Tensor maps (CUtensorMap, compute capability 9.0's tensor copies: TMA) on the sim GPU.
//
// cuTensorMapEncodeTiled checks its arguments as the driver documents them
// (CUDA_ERROR_INVALID_VALUE naming the argument) and writes the sim's layout of the map
// (remote/protocol/sim_tensor_map.h) into the caller's 128 bytes, which the program passes
// to its kernels as it would a driver's (a __grid_constant__ parameter, or copied to
// device memory). The PTX engine reads them at each tensor copy and checks them again.
//
// On a GPU host's real GPU (the cuda executor) the map is its driver's, whose layout is
// opaque: the agent makes it (kOpTensorMap) and the driver checks the arguments; so does
// cuTensorMapReplaceAddress of such a map. Never run on a real GPU.
//
// Not supported on the sim (CUDA_ERROR_NOT_SUPPORTED, logged): interleaved layouts, the
// packed 4- and 6-bit types, the 128-byte swizzles of 32- and 64-byte atoms (compute
// capability 10.0), and a swizzled box whose rows are narrower than the swizzle's span.
// Nowhere: im2col maps (cuTensorMapEncodeIm2col and cuTensorMapEncodeIm2colWide: the
// library's stubs).
#include <cstring>
#include <string>

#include "remote/client/core/api_common.h"
#include "remote/protocol/sim_tensor_map.h"

namespace gpupool::client {
namespace {

namespace dp = gpupool::dataplane;

CUresult Invalid(const char* call, const std::string& what) {
  LogError("%s: %s", call, what.c_str());
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult Unsupported(const char* call, const char* what) {
  return static_cast<CUresult>(ReportUnsupported(call, what));
}

// Whether the current context's GPU (*device) is a sim GPU.
CUresult CurrentGpu(bool* sim, int* device) {
  if (CUresult status = CurrentDevice(device); status != CUDA_SUCCESS) return status;
  Device* d = Runtime::Get().device(*device);
  if (d == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *sim = std::strncmp(d->description().executor, "sim", sizeof(d->description().executor)) == 0;
  return CUDA_SUCCESS;
}

// A map the GPU host's driver makes (kOpTensorMap) into `tensor_map`.
CUresult ForwardTensorMap(const char* call, int device, const dp::TensorMapArgs& args, CUtensorMap* tensor_map) {
  std::string out;
  if (CUresult status =
          Runtime::Get().Call(device, dp::kOpTensorMap, &args, sizeof(args), nullptr, 0, nullptr, 0, &out);
      status != CUDA_SUCCESS) {
    LogError("%s: the GPU host refused the tensor map (CUresult %d; its agent's log says why)", call,
             static_cast<int>(status));
    return status;
  }
  if (out.size() != sizeof(*tensor_map)) return CUDA_ERROR_UNKNOWN;  // an agent that answers otherwise
  std::memcpy(tensor_map, out.data(), sizeof(*tensor_map));
  return CUDA_SUCCESS;
}

}  // namespace

GPUPOOL_CUDA_API CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap* tensorMap, CUtensorMapDataType tensorDataType,
                                                         cuuint32_t tensorRank, void* globalAddress,
                                                         const cuuint64_t* globalDim, const cuuint64_t* globalStrides,
                                                         const cuuint32_t* boxDim, const cuuint32_t* elementStrides,
                                                         CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
                                                         CUtensorMapL2promotion l2Promotion,
                                                         CUtensorMapFloatOOBfill oobFill) {
  GPUPOOL_BODY({
    const char* call = "cuTensorMapEncodeTiled";
    if (tensorMap == nullptr || globalDim == nullptr || boxDim == nullptr || elementStrides == nullptr ||
        (tensorRank > 1 && globalStrides == nullptr)) {
      return Invalid(call, "a null argument");
    }
    if (reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0) return Invalid(call, "tensorMap is not 64-byte aligned");
    if (tensorRank < 1 || tensorRank > dp::kSimTensorMapMaxRank) {
      return Invalid(call, "tensorRank " + std::to_string(tensorRank) + " is not 1 to 5");
    }
    bool sim = true;
    int device = 0;
    if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
    if (!sim) {
      dp::TensorMapArgs args;
      args.kind = dp::kTensorMapEncodeTiled;
      args.data_type = static_cast<uint32_t>(tensorDataType);
      args.rank = tensorRank;
      args.interleave = static_cast<uint32_t>(interleave);
      args.swizzle = static_cast<uint32_t>(swizzle);
      args.l2_promotion = static_cast<uint32_t>(l2Promotion);
      args.oob_fill = static_cast<uint32_t>(oobFill);
      args.address = reinterpret_cast<uintptr_t>(globalAddress);
      for (uint32_t i = 0; i < tensorRank; ++i) {
        args.dims[i] = globalDim[i];
        args.box[i] = boxDim[i];
        args.element_strides[i] = elementStrides[i];
        if (i + 1 < tensorRank) args.strides[i] = globalStrides[i];
      }
      return ForwardTensorMap(call, device, args, tensorMap);
    }
    const uint32_t type = static_cast<uint32_t>(tensorDataType);
    const uint32_t size = dp::SimTensorElementBytes(type);
    if (size == 0) {
      if (type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B || type == CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B ||
          type == CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B) {
        return Unsupported(call, "packed 4- and 6-bit tensor types on a sim GPU");
      }
      return Invalid(call, "tensorDataType " + std::to_string(type) + " is no CUtensorMapDataType");
    }
    if (interleave == CU_TENSOR_MAP_INTERLEAVE_16B || interleave == CU_TENSOR_MAP_INTERLEAVE_32B) {
      return Unsupported(call, "interleaved tensor layouts on a sim GPU");
    }
    if (interleave != CU_TENSOR_MAP_INTERLEAVE_NONE) return Invalid(call, "interleave is no CUtensorMapInterleave");
    const uint64_t address = reinterpret_cast<uintptr_t>(globalAddress);
    if (address % 16 != 0) return Invalid(call, "globalAddress is not 16-byte aligned");
    for (uint32_t i = 0; i < tensorRank; ++i) {
      const std::string at = "[" + std::to_string(i) + "] ";
      if (globalDim[i] == 0 || globalDim[i] > dp::kSimTensorMapMaxDim) {
        return Invalid(call, "globalDim" + at + std::to_string(globalDim[i]) + " is not 1 to 2^32");
      }
      if (boxDim[i] == 0 || boxDim[i] > dp::kSimTensorMapMaxBox) {
        return Invalid(call, "boxDim" + at + std::to_string(boxDim[i]) + " is not 1 to 256");
      }
      if (elementStrides[i] == 0 || elementStrides[i] > dp::kSimTensorMapMaxElementStride) {
        return Invalid(call, "elementStrides" + at + std::to_string(elementStrides[i]) + " is not 1 to 8");
      }
      if (i + 1 < tensorRank && (globalStrides[i] % 16 != 0 || globalStrides[i] >= dp::kSimTensorMapMaxStride)) {
        return Invalid(call,
                       "globalStrides" + at + std::to_string(globalStrides[i]) + " is not a multiple of 16 below 2^40");
      }
    }
    const uint64_t row_bytes = uint64_t{boxDim[0]} * size;
    if (row_bytes % 16 != 0) return Invalid(call, "boxDim[0] * the element size is not a multiple of 16 bytes");
    const uint32_t mode = static_cast<uint32_t>(swizzle);
    if (mode > CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B) return Invalid(call, "swizzle is no CUtensorMapSwizzle");
    if (mode > dp::kSimTensorSwizzleMax) return Unsupported(call, "swizzles of 32- and 64-byte atoms on a sim GPU");
    if (mode != 0 && row_bytes > dp::SimTensorSwizzleSpan(mode)) {
      return Invalid(call, "the box's inner dimension (" + std::to_string(row_bytes) +
                               " bytes) exceeds the swizzle's " + std::to_string(dp::SimTensorSwizzleSpan(mode)));
    }
    if (mode != 0 && row_bytes != dp::SimTensorSwizzleSpan(mode)) {
      return Unsupported(call, "a swizzled box whose rows are narrower than the swizzle's span, on a sim GPU");
    }
    if (static_cast<uint32_t>(l2Promotion) > CU_TENSOR_MAP_L2_PROMOTION_L2_256B) {
      return Invalid(call, "l2Promotion is no CUtensorMapL2promotion");
    }
    if (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE &&
        (oobFill != CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA || !dp::SimTensorTypeIsFloat(type))) {
      return Invalid(call, "oobFill: a NaN fill is for floating-point types only");
    }
    dp::SimTensorMap map;
    map.magic = dp::kSimTensorMapMagic;
    map.rank = static_cast<uint8_t>(tensorRank);
    map.type = static_cast<uint8_t>(type);
    map.swizzle = static_cast<uint8_t>(mode);
    map.oob_nan = oobFill == CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA ? 1 : 0;
    map.address = address;
    for (uint32_t i = 0; i < tensorRank; ++i) {
      map.dims[i] = globalDim[i];
      map.box[i] = static_cast<uint16_t>(boxDim[i]);
      map.element_strides[i] = static_cast<uint8_t>(i == 0 ? 1 : elementStrides[i]);  // TMA has none in dimension 0
      if (i + 1 < tensorRank) map.strides[i] = globalStrides[i];
    }
    static_assert(sizeof(map) == sizeof(*tensorMap));
    std::memcpy(tensorMap, &map, sizeof(map));
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap* tensorMap, void* globalAddress) {
  GPUPOOL_BODY({
    const char* call = "cuTensorMapReplaceAddress";
    if (tensorMap == nullptr) return Invalid(call, "a null tensorMap");
    if (reinterpret_cast<uintptr_t>(tensorMap) % 64 != 0) return Invalid(call, "tensorMap is not 64-byte aligned");
    if (reinterpret_cast<uintptr_t>(globalAddress) % 16 != 0) {
      return Invalid(call, "globalAddress is not 16-byte aligned");
    }
    dp::SimTensorMap map;
    std::memcpy(static_cast<void*>(&map), tensorMap, sizeof(map));
    if (map.magic != dp::kSimTensorMapMagic) {
      // Not the sim's: one the current GPU's driver made, if it is a GPU host's.
      bool sim = true;
      int device = 0;
      if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
      if (sim) return Invalid(call, "tensorMap was not made by cuTensorMapEncodeTiled");
      dp::TensorMapArgs args;
      args.kind = dp::kTensorMapReplaceAddress;
      args.address = reinterpret_cast<uintptr_t>(globalAddress);
      std::memcpy(args.map, tensorMap, sizeof(args.map));
      return ForwardTensorMap(call, device, args, tensorMap);
    }
    map.address = reinterpret_cast<uintptr_t>(globalAddress);
    std::memcpy(tensorMap, &map, sizeof(map));
    return CUDA_SUCCESS;
  });
}

}  // namespace gpupool::client
