// CUDA_TEXTURE_DESC to and from the wire's texture fields (TexObjectCreateArgs), and
// CUDA_ARRAY3D_DESCRIPTOR to and from ArrayCreateArgs: the library writes them for the
// agent, the cuda executor reads them back for its driver. For code
// that has cuda.h (the client and the cuda executor); the protocol itself does not need it.
#pragma once

#include <cuda.h>

#include <cstring>

#include "remote/protocol/protocol.h"

namespace gpupool::dataplane {

inline void TextureToWire(const CUDA_TEXTURE_DESC& texture, TexObjectCreateArgs* args) {
  for (int i = 0; i < 3; ++i) args->address_mode[i] = static_cast<uint32_t>(texture.addressMode[i]);
  args->filter_mode = static_cast<uint32_t>(texture.filterMode);
  args->flags = texture.flags;
  args->max_anisotropy = texture.maxAnisotropy;
  args->mipmap_filter_mode = static_cast<uint32_t>(texture.mipmapFilterMode);
  args->mipmap_level_bias = texture.mipmapLevelBias;
  args->min_mipmap_level_clamp = texture.minMipmapLevelClamp;
  args->max_mipmap_level_clamp = texture.maxMipmapLevelClamp;
  std::memcpy(args->border_color, texture.borderColor, sizeof(args->border_color));
}

// The session checked the enums (dataplane/session.cc).
inline CUDA_TEXTURE_DESC TextureFromWire(const TexObjectCreateArgs& args) {
  CUDA_TEXTURE_DESC texture{};
  for (int i = 0; i < 3; ++i) texture.addressMode[i] = static_cast<CUaddress_mode>(args.address_mode[i]);
  texture.filterMode = static_cast<CUfilter_mode>(args.filter_mode);
  texture.flags = args.flags;
  texture.maxAnisotropy = args.max_anisotropy;
  texture.mipmapFilterMode = static_cast<CUfilter_mode>(args.mipmap_filter_mode);
  texture.mipmapLevelBias = args.mipmap_level_bias;
  texture.minMipmapLevelClamp = args.min_mipmap_level_clamp;
  texture.maxMipmapLevelClamp = args.max_mipmap_level_clamp;
  std::memcpy(texture.borderColor, args.border_color, sizeof(texture.borderColor));
  return texture;
}

// An array's descriptor (a mipmapped array's level 0) under the session's id `array`.
inline ArrayCreateArgs ArrayToWire(const CUDA_ARRAY3D_DESCRIPTOR& descriptor, uint64_t array) {
  ArrayCreateArgs args;
  args.array = array;
  args.width = descriptor.Width;
  args.height = descriptor.Height;
  args.depth = descriptor.Depth;
  args.format = static_cast<uint32_t>(descriptor.Format);
  args.channels = descriptor.NumChannels;
  args.flags = descriptor.Flags;
  return args;
}

inline CUDA_ARRAY3D_DESCRIPTOR ArrayFromWire(const ArrayCreateArgs& args) {
  CUDA_ARRAY3D_DESCRIPTOR descriptor{};
  descriptor.Width = args.width;
  descriptor.Height = args.height;
  descriptor.Depth = args.depth;
  descriptor.Format = static_cast<CUarray_format>(args.format);
  descriptor.NumChannels = args.channels;
  descriptor.Flags = args.flags;
  return descriptor;
}

}  // namespace gpupool::dataplane
