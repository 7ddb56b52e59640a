// Texture objects over device memory rather than CUDA arrays, through the runtime API, each
// result checked against the CPU: tex1Dfetch of floats and of bytes read as normalised
// floats over linear memory; tex2D over pitched memory (cudaMallocPitch) with point
// sampling, clamped coordinates and linear filtering; the resource a texture was made from;
// memory outside an allocation refused; and a texture destroyed after its memory was freed,
// as cleanup code often does. On the sim the library makes these objects; on a GPU host's
// GPU the agent's driver does (forwarded since issue 41).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "../programs/check.h"

namespace {

__global__ void FetchFloats(cudaTextureObject_t texture, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float>(texture, i);
}

__global__ void FetchNormalisedBytes(cudaTextureObject_t texture, float4* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = tex1Dfetch<float4>(texture, i);
}

// out[y][x] = the texel at (x, y) sampled at its centre; column `w` holds a sample left of
// the image (clamped to column 0), column `w + 1` the midpoint of texels x = 0 and 1.
__global__ void Sample2D(cudaTextureObject_t texture, float* out, int w, int h) {
  const int x = threadIdx.x, y = blockIdx.x;
  if (y >= h) return;
  const int row = w + 2;
  if (x < w) out[y * row + x] = tex2D<float>(texture, x + 0.5f, y + 0.5f);
  if (x == 0) {
    out[y * row + w] = tex2D<float>(texture, -3.0f, y + 0.5f);
    out[y * row + w + 1] = tex2D<float>(texture, 1.0f, y + 0.5f);
  }
}

cudaTextureObject_t Texture(const cudaResourceDesc& resource, cudaTextureFilterMode filter, cudaTextureReadMode read) {
  cudaTextureDesc texture = {};
  texture.addressMode[0] = texture.addressMode[1] = cudaAddressModeClamp;
  texture.filterMode = filter;
  texture.readMode = read;
  cudaTextureObject_t made = 0;
  CHECK(cudaCreateTextureObject(&made, &resource, &texture, nullptr));
  return made;
}

}  // namespace

int main() {
  DescribeDeviceExpectingModel();

  // Floats over linear memory.
  const int n = 1000;
  std::vector<float> values(n);
  for (int i = 0; i < n; ++i) values[i] = std::sin(0.37f * i) * 100.0f;
  float* linear = nullptr;
  float* out = nullptr;
  CHECK(cudaMalloc(&linear, n * sizeof(float)));
  CHECK(cudaMalloc(&out, 4 * n * sizeof(float)));
  CHECK(cudaMemcpy(linear, values.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  cudaResourceDesc resource = {};
  resource.resType = cudaResourceTypeLinear;
  resource.res.linear.devPtr = linear;
  resource.res.linear.desc = cudaCreateChannelDesc<float>();
  resource.res.linear.sizeInBytes = n * sizeof(float);
  const cudaTextureObject_t floats = Texture(resource, cudaFilterModePoint, cudaReadModeElementType);
  FetchFloats<<<(n + 127) / 128, 128>>>(floats, out, n);
  CHECK(cudaGetLastError());
  std::vector<float> got(4 * n);
  CHECK(cudaMemcpy(got.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += got[i] != values[i];
  std::printf("tex1Dfetch of %d floats: %d wrong\n", n, wrong);
  EXPECT(wrong == 0);
  cudaResourceDesc back = {};
  CHECK(cudaGetTextureObjectResourceDesc(&back, floats));
  EXPECT(back.resType == cudaResourceTypeLinear && back.res.linear.devPtr == linear &&
         back.res.linear.sizeInBytes == n * sizeof(float));

  // Bytes read as normalised floats (uchar4 over the same memory's first n * 4 bytes).
  std::vector<unsigned char> bytes(4 * n);
  for (int i = 0; i < 4 * n; ++i) bytes[i] = static_cast<unsigned char>((i * 37 + 11) & 0xff);
  unsigned char* byte_memory = nullptr;
  CHECK(cudaMalloc(&byte_memory, bytes.size()));
  CHECK(cudaMemcpy(byte_memory, bytes.data(), bytes.size(), cudaMemcpyHostToDevice));
  resource.res.linear.devPtr = byte_memory;
  resource.res.linear.desc = cudaCreateChannelDesc<uchar4>();
  resource.res.linear.sizeInBytes = bytes.size();
  const cudaTextureObject_t normalised = Texture(resource, cudaFilterModePoint, cudaReadModeNormalizedFloat);
  FetchNormalisedBytes<<<(n + 127) / 128, 128>>>(normalised, reinterpret_cast<float4*>(out), n);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(got.data(), out, 4 * n * sizeof(float), cudaMemcpyDeviceToHost));
  double worst = 0;
  for (int i = 0; i < 4 * n; ++i) worst = std::fmax(worst, std::fabs(got[i] - bytes[i] / 255.0));
  std::printf("tex1Dfetch of %d uchar4 as normalised floats: worst error %.3g\n", n, worst);
  EXPECT(worst < 1e-6);

  // Pitched 2D memory: point samples, a clamped one and a linearly filtered midpoint.
  const int w = 48, h = 20;
  std::vector<float> image(w * h);
  for (int i = 0; i < w * h; ++i) image[i] = static_cast<float>((i * 7919) % 1000) / 8.0f;
  float* pitched = nullptr;
  size_t pitch = 0;
  CHECK(cudaMallocPitch(reinterpret_cast<void**>(&pitched), &pitch, w * sizeof(float), h));
  CHECK(cudaMemcpy2D(pitched, pitch, image.data(), w * sizeof(float), w * sizeof(float), h, cudaMemcpyHostToDevice));
  resource = {};
  resource.resType = cudaResourceTypePitch2D;
  resource.res.pitch2D.devPtr = pitched;
  resource.res.pitch2D.desc = cudaCreateChannelDesc<float>();
  resource.res.pitch2D.width = w;
  resource.res.pitch2D.height = h;
  resource.res.pitch2D.pitchInBytes = pitch;
  const int row = w + 2;
  for (cudaTextureFilterMode filter : {cudaFilterModePoint, cudaFilterModeLinear}) {
    const cudaTextureObject_t plane = Texture(resource, filter, cudaReadModeElementType);
    Sample2D<<<h, w>>>(plane, out, w, h);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(got.data(), out, row * h * sizeof(float), cudaMemcpyDeviceToHost));
    wrong = 0;
    for (int y = 0; y < h; ++y) {
      for (int x = 0; x < w; ++x) wrong += got[y * row + x] != image[y * w + x];
      wrong += got[y * row + w] != image[y * w];
      // Point sampling takes texel 1 at x = 1.0; linear filtering weighs texels 0 and 1
      // by one half each (an exact weight in the GPU's 9-bit fixed point).
      const float midpoint =
          filter == cudaFilterModePoint ? image[y * w + 1] : 0.5f * image[y * w] + 0.5f * image[y * w + 1];
      wrong += std::fabs(got[y * row + w + 1] - midpoint) > 1e-4f * (1 + std::fabs(midpoint));
    }
    std::printf("tex2D over pitched memory (pitch %zu), %s: %d wrong\n", pitch,
                filter == cudaFilterModePoint ? "point" : "linear", wrong);
    EXPECT(wrong == 0);
    CHECK(cudaDestroyTextureObject(plane));
  }

  // Memory past the end of its allocation: refused.
  resource = {};
  resource.resType = cudaResourceTypeLinear;
  resource.res.linear.devPtr = linear + n / 2;
  resource.res.linear.desc = cudaCreateChannelDesc<float>();
  resource.res.linear.sizeInBytes = n * sizeof(float);
  cudaTextureDesc texture = {};
  cudaTextureObject_t refused = 0;
  EXPECT(cudaCreateTextureObject(&refused, &resource, &texture, nullptr) == cudaErrorInvalidValue);
  cudaGetLastError();

  // Freed first, then destroyed.
  CHECK(cudaFree(byte_memory));
  CHECK(cudaDestroyTextureObject(normalised));
  CHECK(cudaDestroyTextureObject(floats));
  CHECK(cudaFree(linear));
  CHECK(cudaFree(pitched));
  CHECK(cudaFree(out));
  CHECK(cudaDeviceSynchronize());
  std::printf("PASS\n");
  return 0;
}
