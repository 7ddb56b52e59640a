// Device printf (vprintf) and assert (__assertfail) text, shared by both tiers: the
// interpreter's handlers (interp/printf.cc) and compiled code's per-thread calls (jit/run.cc,
// PrintfLane and AssertLane) format with this same code, so that a thread prints the same
// bytes on either tier. What a launch's text is made of, and in which order its threads'
// lines come, is each tier's (docs/ptx-engine.md).
#pragma once

#include <cstdint>
#include <string>

namespace gpupool::sim {

// A thread's generic memory, as its loads see it: the host address of [address, address +
// size), or nullptr where no memory of the thread's is.
struct DeviceMemory {
  void* opaque;
  const uint8_t* (*at)(void* opaque, uint64_t address, uint32_t size);
};

// The NUL-terminated string at `address` (at most 4096 bytes; "(null)" when none is
// there).
std::string ReadDeviceString(const DeviceMemory& memory, uint64_t address);

// printf's text of `format` with the argument buffer at `args` (vprintf's layout: each
// argument at its alignment; 0: none), as CUDA's device printf formats it.
std::string FormatDevicePrintf(const DeviceMemory& memory, const std::string& format, uint64_t args);

// The GPU's message for a failed assert of thread `tid` of block `ctaid`.
std::string FormatDeviceAssert(const DeviceMemory& memory, uint64_t message, uint64_t file, uint32_t line,
                               uint64_t function, const uint32_t ctaid[3], const uint32_t tid[3]);

}  // namespace gpupool::sim
