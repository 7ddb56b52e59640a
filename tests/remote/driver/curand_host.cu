// cuRAND's host API, as programs use it: generators made on the host that fill device
// memory with their kernels (XORWOW, Philox, MRG32k3a, MTGP32 and Sobol), checked against
// cuRAND's own CPU generators of the same kind and seed, which produce the same sequence,
// and for their distribution. cuRAND ships its kernels as SASS for each GPU and as PTX for
// compute_121 only: on a simulated GPU older than that, the sim runs that PTX where a real
// GPU of the model would run its SASS (gpupool-remote(7), EXECUTORS).
#include <curand.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../programs/check.h"

#define RAND_CHECK(call)                                                                     \
  do {                                                                                       \
    curandStatus_t rand_check_status_ = (call);                                              \
    if (rand_check_status_ != CURAND_STATUS_SUCCESS) {                                       \
      std::fprintf(stderr, "%s:%d: %s failed: curandStatus %d\n", __FILE__, __LINE__, #call, \
                   static_cast<int>(rand_check_status_));                                    \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

constexpr size_t kCount = 4096;

struct Kind {
  curandRngType_t type;
  const char* name;
};

// `count` uniform floats from a generator of `type` on the device and on the CPU.
void Uniform(const Kind& kind) {
  curandGenerator_t device, host;
  RAND_CHECK(curandCreateGenerator(&device, kind.type));
  RAND_CHECK(curandCreateGeneratorHost(&host, kind.type));
  const bool pseudo = kind.type != CURAND_RNG_QUASI_SOBOL32;
  if (pseudo) {
    RAND_CHECK(curandSetPseudoRandomGeneratorSeed(device, 1234));
    RAND_CHECK(curandSetPseudoRandomGeneratorSeed(host, 1234));
  }
  float* d = nullptr;
  CHECK(cudaMalloc(&d, kCount * sizeof(float)));
  RAND_CHECK(curandGenerateUniform(device, d, kCount));
  std::vector<float> got(kCount), want(kCount);
  CHECK(cudaMemcpy(got.data(), d, kCount * sizeof(float), cudaMemcpyDeviceToHost));
  RAND_CHECK(curandGenerateUniform(host, want.data(), kCount));
  size_t differ = 0;
  double sum = 0, squares = 0;
  for (size_t i = 0; i < kCount; ++i) {
    if (got[i] != want[i]) ++differ;
    EXPECT(got[i] > 0.0f && got[i] <= 1.0f);
    sum += got[i];
    squares += double(got[i]) * got[i];
  }
  const double mean = sum / kCount, variance = squares / kCount - mean * mean;
  std::printf("%s uniform: %zu of %zu differ from the CPU generator, mean %.4f, variance %.4f\n", kind.name, differ,
              kCount, mean, variance);
  EXPECT(differ == 0);
  EXPECT(std::fabs(mean - 0.5) < 0.02);
  EXPECT(std::fabs(variance - 1.0 / 12) < 0.01);
  if (pseudo) {
    // Normal doubles: the CPU's and the GPU's logarithms may differ in the last bits (for
    // MTGP32, whose 32-bit draws they transform, in float's: 6e-7 on the sim).
    double* dn = nullptr;
    CHECK(cudaMalloc(&dn, kCount * sizeof(double)));
    RAND_CHECK(curandGenerateNormalDouble(device, dn, kCount, 1.0, 2.0));
    std::vector<double> normal(kCount), normal_want(kCount);
    CHECK(cudaMemcpy(normal.data(), dn, kCount * sizeof(double), cudaMemcpyDeviceToHost));
    RAND_CHECK(curandGenerateNormalDouble(host, normal_want.data(), kCount, 1.0, 2.0));
    double worst = 0, nsum = 0;
    for (size_t i = 0; i < kCount; ++i) {
      worst = std::fmax(worst, std::fabs(normal[i] - normal_want[i]));
      nsum += normal[i];
    }
    std::printf("%s normal: largest difference from the CPU %.3g, mean %.4f\n", kind.name, worst, nsum / kCount);
    EXPECT(worst < 1e-5);
    EXPECT(std::fabs(nsum / kCount - 1.0) < 0.15);
    CHECK(cudaFree(dn));
  }
  CHECK(cudaFree(d));
  RAND_CHECK(curandDestroyGenerator(device));
  RAND_CHECK(curandDestroyGenerator(host));
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const Kind kinds[] = {{CURAND_RNG_PSEUDO_XORWOW, "XORWOW"},
                        {CURAND_RNG_PSEUDO_PHILOX4_32_10, "Philox4x32-10"},
                        {CURAND_RNG_PSEUDO_MRG32K3A, "MRG32k3a"},
                        {CURAND_RNG_PSEUDO_MTGP32, "MTGP32"},
                        {CURAND_RNG_QUASI_SOBOL32, "Sobol32"}};
  for (const Kind& kind : kinds) Uniform(kind);
  std::printf("PASS\n");
  return 0;
}
