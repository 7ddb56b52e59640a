// The test kernels. The sim GPU runs them from their PTX (remote/sim, the PTX engine), as
// it runs any kernel.
#pragma once

__global__ void vecAdd(const float* a, const float* b, float* c, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

__global__ void scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

__global__ void fillPattern(unsigned int* p, unsigned int seed, unsigned long n) {
  for (unsigned long i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<unsigned long>(gridDim.x) * blockDim.x) {
    p[i] = seed ^ static_cast<unsigned int>(i * 2654435761u);
  }
}

__global__ void noop() {}
