// Mipmapped arrays through the runtime API on a pool GPU (the sim's layout, or a GPU host's
// driver's through its agent), each result checked against the CPU: a 2D float mipmap of 4 levels, each filled through
// its level array (cudaGetMipmappedArrayLevel, cudaMemcpy2DToArray) and read back; texture objects of it read at
// explicit levels of detail (tex2DLod: nearest level, linear between levels, the texture's bias and clamps), with
// gradients (tex2DGrad) and without (tex2D: level 0); and the descriptors a driver refuses. Exits 0 only if every
// result matches.
#include <cmath>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kLevels = 4, kWidth = 64, kHeight = 32;

// Each thread one (lod) sample at the texture's centre, and the same with gradients of
// `lod`'s length in texels along x (2^lod texels: level lod).
__global__ void AtLevels(cudaTextureObject_t texture, const float* lods, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = tex2DLod<float>(texture, 0.5f, 0.5f, lods[i]);
}

__global__ void WithGradients(cudaTextureObject_t texture, float dx, float* out) {
  out[0] = tex2DGrad<float>(texture, 0.5f, 0.5f, make_float2(dx, 0), make_float2(0, 0));
  out[1] = tex2D<float>(texture, 0.5f, 0.5f);
}

cudaTextureObject_t MakeTexture(cudaMipmappedArray_t mipmap, cudaTextureFilterMode between, float bias,
                                float max_clamp) {
  cudaResourceDesc resource{};
  resource.resType = cudaResourceTypeMipmappedArray;
  resource.res.mipmap.mipmap = mipmap;
  cudaTextureDesc texture{};
  texture.addressMode[0] = texture.addressMode[1] = cudaAddressModeClamp;
  texture.filterMode = cudaFilterModeLinear;
  texture.readMode = cudaReadModeElementType;
  texture.normalizedCoords = 1;
  texture.mipmapFilterMode = between;
  texture.mipmapLevelBias = bias;
  texture.minMipmapLevelClamp = 0;
  texture.maxMipmapLevelClamp = max_clamp;
  cudaTextureObject_t object = 0;
  CHECK(cudaCreateTextureObject(&object, &resource, &texture, nullptr));
  return object;
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();
  const cudaChannelFormatDesc channel = cudaCreateChannelDesc<float>();
  cudaMipmappedArray_t mipmap = nullptr;
  // More levels than the extent has (64 gives 7) are refused.
  EXPECT(cudaMallocMipmappedArray(&mipmap, &channel, make_cudaExtent(kWidth, kHeight, 0), 8) == cudaErrorInvalidValue);
  cudaGetLastError();
  CHECK(cudaMallocMipmappedArray(&mipmap, &channel, make_cudaExtent(kWidth, kHeight, 0), kLevels));

  // Level l holds 10 (l + 1) everywhere but for a pattern in its first row, which the read
  // back checks (the centre, where the samples are, is constant).
  for (int l = 0; l < kLevels; ++l) {
    cudaArray_t level = nullptr;
    CHECK(cudaGetMipmappedArrayLevel(&level, mipmap, l));
    cudaChannelFormatDesc got{};
    cudaExtent extent{};
    unsigned flags = 0;
    CHECK(cudaArrayGetInfo(&got, &extent, &flags, level));
    const int w = kWidth >> l, h = kHeight >> l;
    EXPECT(static_cast<int>(extent.width) == w && static_cast<int>(extent.height) == h);
    std::vector<float> texels(w * h, 10.0f * (l + 1));
    for (int x = 0; x < w; ++x) texels[x] = static_cast<float>(l * 1000 + x);
    CHECK(cudaMemcpy2DToArray(level, 0, 0, texels.data(), w * sizeof(float), w * sizeof(float), h,
                              cudaMemcpyHostToDevice));
    std::vector<float> back(w * h);
    CHECK(cudaMemcpy2DFromArray(back.data(), w * sizeof(float), level, 0, 0, w * sizeof(float), h,
                                cudaMemcpyDeviceToHost));
    EXPECT(back == texels);
  }
  cudaArray_t past = nullptr;
  EXPECT(cudaGetMipmappedArrayLevel(&past, mipmap, kLevels) != cudaSuccess);
  cudaGetLastError();
  // A level lives as long as its mipmapped array: it is not freed alone.
  cudaArray_t first = nullptr;
  CHECK(cudaGetMipmappedArrayLevel(&first, mipmap, 0));
  EXPECT(cudaFreeArray(first) != cudaSuccess);
  cudaGetLastError();

  const std::vector<float> lods = {0.0f, 1.4f, 1.6f, 10.0f, -1.0f, 1.5f, 2.25f};
  const int n = static_cast<int>(lods.size());
  float *device_lods = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&device_lods, n * sizeof(float)));
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMemcpy(device_lods, lods.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<float> got(n);
  auto level_value = [](int l) { return 10.0f * (l + 1); };

  // Nearest level.
  cudaTextureObject_t nearest = MakeTexture(mipmap, cudaFilterModePoint, 0, kLevels - 1);
  AtLevels<<<1, 32>>>(nearest, device_lods, out, n);
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float want_nearest[] = {level_value(0), level_value(1), level_value(2), level_value(3),
                                level_value(0), level_value(2), level_value(2)};
  for (int i = 0; i < n; ++i) {
    std::printf("nearest level, lod %g: %g (want %g)\n", lods[i], got[i], want_nearest[i]);
    EXPECT(got[i] == want_nearest[i]);
  }
  // Gradients of 4 texels along x: level 2; tex2D reads level 0.
  WithGradients<<<1, 1>>>(nearest, 4.0f / kWidth, out);
  CHECK(cudaMemcpy(got.data(), out, 2 * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("gradients of 4 texels: %g; tex2D: %g\n", got[0], got[1]);
  EXPECT(got[0] == level_value(2) && got[1] == level_value(0));
  CHECK(cudaDestroyTextureObject(nearest));

  // Linear between levels.
  cudaTextureObject_t between = MakeTexture(mipmap, cudaFilterModeLinear, 0, kLevels - 1);
  AtLevels<<<1, 32>>>(between, device_lods, out, n);
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  const float want_between[] = {10, 20 * 0.6f + 30 * 0.4f, 20 * 0.4f + 30 * 0.6f, 40, 10, 25, 32.5f};
  for (int i = 0; i < n; ++i) {
    // 1.4 and 1.6: the fraction in 8-bit fixed point (0.3984 and 0.6016).
    std::printf("linear between levels, lod %g: %g (want about %g)\n", lods[i], got[i], want_between[i]);
    EXPECT(std::fabs(got[i] - want_between[i]) < 0.05f);
  }
  CHECK(cudaDestroyTextureObject(between));

  // A bias of 1 and a largest level of 2.
  cudaTextureObject_t biased = MakeTexture(mipmap, cudaFilterModePoint, 1.0f, 2.0f);
  AtLevels<<<1, 32>>>(biased, device_lods, out, n);
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  std::printf("bias 1, levels up to 2: lod 0 reads %g, lod 10 reads %g\n", got[0], got[3]);
  EXPECT(got[0] == level_value(1) && got[3] == level_value(2) && got[4] == level_value(0));
  cudaResourceDesc back{};
  CHECK(cudaGetTextureObjectResourceDesc(&back, biased));
  EXPECT(back.resType == cudaResourceTypeMipmappedArray && back.res.mipmap.mipmap == mipmap);
  CHECK(cudaDestroyTextureObject(biased));

  CHECK(cudaFree(device_lods));
  CHECK(cudaFree(out));
  CHECK(cudaFreeMipmappedArray(mipmap));
  std::printf("PASS\n");
  return 0;
}
