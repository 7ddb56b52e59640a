// The device malloc heap (CUDA's device-side malloc and free, and the device runtime's
// parameter buffers), shared by both tiers: the interpreter's handlers (interp/device_heap.cc,
// interp/device_runtime.cc) and compiled code's per-thread calls (jit/run.cc, MallocLane
// and FreeLane) allocate with this same code, so that a kernel gets the same heap, the same
// NULL when it is full and the same fault for a bad free on either tier.
//
// The heap is a module variable (kDeviceHeapVariable, ptx_engine.h) of the size
// cudaLimitMallocHeapSize gave at the module's load; `heap` below is its host memory,
// `heap_size` its bytes. Its bookkeeping lives inside it (device memory like any other).
// REQUIRES: device_heap_mu held by the caller around every call of a launch.
#pragma once

#include <cstdint>
#include <mutex>

namespace gpupool::sim {

// CTAs on the workers, of either tier (and other sessions, whose heaps are other memory),
// take turns.
extern std::mutex device_heap_mu;

// The offset in the heap of `bytes` of payload (16-byte aligned), or 0 when the heap has
// no room (malloc's NULL) or its bookkeeping was overwritten.
uint64_t HeapAllocate(uint8_t* heap, uint64_t heap_size, uint64_t bytes);

// Frees the payload at offset `payload`; false when it is not one HeapAllocate gave and
// has not been freed since (or the bookkeeping was overwritten).
bool HeapFree(uint8_t* heap, uint64_t heap_size, uint64_t payload);

// One thread's malloc(bytes) on the heap at device address `heap_address`: the device
// address of its block, or 0 (NULL).
uint64_t DeviceMalloc(uint8_t* heap, uint64_t heap_address, uint64_t heap_size, uint64_t bytes);

// One thread's free(address): true for NULL (nothing done) and for a block malloc gave;
// false for any other pointer, or one freed twice, which fails the launch with
// CUDA_ERROR_ILLEGAL_ADDRESS (as the GPU's heap check does).
bool DeviceFree(uint8_t* heap, uint64_t heap_address, uint64_t heap_size, uint64_t address);

}  // namespace gpupool::sim
