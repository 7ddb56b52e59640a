// Device-side malloc, free, new and delete as programs use them: a heap made larger with
// cudaDeviceSetLimit(cudaLimitMallocHeapSize) before the first kernel, one allocation
// bigger than the default 8 MiB heap, objects made with new in one kernel and used and
// deleted in the next, and NULL once the heap is exhausted.
#include <cstdio>
#include <new>

#include "../programs/check.h"

struct Particle {
  float x, v;
  __device__ Particle(float position, float velocity) : x(position), v(velocity) {}
  __device__ void Step(float dt) { x += v * dt; }
};

__global__ void Big(size_t bytes, int* ok) {
  char* p = static_cast<char*>(malloc(bytes));
  if (p == nullptr) {
    *ok = 0;
    return;
  }
  for (size_t i = 0; i < bytes; i += 4096) p[i] = static_cast<char>(i / 4096);
  int good = 1;
  for (size_t i = 0; i < bytes; i += 4096) good &= p[i] == static_cast<char>(i / 4096);
  *ok = good;
  free(p);
}

__global__ void Make(Particle** particles, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) particles[i] = new Particle(static_cast<float>(i), 2.0f);
}

__global__ void StepAndDelete(Particle** particles, int n, float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  particles[i]->Step(0.5f);
  x[i] = particles[i]->x;
  delete particles[i];
}

// Allocates 1 MiB blocks until malloc says NULL, then frees them all.
__global__ void Exhaust(int* count) {
  void* blocks[256];
  int n = 0;
  while (n < 256 && (blocks[n] = malloc(1 << 20)) != nullptr) ++n;
  *count = n;
  for (int i = 0; i < n; ++i) free(blocks[i]);
}

int main() {
  const size_t heap = size_t{64} << 20;
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap));
  size_t read_back = 0;
  CHECK(cudaDeviceGetLimit(&read_back, cudaLimitMallocHeapSize));
  EXPECT(read_back == heap);

  int* ok = nullptr;
  CHECK(cudaMallocManaged(&ok, 2 * sizeof(int)));
  ok[0] = -1;
  Big<<<1, 1>>>(size_t{40} << 20, ok);
  CHECK(cudaDeviceSynchronize());
  EXPECT(ok[0] == 1);  // 40 MiB: more than the default heap, less than this one

  const int n = 1000;
  Particle** particles = nullptr;
  float* x = nullptr;
  CHECK(cudaMalloc(&particles, n * sizeof(Particle*)));
  CHECK(cudaMallocManaged(&x, n * sizeof(float)));
  Make<<<(n + 127) / 128, 128>>>(particles, n);
  StepAndDelete<<<(n + 127) / 128, 128>>>(particles, n, x);
  CHECK(cudaDeviceSynchronize());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += x[i] != static_cast<float>(i) + 1.0f;
  EXPECT(wrong == 0);

  // 64 MiB in 1 MiB blocks: fewer than 64 fit (each block has its header), NULL after. (The
  // sim fits 60 to 63; an H100 with driver 580 fits 52.)
  Exhaust<<<1, 1>>>(ok + 1);
  CHECK(cudaDeviceSynchronize());
  std::printf("device heap: %d blocks of 1 MiB before NULL\n", ok[1]);
  EXPECT(ok[1] >= 48 && ok[1] < 64);
  if (OnTheSim()) {
    Big<<<1, 1>>>(size_t{60} << 20, ok);  // everything was freed: the heap is whole again
    CHECK(cudaDeviceSynchronize());
    EXPECT(ok[0] == 1);
  }

  CHECK_FREE(ok, particles, x);
  std::printf("device heap: PASS\n");
  return 0;
}
