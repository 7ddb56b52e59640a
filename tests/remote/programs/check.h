// Shared by the data-path test programs: CHECK(cuda call) prints the failing call and the
// CUDA error, then exits 1. Every program takes no arguments and exits 0 only on success,
// so the same binaries run directly against an agent and inside a Slurm job.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK(call)                                                                    \
  do {                                                                                 \
    cudaError_t check_error_ = (call);                                                 \
    if (check_error_ != cudaSuccess) {                                                 \
      std::fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call,   \
                   cudaGetErrorString(check_error_), static_cast<int>(check_error_));  \
      std::exit(1);                                                                    \
    }                                                                                  \
  } while (0)

#define EXPECT(condition)                                                                  \
  do {                                                                                     \
    if (!(condition)) {                                                                    \
      std::fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #condition);        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
