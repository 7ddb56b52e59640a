// The GPU models gpupool knows: the figures programs read through cudaGetDeviceProperties
// and that the occupancy calculator needs. The client library answers device attributes
// from them; the sim backend takes a simulated GPU's compute capability and SM count from
// them, so that what a program reads and what the sim runs (the PTX it accepts) agree.
// No dependencies: linked into libcuda.so.1 as well as the agent.
#pragma once

namespace gpupool {

struct GpuModel {
  const char* match;  // a substring of the device name ("H100-PCIE"); nullptr: a generation
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

// The model whose `match` is part of `name` (more specific names are tried first), or
// nullptr when gpupool does not know the model.
const GpuModel* FindGpuModel(const char* name);

// The figures of the newest generation at or below compute capability major.minor (the
// oldest generation known when it is below all of them). `match` is nullptr.
const GpuModel& GenerationModel(int cc_major, int cc_minor);

}  // namespace gpupool
