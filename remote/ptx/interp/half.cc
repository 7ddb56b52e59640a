// The interpreter's Half-precision arithmetic (f16, bf16 and their .x2 pairs): add ...
// fma, min/max, setp/set, and atom on 16-bit values. Private interface: half.h and
// internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/half.h"
#include "remote/ptx/interp/conversions.h"
#include "remote/ptx/half_float.h"
#include "remote/ptx/min_max.h"

namespace gpupool::sim::interp {

// atom/red on 16-bit values and half pairs: .add (and .min, .max, .exch) of f16, f16x2,
// bf16, bf16x2, and .cas/.exch of b16 (atomicCAS on an unsigned short). A compare-and-swap
// on the aligned 32-bit word that holds the value (CTAs may run on two threads). vec: 16-bit
// values (1 or 2); mode2 what they are (HalfFormat: kHalfBits for cas, exch).
void HAtom16(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  const uint32_t size = in.vec * 2u;
  ForLanes(mask, [&](int l) {
    uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(in.space, address, size, l);
    if (p == nullptr) {
      w.Fault(address, size, "atomic");
      return;
    }
    if (address % size != 0) {
      w.Fault(address, size, "misaligned atomic");
      return;
    }
    const uint32_t old_value = HalfAtomic(p, in.mode, static_cast<uint8_t>(size), in.mode2, static_cast<uint32_t>(b[l]),
                                          c ? static_cast<uint32_t>(c[l]) : 0);
    if (d) d[l] = old_value;
  });
}

// f16/bf16 arithmetic: mode the operation (HalfOp); vec = halves per register; mode2
// kHalfBF16 for bf16. Each lane is HalfLane's (half_float.h), which compiled code calls too.
void HHalf(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = in.b >= 0 ? w.R(in.b) : nullptr;
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  const uint8_t bf16 = in.mode2 == kHalfBF16;
  ForLanes(mask, [&](int l) {
    d[l] = HalfLane(in.mode, in.flags, in.vec, bf16, static_cast<uint32_t>(a[l]), b ? static_cast<uint32_t>(b[l]) : 0,
                    c ? static_cast<uint32_t>(c[l]) : 0);
  });
}

void HHalfCompare(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* q = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  const bool bf16 = (in.mode2 & 1) == kHalfBF16;
  const auto bool_op = static_cast<BoolOp>((in.mode2 >> 1) & 3);
  const bool negate_c = in.flags & kFlagSigned;
  ForLanes(mask, [&](int l) {
    const bool pred = c != nullptr && ((c[l] != 0) != negate_c);
    bool t[2];
    for (int k = 0; k < in.vec; ++k) {
      float x = HalfBitsToFloat(static_cast<uint16_t>(a[l] >> (16 * k)), bf16);
      float y = HalfBitsToFloat(static_cast<uint16_t>(b[l] >> (16 * k)), bf16);
      t[k] = Compare<float>(in.mode, x, y);
    }
    if (in.width == kTruePredicate) {
      if (in.vec == 2) {
        d[l] = CombineWithPredicate(t[0], bool_op, pred);
        if (q) q[l] = CombineWithPredicate(t[1], bool_op, pred);
      } else {
        d[l] = CombineWithPredicate(t[0], bool_op, pred);
        if (q) q[l] = CombineWithPredicate(!t[0], bool_op, pred);
      }
      return;
    }
    uint64_t result = 0;
    for (int k = 0; k < in.vec; ++k) {
      if (!CombineWithPredicate(t[k], bool_op, pred)) continue;
      switch (in.width) {
        case kTrueAllOnes:
          result |= (in.vec == 2 ? 0xffffull : 0xffffffffull) << (16 * k);
          break;
        case kTrueF16:
          result |= uint64_t{0x3c00} << (16 * k);
          break;
        case kTrueBF16:
          result |= uint64_t{0x3f80} << (16 * k);
          break;
        case kTrueF32:
          result = std::bit_cast<uint32_t>(1.0f);
          break;
      }
    }
    d[l] = result;
  });
}

}  // namespace gpupool::sim::interp
