// What of wmma.cc the other files of interp/ use (private to interp/).
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/interp/handler_tables.h"
#include "remote/ptx/matrix_ops.h"

namespace gpupool::sim::interp {

uint64_t WmmaBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l);
void WmmaSetBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l, uint64_t value);

// wmma.load.{a,b,c} and wmma.store.d (kStore): a = address, b = stride slot (-1: the
// leading dimension). Element by element, each through the address checks of its lane.
template <bool kStore>
void HWmmaMemory(Warp& w, const Inst& in, uint32_t mask) {
  const WmmaOp& op = w.launch->kernel->wmma[in.aux];
  uint32_t rows, cols;
  WmmaShape(op, op.matrix, &rows, &cols);
  const WmmaType t = op.types[0];
  const uint32_t size = WmmaSize(t);
  const uint32_t elements = static_cast<uint32_t>(op.fragments[0].size()) * WmmaPerRegister(t);
  const bool read_only = in.space == Space::kConst || in.space == Space::kParam;
  ForLanes(mask, [&](int l) {
    uint64_t base = w.R(in.a)[l] + static_cast<uint64_t>(in.offset);
    uint64_t stride = in.b >= 0 ? static_cast<uint32_t>(w.R(in.b)[l]) : op.row_major ? cols : rows;
    for (uint32_t e = 0; e < elements; ++e) {
      uint32_t index = (static_cast<uint32_t>(l) * elements + e) % (rows * cols);
      uint64_t row = index / cols, col = index % cols;
      uint64_t address = base + (op.row_major ? row * stride + col : col * stride + row) * size;
      uint8_t* p = w.Address(in.space, address, size, l);
      if (p == nullptr || (kStore && read_only)) {
        w.Fault(address, size, kStore ? "wmma store" : "wmma load");
        return;
      }
      uint64_t value = 0;
      if constexpr (kStore) {
        value = WmmaBits(w, op.fragments[0], t, e, l);
        std::memcpy(p, &value, size);
      } else {
        std::memcpy(&value, p, size);
        WmmaSetBits(w, op.fragments[0], t, e, l, value);
      }
    }
  });
}

void HWmmaMma(Warp& w, const Inst& in, uint32_t mask);
void HCvtTf32(Warp& w, const Inst& in, uint32_t mask);
void HCpAsync(Warp& w, const Inst& in, uint32_t mask);
void HMbarrier(Warp& w, const Inst& in, uint32_t mask);
void HBulkCopy(Warp& w, const Inst& in, uint32_t mask);
void HTensorCopy(Warp& w, const Inst& in, uint32_t mask);
void HStmatrix(Warp& w, const Inst& in, uint32_t mask);
void HStoreAsync(Warp& w, const Inst& in, uint32_t mask);
void HRedAsync(Warp& w, const Inst& in, uint32_t mask);
// Completes `bytes` of the transaction count of the mbarrier object at `object` (its 8
// bytes in shared memory), completing its phase when nothing else is pending.
void MbarrierCompleteTx(uint8_t* object, uint32_t bytes);
void HLdmatrix(Warp& w, const Inst& in, uint32_t mask);

}  // namespace gpupool::sim::interp
