// The cuRAND device API as Monte Carlo programs use it: XORWOW, Philox and MRG32k3a states
// set up per thread (curand_init), uniform and normal draws (pi by darts, the normal
// distribution's mean and variance), Philox's double normals, 4-wide draws and Poisson
// draws. The statistics must hold, and two runs with the same seeds give the same bits.
#include <curand_kernel.h>

#include <cmath>

#include "../programs/check.h"
template <typename State>
__global__ void Setup(State* states, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curand_init(seed, id, 0, &states[id]);
}
template <typename State>
__global__ void Pi(State* states, int per_thread, unsigned* hits, float* normal_sum, float* normal_sq) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  State local = states[id];
  unsigned count = 0;
  float s = 0, q = 0;
  for (int i = 0; i < per_thread; i++) {
    float x = curand_uniform(&local), y = curand_uniform(&local);
    if (x * x + y * y <= 1.f) count++;
    float z = curand_normal(&local);
    s += z;
    q += z * z;
  }
  states[id] = local;
  hits[id] = count;
  normal_sum[id] = s;
  normal_sq[id] = q;
}
__global__ void PhiloxDouble(double* out, unsigned long long seed) {
  int id = blockIdx.x * blockDim.x + threadIdx.x;
  curandStatePhilox4_32_10_t st;
  curand_init(seed, id, 0, &st);
  auto d = curand_normal4_double(&st);
  uint4 u = curand4(&st);
  out[id] = d.x + d.y + d.z + d.w + (u.x & 1);
  unsigned p = curand_poisson(&st, 4.0);
  out[id] += 10 * p;
}
template <typename State>
static void Run(const char* name, int blocks, int threads) {
  int n = blocks * threads;
  State* states;
  unsigned* hits;
  float *s, *q;
  CHECK(cudaMalloc(&states, n * sizeof(State)));
  CHECK(cudaMalloc(&hits, n * 4));
  CHECK(cudaMalloc(&s, n * 4));
  CHECK(cudaMalloc(&q, n * 4));
  double pi[2];
  unsigned first[2];
  for (int round = 0; round < 2; round++) {
    Setup<<<blocks, threads>>>(states, 1234);
    Pi<<<blocks, threads>>>(states, 200, hits, s, q);
    CHECK(cudaDeviceSynchronize());
    unsigned* h = new unsigned[n];
    float* hs = new float[n];
    float* hq = new float[n];
    CHECK(cudaMemcpy(h, hits, n * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hs, s, n * 4, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hq, q, n * 4, cudaMemcpyDeviceToHost));
    double total = 0, ms = 0, mq = 0;
    for (int i = 0; i < n; i++) {
      total += h[i];
      ms += hs[i];
      mq += hq[i];
    }
    pi[round] = 4 * total / (200.0 * n);
    first[round] = h[0] * 1000003u + h[n - 1];
    double mean = ms / (200.0 * n), var = mq / (200.0 * n) - mean * mean;
    printf("%s: pi %.5f normal mean %.5f var %.5f\n", name, pi[round], mean, var);
    EXPECT(fabs(pi[round] - M_PI) < 0.01);
    EXPECT(fabs(mean) < 0.01);
    EXPECT(fabs(var - 1) < 0.02);
  }
  EXPECT(pi[0] == pi[1] && first[0] == first[1]);
}
int main() {
  Run<curandState>("xorwow", 64, 128);
  Run<curandStatePhilox4_32_10_t>("philox", 64, 128);
  Run<curandStateMRG32k3a>("mrg32k3a", 32, 128);
  double* d;
  CHECK(cudaMalloc(&d, 8192 * 8));
  PhiloxDouble<<<64, 128>>>(d, 99);
  CHECK(cudaDeviceSynchronize());
  double* h = new double[8192];
  CHECK(cudaMemcpy(h, d, 8192 * 8, cudaMemcpyDeviceToHost));
  double m = 0;
  for (int i = 0; i < 8192; i++) m += h[i];
  m /= 8192;
  printf("philox double mean %.4f (expect ~40.5)\n", m);
  EXPECT(fabs(m - 40.5) < 0.3);
  printf("PASS\n");
}
