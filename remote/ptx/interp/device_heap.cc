// The interpreter's Device-side malloc and free on the module's heap variable, and
// cudaGraphSetConditional. Private interface: device_heap.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/device_heap.h"

namespace gpupool::sim::interp {

// The heap is a module variable (kDeviceHeapVariable, ptx_engine.h) added to a module that
// calls malloc or free, and its bookkeeping lives inside it: it is device memory like any
// other, read by a checkpoint and restored on a replacement GPU at the same address.
// Layout: a DeviceHeapHeader, then blocks, each a DeviceHeapBlock header and its payload
// (16-byte aligned, as CUDA's malloc aligns). Free blocks form a list in address order;
// neighbours merge when freed, and a free block that ends the used part gives it back.
// Offsets are from the heap's start; 0 is "none". A kernel may scribble over the
// bookkeeping, so every offset read from it is checked before use.
struct DeviceHeapHeader {
  uint64_t magic, top, free_head, unused;
};
struct DeviceHeapBlock {
  uint64_t size, next;  // next: the next free block, or kHeapAllocated
};
constexpr uint64_t kHeapMagic = 0x3130706165485047ull;  // "GPHeap01"
constexpr uint64_t kHeapAllocated = ~uint64_t{0};
constexpr uint64_t kHeapFirstBlock = sizeof(DeviceHeapHeader);
constexpr uint64_t kHeapBlockHeader = sizeof(DeviceHeapBlock);
// CTAs on the two workers (and other sessions, whose heaps are other memory) take turns.
std::mutex device_heap_mu;

// A block at `at` that lies inside the used part, or nullptr.
DeviceHeapBlock* HeapBlock(uint8_t* heap, uint64_t at) {
  const auto* header = reinterpret_cast<const DeviceHeapHeader*>(heap);
  if (at < kHeapFirstBlock || at % 16 != 0 || at > header->top || header->top - at < kHeapBlockHeader) {
    return nullptr;
  }
  auto* block = reinterpret_cast<DeviceHeapBlock*>(heap + at);
  if (block->size > header->top - at - kHeapBlockHeader || block->size % 16 != 0) return nullptr;
  return block;
}

// The offset of `bytes` of payload, or 0 when the heap has no room (malloc's NULL) or its
// bookkeeping was overwritten.
uint64_t HeapAllocate(uint8_t* heap, uint64_t heap_size, uint64_t bytes) {
  auto* header = reinterpret_cast<DeviceHeapHeader*>(heap);
  if (header->magic != kHeapMagic) *header = DeviceHeapHeader{kHeapMagic, kHeapFirstBlock, 0, 0};
  if (header->top < kHeapFirstBlock || header->top > heap_size) return 0;
  if (bytes == 0 || bytes > heap_size) return 0;
  const uint64_t need = (bytes + 15) / 16 * 16;
  uint64_t previous = 0;
  uint64_t at = header->free_head;
  for (uint64_t steps = 0; at != 0; ++steps) {
    DeviceHeapBlock* block = HeapBlock(heap, at);
    if (block == nullptr || block->next == kHeapAllocated || steps > heap_size / 32) {
      return 0;
    }
    if (block->size >= need) {
      uint64_t next = block->next;
      if (block->size - need >= kHeapBlockHeader + 16) {  // split: the rest stays free
        const uint64_t rest = at + kHeapBlockHeader + need;
        *reinterpret_cast<DeviceHeapBlock*>(heap + rest) = DeviceHeapBlock{block->size - need - kHeapBlockHeader, next};
        next = rest;
        block->size = need;
      }
      if (previous == 0) {
        header->free_head = next;
      } else {
        reinterpret_cast<DeviceHeapBlock*>(heap + previous)->next = next;
      }
      block->next = kHeapAllocated;
      return at + kHeapBlockHeader;
    }
    previous = at;
    at = block->next;
  }
  if (heap_size - header->top < kHeapBlockHeader + need) return 0;
  at = header->top;
  header->top += kHeapBlockHeader + need;
  *reinterpret_cast<DeviceHeapBlock*>(heap + at) = DeviceHeapBlock{need, kHeapAllocated};
  return at + kHeapBlockHeader;
}

// Frees the payload at offset `payload`; false when it is not one HeapAllocate gave and
// has not been freed since (or the bookkeeping was overwritten).
bool HeapFree(uint8_t* heap, uint64_t heap_size, uint64_t payload) {
  auto* header = reinterpret_cast<DeviceHeapHeader*>(heap);
  if (header->magic != kHeapMagic || header->top > heap_size) return false;
  if (payload < kHeapFirstBlock + kHeapBlockHeader) return false;
  const uint64_t at = payload - kHeapBlockHeader;
  DeviceHeapBlock* block = HeapBlock(heap, at);
  if (block == nullptr || block->next != kHeapAllocated) return false;
  // Where it goes in the address-ordered list: after `previous` (before it, `before`).
  uint64_t before = 0, previous = 0, next = header->free_head;
  for (uint64_t steps = 0; next != 0 && next < at; ++steps) {
    DeviceHeapBlock* free_block = HeapBlock(heap, next);
    if (free_block == nullptr || free_block->next == kHeapAllocated || steps > heap_size / 32) {
      return false;
    }
    before = previous;
    previous = next;
    next = free_block->next;
  }
  if (next != 0 && HeapBlock(heap, next) == nullptr) return false;
  block->next = next;
  if (previous == 0) {
    header->free_head = at;
  } else {
    reinterpret_cast<DeviceHeapBlock*>(heap + previous)->next = at;
  }
  uint64_t merged = at;
  uint64_t merged_before = previous;
  if (next != 0 && at + kHeapBlockHeader + block->size == next) {
    const auto* following = reinterpret_cast<DeviceHeapBlock*>(heap + next);
    block->size += kHeapBlockHeader + following->size;
    block->next = following->next;
  }
  if (previous != 0) {
    auto* preceding = reinterpret_cast<DeviceHeapBlock*>(heap + previous);
    if (previous + kHeapBlockHeader + preceding->size == at) {
      preceding->size += kHeapBlockHeader + block->size;
      preceding->next = block->next;
      merged = previous;
      merged_before = before;
    }
  }
  // The last block of the used part: the used part ends before it.
  const auto* last = reinterpret_cast<DeviceHeapBlock*>(heap + merged);
  if (merged + kHeapBlockHeader + last->size == header->top) {
    if (merged_before == 0) {
      header->free_head = last->next;
    } else {
      reinterpret_cast<DeviceHeapBlock*>(heap + merged_before)->next = last->next;
    }
    header->top = merged;
  }
  return true;
}

// The heap of the instruction's module (in.offset: its address; in.aux: its size in
// 16-byte units), or nullptr after a fault.
uint64_t DeviceHeapSize(const Inst& in) { return uint64_t{in.aux} * 16; }
uint8_t* DeviceHeap(Warp& w, const Inst& in, int lane) {
  uint8_t* heap =
      w.Address(Space::kGlobal, static_cast<uint64_t>(in.offset), static_cast<uint32_t>(DeviceHeapSize(in)), lane);
  if (heap == nullptr) w.Fault(static_cast<uint64_t>(in.offset), 16, "device heap");
  return heap;
}

// malloc(size): in.printf_fmt = the local offset of its parameter, in.printf_args of its
// return value; lanes in order.
void HMalloc(Warp& w, const Inst& in, uint32_t mask) {
  uint8_t* heap = DeviceHeap(w, in, std::countr_zero(mask));
  if (heap == nullptr) return;
  std::lock_guard<std::mutex> lock(device_heap_mu);
  ForLanes(mask, [&](int l) {
    uint8_t* local = w.LocalOf(l);
    uint64_t bytes = 0;
    std::memcpy(&bytes, local + in.printf_fmt, 8);
    const uint64_t offset = HeapAllocate(heap, DeviceHeapSize(in), bytes);
    const uint64_t address = offset == 0 ? 0 : static_cast<uint64_t>(in.offset) + offset;
    std::memcpy(local + in.printf_args, &address, 8);
  });
}

// cudaGraphSetConditional(handle, value): in.printf_fmt/printf_args = the local offsets of
// its parameters. The remoting library's conditional handle is the device address of the
// condition's 4-byte slot (remote/client/graph/graph_conditionals.cc), so the call is a store
// of the value there, bounds-checked as any global store: a handle that is not one faults
// the launch with CUDA_ERROR_ILLEGAL_ADDRESS.
void HSetConditional(Warp& w, const Inst& in, uint32_t mask) {
  ForLanes(mask, [&](int l) {
    const uint8_t* local = w.LocalOf(l);
    uint64_t handle = 0;
    uint32_t value = 0;
    std::memcpy(&handle, local + in.printf_fmt, 8);
    std::memcpy(&value, local + in.printf_args, 4);
    uint8_t* slot = w.Address(Space::kGlobal, handle, 4, l);
    if (slot == nullptr) {
      w.Fault(handle, 4, "cudaGraphSetConditional of a handle that is not a conditional's");
      return;
    }
    StoreWhole(slot, reinterpret_cast<const uint8_t*>(&value), 4);
  });
}

// free(pointer): in.printf_fmt = the local offset of its parameter. free(NULL) does
// nothing; a pointer malloc did not return (or freed twice) fails the launch, as the
// GPU's heap check does, with CUDA_ERROR_ILLEGAL_ADDRESS.
void HFree(Warp& w, const Inst& in, uint32_t mask) {
  uint8_t* heap = DeviceHeap(w, in, std::countr_zero(mask));
  if (heap == nullptr) return;
  std::lock_guard<std::mutex> lock(device_heap_mu);
  ForLanes(mask, [&](int l) {
    uint64_t address = 0;
    std::memcpy(&address, w.LocalOf(l) + in.printf_fmt, 8);
    if (address == 0) return;
    const uint64_t base = static_cast<uint64_t>(in.offset);
    const uint64_t size = DeviceHeapSize(in);
    if (address < base || address - base >= size || !HeapFree(heap, size, address - base)) {
      w.Fault(address, 1, "free of a pointer device malloc did not return (or freed twice)");
    }
  });
}

}  // namespace gpupool::sim::interp
