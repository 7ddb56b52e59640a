// A program built as the math libraries are: SASS for sm_80 and PTX only for compute_90
// (-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=compute_90). A real
// GPU of compute capability 8.x runs the sm_80 SASS; one of 9.0 or later compiles the PTX.
// The sim runs the compute_90 PTX on both: on 8.x in the SASS's place (the kernel's
// __CUDA_ARCH__ branch says which code ran), and cudaFuncGetAttributes reports the SASS a
// GPU of the model would run (binaryVersion) and the PTX that runs (ptxVersion).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "../programs/check.h"

__global__ void WhichCode(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
#if __CUDA_ARCH__ >= 900
  out[i] = 900000 + i;
#else
  out[i] = 800000 + i;
#endif
}

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  const int arch = properties.major * 10 + properties.minor;

  cudaFuncAttributes attributes;
  CHECK(cudaFuncGetAttributes(&attributes, WhichCode));
  std::printf("ptxVersion %d, binaryVersion %d\n", attributes.ptxVersion, attributes.binaryVersion);
  EXPECT(attributes.binaryVersion == (properties.major == 8 ? 80 : arch));
  if (OnTheSim()) EXPECT(attributes.ptxVersion == 90);  // a GPU of 8.x says 80, its SASS's

  const int n = 256;
  int* out = nullptr;
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  WhichCode<<<2, 128>>>(out, n);
  CHECK(cudaGetLastError());
  int got[n];
  CHECK(cudaMemcpy(got, out, sizeof(got), cudaMemcpyDeviceToHost));
  // The sim runs the compute_90 code everywhere; a real 8.x GPU its sm_80 code.
  const int base = OnTheSim() || properties.major >= 9 ? 900000 : 800000;
  for (int i = 0; i < n; ++i) EXPECT(got[i] == base + i);
  std::printf("ran the %s code\n", got[0] >= 900000 ? "compute_90" : "sm_80");
  CHECK(cudaFree(out));
  std::printf("PASS\n");
  return 0;
}
