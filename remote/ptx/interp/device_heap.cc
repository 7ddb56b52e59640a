// The interpreter's Device-side malloc and free on the module's heap variable (the heap
// itself is remote/ptx/device_heap.h, which compiled code calls too), and
// cudaGraphSetConditional. Private interface: device_heap.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/device_heap.h"

namespace gpupool::sim::interp {

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
    const uint64_t address = DeviceMalloc(heap, static_cast<uint64_t>(in.offset), DeviceHeapSize(in), bytes);
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
    if (!DeviceFree(heap, static_cast<uint64_t>(in.offset), DeviceHeapSize(in), address)) {
      w.Fault(address, 1, "free of a pointer device malloc did not return (or freed twice)");
    }
  });
}

}  // namespace gpupool::sim::interp
