// What of memory.cc the other files of interp/ use (private to interp/). The templates the
// decoder instantiates by width, type and vector length.
#pragma once

#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/arithmetic.h"

namespace gpupool::sim::interp {

template <size_t kBytes>
using WordOf =
    std::conditional_t<kBytes == 1, uint8_t,
                       std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

template <size_t kBytes>
inline void StoreWhole(uint8_t* p, const void* in) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if constexpr (kBytes <= 8 && std::has_single_bit(kBytes)) {
    if (address % kBytes == 0) {
      WordOf<kBytes> word;
      std::memcpy(&word, in, kBytes);
      __atomic_store_n(reinterpret_cast<WordOf<kBytes>*>(p), word, __ATOMIC_RELAXED);
      return;
    }
  }
#if defined(__x86_64__)
  if constexpr (kBytes == 16) {
    if (address % 16 == 0) {
      __m128i word;
      std::memcpy(&word, in, 16);
      asm("movdqa %1, %0" : "=m"(*reinterpret_cast<__m128i*>(p)) : "x"(word));
      return;
    }
  }
#endif
  std::memcpy(p, in, kBytes);
}

inline void StoreWhole(uint8_t* p, const void* in, uint32_t bytes) {
  switch (bytes) {
    case 1:
      return StoreWhole<1>(p, in);
    case 2:
      return StoreWhole<2>(p, in);
    case 4:
      return StoreWhole<4>(p, in);
    case 8:
      return StoreWhole<8>(p, in);
    case 16:
      return StoreWhole<16>(p, in);
  }
  std::memcpy(p, in, bytes);
}

//
// The lanes of a load or store usually fall in one allocation (global) or window
// (shared, local, param). Resolve checks that once for the whole span of the lanes'
// addresses and gives each lane's host address; when the check fails the per-lane
// handlers above run instead, so a stray lane faults exactly as it would there (same
// lane, same message, the same earlier lanes' stores done).

// The lanes of one access resolved to one allocation or window: lane l's bytes are at
// At(l).
struct Span {
  uint8_t* base = nullptr;
  uint64_t stride = 0;  // local memory: bytes per thread
  Space space = Space::kGlobal;
  uint64_t off[32];
  uint8_t* At(int l) const { return base + l * stride + off[l]; }
};

// Resolves the lanes of `mask` (address a[l] + offset in space S, `bytes` long) when all
// of them are in bounds of the allocation or window of the first lane; returns false
// otherwise. One branch-free pass (vectorised for whole warps): a lane is out when
// u = address - start or limit - u has its top bit set (limit < 2^63).
template <Space S>
bool Resolve(Warp& w, const Inst& in, uint32_t mask, uint32_t bytes, Span* span) {
  constexpr uint64_t kLow48 = 0xffffffffffffull;
  const uint64_t* a = w.R(in.a);
  const uint64_t offset = static_cast<uint64_t>(in.offset);
  // Window spaces (shared, local, param) use the low 48 bits of the address, as Address.
  constexpr bool kWindowed = S == Space::kShared || S == Space::kLocal || S == Space::kParam;
  const uint64_t keep = kWindowed ? kLow48 : ~0ull;
  const uint64_t first = (a[std::countr_zero(mask)] + offset) & keep;
  LaunchState& launch = *w.launch;
  Space space = S;
  uint64_t start = 0;  // window base in the lanes' address space
  if constexpr (S == Space::kGeneric) {
    // The first lane's window decides; every lane must then be in it.
    if (first < kSharedWindow) {
      space = Space::kGlobal;
    } else if (first - kSharedWindow < kWindowSize) {
      space = Space::kShared;
      start = kSharedWindow;
    } else if (first - kLocalWindow < kWindowSize) {
      space = Space::kLocal;
      start = kLocalWindow;
    } else {
      return false;
    }
  }
  uint64_t size;
  span->space = space;
  span->stride = 0;
  switch (space) {
    case Space::kGlobal:
    case Space::kConst: {
      uint32_t* hint = &launch.range_hints[&in - launch.kernel->code.data()];
      const MemoryRange* range = w.RangeOf(first, hint);
      if (range == nullptr || range->start + range->size > kSharedWindow) return false;
      start = range->start;
      size = range->size;
      span->base = reinterpret_cast<uint8_t*>(range->host);
      break;
    }
    case Space::kShared:
      size = launch.shared_size;
      span->base = launch.shared;
      break;
    case Space::kParam:
      size = launch.spec->param_size;
      span->base = const_cast<uint8_t*>(launch.spec->params);
      break;
    case Space::kLocal:
      size = launch.kernel->local_size;
      span->base = w.LocalOf(0);
      span->stride = size;
      break;
    default:
      return false;
  }
  if (bytes > size) return false;
  const uint64_t limit = size - bytes;
  uint64_t bad = 0;
  // The register file and the span (on the caller's stack) never overlap.
  const uint64_t* __restrict lanes = a;
  uint64_t* __restrict off = span->off;
  if (mask == kFullMask) {
#pragma GCC ivdep
    for (int l = 0; l < 32; ++l) {
      uint64_t u = ((lanes[l] + offset) & keep) - start;
      bad |= u | (limit - u);
      off[l] = u;
    }
  } else {
    ForLanes(mask, [&](int l) {
      uint64_t u = ((a[l] + offset) & keep) - start;
      bad |= u | (limit - u);
      off[l] = u;
    });
  }
  return (bad >> 63) == 0;
}

Handler LoadStoreHandler(const Inst& in, bool store);
// An ordered load (ld.volatile, .relaxed, .acquire, .cg): the load, then a yield of the
// warp's turn where its lanes read what they read the last time they ran it (Warp::spin_load).
void HOrderedLoad(Warp& w, const Inst& in, uint32_t mask);

template <typename T>
T AtomicResult(uint8_t mode, T old, T v, T compare_value);

template <typename T>
void HAtom(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  ForLanes(mask, [&](int l) {
    uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(in.space, address, sizeof(T), l);
    if (p == nullptr) {
      w.Fault(address, sizeof(T), "atomic");
      return;
    }
    if (address % sizeof(T) != 0) {
      w.Fault(address, sizeof(T), "misaligned atomic");
      return;
    }
    // CTAs may run on two threads at once: a compare-and-swap loop on the host word.
    using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
    Bits* word = reinterpret_cast<Bits*>(p);
    Bits old_bits = __atomic_load_n(word, __ATOMIC_RELAXED);
    T old, r;
    T v = Get<T>(b[l]);
    do {
      std::memcpy(&old, &old_bits, sizeof(T));
      r = AtomicResult<T>(in.mode, old, v, c ? Get<T>(c[l]) : T(0));
      Bits new_bits;
      std::memcpy(&new_bits, &r, sizeof(T));
      if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        break;
      }
    } while (true);
    if (d) d[l] = Put<T>(old);
  });
}

template <typename T>
T AtomicResult(uint8_t mode, T old, T v, T compare_value) {
  T r = old;
  switch (mode) {
    case kAtomAdd:
      r = WrapAdd(old, v);
      break;
    case kAtomMin:
      r = std::min(old, v);
      break;
    case kAtomMax:
      r = std::max(old, v);
      break;
    case kAtomExch:
      r = v;
      break;
    case kAtomCas:
      r = old == v ? compare_value : old;
      break;
    default:
      if constexpr (std::is_integral_v<T>) {
        switch (mode) {
          case kAtomAnd:
            r = old & v;
            break;
          case kAtomOr:
            r = old | v;
            break;
          case kAtomXor:
            r = old ^ v;
            break;
          case kAtomInc:
            r = (old >= v) ? T(0) : T(old + 1);
            break;
          case kAtomDec:
            r = (old == 0 || old > v) ? v : T(old - 1);
            break;
        }
      }
  }
  return r;
}

// atom/red on S with the lanes' span checked once (Resolve). Shared memory belongs to the
// CTA, which one worker runs: a plain read-modify-write per lane. Global memory: atomic
// host operations (other CTAs run on the other worker). Lanes in lane order, as HAtom;
// HAtom runs instead when a lane is out of bounds or misaligned.
template <Space S, typename T>
void HAtomFast(Warp& w, const Inst& in, uint32_t mask) {
  Span span;
  if (!Resolve<S>(w, in, mask, sizeof(T), &span)) return HAtom<T>(w, in, mask);
  const uint64_t* a = w.R(in.a);
  uint64_t misaligned = 0;
  ForLanes(mask, [&](int l) { misaligned |= a[l] + static_cast<uint64_t>(in.offset); });
  if (misaligned % sizeof(T) != 0) return HAtom<T>(w, in, mask);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  using Bits = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
  if (span.space == Space::kShared) {
    if (in.mode == kAtomAdd) {
      ForLanes(mask, [&](int l) {
        T old;
        uint8_t* p = span.At(l);
        std::memcpy(&old, p, sizeof(T));
        T r = WrapAdd(old, Get<T>(b[l]));
        std::memcpy(p, &r, sizeof(T));
        if (d) d[l] = Put<T>(old);
      });
      return;
    }
    ForLanes(mask, [&](int l) {
      T old;
      uint8_t* p = span.At(l);
      std::memcpy(&old, p, sizeof(T));
      T r = AtomicResult<T>(in.mode, old, Get<T>(b[l]), c ? Get<T>(c[l]) : T(0));
      std::memcpy(p, &r, sizeof(T));
      if (d) d[l] = Put<T>(old);
    });
    return;
  }
  ForLanes(mask, [&](int l) {
    Bits* word = reinterpret_cast<Bits*>(span.At(l));
    T v = Get<T>(b[l]);
    T old;
    if constexpr (std::is_integral_v<T>) {
      if (in.mode == kAtomAdd) {
        Bits before = __atomic_fetch_add(word, static_cast<Bits>(v), __ATOMIC_SEQ_CST);
        std::memcpy(&old, &before, sizeof(T));
        if (d) d[l] = Put<T>(old);
        return;
      }
    }
    Bits old_bits = __atomic_load_n(word, __ATOMIC_RELAXED);
    while (true) {
      std::memcpy(&old, &old_bits, sizeof(T));
      T r = AtomicResult<T>(in.mode, old, v, c ? Get<T>(c[l]) : T(0));
      Bits new_bits;
      std::memcpy(&new_bits, &r, sizeof(T));
      if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED)) {
        break;
      }
    }
    if (d) d[l] = Put<T>(old);
  });
}

template <typename T>
Handler AtomHandlerOf(Space space) {
  switch (space) {
    case Space::kGlobal:
      return &HAtomFast<Space::kGlobal, T>;
    case Space::kShared:
      return &HAtomFast<Space::kShared, T>;
    case Space::kGeneric:
      return &HAtomFast<Space::kGeneric, T>;
    default:
      return &HAtom<T>;
  }
}

}  // namespace gpupool::sim::interp
