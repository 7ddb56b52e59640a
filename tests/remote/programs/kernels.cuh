// The test kernels. The sim executor runs CPU twins of these (remote/dataplane/
// sim_kernels.cc), found by mangled name: change a signature in both places.
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
