// What a remote device is: the properties of its GPU model, and the value of each
// CUdevice_attribute (see device_attributes.cc).
#pragma once

#include <cuda.h>

#include "remote/client/runtime.h"

namespace gpupool::client {

// The figures of a GPU model that programs read (cudaGetDeviceProperties) and that the
// occupancy calculator needs.
struct ModelProperties {
  const char* match;  // a substring of the device name ("H100-PCIE"); nullptr: by generation
  int cc_major, cc_minor;
  int multiprocessors;
  int clock_khz, memory_clock_khz, memory_bus_width;
  int l2_cache_bytes;
  int shared_per_block, shared_per_block_optin, shared_per_multiprocessor;
  int reserved_shared_per_block;
  int registers_per_block, registers_per_multiprocessor;
  int max_threads_per_multiprocessor, max_blocks_per_multiprocessor;
  int single_to_double_ratio;
  int async_engines;
};

// The properties of `device`'s model. On the sim, everything comes from the model's
// table entry (the sim backend does not know models); on a GPU host, compute capability
// and SM count come from the GPU itself and the rest from the entry for its model, or for
// its generation when the model is not in the table.
ModelProperties PropertiesOf(const Device& device);

// CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, as GPUs since sm_80 report it: the
// largest access policy window a stream or kernel may be given.
constexpr int kMaxAccessPolicyWindowBytes = 134213632;

// CUDA_ERROR_INVALID_VALUE for attributes outside the enum.
CUresult DeviceAttribute(const Device& device, int attribute, int* value);

}  // namespace gpupool::client
