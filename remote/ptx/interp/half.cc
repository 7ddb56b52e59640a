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
  const bool bf16 = in.mode2 == kHalfBF16, bits = in.mode2 == kHalfBits;
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
    const uintptr_t at = reinterpret_cast<uintptr_t>(p);
    uint32_t* word = reinterpret_cast<uint32_t*>(at & ~uintptr_t{3});
    const int shift = static_cast<int>((at & 3) * 8);
    const uint32_t keep = size == 4 ? 0u : ~(0xffffu << shift);
    const uint32_t v = static_cast<uint32_t>(b[l]);
    uint32_t old_word = __atomic_load_n(word, __ATOMIC_RELAXED);
    uint32_t old_value;
    while (true) {
      old_value = size == 4 ? old_word : (old_word >> shift) & 0xffffu;
      uint32_t result = 0;
      if (bits) {
        result = in.mode == kAtomCas ? (old_value == (v & 0xffffu) ? static_cast<uint32_t>(c[l]) & 0xffffu : old_value)
                                     : v & 0xffffu;
      } else {
        for (int h = 0; h < in.vec; ++h) {
          float x = HalfBitsToFloat(static_cast<uint16_t>(old_value >> (16 * h)), bf16);
          float y = HalfBitsToFloat(static_cast<uint16_t>(v >> (16 * h)), bf16);
          // min and max as PTX orders them (min_max.h: -0 below +0), not the C library's.
          float r = in.mode == kAtomAdd   ? x + y
                    : in.mode == kAtomMin ? PtxMinMax<float, false>(x, y, false)
                    : in.mode == kAtomMax ? PtxMinMax<float, true>(x, y, false)
                                          : y;
          result |= static_cast<uint32_t>(FloatToHalfBits(r, bf16)) << (16 * h);
        }
      }
      uint32_t new_word = size == 4 ? result : (old_word & keep) | (result << shift);
      if (__atomic_compare_exchange_n(word, &old_word, new_word, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        break;
      }
    }
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
