// The device malloc heap both tiers allocate from (device_heap.h).
#include "remote/ptx/device_heap.h"

namespace gpupool::sim {

std::mutex device_heap_mu;

namespace {

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

}  // namespace

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

uint64_t DeviceMalloc(uint8_t* heap, uint64_t heap_address, uint64_t heap_size, uint64_t bytes) {
  const uint64_t offset = HeapAllocate(heap, heap_size, bytes);
  return offset == 0 ? 0 : heap_address + offset;
}

bool DeviceFree(uint8_t* heap, uint64_t heap_address, uint64_t heap_size, uint64_t address) {
  if (address == 0) return true;
  return address >= heap_address && address - heap_address < heap_size &&
         HeapFree(heap, heap_size, address - heap_address);
}

}  // namespace gpupool::sim
