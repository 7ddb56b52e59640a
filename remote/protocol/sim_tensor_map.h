// How the sim GPU keeps a tensor map (CUtensorMap, the 128 opaque bytes that
// cuTensorMapEncodeTiled makes and the tensor copies of compute capability 9.0 read:
// `cp.async.bulk.tensor`, TMA): written by the replacement libcuda.so.1
// (remote/client/api/api_tensor_map.cc) into the caller's CUtensorMap, read by the PTX
// engine's tensor copies (remote/ptx/tensor_copy.h) wherever the program put it (a
// `__grid_constant__` kernel parameter, constant or global memory).
//
// Who may use it: anyone; it is bytes of the program's own. The engine trusts none of them:
// it checks every field again at each copy (a forged or overwritten map is refused as an
// illegal instruction of that launch), and every element it reads or writes goes through
// the same bounds checks as the kernel's own loads and stores, so a map can name only the
// session's own memory.
//
// Fixed layout (both sides are built from this header; no version beyond the protocol's).
#pragma once

#include <cstdint>

namespace gpupool::dataplane {

inline constexpr uint32_t kSimTensorMapMagic = 0x4d545047;  // "GPTM"
inline constexpr uint32_t kSimTensorMapMaxRank = 5;
inline constexpr uint32_t kSimTensorMapMaxBox = 256;          // elements of a box, per dimension
inline constexpr uint32_t kSimTensorMapMaxElementStride = 8;  // elements, per dimension
inline constexpr uint64_t kSimTensorMapMaxDim = uint64_t{1} << 32;
inline constexpr uint64_t kSimTensorMapMaxStride = uint64_t{1} << 40;  // bytes, exclusive

// CUtensorMapDataType's numbers (cuda.h), those the sim copies: every type but the packed
// 4- and 6-bit ones.
enum SimTensorType : uint8_t {
  kTensorU8 = 0,
  kTensorU16 = 1,
  kTensorU32 = 2,
  kTensorS32 = 3,
  kTensorU64 = 4,
  kTensorS64 = 5,
  kTensorF16 = 6,
  kTensorF32 = 7,
  kTensorF64 = 8,
  kTensorBF16 = 9,
  kTensorF32Ftz = 10,
  kTensorTF32 = 11,
  kTensorTF32Ftz = 12,
};

// Bytes of one element of `type`; 0 for a type the sim does not copy.
inline uint32_t SimTensorElementBytes(uint32_t type) {
  switch (type) {
    case kTensorU8:
      return 1;
    case kTensorU16:
    case kTensorF16:
    case kTensorBF16:
      return 2;
    case kTensorU32:
    case kTensorS32:
    case kTensorF32:
    case kTensorF32Ftz:
    case kTensorTF32:
    case kTensorTF32Ftz:
      return 4;
    case kTensorU64:
    case kTensorS64:
    case kTensorF64:
      return 8;
    default:
      return 0;
  }
}

inline bool SimTensorTypeIsFloat(uint32_t type) { return type >= kTensorF16 && type <= kTensorTF32Ftz; }

// CUtensorMapSwizzle's numbers the sim lays out: none, 32, 64 and 128 bytes.
inline constexpr uint32_t kSimTensorSwizzleNone = 0;
inline constexpr uint32_t kSimTensorSwizzleMax = 3;
// The span a swizzle mode permutes 16-byte chunks within (0: none).
inline uint32_t SimTensorSwizzleSpan(uint32_t swizzle) { return swizzle == 0 ? 0 : 16u << swizzle; }

// A tiled tensor map. Dimension 0 is the innermost (contiguous) one.
struct alignas(64) SimTensorMap {
  uint32_t magic = 0;                       // kSimTensorMapMagic
  uint8_t rank = 0;                         // 1 to kSimTensorMapMaxRank
  uint8_t type = 0;                         // SimTensorType
  uint8_t swizzle = 0;                      // 0 to kSimTensorSwizzleMax; the box's rows are then the span's bytes
  uint8_t oob_nan = 0;                      // 1: out-of-bounds elements of a float type read as NaN, else 0
  uint16_t box[kSimTensorMapMaxRank] = {};  // elements traversed per dimension (1 to 256)
  // Traversal steps per dimension (1 to 8; dimension 0's is always 1: TMA has none there).
  uint8_t element_strides[kSimTensorMapMaxRank] = {};
  uint8_t reserved0 = 0;
  uint64_t address = 0;                             // device address of element (0, ...), 16-aligned
  uint64_t dims[kSimTensorMapMaxRank] = {};         // elements per dimension (1 to 2^32)
  uint64_t strides[kSimTensorMapMaxRank - 1] = {};  // bytes between dimension i+1's elements
  uint64_t reserved1[3] = {};
};
static_assert(sizeof(SimTensorMap) == 128, "a tensor map is CUtensorMap's 128 bytes");

}  // namespace gpupool::dataplane
