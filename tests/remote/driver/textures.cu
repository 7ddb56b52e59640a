// CUDA arrays, texture objects and surface objects through the runtime API, each result
// checked against the CPU: a 2D image filter over a texture with linear filtering and
// normalised, wrapping coordinates; a 3D array of bytes read as normalised floats; a layered
// array; a surface written by one kernel, read by another and copied back; the array copies
// (2D and 3D, both ways, array to array); and a bad array descriptor refused.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

// Bilinear sample of a w x h float image at normalised (u, v), wrapping, as the programming
// guide's texture-fetching appendix defines it (weights in 9-bit fixed point).
float Bilinear(const std::vector<float>& image, int w, int h, float u, float v) {
  auto wrap = [](long i, long n) { return ((i % n) + n) % n; };
  const double x = (u - std::floor(u)) * w - 0.5, y = (v - std::floor(v)) * h - 0.5;
  const long i = static_cast<long>(std::floor(x)), j = static_cast<long>(std::floor(y));
  const float a = std::round((x - i) * 256) / 256, b = std::round((y - j) * 256) / 256;
  auto at = [&](long x, long y) { return image[wrap(y, h) * w + wrap(x, w)]; };
  return (1 - a) * (1 - b) * at(i, j) + a * (1 - b) * at(i + 1, j) + (1 - a) * b * at(i, j + 1) +
         a * b * at(i + 1, j + 1);
}

// out = the image scaled to ow x oh and shifted by a third of a texel: every output pixel
// a bilinear sample.
__global__ void Resample(cudaTextureObject_t image, float* out, int ow, int oh) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= ow || y >= oh) return;
  float u = (x + 0.33f) / ow, v = (y - 0.29f) / oh;
  out[y * ow + x] = tex2D<float>(image, u, v);
}

// The same samples with an explicit level of detail and with gradients (tex.level,
// tex.grad): an array without mipmap levels has only its own, whatever they say.
__global__ void ResampleAtLevels(cudaTextureObject_t image, float* out, int ow, int oh) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= ow || y >= oh) return;
  float u = (x + 0.33f) / ow, v = (y - 0.29f) / oh;
  const float at_level = tex2DLod<float>(image, u, v, 2.5f);
  const float with_gradients = tex2DGrad<float>(image, u, v, make_float2(0.25f, 0), make_float2(0, 0.5f));
  out[y * ow + x] = at_level == with_gradients ? at_level : -1000.0f;
}

__global__ void ReadVolume(cudaTextureObject_t volume, float* out, int w, int h, int d) {
  int x = threadIdx.x, y = threadIdx.y, z = blockIdx.x;
  out[(z * h + y) * w + x] = tex3D<float>(volume, x + 0.5f, y + 0.5f, z + 0.5f);
}

__global__ void ReadLayers(cudaTextureObject_t layers, float* out, int w, int n) {
  int x = threadIdx.x, layer = blockIdx.x;
  out[layer * w + x] = tex1DLayered<float>(layers, x + 0.5f, layer);
}

__global__ void WriteSurface(cudaSurfaceObject_t surface, int w, int h) {
  int x = threadIdx.x, y = blockIdx.x;
  if (x < w && y < h) surf2Dwrite(static_cast<float>(x * 100 + y), surface, x * 4, y);
}

__global__ void DoubleSurface(cudaSurfaceObject_t surface, int w, int h) {
  int x = threadIdx.x, y = blockIdx.x;
  if (x >= w || y >= h) return;
  float v = surf2Dread<float>(surface, x * 4, y);
  surf2Dwrite(2 * v, surface, x * 4, y);
}

}  // namespace

int main() {
  CHECK(cudaSetDevice(0));

  // --- A 2D image through a texture with linear filtering -------------------------------
  const int w = 37, h = 23, ow = 50, oh = 31;
  std::vector<float> image(w * h);
  for (int i = 0; i < w * h; ++i) image[i] = std::sin(i * 0.37f) * 10;
  cudaChannelFormatDesc channel = cudaCreateChannelDesc<float>();
  cudaArray_t array = nullptr;
  CHECK(cudaMallocArray(&array, &channel, w, h));
  CHECK(
      cudaMemcpy2DToArray(array, 0, 0, image.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  cudaChannelFormatDesc got{};
  cudaExtent extent{};
  unsigned flags = 99;
  CHECK(cudaArrayGetInfo(&got, &extent, &flags, array));
  EXPECT(got.x == 32 && got.f == cudaChannelFormatKindFloat && extent.width == w && extent.height == h &&
         extent.depth == 0 && flags == 0);
  cudaResourceDesc resource{};
  resource.resType = cudaResourceTypeArray;
  resource.res.array.array = array;
  cudaTextureDesc texture{};
  texture.addressMode[0] = texture.addressMode[1] = cudaAddressModeWrap;
  texture.filterMode = cudaFilterModeLinear;
  texture.readMode = cudaReadModeElementType;
  texture.normalizedCoords = 1;
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &resource, &texture, nullptr));
  cudaResourceDesc back{};
  CHECK(cudaGetTextureObjectResourceDesc(&back, object));
  EXPECT(back.resType == cudaResourceTypeArray && back.res.array.array == array);
  float* out = nullptr;
  CHECK(cudaMalloc(&out, ow * oh * sizeof(float)));
  Resample<<<dim3((ow + 15) / 16, (oh + 7) / 8), dim3(16, 8)>>>(object, out, ow, oh);
  CHECK(cudaGetLastError());
  std::vector<float> resampled(ow * oh);
  CHECK(cudaMemcpy(resampled.data(), out, resampled.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int y = 0; y < oh; ++y) {
    for (int x = 0; x < ow; ++x) {
      float want = Bilinear(image, w, h, (x + 0.33f) / ow, (y - 0.29f) / oh);
      if (std::fabs(resampled[y * ow + x] - want) > 1e-4f * 10) ++wrong;
    }
  }
  EXPECT(wrong == 0);
  ResampleAtLevels<<<dim3((ow + 15) / 16, (oh + 7) / 8), dim3(16, 8)>>>(object, out, ow, oh);
  CHECK(cudaGetLastError());
  std::vector<float> at_levels(ow * oh);
  CHECK(cudaMemcpy(at_levels.data(), out, at_levels.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(at_levels == resampled);
  std::printf("tex2DLod and tex2DGrad of an array of one level: %s\n", at_levels == resampled ? "level 0" : "wrong");
  CHECK(cudaDestroyTextureObject(object));

  // --- Array to array, and back to the host -----------------------------------------------
  cudaArray_t copy = nullptr;
  CHECK(cudaMallocArray(&copy, &channel, w, h));
  CHECK(cudaMemcpy2DArrayToArray(copy, 0, 0, array, 0, 0, w * sizeof(float), h));
  std::vector<float> round_trip(w * h);
  CHECK(cudaMemcpy2DFromArray(round_trip.data(), w * sizeof(float), copy, 0, 0, w * sizeof(float), h,
                              cudaMemcpyDeviceToHost));
  EXPECT(round_trip == image);
  // A region past the array's end is refused.
  EXPECT(cudaMemcpy2DFromArray(round_trip.data(), w * sizeof(float), copy, 4, 0, w * sizeof(float), h,
                               cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFreeArray(copy));
  CHECK(cudaFreeArray(array));

  // --- A 3D array of bytes, read as normalised floats ---------------------------------------
  const int vw = 8, vh = 4, vd = 3;
  std::vector<uint8_t> volume(vw * vh * vd);
  for (size_t i = 0; i < volume.size(); ++i) volume[i] = static_cast<uint8_t>(i * 7 + 1);
  cudaChannelFormatDesc bytes = cudaCreateChannelDesc<uint8_t>();
  cudaArray_t volume_array = nullptr;
  CHECK(cudaMalloc3DArray(&volume_array, &bytes, make_cudaExtent(vw, vh, vd)));
  cudaMemcpy3DParms up{};
  up.srcPtr = make_cudaPitchedPtr(volume.data(), vw, vw, vh);
  up.dstArray = volume_array;
  up.extent = make_cudaExtent(vw, vh, vd);
  up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&up));
  resource = {};
  resource.resType = cudaResourceTypeArray;
  resource.res.array.array = volume_array;
  texture = {};
  texture.addressMode[0] = texture.addressMode[1] = texture.addressMode[2] = cudaAddressModeClamp;
  texture.filterMode = cudaFilterModePoint;
  texture.readMode = cudaReadModeNormalizedFloat;
  CHECK(cudaCreateTextureObject(&object, &resource, &texture, nullptr));
  float* volume_out = nullptr;
  CHECK(cudaMalloc(&volume_out, volume.size() * sizeof(float)));
  ReadVolume<<<vd, dim3(vw, vh)>>>(object, volume_out, vw, vh, vd);
  std::vector<float> volume_back(volume.size());
  CHECK(cudaMemcpy(volume_back.data(), volume_out, volume_back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (size_t i = 0; i < volume.size(); ++i) wrong += volume_back[i] != volume[i] / 255.0f;
  EXPECT(wrong == 0);
  // And back to the host through a 3D copy of a sub-box.
  std::vector<uint8_t> box(3 * 2 * 2);
  cudaMemcpy3DParms down{};
  down.srcArray = volume_array;
  down.srcPos = make_cudaPos(2, 1, 1);
  down.dstPtr = make_cudaPitchedPtr(box.data(), 3, 3, 2);
  down.extent = make_cudaExtent(3, 2, 2);
  down.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&down));
  for (int z = 0; z < 2; ++z)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x) {
        EXPECT(box[(z * 2 + y) * 3 + x] == volume[((z + 1) * vh + y + 1) * vw + x + 2]);
      }
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeArray(volume_array));

  // --- A layered 1D array ------------------------------------------------------------------
  const int lw = 16, layers = 5;
  std::vector<float> layered(lw * layers);
  for (int i = 0; i < lw * layers; ++i) layered[i] = i * 0.5f;
  cudaArray_t layered_array = nullptr;
  CHECK(cudaMalloc3DArray(&layered_array, &channel, make_cudaExtent(lw, 0, layers), cudaArrayLayered));
  cudaMemcpy3DParms layers_up{};
  layers_up.srcPtr = make_cudaPitchedPtr(layered.data(), lw * sizeof(float), lw, 1);
  layers_up.dstArray = layered_array;
  layers_up.extent = make_cudaExtent(lw, 1, layers);
  layers_up.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&layers_up));
  resource.res.array.array = layered_array;
  texture = {};
  texture.filterMode = cudaFilterModePoint;
  CHECK(cudaCreateTextureObject(&object, &resource, &texture, nullptr));
  float* layers_out = nullptr;
  CHECK(cudaMalloc(&layers_out, layered.size() * sizeof(float)));
  ReadLayers<<<layers, lw>>>(object, layers_out, lw, layers);
  std::vector<float> layers_back(layered.size());
  CHECK(cudaMemcpy(layers_back.data(), layers_out, layers_back.size() * sizeof(float), cudaMemcpyDeviceToHost));
  EXPECT(layers_back == layered);
  CHECK(cudaDestroyTextureObject(object));
  CHECK(cudaFreeArray(layered_array));

  // --- A surface: written, doubled in place, copied back ---------------------------------
  const int sw = 24, sh = 9;
  cudaArray_t surface_array = nullptr;
  CHECK(cudaMalloc3DArray(&surface_array, &channel, make_cudaExtent(sw, sh, 0), cudaArraySurfaceLoadStore));
  resource.res.array.array = surface_array;
  cudaSurfaceObject_t surface = 0;
  CHECK(cudaCreateSurfaceObject(&surface, &resource));
  WriteSurface<<<sh, sw>>>(surface, sw, sh);
  DoubleSurface<<<sh, sw>>>(surface, sw, sh);
  CHECK(cudaGetLastError());
  std::vector<float> surface_back(sw * sh);
  CHECK(cudaMemcpy2DFromArray(surface_back.data(), sw * sizeof(float), surface_array, 0, 0, sw * sizeof(float), sh,
                              cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int y = 0; y < sh; ++y)
    for (int x = 0; x < sw; ++x) wrong += surface_back[y * sw + x] != 2.0f * (x * 100 + y);
  EXPECT(wrong == 0);
  CHECK(cudaDestroySurfaceObject(surface));
  // A surface over an array made without cudaArraySurfaceLoadStore is refused.
  cudaArray_t plain = nullptr;
  CHECK(cudaMallocArray(&plain, &channel, 4, 4));
  resource.res.array.array = plain;
  EXPECT(cudaCreateSurfaceObject(&surface, &resource) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaFreeArray(plain));
  CHECK(cudaFreeArray(surface_array));

  // --- A bad descriptor: a cubemap whose faces are not square ----------------------------
  cudaArray_t cube = nullptr;
  EXPECT(cudaMalloc3DArray(&cube, &channel, make_cudaExtent(8, 4, 6), cudaArrayCubemap) == cudaErrorInvalidValue);
  cudaGetLastError();

  CHECK(cudaDeviceSynchronize());
  std::printf("textures: OK\n");
  return 0;
}
