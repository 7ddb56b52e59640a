// Sim kernels: CPU implementations of the project's own test kernels, by mangled name.
//
// The sim executor cannot run GPU code; it runs these instead, with the same parameter
// layout the kernels have on a GPU (tests/remote/*.cu defines the CUDA side; a kernel
// added there needs its twin here). Each implementation walks the whole grid and reads
// and writes device memory through SimDeviceMemory as the launching session, so an
// out-of-range pointer, or one into another session's memory, becomes
// CUDA_ERROR_ILLEGAL_ADDRESS instead of a crash of the agent or a cross-tenant access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "remote/dataplane/executor.h"
#include "remote/dataplane/sim_memory.h"

namespace gpupool::dataplane {

struct SimLaunch {
  const LaunchConfig* config;
  const uint8_t* params;
  size_t param_size;
  SimDeviceMemory* memory;
  SimDeviceMemory::Owner owner;  // the launching session: its kernels reach only its memory
};

// Returns a CUresult.
using SimKernel = int32_t (*)(const SimLaunch& launch);

struct SimKernelSpec {
  SimKernel run;
  uint32_t param_size;  // the packed size the GPU compiler gives this kernel's parameters
};

// nullptr when no CPU implementation exists under that name.
const SimKernelSpec* FindSimKernel(const std::string& mangled_name);

}  // namespace gpupool::dataplane
