// CUDA arrays through the runtime API without kernels: copies into and out of 2D and 3D
// arrays (from and to the host, pitched device memory and another array, whole and in
// part), the linear calls of a 1D array, a mipmapped array's levels, texture and surface
// objects over an array, a mipmapped array and device memory, each result checked byte for
// byte. On the sim the library lays the
// arrays out in device memory; on a GPU host's GPU (and on the stand-in driver the test
// server can serve, tests/remote/fake_cuda_driver.cc) its agent's driver holds them.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

int main() {
  DescribeDeviceExpectingModel();

  // A 2D array of floats: the host's rows in, a 5 x 3 region out.
  const int w = 32, h = 8;
  std::vector<float> image(w * h);
  for (int i = 0; i < w * h; ++i) image[i] = 0.25f * static_cast<float>(i * 13 % 401);
  cudaChannelFormatDesc floats = cudaCreateChannelDesc<float>();
  cudaArray_t plane = nullptr;
  CHECK(cudaMallocArray(&plane, &floats, w, h));
  // Host rows with padding: a pitch of w + 3 floats.
  const int host_pitch = w + 3;
  std::vector<float> padded(host_pitch * h, -1.0f);
  for (int y = 0; y < h; ++y) std::memcpy(&padded[y * host_pitch], &image[y * w], w * sizeof(float));
  CHECK(cudaMemcpy2DToArray(plane, 0, 0, padded.data(), host_pitch * sizeof(float), w * sizeof(float), h,
                            cudaMemcpyHostToDevice));
  float region[3][5];
  CHECK(cudaMemcpy2DFromArray(region, sizeof(region[0]), plane, 7 * sizeof(float), 2, 5 * sizeof(float), 3,
                              cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int y = 0; y < 3; ++y) {
    for (int x = 0; x < 5; ++x) wrong += region[y][x] != image[(y + 2) * w + x + 7];
  }
  std::printf("2D array, a 5 x 3 region read back: %d wrong\n", wrong);
  EXPECT(wrong == 0);

  // Array to array, then out to pitched device memory and back to the host.
  cudaArray_t copy = nullptr;
  CHECK(cudaMallocArray(&copy, &floats, w, h));
  CHECK(cudaMemcpy2DArrayToArray(copy, 0, 0, plane, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  float* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&pitched), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2DFromArray(pitched, pitch, copy, 0, 0, w * sizeof(float), h, cudaMemcpyDeviceToDevice));
  std::vector<float> back(w * h);
  CHECK(cudaMemcpy2D(back.data(), w * sizeof(float), pitched, pitch, w * sizeof(float), h, cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int i = 0; i < w * h; ++i) wrong += back[i] != image[i];
  std::printf("array to array to pitched memory (pitch %zu): %d wrong\n", pitch, wrong);
  EXPECT(wrong == 0);
  // And from device memory into an array.
  CHECK(cudaMemcpy2DToArray(plane, 4, 1, pitched, pitch, 8, 2, cudaMemcpyDeviceToDevice));
  CHECK(cudaMemcpy2DFromArray(region, sizeof(region[0]), plane, 4, 1, 8, 2, cudaMemcpyDeviceToHost));
  EXPECT(region[0][0] == image[0] && region[0][1] == image[1] && region[1][0] == image[w] &&
         region[1][1] == image[w + 1]);

  // A 3D array of uchar4, whole through cudaMemcpy3D both ways.
  const int vw = 6, vh = 4, vd = 3;
  cudaChannelFormatDesc bytes4 = cudaCreateChannelDesc<uchar4>();
  cudaArray_t volume = nullptr;
  CHECK(cudaMalloc3DArray(&volume, &bytes4, make_cudaExtent(vw, vh, vd)));
  std::vector<uchar4> voxels(vw * vh * vd), voxels_back(vw * vh * vd);
  for (int i = 0; i < vw * vh * vd; ++i) {
    voxels[i] = make_uchar4(i & 0xff, (i * 7) & 0xff, (i * 31) & 0xff, 255 - i);
  }
  cudaMemcpy3DParms in = {};
  in.srcPtr = make_cudaPitchedPtr(voxels.data(), vw * sizeof(uchar4), vw, vh);
  in.dstArray = volume;
  in.extent = make_cudaExtent(vw, vh, vd);
  in.kind = cudaMemcpyHostToDevice;
  CHECK(cudaMemcpy3D(&in));
  cudaMemcpy3DParms out = {};
  out.srcArray = volume;
  out.dstPtr = make_cudaPitchedPtr(voxels_back.data(), vw * sizeof(uchar4), vw, vh);
  out.extent = make_cudaExtent(vw, vh, vd);
  out.kind = cudaMemcpyDeviceToHost;
  CHECK(cudaMemcpy3D(&out));
  EXPECT(std::memcmp(voxels.data(), voxels_back.data(), voxels.size() * sizeof(uchar4)) == 0);
  std::printf("3D array of %d voxels, in and out: %s\n", vw * vh * vd,
              std::memcmp(voxels.data(), voxels_back.data(), voxels.size() * sizeof(uchar4)) == 0 ? "same" : "DIFFER");

  // A 1D array through the linear calls (the runtime's deprecated cudaMemcpyToArray).
  cudaArray_t line = nullptr;
  CHECK(cudaMallocArray(&line, &floats, 64));
  CHECK(cudaMemcpyToArray(line, 16 * sizeof(float), 0, image.data(), 8 * sizeof(float), cudaMemcpyHostToDevice));
  float eight[8] = {};
  CHECK(cudaMemcpyFromArray(eight, line, 16 * sizeof(float), 0, sizeof(eight), cudaMemcpyDeviceToHost));
  EXPECT(std::memcmp(eight, image.data(), sizeof(eight)) == 0);

  // A region outside an array: refused.
  EXPECT(cudaMemcpy2DFromArray(region, sizeof(region[0]), plane, (w - 2) * sizeof(float), 0, 5 * sizeof(float), 1,
                               cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  cudaGetLastError();

  // Texture and surface objects over an array, a texture over device memory.
  cudaResourceDesc resource = {};
  resource.resType = cudaResourceTypeArray;
  resource.res.array.array = plane;
  cudaTextureDesc texture = {};
  texture.filterMode = cudaFilterModePoint;
  cudaTextureObject_t over_array = 0;
  CHECK(cudaCreateTextureObject(&over_array, &resource, &texture, nullptr));
  cudaResourceDesc described = {};
  CHECK(cudaGetTextureObjectResourceDesc(&described, over_array));
  EXPECT(described.resType == cudaResourceTypeArray && described.res.array.array == plane);
  cudaArray_t writable = nullptr;
  CHECK(cudaMallocArray(&writable, &floats, 16, 16, cudaArraySurfaceLoadStore));
  resource.res.array.array = writable;
  cudaSurfaceObject_t surface = 0;
  CHECK(cudaCreateSurfaceObject(&surface, &resource));
  resource = {};
  resource.resType = cudaResourceTypeLinear;
  resource.res.linear.devPtr = pitched;
  resource.res.linear.desc = floats;
  resource.res.linear.sizeInBytes = w * sizeof(float);
  cudaTextureObject_t over_memory = 0;
  CHECK(cudaCreateTextureObject(&over_memory, &resource, &texture, nullptr));
  EXPECT(over_array != 0 && surface != 0 && over_memory != 0);

  // A mipmapped array of floats, 32 x 8 and three levels below it (16 x 4, 8 x 2, 4 x 1):
  // each level its own image in and out, a level's extent and no more, a texture object
  // over the whole and a surface over a level.
  cudaMipmappedArray_t pyramid = nullptr;
  CHECK(cudaMallocMipmappedArray(&pyramid, &floats, make_cudaExtent(w, h, 0), 4, cudaArraySurfaceLoadStore));
  // Every level written first, then each read back: each is its own.
  auto level_texel = [](unsigned l, size_t i) { return static_cast<float>(l * 1000 + i); };
  for (unsigned l = 0; l < 4; ++l) {
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, pyramid, l));
    cudaChannelFormatDesc format = {};
    cudaExtent extent = {};
    unsigned flags = 0;
    CHECK(cudaArrayGetInfo(&format, &extent, &flags, level));
    const size_t lw = w >> l, lh = h >> l;
    EXPECT(extent.width == lw && extent.height == lh && format.x == 32);
    std::vector<float> texels(lw * lh);
    for (size_t i = 0; i < texels.size(); ++i) texels[i] = level_texel(l, i);
    CHECK(cudaMemcpy2DToArray(level, 0, 0, texels.data(), lw * sizeof(float), lw * sizeof(float), lh,
                              cudaMemcpyHostToDevice));
    // One column past the level's width: refused, as for any array.
    EXPECT(cudaMemcpy2DToArray(level, sizeof(float), 0, texels.data(), lw * sizeof(float), lw * sizeof(float), 1,
                               cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
    cudaGetLastError();
  }
  wrong = 0;
  for (unsigned l = 0; l < 4; ++l) {
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, pyramid, l));
    const size_t lw = w >> l, lh = h >> l;
    std::vector<float> texels_back(lw * lh, -1.0f);
    CHECK(cudaMemcpy2DFromArray(texels_back.data(), lw * sizeof(float), level, 0, 0, lw * sizeof(float), lh,
                                cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < texels_back.size(); ++i) wrong += texels_back[i] != level_texel(l, i);
  }
  std::printf("mipmapped array, 4 levels in and out: %d wrong\n", wrong);
  EXPECT(wrong == 0);
  cudaResourceDesc levels_resource = {};
  levels_resource.resType = cudaResourceTypeMipmappedArray;
  levels_resource.res.mipmap.mipmap = pyramid;
  cudaTextureDesc trilinear = {};
  trilinear.filterMode = cudaFilterModeLinear;
  trilinear.mipmapFilterMode = cudaFilterModeLinear;
  trilinear.normalizedCoords = 1;
  trilinear.maxMipmapLevelClamp = 3;
  cudaTextureObject_t over_levels = 0;
  CHECK(cudaCreateTextureObject(&over_levels, &levels_resource, &trilinear, nullptr));
  CHECK(cudaGetTextureObjectResourceDesc(&described, over_levels));
  EXPECT(described.resType == cudaResourceTypeMipmappedArray && described.res.mipmap.mipmap == pyramid);
  cudaArray_t level2 = nullptr;
  CHECK(cudaGetMipmappedArrayLevel(&level2, pyramid, 2));
  cudaResourceDesc level_resource = {};
  level_resource.resType = cudaResourceTypeArray;
  level_resource.res.array.array = level2;
  cudaSurfaceObject_t level_surface = 0;
  CHECK(cudaCreateSurfaceObject(&level_surface, &level_resource));
  EXPECT(over_levels != 0 && level_surface != 0);
  CHECK(cudaDestroySurfaceObject(level_surface));
  CHECK(cudaDestroyTextureObject(over_levels));
  CHECK(cudaFreeMipmappedArray(pyramid));

  CHECK(cudaDestroyTextureObject(over_memory));
  CHECK(cudaDestroySurfaceObject(surface));
  CHECK(cudaDestroyTextureObject(over_array));
  for (cudaArray_t array : {plane, copy, volume, line, writable}) CHECK(cudaFreeArray(array));
  CHECK(cudaFree(pitched));
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS\n");
  return 0;
}
