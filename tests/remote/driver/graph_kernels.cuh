// The kernels and the host function that the graph programs of this folder (stream_graphs,
// graph_nodes) put into their graphs, and the count of the host function's calls.
#pragma once

#include <cuda_runtime.h>

__global__ void AddScalar(float* x, float value, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += value;
}

__global__ void Scale(float* x, float factor, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= factor;
}

int host_calls = 0;
void CUDART_CB CountCall(void*) { ++host_calls; }
