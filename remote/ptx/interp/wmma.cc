// The interpreter's Warp matrix operations (wmma load/store/mma, mma.sync, ldmatrix), cvt
// to tf32, cp.async and mbarrier. Private interface: wmma.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/wmma.h"

namespace gpupool::sim::interp {

//
// A fragment holds E elements in each of the 32 lanes; PTX leaves which matrix element
// each one is to the implementation. Here element e of lane l is element (l * E + e) mod
// (rows * cols) of the matrix in row-major order, whatever the layout in memory: the
// fragments of A and B hold 2 or 4 copies of each element on shapes where E * 32 exceeds
// the matrix, as a GPU's do. Loads and stores go through the ordinary address checks,
// lane by lane; mma gathers the three matrices from every lane's registers, multiplies
// in the precision a tensor core uses (f32 or f16 accumulators summed in f32, f64 in f64,
// integers in 64 bits) and scatters the result.

// Element e of a fragment, as its raw bits (zero-extended).
uint64_t WmmaBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l) {
  uint32_t per = WmmaPerRegister(t);
  uint64_t word = w.R(fragment[e / per])[l];
  if (per == 1) return t == WmmaType::kF64 ? word : word & 0xffffffffu;
  uint32_t bits = 8 * WmmaSize(t);
  return (word >> ((e % per) * bits)) & ((uint64_t{1} << bits) - 1);
}

void WmmaSetBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l, uint64_t value) {
  uint32_t per = WmmaPerRegister(t);
  uint64_t& word = w.R(fragment[e / per])[l];
  if (per == 1) {
    word = value;
    return;
  }
  uint32_t shift = (e % per) * 8 * WmmaSize(t);
  uint64_t field = ((uint64_t{1} << (8 * WmmaSize(t))) - 1) << shift;
  if (e % per == 0) word = 0;  // a packed register is written whole, from its first element
  word = (word & ~field) | ((value << shift) & field);
}

// wmma.mma and mma.sync: D = A * B + C over the whole warp (matrix_ops.h: WarpMma, which
// compiled code runs too), every lane's registers read, d written for the lanes running it.
void HWmmaMma(Warp& w, const Inst& in, uint32_t mask) {
  const WmmaOp& op = w.launch->kernel->wmma[in.aux];
  const uint64_t* rows[3][kMaxFragmentRegisters];
  uint64_t* d[kMaxFragmentRegisters];
  for (int m = 0; m < 3; ++m) {
    for (size_t r = 0; r < op.fragments[m + 1].size(); ++r) rows[m][r] = w.R(op.fragments[m + 1][r]);
  }
  for (size_t r = 0; r < op.fragments[0].size(); ++r) d[r] = w.R(op.fragments[0][r]);
  WarpMma(op, rows[0], rows[1], rows[2], d, mask);
}

// cvt.rna.tf32.f32 (and .rn, .rz): f32 to TF32 (10 mantissa bits), kept in a .b32 with
// the low 13 bits clear. mode the rounding (Tf32Rounding).
void HCvtTf32(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask, [&](int l) {
    uint32_t x = static_cast<uint32_t>(a[l]);
    if ((x & 0x7f800000u) != 0x7f800000u) {  // NaN and infinity pass unchanged
      if (in.mode == kTf32RoundAway) x += 0x1000u;
      if (in.mode == kTf32RoundNearest) x += 0xfffu + ((x >> 13) & 1);
    }
    d[l] = (x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu) ? x : x & ~0x1fffu;
  });
}

// cp.async.{ca,cg}.shared.global [a + offset], [b + aux], width{, c}: copies `width` bytes
// (4, 8 or 16) from global to shared memory, the first c of them from the source and the
// rest zeros (c: src-size, -1 when absent; flag signed: c is ignore-src, a predicate). The
// copy is done at once: cp.async.commit_group and wait_group then have nothing to wait
// for, and a program that waits before it reads (as it must) sees the data.
void HCpAsync(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* dst = w.R(in.a);
  const uint64_t* src = w.R(in.b);
  const uint64_t* size = in.c >= 0 ? w.R(in.c) : nullptr;
  ForLanes(mask, [&](int l) {
    uint32_t from_source = in.width;
    if (size != nullptr) {
      from_source = (in.flags & kFlagSigned) ? ((size[l] & 1) != 0 ? 0u : in.width)
                                             : static_cast<uint32_t>(std::min<uint64_t>(size[l], in.width));
    }
    uint64_t to = dst[l] + static_cast<uint64_t>(in.offset);
    uint64_t from = src[l] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.aux)));
    uint8_t* target = w.Address(Space::kShared, to, in.width, l);
    if (target == nullptr) {
      w.Fault(to, in.width, "cp.async store");
      return;
    }
    if (from_source > 0) {
      uint8_t* source = w.Address(Space::kGlobal, from, from_source, l);
      if (source == nullptr) {
        w.Fault(from, from_source, "cp.async load");
        return;
      }
      std::memmove(target, source, from_source);
    }
    std::memset(target + from_source, 0, in.width - from_source);
  });
}

// mbarrier (sm_80: cuda::barrier, memcpy_async with a barrier): the 8-byte object in shared
// memory holds the arrivals still pending in bits 0-31, the expected count in bits 32-62
// and the phase in bit 63; PTX leaves the layout to the implementation. A CTA's warps run
// on one thread, so the operations need no atomics. mode (MbarrierOp): init [a], b; arrive d, [a],
// b (count); arrive_drop (the same, and the expected count drops by b too); test_wait
// d, [a], b (a state from arrive); test_wait.parity d, [a], b (a phase parity); inval
// [a]; pending_count d, b (from a state). A state is the object as the arrival left it,
// with the phase the arrival was made in. try_wait runs as test_wait: a warp that waits
// loops, and the CTA's other warps get their turns.
constexpr uint64_t kMbarPhase = uint64_t{1} << 63;
constexpr uint64_t kMbarCount = 0x7fffffffu;

void HMbarrier(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = in.a >= 0 ? w.R(in.a) : nullptr;  // none for pending_count
  const uint64_t* b = in.b >= 0 ? w.R(in.b) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  ForLanes(mask, [&](int l) {
    if (in.mode == kMbarrierPendingCount) {
      d[l] = b[l] & kMbarCount;
      return;
    }
    uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(in.space, address, 8, l);
    if (p == nullptr) {
      w.Fault(address, 8, "mbarrier");
      return;
    }
    uint64_t object;
    std::memcpy(&object, p, 8);
    const uint64_t phase = object & kMbarPhase;
    const uint64_t pending = object & kMbarCount;
    const uint64_t expected = (object >> 32) & kMbarCount;
    switch (in.mode) {
      case kMbarrierInit: {
        uint64_t count = b[l] & kMbarCount;
        object = (count << 32) | count;
        break;
      }
      case kMbarrierArrive:
      case kMbarrierArriveDrop: {
        uint64_t count = b != nullptr ? b[l] & kMbarCount : 1;
        uint64_t left = pending > count ? pending - count : 0;
        uint64_t keep = in.mode == kMbarrierArriveDrop && expected > count ? expected - count
                        : in.mode == kMbarrierArriveDrop                   ? 0
                                                                           : expected;
        if (d != nullptr) d[l] = phase | left;
        object = left == 0 ? ((phase ^ kMbarPhase) | (keep << 32) | keep) : (phase | (keep << 32) | left);
        break;
      }
      case kMbarrierTestWait:
        d[l] = (b[l] & kMbarPhase) != phase;
        return;
      case kMbarrierTestParity:
        d[l] = ((b[l] & 1) != 0) != (phase != 0);
        return;
      default:
        object = 0;
        break;
    }
    std::memcpy(p, &object, 8);
  });
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {d...}, [a]: vec 8x8 matrices
// of 16-bit elements; row r of matrix j starts at the address lane 8j + r gives. Lane l
// receives in register j the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of
// matrix j, or with .trans (flag signed) the elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4): LdmatrixAddress (matrix_ops.h), which compiled code places them by too.
void HLdmatrix(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  uint64_t rows[32];
  for (int l = 0; l < 32; ++l) rows[l] = a[l] + static_cast<uint64_t>(in.offset);
  const bool transpose = (in.flags & kFlagSigned) != 0;
  ForLanes(mask, [&](int l) {
    for (int j = 0; j < in.vec; ++j) {
      uint32_t word = 0;
      for (int h = 0; h < 2; ++h) {
        const uint64_t address = LdmatrixAddress(rows, static_cast<uint32_t>(l), static_cast<uint32_t>(j),
                                                 static_cast<uint32_t>(h), transpose);
        uint8_t* p = w.Address(in.space, address, 2, l);
        if (p == nullptr) {
          w.Fault(address, 2, "ldmatrix");
          return;
        }
        uint16_t half;
        std::memcpy(&half, p, 2);
        word |= static_cast<uint32_t>(half) << (16 * h);
      }
      w.R(in.d[j])[l] = word;
    }
  });
}

}  // namespace gpupool::sim::interp
