// The interpreter's Device printf (vprintf) and assert (__assertfail): each lane's text is
// the shared code's (remote/ptx/device_printf.h), over the lane's generic memory. Private
// interface: printf.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/printf.h"

#include "remote/ptx/device_printf.h"

namespace gpupool::sim::interp {

namespace {

// A lane's generic memory, as its loads see it.
struct LaneMemory {
  Warp* w;
  int lane;
  static const uint8_t* At(void* opaque, uint64_t address, uint32_t size) {
    auto* self = static_cast<LaneMemory*>(opaque);
    return self->w->Address(Space::kGeneric, address, size, self->lane);
  }
};

}  // namespace

// vprintf(format, args): in.printf_fmt/printf_args = local offsets of the
// call's parameters, in.offset = local offset of the return value (or -1).
void HPrintf(Warp& w, const Inst& in, uint32_t mask) {
  ForLanes(mask, [&](int l) {
    uint8_t* local = w.LocalOf(l);
    uint64_t format_address, args_address;
    std::memcpy(&format_address, local + in.printf_fmt, 8);
    std::memcpy(&args_address, local + in.printf_args, 8);
    LaneMemory lane{&w, l};
    const DeviceMemory memory{&lane, &LaneMemory::At};
    std::string text = FormatDevicePrintf(memory, ReadDeviceString(memory, format_address), args_address);
    AppendPrintf(&w.launch->printf, text, &w.launch->printf_dropped);
    if (in.offset >= 0) {
      int32_t length = static_cast<int32_t>(text.size());
      std::memcpy(local + in.offset, &length, 4);
    }
  });
}

// __assertfail(message, file, line, function, char size): the GPU's message,
// then the launch fails with CUDA_ERROR_ASSERT.
void HAssert(Warp& w, const Inst& in, uint32_t mask) {
  int lane = std::countr_zero(mask);
  uint8_t* local = w.LocalOf(lane);
  uint64_t message, file, function;
  uint32_t line;
  std::memcpy(&message, local + in.printf_fmt, 8);
  std::memcpy(&file, local + in.printf_args, 8);
  std::memcpy(&line, local + in.offset, 4);
  std::memcpy(&function, local + in.aux, 8);
  const LaunchState& launch = *w.launch;
  uint32_t tid = w.index * 32 + lane;
  const uint32_t* block = launch.spec->block;
  const uint32_t thread[3] = {tid % block[0], (tid / block[0]) % block[1], tid / (block[0] * block[1])};
  LaneMemory lane_memory{&w, lane};
  const std::string text = FormatDeviceAssert(DeviceMemory{&lane_memory, &LaneMemory::At}, message, file, line,
                                              function, launch.ctaid, thread);
  AppendPrintf(&w.launch->printf, text, &w.launch->printf_dropped);
}

}  // namespace gpupool::sim::interp
