// How the sim GPU keeps CUDA arrays, texture objects and surface objects: in the session's
// own device memory, laid out by the replacement libcuda.so.1 (remote/client/api/api_array.cc)
// and read by the PTX engine's texture and surface instructions (remote/ptx/texture.h).
//
//  - A CUDA array is one ordinary device allocation: its texels row after row (a row is
//    width * element bytes, no padding), rows of a slice after each other, then the next
//    slice (3D depth, or the layers of a layered array; a cubemap's 6 faces are 6 layers,
//    face-major, a cubemap layered array 6 * layers). Copies to and from it are the
//    client's 2D/3D row copies over that allocation.
//  - A texture or surface object's handle (CUtexObject, CUsurfObject) is the device
//    address of a SimTextureDescriptor the client wrote into an allocation of its own.
//  - A mipmapped array is one allocation holding its levels one after another, each laid
//    out as an array; a texture object of one is flagged kSimTexMipmapped, its descriptor
//    describing level 0 and followed in its allocation by a SimMipmapHeader and the
//    header's `levels` SimMipmapLevels.
//
// So arrays and descriptors are device memory like any other: a session's checkpoint and
// journal carry them across a failover, and nothing of them lives in the agent.
//
// Who may use it: only the session owning the memory. A kernel reads a descriptor at the
// handle it is given and the texels it names through the same bounds checks as its loads
// (a forged descriptor reaches only the session's own allocations; anything else faults
// as an illegal address).
//
// Fixed layout (both sides are built from this header; no version beyond the protocol's).
#pragma once

#include <cstdint>

namespace gpupool::dataplane {

inline constexpr uint32_t kSimTextureMagic = 0x54585047;  // "GPXT"
inline constexpr uint32_t kSimSurfaceMagic = 0x46535047;  // "GPSF"

// Texel formats: CUarray_format's numbers (cuda.h), the ones the sim samples.
enum SimTexelFormat : uint32_t {
  kTexelU8 = 0x01,
  kTexelU16 = 0x02,
  kTexelU32 = 0x03,
  kTexelS8 = 0x08,
  kTexelS16 = 0x09,
  kTexelS32 = 0x0a,
  kTexelF16 = 0x10,
  kTexelF32 = 0x20,
};

// Bytes of one channel of `format`; 0 for a format the sim does not sample.
inline uint32_t SimTexelChannelBytes(uint32_t format) {
  switch (format) {
    case kTexelU8:
    case kTexelS8:
      return 1;
    case kTexelU16:
    case kTexelS16:
    case kTexelF16:
      return 2;
    case kTexelU32:
    case kTexelS32:
    case kTexelF32:
      return 4;
    default:
      return 0;
  }
}

// CUaddress_mode's numbers.
enum SimAddressMode : uint32_t { kAddressWrap = 0, kAddressClamp = 1, kAddressMirror = 2, kAddressBorder = 3 };

// SimTextureDescriptor::flags
inline constexpr uint32_t kSimTexLayered = 1;         // `layers` layers of width x height
inline constexpr uint32_t kSimTexCubemap = 2;         // 6 faces (times layers) of width x width
inline constexpr uint32_t kSimTexLinearFilter = 4;    // CU_TR_FILTER_MODE_LINEAR
inline constexpr uint32_t kSimTexNormalized = 8;      // CU_TRSF_NORMALIZED_COORDINATES
inline constexpr uint32_t kSimTexReadAsInteger = 16;  // CU_TRSF_READ_AS_INTEGER
inline constexpr uint32_t kSimTexLinearMemory = 32;   // CU_RESOURCE_TYPE_LINEAR (tex1Dfetch)
inline constexpr uint32_t kSimTexMipmapped = 64;      // CU_RESOURCE_TYPE_MIPMAPPED_ARRAY

struct SimTextureDescriptor {
  uint32_t magic = 0;        // kSimTextureMagic or kSimSurfaceMagic
  uint32_t format = 0;       // SimTexelFormat
  uint32_t channels = 0;     // 1, 2 or 4
  uint32_t dims = 0;         // 1, 2 or 3 (a layered array: its layers' dimensions; cubemap: 2)
  uint64_t base = 0;         // device address of texel (0, 0, 0)
  uint64_t width = 0;        // texels
  uint64_t height = 1;       // rows (1 for one dimension)
  uint64_t depth = 1;        // slices: 3D depth, layers, or cubemap faces (6 * layers)
  uint64_t pitch = 0;        // bytes from one row to the next
  uint64_t slice_pitch = 0;  // bytes from one slice (or layer, or face) to the next
  uint32_t flags = 0;
  uint32_t address_mode[3] = {kAddressClamp, kAddressClamp, kAddressClamp};
  float border[4] = {0, 0, 0, 0};
  uint64_t reserved[2] = {0, 0};
};
static_assert(sizeof(SimTextureDescriptor) == 112, "the descriptor's layout is shared");

// The most levels a mipmapped array has (1 + log2 of 2^17, the largest 1D width).
inline constexpr uint32_t kSimMaxMipmapLevels = 18;

// After a mipmapped texture's descriptor: how it picks levels (CUDA_TEXTURE_DESC's
// mipmapFilterMode, mipmapLevelBias, minMipmapLevelClamp, maxMipmapLevelClamp).
struct SimMipmapHeader {
  uint32_t levels = 1;         // 1 to kSimMaxMipmapLevels
  uint32_t linear_filter = 0;  // 1: CU_TR_FILTER_MODE_LINEAR between levels
  float bias = 0;
  float min_clamp = 0;
  float max_clamp = 0;
  uint32_t reserved = 0;
};
static_assert(sizeof(SimMipmapHeader) == 24, "the header's layout is shared");

// One level of a mipmapped texture: as the descriptor's fields of the same names.
struct SimMipmapLevel {
  uint64_t base = 0;
  uint64_t width = 0;
  uint64_t height = 1;
  uint64_t depth = 1;
  uint64_t pitch = 0;
  uint64_t slice_pitch = 0;
};
static_assert(sizeof(SimMipmapLevel) == 48, "a level's layout is shared");

}  // namespace gpupool::dataplane
