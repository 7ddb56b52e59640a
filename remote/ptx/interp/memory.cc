// The interpreter's ld, st, atom and red: state-space windows, the per-instruction
// allocation hint, the single-access vector loads and stores, and the fast paths of
// coalesced warps. Private interface: memory.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/memory.h"

namespace gpupool::sim::interp {

// One thread's vector access (up to 16 aligned bytes) is one access, as on a GPU, where
// code across CTAs relies on it: CUB's decoupled look-back scan publishes {status, value}
// with one st.relaxed.gpu.v2 and the next CTA, which here may run on the other worker
// thread, polls it with one ld.relaxed.gpu.v2. Copied element by element, the poller
// could see a new status with an old value (thrust::inclusive_scan came out wrong, rarely).
// Up to 8 bytes: one relaxed atomic move; 16 bytes: one MOVDQA, which processors with AVX
// carry out atomically (Intel SDM 8.1.1; AMD likewise). Larger or misaligned: memcpy.
constexpr uint32_t kMaxVectorBytes = 4 * 8;  // ld/st.v4 of 8-byte elements

template <size_t kBytes>
inline void LoadWhole(void* out, const uint8_t* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if constexpr (kBytes <= 8 && std::has_single_bit(kBytes)) {
    if (address % kBytes == 0) {
      WordOf<kBytes> word = __atomic_load_n(reinterpret_cast<const WordOf<kBytes>*>(p), __ATOMIC_RELAXED);
      std::memcpy(out, &word, kBytes);
      return;
    }
  }
#if defined(__x86_64__)
  if constexpr (kBytes == 16) {
    if (address % 16 == 0) {
      __m128i word;
      asm("movdqa %1, %0" : "=x"(word) : "m"(*reinterpret_cast<const __m128i*>(p)));
      std::memcpy(out, &word, 16);
      return;
    }
  }
#endif
  std::memcpy(out, p, kBytes);
}

// The same for a size known only at run time (the per-lane paths).
inline void LoadWhole(void* out, const uint8_t* p, uint32_t bytes) {
  switch (bytes) {
    case 1:
      return LoadWhole<1>(out, p);
    case 2:
      return LoadWhole<2>(out, p);
    case 4:
      return LoadWhole<4>(out, p);
    case 8:
      return LoadWhole<8>(out, p);
    case 16:
      return LoadWhole<16>(out, p);
  }
  std::memcpy(out, p, bytes);
}

// ld{.space}{.vN}.type: width bytes per element, flag signed: sign-extend.
void HLoad(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  uint32_t bytes = in.width * in.vec;
  ForLanes(mask, [&](int l) {
    uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(in.space, address, bytes, l);
    if (p == nullptr) {
      w.Fault(address, bytes, "load");
      return;
    }
    uint8_t lane[kMaxVectorBytes];
    LoadWhole(lane, p, bytes);
    for (int i = 0; i < in.vec; ++i) {
      uint64_t v = 0;
      std::memcpy(&v, lane + i * in.width, in.width);
      if ((in.flags & kFlagSigned) && in.width < 8) {
        int shift = 64 - 8 * in.width;
        v = static_cast<uint64_t>(static_cast<int64_t>(v << shift) >> shift);
      }
      if (in.d[i] >= 0) w.R(in.d[i])[l] = v;
    }
  });
}

void HStore(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  uint32_t bytes = in.width * in.vec;
  ForLanes(mask, [&](int l) {
    uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(in.space, address, bytes, l);
    if (p == nullptr || in.space == Space::kConst || (in.space == Space::kParam)) {
      w.Fault(address, bytes, "store");
      return;
    }
    uint8_t lane[kMaxVectorBytes];
    for (int i = 0; i < in.vec; ++i) {
      uint64_t v = w.R(in.d[i])[l];
      std::memcpy(lane + i * in.width, &v, in.width);
    }
    StoreWhole(p, lane, bytes);
  });
}

// Global memory (directly or through a generic address) is what CTAs on the two worker
// threads share; shared, local and parameter memory belong to one CTA, on one thread.
template <Space S>
constexpr bool kSharedAcrossThreads = S == Space::kGlobal || S == Space::kGeneric;

// Whether lane l's bytes start at the first lane's plus l * kElem for every lane (a
// coalesced access, the usual case on a GPU); not for local memory (a copy per thread).
// The copy then runs as one vectorised loop instead of a gather.
template <size_t kElem>
inline bool Consecutive(const Span& span) {
  const uint64_t first = span.off[0];
  // Most other patterns (broadcasts, rows of half warps) show at the last lane.
  if (span.stride != 0 || span.off[31] != first + 31 * kElem) return false;
  uint64_t differ = 0;
#pragma GCC ivdep
  for (int l = 0; l < 32; ++l) differ |= span.off[l] ^ (first + l * kElem);
  return differ == 0;
}

template <typename T>
inline uint64_t LoadValue(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return Put<T>(v);
}

// ld of kVec elements of T (signed T: sign-extended) from space S.
template <Space S, typename T, int kVec>
void HLoadFast(Warp& w, const Inst& in, uint32_t mask) {
  Span span;
  if constexpr (S != Space::kLocal) {
    if (in.uniform_address) {
      // One address for every lane (a parameter, a shared variable): read it once, unless
      // it is local memory (one copy per thread).
      uint32_t first = mask & -mask;
      if (Resolve<S>(w, in, first, sizeof(T) * kVec, &span) && span.space != Space::kLocal) {
        T lane[kVec];
        LoadWhole<sizeof(T) * kVec>(lane, span.At(std::countr_zero(mask)));
        for (int i = 0; i < kVec; ++i) {
          if (in.d[i] < 0) continue;
          uint64_t* d = w.R(in.d[i]);
          uint64_t v = Put<T>(lane[i]);
          if (mask == kFullMask) {
            std::fill_n(d, 32, v);
          } else {
            ForLanes(mask, [&](int l) { d[l] = v; });
          }
        }
        return;
      }
    }
  }
  if (!Resolve<S>(w, in, mask, sizeof(T) * kVec, &span)) return HLoad(w, in, mask);
  if constexpr (kVec > 1 && kSharedAcrossThreads<S>) {
    // A vector that another worker thread may write: each lane's read whole (LoadWhole).
    uint64_t* d[kVec];
    for (int i = 0; i < kVec; ++i) d[i] = in.d[i] < 0 ? nullptr : w.R(in.d[i]);
    ForLanes(mask, [&](int l) {
      T lane[kVec];
      LoadWhole<sizeof(T) * kVec>(lane, span.At(l));
      for (int i = 0; i < kVec; ++i) {
        if (d[i] != nullptr) d[i][l] = Put<T>(lane[i]);
      }
    });
    return;
  }
  if (mask == kFullMask && Consecutive<sizeof(T) * kVec>(span)) {
    const uint8_t* __restrict p = span.base + span.off[0];
    for (int i = 0; i < kVec; ++i) {
      if (in.d[i] < 0) continue;
      uint64_t* __restrict d = w.R(in.d[i]);
      for (int l = 0; l < 32; ++l) d[l] = LoadValue<T>(p + (l * kVec + i) * sizeof(T));
    }
    return;
  }
  for (int i = 0; i < kVec; ++i) {
    if (in.d[i] < 0) continue;
    uint64_t* d = w.R(in.d[i]);
    ForLanes(mask, [&](int l) { d[l] = LoadValue<T>(span.At(l) + i * sizeof(T)); });
  }
}

// st of kVec elements of T to space S (lane by lane, in lane order, as HStore).
template <Space S, typename T, int kVec>
void HStoreFast(Warp& w, const Inst& in, uint32_t mask) {
  Span span;
  if (!Resolve<S>(w, in, mask, sizeof(T) * kVec, &span)) return HStore(w, in, mask);
  const uint64_t* v[kVec];
  for (int i = 0; i < kVec; ++i) v[i] = w.R(in.d[i]);
  if constexpr (kVec > 1 && kSharedAcrossThreads<S>) {
    // A vector that another worker thread may read: each lane's written whole (StoreWhole).
    ForLanes(mask, [&](int l) {
      T lane[kVec];
      for (int i = 0; i < kVec; ++i) lane[i] = static_cast<T>(v[i][l]);
      StoreWhole<sizeof(T) * kVec>(span.At(l), lane);
    });
    return;
  }
  if (mask == kFullMask && Consecutive<sizeof(T) * kVec>(span)) {
    // Distinct lanes' bytes do not overlap, so the order of the lanes does not matter.
    uint8_t* __restrict p = span.base + span.off[0];
    for (int i = 0; i < kVec; ++i) {
      const uint64_t* __restrict value = v[i];
      for (int l = 0; l < 32; ++l) {
        T t = static_cast<T>(value[l]);
        std::memcpy(p + (l * kVec + i) * sizeof(T), &t, sizeof(T));
      }
    }
    return;
  }
  ForLanes(mask, [&](int l) {
    uint8_t* p = span.At(l);
    for (int i = 0; i < kVec; ++i) {
      T value = static_cast<T>(v[i][l]);
      std::memcpy(p + i * sizeof(T), &value, sizeof(T));
    }
  });
}

template <Space S, typename T>
Handler LoadStoreByVec(bool store, int vec) {
  switch (vec) {
    case 1:
      return store ? &HStoreFast<S, T, 1> : &HLoadFast<S, T, 1>;
    case 2:
      return store ? &HStoreFast<S, T, 2> : &HLoadFast<S, T, 2>;
    case 4:
      return store ? &HStoreFast<S, T, 4> : &HLoadFast<S, T, 4>;
    default:
      return nullptr;
  }
}

template <Space S>
Handler LoadStoreByType(bool store, int width, bool is_signed, int vec) {
  if (is_signed && !store) {
    switch (width) {
      case 1:
        return LoadStoreByVec<S, int8_t>(store, vec);
      case 2:
        return LoadStoreByVec<S, int16_t>(store, vec);
      case 4:
        return LoadStoreByVec<S, int32_t>(store, vec);
    }
  }
  switch (width) {
    case 1:
      return LoadStoreByVec<S, uint8_t>(store, vec);
    case 2:
      return LoadStoreByVec<S, uint16_t>(store, vec);
    case 4:
      return LoadStoreByVec<S, uint32_t>(store, vec);
    case 8:
      return LoadStoreByVec<S, uint64_t>(store, vec);
  }
  return nullptr;
}

// A thread polling a flag another warp of its CTA sets (a hand-written spin-wait, with no
// nanosleep to back off) reads the same value again and again: once it has, the warp's
// turn ends (Warp::yield), so that the warp it waits for runs now rather than after a
// slice (2^14 warp instructions) of spinning. A loop that reads new values runs on; one
// that happens to read the same value twice only gives up a turn early.
void HOrderedLoad(Warp& w, const Inst& in, uint32_t mask) {
  LoadStoreHandler(in, false)(w, in, mask);
  uint64_t digest = mask;
  for (int i = 0; i < in.vec; ++i) {
    if (in.d[i] < 0) continue;
    const uint64_t* value = w.R(in.d[i]);
    ForLanes(mask, [&](int l) { digest = (digest ^ value[l]) * 0x100000001b3ull; });
  }
  if (w.spin_load == &in && w.spin_value == digest) w.yield = true;
  w.spin_load = &in;
  w.spin_value = digest;
}

// The handler of ld/st: a fast path by space, width and vector length, else the
// per-lane HLoad/HStore.
Handler LoadStoreHandler(const Inst& in, bool store) {
  bool is_signed = (in.flags & kFlagSigned) != 0;
  Handler h = nullptr;
  switch (in.space) {
    case Space::kGlobal:
      h = LoadStoreByType<Space::kGlobal>(store, in.width, is_signed, in.vec);
      break;
    case Space::kShared:
      h = LoadStoreByType<Space::kShared>(store, in.width, is_signed, in.vec);
      break;
    case Space::kLocal:
      h = LoadStoreByType<Space::kLocal>(store, in.width, is_signed, in.vec);
      break;
    case Space::kGeneric:
      h = LoadStoreByType<Space::kGeneric>(store, in.width, is_signed, in.vec);
      break;
    case Space::kConst:
      if (!store) h = LoadStoreByType<Space::kConst>(false, in.width, is_signed, in.vec);
      break;
    case Space::kParam:
      if (!store) h = LoadStoreByType<Space::kParam>(false, in.width, is_signed, in.vec);
      break;
  }
  if (h != nullptr) return h;
  return store ? &HStore : &HLoad;
}

}  // namespace gpupool::sim::interp
