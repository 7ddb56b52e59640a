// An iterative program whose state lives in CUDA arrays, for the failover tests: two 2D
// arrays of unsigned ints, each with a texture object and a surface object; every
// iteration reads one through its texture (a texel and its right neighbour, wrapping) and
// writes the other through its surface, then they swap. A CPU reference decides PASS. Its
// GPU may fail while it runs: with failover it prints "iterate: PASS" all the same, so the
// arrays' texels and the objects' descriptors came through.
//
//   texture_iterate [ITERATIONS [MS_BETWEEN]]   (defaults 120 20)
//
// Prints "iterate: running" once some iterations are done (the tests fail the GPU after
// that), "iterate: iteration N" every 50, then "iterate: PASS" or what was wrong.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "check.h"

constexpr int kWidth = 64, kHeight = 24;

// next(x, y) = now(x, y) * 1664525 + now(x + 1 wrapping, y) + iteration
__global__ void step(cudaTextureObject_t now, cudaSurfaceObject_t next, unsigned iteration) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x >= kWidth) return;
  unsigned here = tex2D<unsigned>(now, x, y);
  unsigned right = tex2D<unsigned>(now, (x + 1) % kWidth, y);
  surf2Dwrite(here * 1664525u + right + iteration, next, x * 4, y);
}

int main(int argc, char** argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 120;
  const int pause_ms = argc > 2 ? std::atoi(argv[2]) : 20;
  EXPECT(iterations > 0 && pause_ms >= 0);
  std::vector<unsigned> state(kWidth * kHeight);
  for (int i = 0; i < kWidth * kHeight; ++i) state[i] = i * 2654435761u;
  cudaChannelFormatDesc channel = cudaCreateChannelDesc<unsigned>();
  cudaArray_t arrays[2];
  cudaTextureObject_t textures[2];
  cudaSurfaceObject_t surfaces[2];
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaMallocArray(&arrays[i], &channel, kWidth, kHeight, cudaArraySurfaceLoadStore));
    cudaResourceDesc resource{};
    resource.resType = cudaResourceTypeArray;
    resource.res.array.array = arrays[i];
    cudaTextureDesc texture{};
    texture.filterMode = cudaFilterModePoint;
    texture.readMode = cudaReadModeElementType;
    CHECK(cudaCreateTextureObject(&textures[i], &resource, &texture, nullptr));
    CHECK(cudaCreateSurfaceObject(&surfaces[i], &resource));
  }
  CHECK(cudaMemcpy2DToArray(arrays[0], 0, 0, state.data(), kWidth * 4, kWidth * 4, kHeight, cudaMemcpyHostToDevice));
  for (int it = 1; it <= iterations; ++it) {
    const int now = (it - 1) % 2;
    step<<<dim3((kWidth + 31) / 32, kHeight), 32>>>(textures[now], surfaces[1 - now], it);
    CHECK(cudaGetLastError());
    std::vector<unsigned> next(state.size());
    for (int y = 0; y < kHeight; ++y) {
      for (int x = 0; x < kWidth; ++x) {
        next[y * kWidth + x] =
            state[y * kWidth + x] * 1664525u + state[y * kWidth + (x + 1) % kWidth] + static_cast<unsigned>(it);
      }
    }
    state.swap(next);
    // A texel back every iteration, as an iterative solver reads its residual.
    unsigned corner = 0;
    CHECK(cudaMemcpy2DFromArray(&corner, 4, arrays[1 - now], 0, 0, 4, 1, cudaMemcpyDeviceToHost));
    if (corner != state[0]) {
      std::printf("iterate: FAIL at iteration %d: texel (0, 0) is %u, not %u\n", it, corner, state[0]);
      return 1;
    }
    if (it == 10) std::printf("iterate: running\n");
    if (it % 50 == 0) std::printf("iterate: iteration %d\n", it);
    std::fflush(stdout);
    if (pause_ms > 0) usleep(pause_ms * 1000);
  }
  std::vector<unsigned> got(state.size());
  CHECK(cudaMemcpy2DFromArray(got.data(), kWidth * 4, arrays[iterations % 2], 0, 0, kWidth * 4, kHeight,
                              cudaMemcpyDeviceToHost));
  size_t wrong = 0;
  for (size_t i = 0; i < got.size(); ++i) wrong += got[i] != state[i];
  for (int i = 0; i < 2; ++i) {
    CHECK(cudaDestroySurfaceObject(surfaces[i]));
    CHECK(cudaDestroyTextureObject(textures[i]));
    CHECK(cudaFreeArray(arrays[i]));
  }
  if (wrong != 0) {
    std::printf("iterate: FAIL: %zu of %zu texels wrong\n", wrong, got.size());
    return 1;
  }
  std::printf("iterate: PASS (%d iterations, two %dx%d arrays through textures and surfaces)\n", iterations, kWidth,
              kHeight);
  return 0;
}
