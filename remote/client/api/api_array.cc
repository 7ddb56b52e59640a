// CUDA arrays, texture objects and surface objects on the sim GPU.
//
// An array is one device allocation, laid out as remote/protocol/sim_texture.h says (rows
// without padding, slices after each other, a cubemap's faces as slices); a texture or
// surface object is a SimTextureDescriptor written into an allocation of its own, whose
// device address is the handle a kernel gets. Both are ordinary device memory of the
// context, so a failover's checkpoint and journal carry them like any allocation.
//
// On the cuda executor a real GPU's texture unit reads neither layout: arrays, texture
// objects and surface objects are made by the GPU's driver through the agent
// (ops::NewForwardedArray, ops::CopyForwardedArray, ForwardTextureObject, the forwarded
// branch of cuSurfObjectCreate; mipmapped arrays: ops::NewForwardedMipmappedArray, whose
// levels are forwarded arrays). On the sim a mipmapped array is one allocation of its
// levels, each an array. Not supported anywhere: resource views, sRGB reads, texture and
// surface references (cuTexRef*, cuSurfRef*), sparse arrays.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "remote/client/core/api_common.h"
#include "remote/client/ops/arrays.h"
#include "remote/client/ops/memory.h"
#include "remote/protocol/sim_texture.h"
#include "remote/protocol/texture_desc.h"

namespace gpupool::client {
namespace {

namespace dp = gpupool::dataplane;
using ops::ArrayInfo;
using ops::FindArray;
using ops::NewArray;

// A bad argument: logged with the field it names, CUDA_ERROR_INVALID_VALUE.
CUresult Invalid(const char* call, const std::string& what) {
  LogError("%s: %s", call, what.c_str());
  return CUDA_ERROR_INVALID_VALUE;
}

// Whether the current context's GPU is a sim GPU (*sim; its ordinal in *device), whose
// arrays and objects the library makes itself.
CUresult CurrentGpu(bool* sim, int* device) {
  if (CUresult status = CurrentDevice(device); status != CUDA_SUCCESS) return status;
  Device* d = Runtime::Get().device(*device);
  if (d == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  *sim = std::strncmp(d->description().executor, "sim", sizeof(d->description().executor)) == 0;
  return CUDA_SUCCESS;
}

// A copy of `bytes` at `offset` of a forwarded array's first row (CUDA's linear array calls
// are for 1D arrays; a sim array's bytes are device memory any offset reaches), as a 2D copy
// of one row, which its agent makes.
CUresult ArrayRowCopy(CUarray array, size_t offset, size_t bytes, bool to_array, CUmemorytype other_type,
                      const void* host, CUdeviceptr device_ptr, CUstream stream) {
  CUDA_MEMCPY2D copy{};
  copy.WidthInBytes = bytes;
  copy.Height = 1;
  (to_array ? copy.dstMemoryType : copy.srcMemoryType) = CU_MEMORYTYPE_ARRAY;
  (to_array ? copy.dstArray : copy.srcArray) = array;
  (to_array ? copy.dstXInBytes : copy.srcXInBytes) = offset;
  (to_array ? copy.srcMemoryType : copy.dstMemoryType) = other_type;
  if (to_array) {
    copy.srcHost = host;
    copy.srcDevice = device_ptr;
  } else {
    copy.dstHost = const_cast<void*>(host);
    copy.dstDevice = device_ptr;
  }
  return ops::Copy2D(&copy, stream);
}

bool Multiply(size_t a, size_t b, size_t* out) { return !__builtin_mul_overflow(a, b, out); }

// Bytes of one element of `format` with `channels`, or an error naming the field.
CUresult ElementBytes(const char* call, CUarray_format format, unsigned channels, size_t* bytes) {
  const uint32_t channel = dp::SimTexelChannelBytes(static_cast<uint32_t>(format));
  if (channel == 0) {
    // Real formats the sim does not sample (block-compressed, packed, UNORM vectors...).
    LogError("%s: Format 0x%x is not supported on pool GPUs", call, static_cast<unsigned>(format));
    return static_cast<CUresult>(ReportUnsupported(call, "that array format"));
  }
  if (channels != 1 && channels != 2 && channels != 4) {
    return Invalid(call, "NumChannels " + std::to_string(channels) + " is not 1, 2 or 4");
  }
  *bytes = size_t{channel} * channels;
  return CUDA_SUCCESS;
}

// A GPU's limits (those of an A100, which every sim model shares for textures).
constexpr size_t kMax1D = 131072, kMax2DWidth = 131072, kMax2DHeight = 65536, kMax3D = 16384, kMaxLayered = 32768,
                 kMaxLayers = 2048;

// Checks an array's descriptor as a driver does (*desc) and lays it out: *info, and its
// size in *bytes.
CUresult ArrayLayout(const char* call, const CUDA_ARRAY3D_DESCRIPTOR* desc, ArrayInfo* result, size_t* bytes_out) {
  size_t element = 0;
  if (CUresult status = ElementBytes(call, desc->Format, desc->NumChannels, &element); status != CUDA_SUCCESS) {
    return status;
  }
  const unsigned known =
      CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP | CUDA_ARRAY3D_TEXTURE_GATHER;
  if (desc->Flags & ~known) {
    LogError(
        "%s: Flags 0x%x: only LAYERED, SURFACE_LDST, CUBEMAP and TEXTURE_GATHER are "
        "supported on pool GPUs",
        call, desc->Flags);
    return static_cast<CUresult>(ReportUnsupported(call, "those array flags"));
  }
  const bool layered = desc->Flags & CUDA_ARRAY3D_LAYERED;
  const bool cubemap = desc->Flags & CUDA_ARRAY3D_CUBEMAP;
  const size_t width = desc->Width, height = desc->Height, depth = desc->Depth;
  if (width == 0) return Invalid(call, "Width is 0");
  if (cubemap) {
    if (width != height) return Invalid(call, "a cubemap's Width and Height differ");
    if (layered ? (depth == 0 || depth % 6 != 0) : depth != 6) {
      return Invalid(call, "a cubemap's Depth is not 6 (a layered one's, a multiple of 6)");
    }
    if (width > kMaxLayered || depth / 6 > kMaxLayers) return Invalid(call, "cubemap too large");
  } else if (layered) {
    if (depth == 0) return Invalid(call, "a layered array's Depth (its layers) is 0");
    if (width > kMaxLayered || height > kMaxLayered || depth > kMaxLayers) {
      return Invalid(call, "layered array too large (Width, Height up to 32768, 2048 layers)");
    }
  } else if (depth > 0) {
    if (height == 0) return Invalid(call, "a 3D array's Height is 0");
    if (width > kMax3D || height > kMax3D || depth > kMax3D) {
      return Invalid(call, "3D array too large (16384 per dimension)");
    }
  } else if (height > 0) {
    if (width > kMax2DWidth || height > kMax2DHeight) {
      return Invalid(call, "2D array too large (Width up to 131072, Height up to 65536)");
    }
  } else if (width > kMax1D) {
    return Invalid(call, "1D array Width over 131072");
  }
  ArrayInfo info;
  info.descriptor = *desc;
  info.row_bytes = width * element;  // under 2^17 * 16: no overflow
  info.rows = height == 0 ? 1 : height;
  info.slices = depth == 0 ? 1 : depth;
  size_t bytes = 0;
  if (!Multiply(info.row_bytes, info.rows, &bytes) || !Multiply(bytes, info.slices, &bytes)) {
    return Invalid(call, "the array's size overflows");
  }
  *result = info;
  *bytes_out = bytes;
  return CUDA_SUCCESS;
}

CUresult CreateArray(const char* call, CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  if (handle == nullptr || desc == nullptr) return Invalid(call, "a null argument");
  bool sim = true;
  int device = 0;
  if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
  ArrayInfo info;
  size_t bytes = 0;
  if (CUresult status = ArrayLayout(call, desc, &info, &bytes); status != CUDA_SUCCESS) return status;
  // On a GPU host's GPU the array is its driver's (its texture unit reads no other layout).
  return sim ? NewArray(info, bytes, handle) : ops::NewForwardedArray(info, device, handle);
}

// A mipmapped array: its levels, each halving level 0's extent (at least 1; layers and a
// cubemap's faces stay), as many as the largest dimension allows. On the sim they are laid
// out as arrays one after another in one allocation (remote/protocol/sim_texture.h); on a
// GPU host's GPU its driver makes them (kOpMipmappedArrayCreate).
CUresult CreateMipmappedArray(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc, unsigned count) {
  const char* call = "cuMipmappedArrayCreate";
  if (handle == nullptr || desc == nullptr) return Invalid(call, "a null argument");
  bool sim = true;
  int device = 0;
  if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
  static_assert(dp::kSimMaxMipmapLevels == dp::kMaxMipmapLevels, "one limit on both executors");
  const bool stacked = desc->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);  // Depth: layers, faces
  size_t largest = std::max<size_t>(desc->Width, desc->Height);
  if (!stacked) largest = std::max<size_t>(largest, desc->Depth);
  unsigned most = 1;
  while (most < dp::kSimMaxMipmapLevels && (largest >> most) > 0) ++most;
  if (count == 0 || count > most) {
    return Invalid(call,
                   "numMipmapLevels " + std::to_string(count) + " (1 to " + std::to_string(most) + " for this extent)");
  }
  std::vector<ArrayInfo> levels(count);
  std::vector<size_t> offsets(count);
  size_t total = 0;
  for (unsigned l = 0; l < count; ++l) {
    CUDA_ARRAY3D_DESCRIPTOR level = *desc;
    level.Width = std::max<size_t>(desc->Width >> l, 1);
    if (desc->Height > 0) level.Height = std::max<size_t>(desc->Height >> l, 1);
    if (!stacked && desc->Depth > 0) level.Depth = std::max<size_t>(desc->Depth >> l, 1);
    size_t bytes = 0;
    if (CUresult status = ArrayLayout(call, &level, &levels[l], &bytes); status != CUDA_SUCCESS) return status;
    offsets[l] = total;
    // Each level starts 256-byte aligned, as a driver's allocations do.
    if (__builtin_add_overflow(total, (bytes + 255) / 256 * 256, &total)) {
      return Invalid(call, "the mipmapped array's size overflows");
    }
  }
  if (!sim) return ops::NewForwardedMipmappedArray(*desc, levels, device, handle);
  return ops::NewMipmappedArray(levels, offsets, total, handle);
}

// A linear or pitched 2D resource (`resource.resType` one of them), checked on any GPU: a
// format the library knows, a pitch at least a row, and every byte inside one allocation.
// *element: bytes of one element; *bytes: from the first element's byte to past the last.
CUresult CheckMemoryResource(const char* call, const CUDA_RESOURCE_DESC& resource, size_t* element, size_t* bytes) {
  if (resource.resType == CU_RESOURCE_TYPE_LINEAR) {
    const auto& l = resource.res.linear;
    if (CUresult status = ElementBytes(call, l.format, l.numChannels, element); status != CUDA_SUCCESS) {
      return status;
    }
    if (l.sizeInBytes < *element) return Invalid(call, "res.linear.sizeInBytes under one element");
    if (!Runtime::Get().FindAllocation(l.devPtr, l.sizeInBytes, nullptr, nullptr)) {
      return Invalid(call, "res.linear.devPtr and sizeInBytes are not inside one allocation");
    }
    *bytes = l.sizeInBytes;
    return CUDA_SUCCESS;
  }
  const auto& p = resource.res.pitch2D;
  if (CUresult status = ElementBytes(call, p.format, p.numChannels, element); status != CUDA_SUCCESS) {
    return status;
  }
  size_t row = 0;
  if (p.width == 0 || p.height == 0) return Invalid(call, "res.pitch2D.width or height is 0");
  if (!Multiply(p.width, *element, &row) || p.pitchInBytes < row) {
    return Invalid(call, "res.pitch2D.pitchInBytes is under width * element size");
  }
  if (p.pitchInBytes % 32 != 0) {
    return Invalid(call, "res.pitch2D.pitchInBytes is not a multiple of 32 (the texture pitch alignment)");
  }
  if (!Multiply(p.pitchInBytes, p.height - 1, bytes) || __builtin_add_overflow(*bytes, row, bytes) ||
      !Runtime::Get().FindAllocation(p.devPtr, *bytes, nullptr, nullptr)) {
    return Invalid(call, "res.pitch2D's rows are not inside one allocation");
  }
  return CUDA_SUCCESS;
}

// The descriptor of an object over `resource`, or an error naming the field.
CUresult Describe(const char* call, const CUDA_RESOURCE_DESC& resource, bool surface, dp::SimTextureDescriptor* d) {
  if (resource.flags != 0) return Invalid(call, "pResDesc->flags is not 0");
  size_t element = 0;
  switch (resource.resType) {
    case CU_RESOURCE_TYPE_ARRAY: {
      ArrayInfo array;
      if (FindArray(resource.res.array.hArray, &array) != CUDA_SUCCESS) {
        return Invalid(call, "pResDesc->res.array.hArray is no array");
      }
      if (array.forwarded_device >= 0) {
        return Invalid(call, "pResDesc->res.array.hArray is an array of a GPU host's GPU, not of this one");
      }
      const CUDA_ARRAY3D_DESCRIPTOR& a = array.descriptor;
      if (surface && !(a.Flags & CUDA_ARRAY3D_SURFACE_LDST)) {
        return Invalid(call, "the array was not created with CUDA_ARRAY3D_SURFACE_LDST");
      }
      d->format = a.Format;
      d->channels = a.NumChannels;
      d->base = array.base;
      d->width = a.Width;
      d->height = array.rows;
      d->depth = array.slices;
      d->pitch = array.row_bytes;
      d->slice_pitch = array.row_bytes * array.rows;
      const bool layered = a.Flags & CUDA_ARRAY3D_LAYERED;
      const bool cubemap = a.Flags & CUDA_ARRAY3D_CUBEMAP;
      d->dims = cubemap ? 2 : layered ? (a.Height ? 2 : 1) : a.Depth ? 3 : a.Height ? 2 : 1;
      if (layered) d->flags |= dp::kSimTexLayered;
      if (cubemap) d->flags |= dp::kSimTexCubemap;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_LINEAR: {
      if (surface) return Invalid(call, "a surface needs an array (pResDesc->resType)");
      const auto& l = resource.res.linear;
      size_t bytes = 0;
      if (CUresult status = CheckMemoryResource(call, resource, &element, &bytes); status != CUDA_SUCCESS) {
        return status;
      }
      d->format = l.format;
      d->channels = l.numChannels;
      d->base = l.devPtr;
      d->width = l.sizeInBytes / element;
      d->pitch = d->slice_pitch = l.sizeInBytes;
      d->dims = 1;
      d->flags |= dp::kSimTexLinearMemory;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_PITCH2D: {
      if (surface) return Invalid(call, "a surface needs an array (pResDesc->resType)");
      const auto& p = resource.res.pitch2D;
      size_t bytes = 0;
      if (CUresult status = CheckMemoryResource(call, resource, &element, &bytes); status != CUDA_SUCCESS) {
        return status;
      }
      d->format = p.format;
      d->channels = p.numChannels;
      d->base = p.devPtr;
      d->width = p.width;
      d->height = p.height;
      d->pitch = p.pitchInBytes;
      d->slice_pitch = bytes;
      d->dims = 2;
      return CUDA_SUCCESS;
    }
    case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
      // A texture's (MipmappedTexture); a surface needs one level's array.
      return Invalid(call, "a surface needs an array (pResDesc->resType)");
    default:
      return Invalid(call, "pResDesc->resType is no CUresourcetype");
  }
}

// A texture object of a mipmapped array on the sim: level 0's descriptor, flagged, and the
// levels' header and table after it (remote/protocol/sim_texture.h).
CUresult MipmappedTexture(const char* call, const CUDA_RESOURCE_DESC& resource, const CUDA_TEXTURE_DESC& texture,
                          dp::SimTextureDescriptor* d, std::vector<uint8_t>* trailer) {
  unsigned count = 0;
  CUarray level0 = nullptr;
  int forwarded_device = -1;
  uint64_t remote = 0;
  if (ops::MipmappedArrayLevel(resource.res.mipmap.hMipmappedArray, 0, &level0, &count) != CUDA_SUCCESS ||
      ops::FindMipmappedArray(resource.res.mipmap.hMipmappedArray, &forwarded_device, &remote) != CUDA_SUCCESS) {
    return Invalid(call, "pResDesc->res.mipmap.hMipmappedArray is no mipmapped array");
  }
  if (forwarded_device >= 0) {
    return Invalid(call, "pResDesc->res.mipmap.hMipmappedArray is a GPU host's GPU's, not this GPU's");
  }
  if (texture.mipmapFilterMode != CU_TR_FILTER_MODE_POINT && texture.mipmapFilterMode != CU_TR_FILTER_MODE_LINEAR) {
    return Invalid(call, "pTexDesc->mipmapFilterMode is no CUfilter_mode");
  }
  if (std::isnan(texture.mipmapLevelBias) || std::isnan(texture.minMipmapLevelClamp) ||
      std::isnan(texture.maxMipmapLevelClamp)) {
    return Invalid(call, "a mipmap level bias or clamp is not a number");
  }
  CUDA_RESOURCE_DESC first{};
  first.resType = CU_RESOURCE_TYPE_ARRAY;
  first.res.array.hArray = level0;
  if (CUresult status = Describe(call, first, false, d); status != CUDA_SUCCESS) return status;
  d->flags |= dp::kSimTexMipmapped;
  dp::SimMipmapHeader header;
  header.levels = count;
  header.linear_filter = texture.mipmapFilterMode == CU_TR_FILTER_MODE_LINEAR ? 1 : 0;
  header.bias = texture.mipmapLevelBias;
  header.min_clamp = texture.minMipmapLevelClamp;
  header.max_clamp = texture.maxMipmapLevelClamp;
  trailer->resize(sizeof(header) + count * sizeof(dp::SimMipmapLevel));
  std::memcpy(trailer->data(), &header, sizeof(header));
  for (unsigned l = 0; l < count; ++l) {
    CUarray array = nullptr;
    ArrayInfo info;
    if (ops::MipmappedArrayLevel(resource.res.mipmap.hMipmappedArray, l, &array) != CUDA_SUCCESS ||
        FindArray(array, &info) != CUDA_SUCCESS) {
      return Invalid(call, "pResDesc->res.mipmap.hMipmappedArray is no mipmapped array");
    }
    dp::SimMipmapLevel level;
    level.base = info.base;
    level.width = info.descriptor.Width;
    level.height = info.rows;
    level.depth = info.slices;
    level.pitch = info.row_bytes;
    level.slice_pitch = info.row_bytes * info.rows;
    std::memcpy(trailer->data() + sizeof(header) + l * sizeof(level), &level, sizeof(level));
  }
  return CUDA_SUCCESS;
}

// A request whose answer is a driver's handle (kOpTexObjectCreate, kOpSurfObjectCreate).
CUresult CallForHandle(int device, uint32_t op, const void* args, size_t size, uint64_t* handle) {
  std::string out;
  if (CUresult status = Runtime::Get().Call(device, op, args, size, nullptr, 0, nullptr, 0, &out);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (out.size() != sizeof(*handle)) return CUDA_ERROR_UNKNOWN;  // an agent that answers otherwise
  std::memcpy(handle, out.data(), sizeof(*handle));
  return CUDA_SUCCESS;
}

// cuTexObjectCreate on a GPU host's GPU: the object is its driver's (kOpTexObjectCreate),
// over device memory (linear or pitched 2D) or one of its CUDA arrays or mipmapped arrays
// (forwarded: ops::NewForwardedArray, NewForwardedMipmappedArray). Its handle is
// the driver's, which another GPU would not give: such a process is no longer protected
// against a failure of its GPU (gpupool-remote(7), FAILOVER).
CUresult ForwardTextureObject(const char* call, int device, const CUDA_RESOURCE_DESC& resource,
                              const CUDA_TEXTURE_DESC& texture, CUtexObject* handle) {
  if (resource.flags != 0) return Invalid(call, "pResDesc->flags is not 0");
  dp::TexObjectCreateArgs args;
  args.resource_type = static_cast<uint32_t>(resource.resType);
  size_t element = 0, bytes = 0;
  if (resource.resType == CU_RESOURCE_TYPE_LINEAR || resource.resType == CU_RESOURCE_TYPE_PITCH2D) {
    if (CUresult status = CheckMemoryResource(call, resource, &element, &bytes); status != CUDA_SUCCESS) {
      return status;
    }
  }
  if (resource.resType == CU_RESOURCE_TYPE_LINEAR) {
    const auto& l = resource.res.linear;
    args.device_ptr = l.devPtr;
    args.format = l.format;
    args.channels = l.numChannels;
    args.size_bytes = l.sizeInBytes;
  } else if (resource.resType == CU_RESOURCE_TYPE_PITCH2D) {
    const auto& p = resource.res.pitch2D;
    args.device_ptr = p.devPtr;
    args.format = p.format;
    args.channels = p.numChannels;
    args.width = p.width;
    args.height = p.height;
    args.pitch = p.pitchInBytes;
  } else if (resource.resType == CU_RESOURCE_TYPE_ARRAY) {
    ArrayInfo array;
    if (FindArray(resource.res.array.hArray, &array) != CUDA_SUCCESS || array.forwarded_device != device) {
      return Invalid(call, "pResDesc->res.array.hArray is no array of this GPU");
    }
    args.resource_type = dp::kResourceTypeArray;
    args.device_ptr = array.remote;
  } else if (resource.resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY) {
    int forwarded_device = -1;
    if (ops::FindMipmappedArray(resource.res.mipmap.hMipmappedArray, &forwarded_device, &args.device_ptr) !=
            CUDA_SUCCESS ||
        forwarded_device != device) {
      return Invalid(call, "pResDesc->res.mipmap.hMipmappedArray is no mipmapped array of this GPU");
    }
    args.resource_type = dp::kResourceTypeMipmappedArray;
  } else {
    return Invalid(call, "pResDesc->resType is no CUresourcetype");
  }
  dp::TextureToWire(texture, &args);
  uint64_t made = 0;
  if (CUresult status = CallForHandle(device, dp::kOpTexObjectCreate, &args, sizeof(args), &made);
      status != CUDA_SUCCESS) {
    return status;
  }
  if (Device* owner = Runtime::Get().device(device); owner != nullptr && owner->failover) {
    owner->failover->Unprotect(
        "it made texture objects, whose handles its GPU's driver gives (another GPU's driver would give "
        "others)");
  }
  ops::ObjectRecord record;
  record.resource = resource;
  record.texture = texture;
  if (ops::ListForwardedObject(made, device, record) != CUDA_SUCCESS) {
    dp::TexObjectDestroyArgs destroy{made};
    Runtime::Get().Call(device, dp::kOpTexObjectDestroy, &destroy, sizeof(destroy));
    return static_cast<CUresult>(ReportUnsupported(
        call, "texture objects on two GPUs whose drivers gave the same handle (a kernel could not tell them apart)"));
  }
  *handle = made;
  return CUDA_SUCCESS;
}

// What cu{Tex,Surf}ObjectGetResourceDesc answer: the resource the object was made from.
CUresult ObjectResource(uint64_t handle, bool surface, CUDA_RESOURCE_DESC* resource) {
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ops::ObjectRecord record;
  if (CUresult status = ops::FindObject(handle, surface, &record); status != CUDA_SUCCESS) return status;
  *resource = record.resource;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace gpupool::client

using namespace gpupool::client;       // NOLINT
using namespace gpupool::client::ops;  // NOLINT

// --- Arrays ------------------------------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuArray3DCreate_v2(CUarray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc) {
  GPUPOOL_BODY({ return CreateArray("cuArray3DCreate", handle, desc); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuArrayCreate_v2(CUarray* handle, const CUDA_ARRAY_DESCRIPTOR* desc) {
  GPUPOOL_BODY({
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR full{};
    full.Width = desc->Width;
    full.Height = desc->Height;
    full.Format = desc->Format;
    full.NumChannels = desc->NumChannels;
    return CreateArray("cuArrayCreate", handle, &full);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* desc, CUarray array) {
  GPUPOOL_BODY({
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ArrayInfo info;
    if (CUresult status = FindArray(array, &info); status != CUDA_SUCCESS) return status;
    *desc = info.descriptor;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* desc, CUarray array) {
  GPUPOOL_BODY({
    if (desc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ArrayInfo info;
    if (CUresult status = FindArray(array, &info); status != CUDA_SUCCESS) return status;
    desc->Width = info.descriptor.Width;
    desc->Height = info.descriptor.Height;
    desc->Format = info.descriptor.Format;
    desc->NumChannels = info.descriptor.NumChannels;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuArrayDestroy(CUarray array) {
  GPUPOOL_BODY({ return DestroyArray(array); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* handle, const CUDA_ARRAY3D_DESCRIPTOR* desc,
                                                         unsigned int levels) {
  GPUPOOL_BODY({ return CreateMipmappedArray(handle, desc, levels); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray* level_array, CUmipmappedArray mipmapped,
                                                           unsigned int level) {
  GPUPOOL_BODY({
    if (level_array == nullptr) return CUDA_ERROR_INVALID_VALUE;
    return ops::MipmappedArrayLevel(mipmapped, level, level_array);
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray mipmapped) {
  GPUPOOL_BODY({ return ops::DestroyMipmappedArray(mipmapped); });
}

// Linear copies to and from an array's bytes (CUDA: for 1D arrays; any array here, by its
// layout).
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoA_v2(CUarray dst, size_t offset, const void* src, size_t bytes) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(dst, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {  // a forwarded array
      return ArrayRowCopy(dst, offset, bytes, true, CU_MEMORYTYPE_HOST, src, 0, nullptr);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyHtoD_v2(at, src, bytes);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyHtoAAsync_v2(CUarray dst, size_t offset, const void* src, size_t bytes,
                                                       CUstream stream) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(dst, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {
      return ArrayRowCopy(dst, offset, bytes, true, CU_MEMORYTYPE_HOST, src, 0, stream);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyHtoDAsync_v2(at, src, bytes, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAtoH_v2(void* dst, CUarray src, size_t offset, size_t bytes) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(src, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {
      return ArrayRowCopy(src, offset, bytes, false, CU_MEMORYTYPE_HOST, dst, 0, nullptr);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyDtoH_v2(dst, at, bytes);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t offset, size_t bytes,
                                                       CUstream stream) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(src, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {
      return ArrayRowCopy(src, offset, bytes, false, CU_MEMORYTYPE_HOST, dst, 0, stream);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyDtoHAsync_v2(dst, at, bytes, stream);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr src, size_t bytes) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(dst, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {
      return ArrayRowCopy(dst, offset, bytes, true, CU_MEMORYTYPE_DEVICE, nullptr, src, nullptr);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyDtoD_v2(at, src, bytes);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t offset, size_t bytes) {
  GPUPOOL_BODY({
    CUdeviceptr at = 0;
    CUresult status = ArrayBytes(src, offset, bytes, &at);
    if (status == CUDA_ERROR_NOT_SUPPORTED) {
      return ArrayRowCopy(src, offset, bytes, false, CU_MEMORYTYPE_DEVICE, nullptr, dst, nullptr);
    }
    return status != CUDA_SUCCESS ? status : cuMemcpyDtoD_v2(dst, at, bytes);
  });
}
GPUPOOL_CUDA_API CUresult CUDAAPI cuMemcpyAtoA_v2(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset,
                                                  size_t bytes) {
  GPUPOOL_BODY({
    CUdeviceptr to = 0, from = 0;
    CUresult to_status = ArrayBytes(dst, dst_offset, bytes, &to);
    CUresult from_status = ArrayBytes(src, src_offset, bytes, &from);
    if (to_status == CUDA_SUCCESS && from_status == CUDA_SUCCESS) return cuMemcpyDtoD_v2(to, from, bytes);
    if (to_status != CUDA_ERROR_NOT_SUPPORTED && from_status != CUDA_ERROR_NOT_SUPPORTED) {
      return to_status != CUDA_SUCCESS ? to_status : from_status;
    }
    // A forwarded array on either side: the first rows' bytes, one copy of its agent's.
    CUDA_MEMCPY2D copy{};
    copy.WidthInBytes = bytes;
    copy.Height = 1;
    copy.srcMemoryType = copy.dstMemoryType = CU_MEMORYTYPE_ARRAY;
    copy.srcArray = src;
    copy.srcXInBytes = src_offset;
    copy.dstArray = dst;
    copy.dstXInBytes = dst_offset;
    return Copy2D(&copy, nullptr);
  });
}

// --- Texture and surface objects ----------------------------------------------------------------

GPUPOOL_CUDA_API CUresult CUDAAPI cuTexObjectCreate(CUtexObject* handle, const CUDA_RESOURCE_DESC* resource,
                                                    const CUDA_TEXTURE_DESC* texture,
                                                    const CUDA_RESOURCE_VIEW_DESC* view) {
  GPUPOOL_BODY({
    const char* call = "cuTexObjectCreate";
    if (handle == nullptr || resource == nullptr || texture == nullptr) {
      return Invalid(call, "a null argument");
    }
    if (view != nullptr) return static_cast<CUresult>(ReportUnsupported(call, "resource views"));
    bool sim = true;
    int device = 0;
    if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
    if (!sim) return ForwardTextureObject(call, device, *resource, *texture, handle);
    dp::SimTextureDescriptor d;
    d.magic = dp::kSimTextureMagic;
    std::vector<uint8_t> trailer;
    if (CUresult status = resource->resType == CU_RESOURCE_TYPE_MIPMAPPED_ARRAY
                              ? MipmappedTexture(call, *resource, *texture, &d, &trailer)
                              : Describe(call, *resource, false, &d);
        status != CUDA_SUCCESS) {
      return status;
    }
    for (int i = 0; i < 3; ++i) {
      if (texture->addressMode[i] > CU_TR_ADDRESS_MODE_BORDER) {
        return Invalid(call, "pTexDesc->addressMode[" + std::to_string(i) + "] is no CUaddress_mode");
      }
      d.address_mode[i] = texture->addressMode[i];
    }
    if (texture->filterMode == CU_TR_FILTER_MODE_LINEAR) {
      d.flags |= dp::kSimTexLinearFilter;
    } else if (texture->filterMode != CU_TR_FILTER_MODE_POINT) {
      return Invalid(call, "pTexDesc->filterMode is no CUfilter_mode");
    }
    const unsigned known = CU_TRSF_READ_AS_INTEGER | CU_TRSF_NORMALIZED_COORDINATES |
                           CU_TRSF_DISABLE_TRILINEAR_OPTIMIZATION | CU_TRSF_SEAMLESS_CUBEMAP;
    if (texture->flags & CU_TRSF_SRGB) {
      return static_cast<CUresult>(ReportUnsupported(call, "sRGB texture reads"));
    }
    if (texture->flags & ~(known | CU_TRSF_SRGB)) {
      return Invalid(call, "pTexDesc->flags has unknown bits");
    }
    if (texture->flags & CU_TRSF_READ_AS_INTEGER) d.flags |= dp::kSimTexReadAsInteger;
    if (texture->flags & CU_TRSF_NORMALIZED_COORDINATES) d.flags |= dp::kSimTexNormalized;
    std::memcpy(d.border, texture->borderColor, sizeof(d.border));
    ObjectRecord record;
    record.resource = *resource;
    record.texture = *texture;
    uint64_t at = 0;
    if (CUresult status = PublishObject(d, record, &at, trailer); status != CUDA_SUCCESS) return status;
    *handle = at;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuTexObjectDestroy(CUtexObject handle) {
  GPUPOOL_BODY({ return DestroyObject(handle, false); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC* resource, CUtexObject handle) {
  GPUPOOL_BODY({ return ObjectResource(handle, false, resource); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC* texture, CUtexObject handle) {
  GPUPOOL_BODY({
    if (texture == nullptr) return CUDA_ERROR_INVALID_VALUE;
    ObjectRecord record;
    if (CUresult status = FindObject(handle, false, &record); status != CUDA_SUCCESS) return status;
    *texture = record.texture;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuSurfObjectCreate(CUsurfObject* handle, const CUDA_RESOURCE_DESC* resource) {
  GPUPOOL_BODY({
    const char* call = "cuSurfObjectCreate";
    if (handle == nullptr || resource == nullptr) return Invalid(call, "a null argument");
    if (resource->resType != CU_RESOURCE_TYPE_ARRAY) {
      return Invalid(call, "pResDesc->resType is not CU_RESOURCE_TYPE_ARRAY");
    }
    bool sim = true;
    int device = 0;
    if (CUresult status = CurrentGpu(&sim, &device); status != CUDA_SUCCESS) return status;
    if (!sim) {
      // A GPU host's GPU: the surface is its driver's, over its array (forwarded), which the
      // driver checks was made with SURFACE_LDST.
      ArrayInfo array;
      if (FindArray(resource->res.array.hArray, &array) != CUDA_SUCCESS || array.forwarded_device != device) {
        return Invalid(call, "pResDesc->res.array.hArray is no array of this GPU");
      }
      dp::SurfObjectCreateArgs args{array.remote};
      uint64_t made = 0;
      if (CUresult status = CallForHandle(device, dp::kOpSurfObjectCreate, &args, sizeof(args), &made);
          status != CUDA_SUCCESS) {
        return status;
      }
      ObjectRecord record;
      record.surface = true;
      record.resource = *resource;
      if (ListForwardedObject(made, device, record) != CUDA_SUCCESS) {
        dp::TexObjectDestroyArgs destroy{made};
        Runtime::Get().Call(device, dp::kOpSurfObjectDestroy, &destroy, sizeof(destroy));
        return static_cast<CUresult>(
            ReportUnsupported(call, "surface objects on two GPUs whose drivers gave the same handle"));
      }
      *handle = made;
      return CUDA_SUCCESS;
    }
    dp::SimTextureDescriptor d;
    d.magic = dp::kSimSurfaceMagic;
    if (CUresult status = Describe(call, *resource, true, &d); status != CUDA_SUCCESS) {
      return status;
    }
    ObjectRecord record;
    record.surface = true;
    record.resource = *resource;
    uint64_t at = 0;
    if (CUresult status = PublishObject(d, record, &at); status != CUDA_SUCCESS) return status;
    // Kernels given the handle write the array: failover's checkpoints must read it back.
    if (Device* owner = Runtime::Get().device(device); owner && owner->failover) {
      owner->failover->AddWriteThrough(at, d.base);
    }
    *handle = at;
    return CUDA_SUCCESS;
  });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuSurfObjectDestroy(CUsurfObject handle) {
  GPUPOOL_BODY({ return DestroyObject(handle, true); });
}

GPUPOOL_CUDA_API CUresult CUDAAPI cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC* resource, CUsurfObject handle) {
  GPUPOOL_BODY({ return ObjectResource(handle, true, resource); });
}
