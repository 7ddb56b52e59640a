// What of device_heap.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/memory.h"

namespace gpupool::sim::interp {

// CTAs on the two workers (and other sessions, whose heaps are other memory) take turns.
extern std::mutex device_heap_mu;

uint64_t HeapAllocate(uint8_t* heap, uint64_t heap_size, uint64_t bytes);
bool HeapFree(uint8_t* heap, uint64_t heap_size, uint64_t payload);
void HMalloc(Warp& w, const Inst& in, uint32_t mask);
void HSetConditional(Warp& w, const Inst& in, uint32_t mask);
void HFree(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp
