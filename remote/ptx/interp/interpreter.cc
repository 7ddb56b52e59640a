// The PTX engine's decoder (ParsedModule -> DecodedKernel) and interpreter
// (RunKernel). Design notes: docs/ptx-engine.md.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cfenv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <thread>
#include <tuple>
#include <type_traits>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "remote/protocol/protocol.h"
#include "remote/ptx/front/program.h"
#include "remote/ptx/interp/texture.h"  // texture/surface hook (HTexture, Decoder::Texture)

namespace gpupool::sim {

Result<std::unique_ptr<ParsedModule>> ParsePtxText(std::string_view text);
uint64_t PtxTypeSize(const std::string& type);

namespace {

// The CUresult values a launch ends with: the protocol's (remote/protocol/protocol.h).
constexpr int32_t kSuccess = dataplane::kCuSuccess;
constexpr int32_t kInvalidValue = dataplane::kCuInvalidValue;
constexpr int32_t kIllegalAddress = dataplane::kCuIllegalAddress;
constexpr int32_t kOutOfResources = dataplane::kCuLaunchOutOfResources;
constexpr int32_t kLaunchTimeout = dataplane::kCuLaunchTimeout;  // cancelled (LaunchSpec::cancel)
constexpr int32_t kAssertFailed = dataplane::kCuAssert;
constexpr int32_t kLaunchFailed = dataplane::kCuLaunchFailed;
constexpr int32_t kCooperativeTooLarge = dataplane::kCuCooperativeLaunchTooLarge;
constexpr int32_t kNotSupported = dataplane::kCuNotSupported;

constexpr uint32_t kFullMask = 0xffffffffu;
// Threads that run the CTAs of one launch (the agent's hosts have few cores to spare).
constexpr uint32_t kMaxWorkers = 2;
// A cooperative launch holds every CTA's registers and memory at once: at most this many
// CTAs and bytes (the client refuses a grid larger than the model's SMs hold, well below).
constexpr uint64_t kMaxCooperativeCtas = 1u << 16;
constexpr uint64_t kMaxCooperativeBytes = uint64_t{2} << 30;
// Local memory of one thread (CUDA's limit), and host memory of one CTA's registers and
// local memory together.
constexpr uint64_t kMaxLocalPerThread = 512 * 1024;
constexpr uint64_t kMaxCtaBytes = uint64_t{1} << 30;
// What the decoder sums local declarations up to before it refuses the kernel: far above
// what a launch allows, far below where a sum of declarations (each at most
// kMaxDeclarationBytes) could wrap.
constexpr uint64_t kMaxLocalSum = uint64_t{1} << 48;
// Bytes of an entry's parameters (CUDA 12.1 and later).
constexpr uint64_t kMaxParamBytes = 32764;
// Device functions are inlined at their call sites: calls nested deeper than this are a
// trap where they would run (recursion deeper than this, or a virtual call that could
// reach itself), and a kernel of more instructions than kMaxKernelInstructions once
// inlined (deep or branching recursion, or PTX made to be large) is refused at decode,
// so that no job's PTX holds the agent's memory.
constexpr int kMaxCallDepth = 16;
constexpr size_t kMaxKernelInstructions = size_t{1} << 17;
// Trap kinds (Inst::mode of a Flow::kTrap).
constexpr uint8_t kTrapInstruction = 0;   // trap, brkpt
constexpr uint8_t kTrapBadFunction = 1;   // an indirect call to no function of the module
constexpr uint8_t kTrapCallsTooDeep = 2;  // calls nested deeper than kMaxCallDepth
// A warp runs at most this many instructions before the next warp of its CTA
// gets a turn, so that warps spinning on each other's shared-memory flags make
// progress.
constexpr uint64_t kWarpSlice = 1u << 14;
constexpr uint64_t kCooperativeWarpSlice = 1u << 8;
// A CTA that runs this many warp instructions without finishing may be waiting for other
// CTAs of its grid (a grid-wide barrier or flag of the program's own, which works on a GPU
// where they are resident together): its worker then makes the following CTAs resident
// beside it (RunResident), as many as a GPU of the model would hold.
constexpr uint64_t kResidentAfter = uint64_t{1} << 20;

}  // namespace

// ---- Execution state
// ---------------------------------------------------------------------

// One per worker, on cache lines of its own (the workers update theirs on every
// instruction).
struct alignas(64) LaunchState {
  const DecodedKernel* kernel = nullptr;
  const LaunchSpec* spec = nullptr;
  uint8_t* shared = nullptr;
  uint64_t shared_size = 0;
  uint8_t* local = nullptr;          // threads of the CTA * local_size
  uint64_t clock = 0;                // advances with every warp instruction
  uint64_t thread_instructions = 0;  // lanes executed, for the benchmark
  std::string printf;                // device printf text of this worker's CTAs
  uint64_t printf_dropped = 0;       // bytes of it dropped (AppendPrintf)
  // The CTA's 16 barriers (bar.sync/red/arrive ID{, COUNT}): lanes waiting at each, and
  // for a barrier given a thread count, the threads arrived and the count; bar.red's
  // accumulators. `active_barriers`: bit i when barrier i has waiting or arrived lanes.
  static constexpr int kBarriers = 16;
  uint32_t barrier_waiting[kBarriers] = {};
  uint32_t barrier_arrived[kBarriers] = {};
  uint32_t barrier_expected[kBarriers] = {};  // 0: every live thread of the CTA
  uint32_t active_barriers = 0;
  uint32_t reduce_count[kBarriers] = {};
  bool reduce_all[kBarriers] = {true, true, true, true, true, true, true, true,
                                true, true, true, true, true, true, true, true};
  bool reduce_any[kBarriers] = {};
  int32_t error = kSuccess;
  std::string detail;
  size_t range_hint = 0;
  uint32_t* range_hints = nullptr;  // per instruction: its last allocation (fast paths)
  uint32_t cta_linear = 0;
  uint32_t ctaid[3] = {0, 0, 0};
  uint64_t slice = kWarpSlice;  // warp instructions a warp runs before the next one's turn
};

struct Warp {
  uint64_t* regs = nullptr;  // slot_count * 32
  LaunchState* launch = nullptr;
  uint32_t index = 0;    // warp index in its CTA
  uint32_t live = 0;     // lanes that have not exited
  uint32_t waiting = 0;  // lanes waiting at a barrier
  uint8_t wait_id[32] = {};  // the barrier each waiting lane waits at
  bool uniform = true;   // every live lane is at `pc`
  int32_t pc = 0;
  int32_t lane_pc[32] = {};
  // Forward progress for divergent lanes (independent thread scheduling, sm_70 on): the
  // lowest PC runs first, so lanes spinning in a loop on what other lanes of their warp
  // will do (an intra-warp lock) would run for ever. After kSpinLimit backward branches of
  // one group of lanes while other lanes were ready elsewhere, that group is `deferred`
  // for up to kDeferSteps steps, or until no other lane is ready or the others reach a
  // warp-synchronous instruction.
  uint32_t spin_mask = 0;  // the group whose backward branches `spin` counts
  uint32_t spin = 0;
  uint32_t deferred = 0;
  uint32_t defer_left = 0;

  uint64_t* R(int32_t slot) { return regs + static_cast<size_t>(slot) * 32; }

  uint8_t* LocalOf(int lane) {
    return launch->local + (static_cast<uint64_t>(index) * 32 + lane) * launch->kernel->local_size;
  }

  void Fault(uint64_t address, uint32_t size, const char* what) {
    if (launch->error != kSuccess) return;
    launch->error = kIllegalAddress;
    char text[160];
    std::snprintf(text, sizeof(text), "%s of %u bytes at 0x%llx (block %u, warp %u)", what, size,
                  static_cast<unsigned long long>(address), launch->cta_linear, index);
    launch->detail = text;
  }

  // The allocation holding `address`, nullptr if none; *hint: the index of the last one
  // found (tried first, updated).
  const MemoryRange* RangeOf(uint64_t address, uint32_t* hint) {
    const std::vector<MemoryRange>& ranges = launch->spec->memory;
    if (*hint < ranges.size() && address - ranges[*hint].start < ranges[*hint].size) {
      return &ranges[*hint];
    }
    auto after = std::upper_bound(ranges.begin(), ranges.end(), address,
                                  [](uint64_t a, const MemoryRange& r) { return a < r.start; });
    if (after == ranges.begin()) return nullptr;
    const MemoryRange& range = *std::prev(after);
    if (address - range.start >= range.size) return nullptr;
    *hint = static_cast<uint32_t>(std::prev(after) - ranges.begin());
    return &range;
  }

  uint8_t* Global(uint64_t address, uint32_t size) {
    const std::vector<MemoryRange>& ranges = launch->spec->memory;
    size_t hint = launch->range_hint;
    if (hint < ranges.size() && address >= ranges[hint].start &&
        address - ranges[hint].start + size <= ranges[hint].size) {
      return reinterpret_cast<uint8_t*>(ranges[hint].host) + (address - ranges[hint].start);
    }
    auto after = std::upper_bound(ranges.begin(), ranges.end(), address,
                                  [](uint64_t a, const MemoryRange& r) { return a < r.start; });
    if (after == ranges.begin()) return nullptr;
    const MemoryRange& range = *std::prev(after);
    uint64_t offset = address - range.start;
    if (offset > range.size || size > range.size - offset) return nullptr;
    launch->range_hint = static_cast<size_t>(std::prev(after) - ranges.begin());
    return reinterpret_cast<uint8_t*>(range.host) + offset;
  }

  // Host address of `size` bytes at `address` in `space` for `lane`; nullptr if
  // stray.
  uint8_t* Address(Space space, uint64_t address, uint32_t size, int lane) {
    switch (space) {
      case Space::kGlobal:
      case Space::kConst: return Global(address, size);
      case Space::kShared:
        address &= 0xffffffffffffull;
        if (address > launch->shared_size || size > launch->shared_size - address) return nullptr;
        return launch->shared + address;
      case Space::kLocal: {
        uint64_t local_size = launch->kernel->local_size;
        address &= 0xffffffffffffull;
        if (address > local_size || size > local_size - address) return nullptr;
        return LocalOf(lane) + address;
      }
      case Space::kParam: {
        address &= 0xffffffffffffull;
        size_t param_size = launch->spec->param_size;
        if (address > param_size || size > param_size - address) return nullptr;
        return const_cast<uint8_t*>(launch->spec->params) + address;
      }
      case Space::kGeneric:
        if (address >= kSharedWindow && address < kSharedWindow + kWindowSize) {
          return Address(Space::kShared, address - kSharedWindow, size, lane);
        }
        if (address >= kLocalWindow && address < kLocalWindow + kWindowSize) {
          return Address(Space::kLocal, address - kLocalWindow, size, lane);
        }
        if (address >= kParamWindow && address < kParamWindow + kWindowSize) {
          return Address(Space::kParam, address - kParamWindow, size, lane);
        }
        return Global(address, size);
    }
    return nullptr;
  }
};

namespace {

template <typename F>
inline void ForLanes(uint32_t mask, F&& f) {
  if (mask == kFullMask) {
    for (int lane = 0; lane < 32; ++lane) f(lane);
  } else {
    while (mask) {
      int lane = std::countr_zero(mask);
      mask &= mask - 1;
      f(lane);
    }
  }
}

// ForLanes for element-wise lane loops: each lane reads its own lane of the source slots
// and writes its own lane of the destination slot (which may be one of the sources, as a
// whole slot: slots never partly overlap), so no lane depends on another and the compiler
// may vectorise whole warps. Not for stores, atomics or anything that crosses lanes.
template <typename F>
inline void ForLanesIndependent(uint32_t mask, F&& f) {
  if (mask == kFullMask) {
#pragma GCC ivdep
    for (int lane = 0; lane < 32; ++lane) f(lane);
  } else {
    while (mask) {
      int lane = std::countr_zero(mask);
      mask &= mask - 1;
      f(lane);
    }
  }
}

// ---- Values
// ------------------------------------------------------------------------------

template <typename T>
inline T Get(uint64_t raw) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<float>(static_cast<uint32_t>(raw));
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<double>(raw);
  } else {
    return static_cast<T>(raw);
  }
}

template <typename T>
inline uint64_t Put(T value) {
  if constexpr (std::is_same_v<T, float>) {
    return std::bit_cast<uint32_t>(value);
  } else if constexpr (std::is_same_v<T, double>) {
    return std::bit_cast<uint64_t>(value);
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(value));
  } else {
    return static_cast<uint64_t>(value);
  }
}

template <typename T>
using Unsigned = std::make_unsigned_t<T>;

template <typename T>
inline T WrapAdd(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(a) + static_cast<Unsigned<T>>(b));
  } else {
    return a + b;
  }
}
template <typename T>
inline T WrapSub(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<T>(static_cast<Unsigned<T>>(a) - static_cast<Unsigned<T>>(b));
  } else {
    return a - b;
  }
}
template <typename T>
inline T WrapMul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::conditional_t<(sizeof(T) < 4), uint32_t, Unsigned<T>>;
    return static_cast<T>(static_cast<U>(static_cast<Unsigned<T>>(a)) *
                          static_cast<U>(static_cast<Unsigned<T>>(b)));
  } else {
    return a * b;
  }
}

template <typename T>
struct Wider;
template <>
struct Wider<int16_t> {
  using type = int32_t;
};
template <>
struct Wider<uint16_t> {
  using type = uint32_t;
};
template <>
struct Wider<int32_t> {
  using type = int64_t;
};
template <>
struct Wider<uint32_t> {
  using type = uint64_t;
};
template <>
struct Wider<int64_t> {
  using type = __int128;
};
template <>
struct Wider<uint64_t> {
  using type = unsigned __int128;
};

template <typename T>
inline T MulHi(T a, T b) {
  using W = typename Wider<T>::type;
  return static_cast<T>((static_cast<W>(a) * static_cast<W>(b)) >> (8 * sizeof(T)));
}

inline float FlushF32(float v) {
  return std::fpclassify(v) == FP_SUBNORMAL ? std::copysign(0.0f, v) : v;
}
template <typename T>
inline T Saturate01(T v) {
  if (std::isnan(v)) return T(0);
  return std::min(T(1), std::max(T(0), v));
}

// A float operand under .ftz: a subnormal f32 input counts as a zero of its sign, as the
// GPU flushes inputs as well as results (a subnormal times 2^30 is 0 there).
template <typename T>
inline T FtzOperand(uint64_t raw, uint8_t flags) {
  T v = Get<T>(raw);
  if constexpr (std::is_same_v<T, float>) {
    if (flags & kFlagFtz) v = FlushF32(v);
  }
  return v;
}

// Float results with .ftz/.sat applied.
template <typename T>
inline T FixFloat(T v, uint8_t flags) {
  if constexpr (std::is_same_v<T, float>) {
    if (flags & kFlagFtz) v = FlushF32(v);
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (flags & kFlagSat) v = Saturate01(v);
  }
  return v;
}

// ---- Arithmetic handlers
// ------------------------------------------------------------------

enum BinOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kMulHi,
  kDiv,
  kRem,
  kMin,
  kMax,
  kAnd,
  kOr,
  kXor,
  kShl,
  kShr,
  kAddSat,
  kSubSat,
  kCopysign,
  kMul24,
  kMul24Hi,
};

template <typename T, BinOp op>
inline T Binary(T a, T b) {
  if constexpr (op == kAdd) return WrapAdd(a, b);
  if constexpr (op == kSub) return WrapSub(a, b);
  if constexpr (op == kMul) return WrapMul(a, b);
  if constexpr (op == kMulHi) {
    if constexpr (std::is_integral_v<T> && sizeof(T) >= 2) return MulHi(a, b);
    return a;
  }
  if constexpr (op == kDiv) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return static_cast<T>(-1);
      if constexpr (std::is_signed_v<T>) {
        if (a == std::numeric_limits<T>::min() && b == -1) return a;
      }
      return static_cast<T>(a / b);
    } else {
      return a / b;
    }
  }
  if constexpr (op == kRem) {
    if constexpr (std::is_integral_v<T>) {
      if (b == 0) return a;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;
      }
      return static_cast<T>(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
  if constexpr (op == kMin) {
    if constexpr (std::is_floating_point_v<T>) return std::fmin(a, b);
    return std::min(a, b);
  }
  if constexpr (op == kMax) {
    if constexpr (std::is_floating_point_v<T>) return std::fmax(a, b);
    return std::max(a, b);
  }
  if constexpr (std::is_integral_v<T>) {
    if constexpr (op == kAnd) return a & b;
    if constexpr (op == kOr) return a | b;
    if constexpr (op == kXor) return a ^ b;
    if constexpr (op == kShl) {
      Unsigned<T> shift = static_cast<Unsigned<T>>(b);
      if (shift >= 8 * sizeof(T)) return 0;
      return static_cast<T>(static_cast<Unsigned<T>>(a) << shift);
    }
    if constexpr (op == kShr) {
      Unsigned<T> shift = static_cast<Unsigned<T>>(b);
      if (shift >= 8 * sizeof(T)) return std::is_signed_v<T> && a < 0 ? T(-1) : T(0);
      return static_cast<T>(a >> shift);
    }
    if constexpr (op == kAddSat || op == kSubSat) {
      int64_t wide = op == kAddSat ? int64_t{a} + int64_t{b} : int64_t{a} - int64_t{b};
      wide =
          std::clamp<int64_t>(wide, std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
      return static_cast<T>(wide);
    }
    if constexpr (op == kMul24 || op == kMul24Hi) {
      int64_t x =
          std::is_signed_v<T>
              ? (static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(a) << 8)) >> 8)
              : static_cast<int64_t>(static_cast<uint32_t>(a) & 0xffffff);
      int64_t y =
          std::is_signed_v<T>
              ? (static_cast<int64_t>(static_cast<int32_t>(static_cast<uint32_t>(b) << 8)) >> 8)
              : static_cast<int64_t>(static_cast<uint32_t>(b) & 0xffffff);
      int64_t p = x * y;
      return static_cast<T>(op == kMul24 ? p : (p >> 16));
    }
  } else {
    if constexpr (op == kCopysign) return std::copysign(b, a);
  }
  return a;
}

template <typename T, BinOp op>
void HBinary(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(mask, [&](int l) {
      d[l] = Put<T>(FixFloat<T>(
          Binary<T, op>(FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags)), in.flags));
    });
  } else {
    ForLanesIndependent(mask,
                        [&](int l) { d[l] = Put<T>(Binary<T, op>(Get<T>(a[l]), Get<T>(b[l]))); });
  }
}

// mul.wide / mad.wide: T inputs, twice-as-wide result.
template <typename T>
void HMulWide(Warp& w, const Inst& in, uint32_t mask) {
  using W = typename Wider<T>::type;
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  ForLanesIndependent(mask, [&](int l) {
    W p = static_cast<W>(Get<T>(a[l])) * static_cast<W>(Get<T>(b[l]));
    uint64_t r = Put<W>(p);
    if (c) r += c[l];
    d[l] = r;
  });
}

// Integer add/sub/mad with the carry flag (.cc in, addc/subc/madc out).
template <typename T>
void HCarry(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* cc = w.R(w.launch->kernel->carry_slot);
  using U = Unsigned<T>;
  constexpr int kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    unsigned __int128 x = static_cast<U>(a[l]);
    unsigned __int128 y = static_cast<U>(b[l]);
    unsigned __int128 carry_in = (in.flags & kFlagCarryIn) ? (cc[l] & 1) : 0;
    unsigned __int128 r;
    if (in.mode == 0) {  // add
      r = x + y + carry_in;
    } else if (in.mode == 1) {  // sub: a - b - borrow
      r = x - y - carry_in;
    } else {  // mad.lo / mad.hi with carry
      unsigned __int128 p = x * y;
      if (in.mode == 3) p >>= kBits;
      p &= (static_cast<unsigned __int128>(1) << kBits) - 1;
      r = p + static_cast<U>(c[l]) + carry_in;
    }
    d[l] = Put<T>(static_cast<T>(static_cast<U>(r)));
    if (in.flags & kFlagCarryOut) cc[l] = static_cast<uint64_t>((r >> kBits) & 1);
  });
}

enum UnOp : uint8_t {
  kMov,
  kNeg,
  kAbs,
  kNot,
  kCnot,
  kPopc,
  kClz,
  kBrev,
  kSqrt,
  kRsqrt,
  kRcp,
  kSin,
  kCos,
  kLg2,
  kEx2,
  kTanh,
  kBfind,
  kBfindShift,
  kNotPred,
};

template <typename T, UnOp op>
inline T Unary(T a) {
  if constexpr (op == kMov) return a;
  if constexpr (op == kNeg) {
    if constexpr (std::is_integral_v<T>) return WrapSub<T>(T(0), a);
    return -a;
  }
  if constexpr (op == kAbs) {
    if constexpr (std::is_integral_v<T>) return a < 0 ? WrapSub<T>(T(0), a) : a;
    return std::fabs(a);
  }
  if constexpr (std::is_integral_v<T>) {
    using U = Unsigned<T>;
    U u = static_cast<U>(a);
    if constexpr (op == kNot) return static_cast<T>(~u);
    if constexpr (op == kNotPred) return static_cast<T>(u ^ 1);
    if constexpr (op == kCnot) return u == 0 ? T(1) : T(0);
    if constexpr (op == kPopc) return static_cast<T>(std::popcount(u));
    if constexpr (op == kClz) return static_cast<T>(std::countl_zero(u));
    if constexpr (op == kBrev) {
      U r = 0;
      for (size_t i = 0; i < 8 * sizeof(U); ++i) r |= ((u >> i) & 1) << (8 * sizeof(U) - 1 - i);
      return static_cast<T>(r);
    }
    if constexpr (op == kBfind || op == kBfindShift) {
      U v = u;
      if constexpr (std::is_signed_v<T>) {
        if (a < 0) v = ~u;
      }
      if (v == 0) return static_cast<T>(-1);
      int msb = static_cast<int>(8 * sizeof(U)) - 1 - std::countl_zero(v);
      return static_cast<T>(op == kBfind ? msb : static_cast<int>(8 * sizeof(U)) - 1 - msb);
    }
  } else {
    if constexpr (op == kSqrt) return std::sqrt(a);
    if constexpr (op == kRsqrt) return T(1) / std::sqrt(a);
    if constexpr (op == kRcp) return T(1) / a;
    if constexpr (op == kSin) return std::sin(a);
    if constexpr (op == kCos) return std::cos(a);
    if constexpr (op == kLg2) return std::log2(a);
    if constexpr (op == kEx2) return std::exp2(a);
    if constexpr (op == kTanh) return std::tanh(a);
  }
  return a;
}

template <typename T, UnOp op>
void HUnary(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(mask, [&](int l) {
      d[l] = Put<T>(FixFloat<T>(Unary<T, op>(FtzOperand<T>(a[l], in.flags)), in.flags));
    });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = Put<T>(Unary<T, op>(Get<T>(a[l]))); });
  }
}

// Integer popc/clz/bfind always write a .u32.
template <typename T, UnOp op>
void HCount(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask,
                      [&](int l) { d[l] = static_cast<uint32_t>(Unary<T, op>(Get<T>(a[l]))); });
}

// mad.lo / fma / mad (float).
template <typename T,
          int kind>  // 0: lo, 1: hi, 2: float fma, 3: hi .sat? (unused)
void HMad(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanesIndependent(mask, [&](int l) {
    T x = FtzOperand<T>(a[l], in.flags), y = FtzOperand<T>(b[l], in.flags),
      z = FtzOperand<T>(c[l], in.flags);
    T r;
    if constexpr (kind == 0)
      r = WrapAdd(WrapMul(x, y), z);
    else if constexpr (kind == 1)
      r = WrapAdd(MulHi(x, y), z);
    else
      r = FixFloat<T>(std::fma(x, y, z), in.flags);
    d[l] = Put<T>(r);
  });
}

#if defined(__x86_64__)
// fma.f32/f64 compiled for AVX2+FMA, chosen at decode time when the host has them:
// libm's fma is a call per lane; the result is the same (one rounding either way).
template <typename T>
__attribute__((target("avx2,fma"))) void HFmaHw(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  auto fma = [](T x, T y, T z) {
    if constexpr (std::is_same_v<T, float>) {
      return __builtin_fmaf(x, y, z);
    } else {
      return __builtin_fma(x, y, z);
    }
  };
  if (in.flags & (kFlagFtz | kFlagSat)) {
    ForLanesIndependent(mask, [&](int l) {
      d[l] = Put<T>(FixFloat<T>(fma(FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags),
                                    FtzOperand<T>(c[l], in.flags)),
                                in.flags));
    });
  } else {
    ForLanesIndependent(
        mask, [&](int l) { d[l] = Put<T>(fma(Get<T>(a[l]), Get<T>(b[l]), Get<T>(c[l]))); });
  }
}

bool HostHasFma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}
#endif

template <typename T>
void HMad24(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    T p = in.mode ? Binary<T, kMul24Hi>(Get<T>(a[l]), Get<T>(b[l]))
                  : Binary<T, kMul24>(Get<T>(a[l]), Get<T>(b[l]));
    d[l] = Put<T>(WrapAdd(p, Get<T>(c[l])));
  });
}

template <typename T>
void HSad(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    T x = Get<T>(a[l]), y = Get<T>(b[l]);
    T diff = x > y ? WrapSub(x, y) : WrapSub(y, x);
    d[l] = Put<T>(WrapAdd(diff, Get<T>(c[l])));
  });
}

enum Cmp : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kEqu,
  kNeu,
  kLtu,
  kLeu,
  kGtu,
  kGeu,
  kNum,
  kNan,
};

template <typename T>
inline bool Compare(uint8_t cmp, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    bool unordered = std::isnan(a) || std::isnan(b);
    switch (cmp) {
      case kEq: return !unordered && a == b;
      case kNe: return !unordered && a != b;
      case kLt: return !unordered && a < b;
      case kLe: return !unordered && a <= b;
      case kGt: return !unordered && a > b;
      case kGe: return !unordered && a >= b;
      case kEqu: return unordered || a == b;
      case kNeu: return unordered || a != b;
      case kLtu: return unordered || a < b;
      case kLeu: return unordered || a <= b;
      case kGtu: return unordered || a > b;
      case kGeu: return unordered || a >= b;
      case kNum: return !unordered;
      case kNan: return unordered;
    }
    return false;
  } else {
    switch (cmp) {
      case kEq: return a == b;
      case kNe: return a != b;
      case kLt: return a < b;
      case kLe: return a <= b;
      case kGt: return a > b;
      case kGe: return a >= b;
    }
    return false;
  }
}

// setp / set: mode = comparison, mode2 = bool op (0 none, 1 and, 2 or, 3 xor)
// with c.
template <typename T>
void HSetp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* q = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  bool negate_c = in.flags & kFlagSigned;  // reused: the bool operand is !%p
  ForLanes(mask, [&](int l) {
    bool t = Compare<T>(in.mode, FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags));
    bool f = !t;
    if (c) {
      bool p = (c[l] & 1) != negate_c;
      switch (in.mode2) {
        case 1:
          t = t && p;
          f = f && p;
          break;
        case 2:
          t = t || p;
          f = f || p;
          break;
        case 3:
          t = t != p;
          f = f != p;
          break;
      }
    }
    d[l] = t;
    if (q) q[l] = f;
  });
}

// setp without a predicate operand (no .and/.or/.xor): the comparison is a template
// parameter, so the lane loop has no switch. kFtz: setp.ftz.f32 (inputs flushed).
template <typename T, Cmp kCmp, bool kFtz = false>
void HSetpPlain(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  auto operand = [](uint64_t raw) {
    if constexpr (kFtz) {
      return FlushF32(Get<float>(raw));
    } else {
      return Get<T>(raw);
    }
  };
  if (in.d[1] >= 0) {
    uint64_t* q = w.R(in.d[1]);
    ForLanesIndependent(mask, [&](int l) {
      bool t = Compare<T>(kCmp, operand(a[l]), operand(b[l]));
      d[l] = t;
      q[l] = !t;
    });
  } else {
    ForLanesIndependent(mask,
                        [&](int l) { d[l] = Compare<T>(kCmp, operand(a[l]), operand(b[l])); });
  }
}

template <typename T>
struct WSetpPlain {
  static Handler For(uint8_t cmp, bool ftz = false) {
    if constexpr (std::is_same_v<T, float>) {
      if (ftz) {
        switch (cmp) {
          case kEq: return &HSetpPlain<T, kEq, true>;
          case kNe: return &HSetpPlain<T, kNe, true>;
          case kLt: return &HSetpPlain<T, kLt, true>;
          case kLe: return &HSetpPlain<T, kLe, true>;
          case kGt: return &HSetpPlain<T, kGt, true>;
          case kGe: return &HSetpPlain<T, kGe, true>;
        }
        return nullptr;
      }
    }
    switch (cmp) {
      case kEq: return &HSetpPlain<T, kEq>;
      case kNe: return &HSetpPlain<T, kNe>;
      case kLt: return &HSetpPlain<T, kLt>;
      case kLe: return &HSetpPlain<T, kLe>;
      case kGt: return &HSetpPlain<T, kGt>;
      case kGe: return &HSetpPlain<T, kGe>;
    }
    return nullptr;
  }
};

// setp's and set's BoolOp (1 and, 2 or, 3 xor) of comparison t with predicate c.
inline bool CombineWithPredicate(bool t, uint8_t bool_op, bool c) {
  switch (bool_op) {
    case 1: return t && c;
    case 2: return t || c;
    case 3: return t != c;
  }
  return t;
}

// set.cmp{.boolop}.dtype.stype d, a, b{, {!}c}: when true, all ones, or 1.0 as f32, f16 or
// bf16 (mode2, as the decoder sets it); else 0.
template <typename T>
void HSet(Warp& w, const Inst& in, uint32_t mask) {
  static constexpr uint32_t kTrue[4] = {0xffffffffu, 0x3f800000u, 0x3c00u, 0x3f80u};
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  const uint32_t if_true = kTrue[in.mode2 & 3];
  const uint8_t bool_op = in.mode2 >> 2;
  const bool negate_c = in.flags & kFlagSigned;
  ForLanes(mask, [&](int l) {
    bool t = Compare<T>(in.mode, FtzOperand<T>(a[l], in.flags), FtzOperand<T>(b[l], in.flags));
    if (c != nullptr) t = CombineWithPredicate(t, bool_op, (c[l] != 0) != negate_c);
    d[l] = t ? if_true : 0;
  });
}

void HSelp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanesIndependent(mask, [&](int l) { d[l] = (c[l] & 1) ? a[l] : b[l]; });
}

// slct.dtype.s32/f32 d, a, b, c: a when c >= 0.
void HSlct(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    bool pick_a = in.mode ? Get<float>(c[l]) >= 0.0f : Get<int32_t>(c[l]) >= 0;
    d[l] = pick_a ? a[l] : b[l];
  });
}

void HTestp(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanes(mask, [&](int l) {
    double v = in.width == 8 ? Get<double>(a[l]) : static_cast<double>(Get<float>(a[l]));
    int cls =
        in.width == 8 ? std::fpclassify(Get<double>(a[l])) : std::fpclassify(Get<float>(a[l]));
    bool r = false;
    switch (in.mode) {
      case 0: r = std::isfinite(v); break;
      case 1: r = std::isinf(v); break;
      case 2: r = !std::isnan(v); break;
      case 3: r = std::isnan(v); break;
      case 4: r = cls == FP_NORMAL; break;
      case 5: r = cls == FP_SUBNORMAL; break;
    }
    d[l] = r;
  });
}

template <typename T>
void HBfe(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  using U = Unsigned<T>;
  constexpr uint32_t kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    U value = static_cast<U>(a[l]);
    uint32_t pos = static_cast<uint8_t>(b[l]);
    uint32_t len = static_cast<uint8_t>(c[l]);
    bool sign = false;
    if constexpr (std::is_signed_v<T>) {
      uint32_t top = std::min(pos + len, kBits) - 1;
      sign = len != 0 && ((value >> std::min(top, kBits - 1)) & 1);
    }
    U r = 0;
    for (uint32_t i = 0; i < kBits; ++i) {
      bool bit = i < len && pos + i < kBits ? ((value >> (pos + i)) & 1) : sign;
      if (i >= len) bit = sign;
      r |= static_cast<U>(bit) << i;
    }
    d[l] = Put<T>(static_cast<T>(r));
  });
}

template <typename T>
void HBfi(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const uint64_t* e = w.R(in.e);
  using U = Unsigned<T>;
  constexpr uint32_t kBits = 8 * sizeof(U);
  ForLanes(mask, [&](int l) {
    U insert = static_cast<U>(a[l]);
    U r = static_cast<U>(b[l]);
    uint32_t pos = static_cast<uint8_t>(c[l]);
    uint32_t len = static_cast<uint8_t>(e[l]);
    for (uint32_t i = 0; i < len && pos + i < kBits; ++i) {
      U bit = static_cast<U>(1) << (pos + i);
      r = (r & ~bit) | (((insert >> i) & 1) ? bit : 0);
    }
    d[l] = Put<T>(static_cast<T>(r));
  });
}

void HPrmt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    uint64_t bytes =
        (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    uint32_t selector = static_cast<uint32_t>(c[l]);
    uint32_t r = 0;
    if (in.mode == 0) {
      for (int i = 0; i < 4; ++i) {
        uint32_t s = (selector >> (4 * i)) & 0xf;
        uint32_t byte = (bytes >> (8 * (s & 7))) & 0xff;
        if (s & 8) byte = (byte & 0x80) ? 0xff : 0;
        r |= byte << (8 * i);
      }
    } else {
      // f4e, b4e, rc8, ecl, ecr, rc16
      uint32_t s = selector & 3;
      uint8_t bs[8];
      for (int i = 0; i < 8; ++i) bs[i] = (bytes >> (8 * i)) & 0xff;
      uint8_t out[4];
      switch (in.mode) {
        case 1:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s + i) & 7];
          break;  // f4e
        case 2:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s - i + 8) & 7];
          break;  // b4e
        case 3:
          for (int i = 0; i < 4; ++i) out[i] = bs[s];
          break;  // rc8
        case 4:
          for (int i = 0; i < 4; ++i) out[i] = bs[std::min<uint32_t>(i, s)];
          break;  // ecl
        case 5:
          for (int i = 0; i < 4; ++i) out[i] = bs[std::max<uint32_t>(i, s)];
          break;  // ecr
        default:
          for (int i = 0; i < 4; ++i) out[i] = bs[(s & 1) * 2 + (i & 1)];
          break;  // rc16
      }
      r = out[0] | (out[1] << 8) | (out[2] << 16) | (static_cast<uint32_t>(out[3]) << 24);
    }
    d[l] = r;
  });
}

// shf.l/.r .wrap/.clamp.b32 d, a, b, c: funnel shift of b:a by c.
void HShf(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    uint64_t both =
        (static_cast<uint64_t>(static_cast<uint32_t>(b[l])) << 32) | static_cast<uint32_t>(a[l]);
    uint32_t n = static_cast<uint32_t>(c[l]);
    n = (in.mode2 == 0) ? (n & 31) : std::min<uint32_t>(n, 32);
    d[l] =
        in.mode == 0 ? static_cast<uint32_t>((both << n) >> 32) : static_cast<uint32_t>(both >> n);
  });
}

// bmsk.{clamp,wrap}.b32 d, a, b: a mask of b bits from bit a (mode 1: clamp; wrap takes
// a and b modulo 32), as the PTX ISA defines it: cut at bit 31, 0 when a >= 32 (clamp)
// or b is 0, all bits from a up when b >= 32 (clamp).
// fns.b32 d, mask, base, offset (__fns): the position of the |offset|-th set bit of mask
// counting from bit base up (offset > 0) or down (offset < 0); offset 0 asks whether bit
// base itself is set; 0xffffffff when there is none (the PTX ISA's semantics). A base
// above 31, undefined there, finds nothing here.
void HFns(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  ForLanes(mask, [&](int l) {
    const uint32_t bits = static_cast<uint32_t>(a[l]), base = static_cast<uint32_t>(b[l]);
    const int64_t offset = static_cast<int32_t>(c[l]);
    uint32_t found = 0xffffffffu;
    if (base < 32 && offset == 0) {
      if ((bits >> base) & 1) found = base;
    } else if (base < 32 && offset > 0) {
      uint32_t from = bits & (~0u << base);  // the bits at or above base
      const int64_t skip = offset - 1;
      if (std::popcount(from) > skip) {
        for (int64_t i = 0; i < skip; ++i) from &= from - 1;
        found = static_cast<uint32_t>(std::countr_zero(from));
      }
    } else if (base < 32) {
      uint32_t from = bits & ((2u << base) - 1);  // the bits at or below base
      const int64_t skip = -offset - 1;
      if (std::popcount(from) > skip) {
        for (int64_t i = 0; i < skip; ++i) from &= ~(0x80000000u >> std::countl_zero(from));
        found = 31u - static_cast<uint32_t>(std::countl_zero(from));
      }
    }
    d[l] = found;
  });
}

void HBmsk(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const bool clamp = in.mode == 1;
  ForLanes(mask, [&](int l) {
    const uint32_t position = static_cast<uint32_t>(a[l]), width = static_cast<uint32_t>(b[l]);
    const uint32_t a1 = position & 0x1f, b1 = width & 0x1f, sum = a1 + b1;
    uint32_t mask0 = ~0u << a1;
    uint32_t mask1 = sum >= 32 ? 0 : ~0u << sum;
    bool overflow = sum >= 32;
    if (clamp && position >= 32) {
      mask0 = 0;
      overflow = true;
    }
    if (clamp && width >= 32) overflow = true;
    if (overflow) {
      mask1 = 0;
    } else if (b1 == 0) {
      mask1 = ~0u;
    }
    d[l] = mask0 & ~mask1;
  });
}

// lop3.b32 d, a, b, c, immLut
void HLop3(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const uint64_t* e = w.R(in.e);
  ForLanes(mask, [&](int l) {
    uint32_t x = a[l], y = b[l], z = c[l], lut = e[l] & 0xff, r = 0;
    for (int i = 0; i < 8; ++i) {
      if (!((lut >> i) & 1)) continue;
      uint32_t term = ((i & 4) ? x : ~x) & ((i & 2) ? y : ~y) & ((i & 1) ? z : ~z);
      r |= term;
    }
    d[l] = r;
  });
}

// mov.b64 d, {a, b} (pack) and mov.b64 {a, b}, d (unpack): in.width = element
// bytes.
void HPack(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  int bits = in.width * 8;
  uint64_t element_mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  const int32_t sources[4] = {in.a, in.b, in.c, in.e};
  ForLanes(mask, [&](int l) {
    uint64_t r = 0;
    for (int i = 0; i < in.vec; ++i) r |= (w.R(sources[i])[l] & element_mask) << (bits * i);
    d[l] = r;
  });
}
void HUnpack(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  int bits = in.width * 8;
  uint64_t element_mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
  ForLanes(mask, [&](int l) {
    uint64_t v = a[l];
    for (int i = 0; i < in.vec; ++i) {
      if (in.d[i] >= 0) w.R(in.d[i])[l] = (v >> (bits * i)) & element_mask;
    }
  });
}

// cvta / cvta.to: mode 0 to generic (add window), 1 from generic (subtract).
void HCvta(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  uint64_t window = static_cast<uint64_t>(in.offset);
  uint64_t keep = in.width == 4 ? 0xffffffffull : ~0ull;
  if (in.mode == 0) {
    ForLanesIndependent(mask, [&](int l) { d[l] = (a[l] & keep) + window; });
  } else {
    ForLanesIndependent(mask, [&](int l) { d[l] = (a[l] - window) & keep; });
  }
}

// isspacep.space p, a
void HIsspacep(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanes(mask, [&](int l) {
    uint64_t v = a[l];
    bool shared = v >= kSharedWindow && v < kSharedWindow + kWindowSize;
    bool local = v >= kLocalWindow && v < kLocalWindow + kWindowSize;
    bool param = v >= kParamWindow && v < kParamWindow + kWindowSize;
    switch (static_cast<Space>(in.mode)) {
      case Space::kShared: d[l] = shared; break;
      case Space::kLocal: d[l] = local; break;
      case Space::kParam: d[l] = param; break;
      default: d[l] = !shared && !local && !param; break;
    }
  });
}

// ---- Conversions
// --------------------------------------------------------------------------

enum Kind : uint8_t { kKindU, kKindS, kKindF, kKindB };

uint16_t FloatToHalf(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t sign = (x >> 16) & 0x8000;
  int32_t exponent = static_cast<int32_t>((x >> 23) & 0xff) - 127 + 15;
  uint32_t mantissa = x & 0x7fffff;
  if (((x >> 23) & 0xff) == 0xff)
    return static_cast<uint16_t>(sign | 0x7c00 | (mantissa ? 0x200 : 0));
  if (exponent >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  if (exponent <= 0) {
    if (exponent < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x800000;
    uint32_t shift = static_cast<uint32_t>(14 - exponent);
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(exponent) << 10) | (mantissa >> 13);
  uint32_t rest = mantissa & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (half & 1))) ++half;
  return static_cast<uint16_t>(sign | half);
}

float HalfToFloat(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exponent = (h >> 10) & 0x1f;
  uint32_t mantissa = h & 0x3ff;
  uint32_t x;
  if (exponent == 0) {
    if (mantissa == 0) {
      x = sign;
    } else {
      int e = -1;
      do {
        ++e;
        mantissa <<= 1;
      } while (!(mantissa & 0x400));
      x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mantissa & 0x3ff) << 13);
    }
  } else if (exponent == 31) {
    x = sign | 0x7f800000 | (mantissa << 13);
  } else {
    x = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  return std::bit_cast<float>(x);
}

// bf16 nearest to f, ties to even; a NaN stays a (quiet) NaN.
uint16_t FloatToBFloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  return static_cast<uint16_t>(std::isnan(f) ? ((x >> 16) | 0x40)
                                             : ((x + 0x7fff + ((x >> 16) & 1)) >> 16));
}

// f to f16 or bf16 with .rz (rounding 1), .rm (2) or .rp (3), as __float2half_rz and
// __float2bfloat16_rd compile: the nearest value, moved one step when it lies on the wrong
// side of f. Stepping a 16-bit pattern by one moves its magnitude by one unit in the last
// place, from the largest finite value to infinity and from infinity back.
uint16_t FloatToHalfDirected(float f, int rounding, bool bf16) {
  uint16_t h = bf16 ? FloatToBFloat16(f) : FloatToHalf(f);
  if (std::isnan(f)) return h;
  const float back = bf16 ? std::bit_cast<float>(static_cast<uint32_t>(h) << 16) : HalfToFloat(h);
  const bool negative = h & 0x8000;
  const bool above = back > f, below = back < f;
  if ((rounding == 1 && std::fabs(back) > std::fabs(f)) || (rounding == 2 && above && !negative) ||
      (rounding == 3 && below && negative)) {
    --h;  // towards zero
  } else if ((rounding == 2 && above && negative) || (rounding == 3 && below && !negative)) {
    ++h;  // away from zero
  }
  return h;
}

// Rounding: 0 none/rn, 1 rz, 2 rm, 3 rp; integer rounding (rni...) 4..7.
double RoundTo(double v, int rounding) {
  switch (rounding & 3) {
    case 0: return std::nearbyint(v);  // round-half-even in the default mode
    case 1: return std::trunc(v);
    case 2: return std::floor(v);
    default: return std::ceil(v);
  }
}

// cvt: mode = destination kind | size << 2 (bytes), mode2 = source, e =
// rounding, flags.
void HCvt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  int dkind = in.mode & 3, dsize = in.mode >> 2;
  int skind = in.mode2 & 3, ssize = in.mode2 >> 2;
  int rounding = in.width;  // 0..3 float rounding, 4..7 integer rounding (+4)
  bool sat = in.flags & kFlagSat;
  // .rz/.rm/.rp into a float type (__int2float_rz, __ll2double_rd, __double2float_ru,
  // __float2half_rz...): the host converts in that rounding mode, set around the lanes
  // (the loads come after the first call and the stores before the second, as in
  // HDirectedRounding). Rounding in one direction twice (to double or float, then to a
  // half) gives the same as rounding once.
  const bool directed = (dkind == kKindF || dkind == kKindB) && rounding >= 1 && rounding <= 3;
  const int saved_rounding = std::fegetround();
  if (directed) {
    std::fesetround(rounding == 1 ? FE_TOWARDZERO : rounding == 2 ? FE_DOWNWARD : FE_UPWARD);
  }
  ForLanes(mask, [&](int l) {
    uint64_t raw = a[l];
    // Read the source.
    bool is_float = skind == kKindF || skind == kKindB;  // kKindB: bf16
    double fv = 0;
    int64_t sv = 0;
    uint64_t uv = 0;
    if (is_float) {
      if (ssize == 2 && skind == kKindB)
        fv = std::bit_cast<float>(static_cast<uint32_t>(raw & 0xffff) << 16);
      else if (ssize == 2)
        fv = HalfToFloat(static_cast<uint16_t>(raw));
      else if (ssize == 4)
        fv = Get<float>(raw);
      else
        fv = Get<double>(raw);
      if ((in.flags & kFlagFtz) && ssize == 4) fv = FlushF32(static_cast<float>(fv));
    } else if (skind == kKindS) {
      int shift = 64 - 8 * ssize;
      sv = static_cast<int64_t>(raw << shift) >> shift;
    } else {
      uv = ssize == 8 ? raw : (raw & ((1ull << (8 * ssize)) - 1));
    }
    uint64_t out = 0;
    if (dkind == kKindF || dkind == kKindB) {
      double r;
      if (is_float) {
        r = fv;
        if (rounding >= 4) r = RoundTo(r, rounding);
      } else {
        r = skind == kKindS ? static_cast<double>(sv) : static_cast<double>(uv);
      }
      if (dsize == 8) {
        if (sat) r = Saturate01(r);
        out = Put<double>(r);
      } else if (dsize == 4) {
        float f;
        if (!is_float && ssize == 8) {
          f = skind == kKindS ? static_cast<float>(sv) : static_cast<float>(uv);
        } else {
          f = static_cast<float>(r);
        }
        if (in.flags & kFlagFtz) f = FlushF32(f);
        if (sat) f = Saturate01(f);
        out = Put<float>(f);
      } else {
        float f;
        if (!is_float && ssize == 8) {
          f = skind == kKindS ? static_cast<float>(sv) : static_cast<float>(uv);
        } else {
          f = static_cast<float>(r);
        }
        if (sat) f = Saturate01(f);
        if (directed) {
          out = FloatToHalfDirected(f, rounding, dkind == kKindB);
        } else {
          out = dkind == kKindB ? FloatToBFloat16(f) : FloatToHalf(f);
        }
      }
    } else {
      // Integer destination (sizes 1..8), saturating from floats and when .sat.
      int bits = 8 * dsize;
      if (is_float) {
        double r = std::isnan(fv) ? 0.0 : RoundTo(fv, rounding);
        if (dkind == kKindS) {
          double lo = -std::ldexp(1.0, bits - 1), hi = std::ldexp(1.0, bits - 1) - 1;
          int64_t v = r <= lo   ? static_cast<int64_t>(lo)
                      : r >= hi ? (bits == 64 ? INT64_MAX : static_cast<int64_t>(hi))
                                : static_cast<int64_t>(r);
          out = static_cast<uint64_t>(v);
        } else {
          double hi = std::ldexp(1.0, bits) - 1;
          uint64_t v = r <= 0    ? 0
                       : r >= hi ? (bits == 64 ? UINT64_MAX : static_cast<uint64_t>(hi))
                                 : static_cast<uint64_t>(r);
          out = v;
        }
      } else if (sat) {
        if (dkind == kKindS) {
          int64_t lo = bits == 64 ? INT64_MIN : -(int64_t{1} << (bits - 1));
          int64_t hi = bits == 64 ? INT64_MAX : (int64_t{1} << (bits - 1)) - 1;
          if (skind == kKindS)
            out = static_cast<uint64_t>(std::clamp(sv, lo, hi));
          else
            out = static_cast<uint64_t>(uv > static_cast<uint64_t>(hi) ? hi
                                                                       : static_cast<int64_t>(uv));
        } else {
          uint64_t hi = bits == 64 ? UINT64_MAX : (uint64_t{1} << bits) - 1;
          if (skind == kKindS)
            out = sv < 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(sv), hi);
          else
            out = std::min(uv, hi);
        }
      } else {
        out = skind == kKindS ? static_cast<uint64_t>(sv) : uv;
      }
      // Store sign-extended for signed destinations, else zero-extended.
      if (bits < 64) {
        if (dkind == kKindS) {
          int shift = 64 - bits;
          out = static_cast<uint64_t>(static_cast<int64_t>(out << shift) >> shift);
        } else {
          out &= (1ull << bits) - 1;
        }
      }
    }
    d[l] = out;
  });
  if (directed) std::fesetround(saved_rounding);
}

// cvt between integer types without .sat: truncate or extend the source (S) to the
// destination (D), stored sign- or zero-extended as HCvt does.
template <typename S, typename D>
void HCvtInt(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask, [&](int l) { d[l] = Put<D>(static_cast<D>(static_cast<S>(a[l]))); });
}

template <typename S>
Handler CvtIntTo(int kind, int size) {
  bool is_signed = kind == kKindS;
  switch (size) {
    case 1: return is_signed ? &HCvtInt<S, int8_t> : &HCvtInt<S, uint8_t>;
    case 2: return is_signed ? &HCvtInt<S, int16_t> : &HCvtInt<S, uint16_t>;
    case 4: return is_signed ? &HCvtInt<S, int32_t> : &HCvtInt<S, uint32_t>;
    case 8: return is_signed ? &HCvtInt<S, int64_t> : &HCvtInt<S, uint64_t>;
  }
  return nullptr;
}

// The handler of a decoded cvt: HCvtInt for integer-to-integer without .sat, else HCvt.
Handler CvtHandler(const Inst& in) {
  int dkind = in.mode & 3, dsize = in.mode >> 2;
  int skind = in.mode2 & 3, ssize = in.mode2 >> 2;
  bool ints = (dkind == kKindS || dkind == kKindU) && (skind == kKindS || skind == kKindU);
  if (!ints || (in.flags & kFlagSat)) return &HCvt;
  Handler h = nullptr;
  bool is_signed = skind == kKindS;
  switch (ssize) {
    case 1: h = is_signed ? CvtIntTo<int8_t>(dkind, dsize) : CvtIntTo<uint8_t>(dkind, dsize); break;
    case 2:
      h = is_signed ? CvtIntTo<int16_t>(dkind, dsize) : CvtIntTo<uint16_t>(dkind, dsize);
      break;
    case 4:
      h = is_signed ? CvtIntTo<int32_t>(dkind, dsize) : CvtIntTo<uint32_t>(dkind, dsize);
      break;
    case 8:
      h = is_signed ? CvtIntTo<int64_t>(dkind, dsize) : CvtIntTo<uint64_t>(dkind, dsize);
      break;
  }
  return h != nullptr ? h : &HCvt;
}

// ---- Memory
// -------------------------------------------------------------------------------

// One thread's vector access (up to 16 aligned bytes) is one access, as on a GPU, where
// code across CTAs relies on it: CUB's decoupled look-back scan publishes {status, value}
// with one st.relaxed.gpu.v2 and the next CTA, which here may run on the other worker
// thread, polls it with one ld.relaxed.gpu.v2. Copied element by element, the poller
// could see a new status with an old value (thrust::inclusive_scan came out wrong, rarely).
// Up to 8 bytes: one relaxed atomic move; 16 bytes: one MOVDQA, which processors with AVX
// carry out atomically (Intel SDM 8.1.1; AMD likewise). Larger or misaligned: memcpy.
constexpr uint32_t kMaxVectorBytes = 4 * 8;  // ld/st.v4 of 8-byte elements

template <size_t kBytes>
using WordOf = std::conditional_t<
    kBytes == 1, uint8_t,
    std::conditional_t<kBytes == 2, uint16_t, std::conditional_t<kBytes == 4, uint32_t, uint64_t>>>;

template <size_t kBytes>
inline void LoadWhole(void* out, const uint8_t* p) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(p);
  if constexpr (kBytes <= 8 && std::has_single_bit(kBytes)) {
    if (address % kBytes == 0) {
      WordOf<kBytes> word =
          __atomic_load_n(reinterpret_cast<const WordOf<kBytes>*>(p), __ATOMIC_RELAXED);
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

// The same for a size known only at run time (the per-lane paths).
inline void LoadWhole(void* out, const uint8_t* p, uint32_t bytes) {
  switch (bytes) {
    case 1: return LoadWhole<1>(out, p);
    case 2: return LoadWhole<2>(out, p);
    case 4: return LoadWhole<4>(out, p);
    case 8: return LoadWhole<8>(out, p);
    case 16: return LoadWhole<16>(out, p);
  }
  std::memcpy(out, p, bytes);
}

inline void StoreWhole(uint8_t* p, const void* in, uint32_t bytes) {
  switch (bytes) {
    case 1: return StoreWhole<1>(p, in);
    case 2: return StoreWhole<2>(p, in);
    case 4: return StoreWhole<4>(p, in);
    case 8: return StoreWhole<8>(p, in);
    case 16: return StoreWhole<16>(p, in);
  }
  std::memcpy(p, in, bytes);
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

// ---- Memory fast paths
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
    default: return false;
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
    case 1: return store ? &HStoreFast<S, T, 1> : &HLoadFast<S, T, 1>;
    case 2: return store ? &HStoreFast<S, T, 2> : &HLoadFast<S, T, 2>;
    case 4: return store ? &HStoreFast<S, T, 4> : &HLoadFast<S, T, 4>;
    default: return nullptr;
  }
}

template <Space S>
Handler LoadStoreByType(bool store, int width, bool is_signed, int vec) {
  if (is_signed && !store) {
    switch (width) {
      case 1: return LoadStoreByVec<S, int8_t>(store, vec);
      case 2: return LoadStoreByVec<S, int16_t>(store, vec);
      case 4: return LoadStoreByVec<S, int32_t>(store, vec);
    }
  }
  switch (width) {
    case 1: return LoadStoreByVec<S, uint8_t>(store, vec);
    case 2: return LoadStoreByVec<S, uint16_t>(store, vec);
    case 4: return LoadStoreByVec<S, uint32_t>(store, vec);
    case 8: return LoadStoreByVec<S, uint64_t>(store, vec);
  }
  return nullptr;
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

enum AtomOp : uint8_t {
  kAtomAdd,
  kAtomMin,
  kAtomMax,
  kAtomAnd,
  kAtomOr,
  kAtomXor,
  kAtomExch,
  kAtomCas,
  kAtomInc,
  kAtomDec
};

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
      if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED)) {
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
    case kAtomAdd: r = WrapAdd(old, v); break;
    case kAtomMin: r = std::min(old, v); break;
    case kAtomMax: r = std::max(old, v); break;
    case kAtomExch: r = v; break;
    case kAtomCas: r = old == v ? compare_value : old; break;
    default:
      if constexpr (std::is_integral_v<T>) {
        switch (mode) {
          case kAtomAnd: r = old & v; break;
          case kAtomOr: r = old | v; break;
          case kAtomXor: r = old ^ v; break;
          case kAtomInc: r = (old >= v) ? T(0) : T(old + 1); break;
          case kAtomDec: r = (old == 0 || old > v) ? v : T(old - 1); break;
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
      if (__atomic_compare_exchange_n(word, &old_bits, new_bits, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED)) {
        break;
      }
    }
    if (d) d[l] = Put<T>(old);
  });
}

template <typename T>
Handler AtomHandlerOf(Space space) {
  switch (space) {
    case Space::kGlobal: return &HAtomFast<Space::kGlobal, T>;
    case Space::kShared: return &HAtomFast<Space::kShared, T>;
    case Space::kGeneric: return &HAtomFast<Space::kGeneric, T>;
    default: return &HAtom<T>;
  }
}

// ---- Warp-level operations
// ----------------------------------------------------------------

// shfl.sync.mode.b32 d[|p], a, b, c, membermask
void HShfl(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* p = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  uint64_t source[32];
  std::memcpy(source, a, sizeof(source));
  ForLanes(mask, [&](int lane) {
    uint32_t bval = b[lane] & 0x1f;
    uint32_t cval = c[lane] & 0x1f;
    uint32_t segmask = (c[lane] >> 8) & 0x1f;
    int max_lane = static_cast<int>((lane & segmask) | (cval & ~segmask));
    int min_lane = static_cast<int>(lane & segmask);
    int j = lane;
    bool ok = false;
    switch (in.mode) {
      case 0:
        j = lane - static_cast<int>(bval);
        ok = j >= max_lane;
        break;  // up
      case 1:
        j = lane + static_cast<int>(bval);
        ok = j <= max_lane;
        break;  // down
      case 2:
        j = lane ^ static_cast<int>(bval);
        ok = j <= max_lane;
        break;  // bfly
      default:
        j = min_lane | static_cast<int>(bval & ~segmask);
        ok = j <= max_lane;
        break;  // idx
    }
    if (!ok || j < 0 || j > 31) j = lane;
    d[lane] = source[j];
    if (p) p[lane] = ok;
  });
}

// The lanes each lane's vote/match/redux.sync takes part with: its membermask (slot
// in.b) among the lanes executing. Lanes of a warp that run converged may name different
// groups: a cooperative_groups labeled_partition or a tiled partition of a coalesced
// group. Calls `each(group, lanes)` once per distinct group with the lanes naming it.
template <typename Each>
void ForMemberGroups(Warp& w, const Inst& in, uint32_t mask, Each each) {
  if (in.b < 0) {
    each(mask, mask);
    return;
  }
  const uint64_t* members = w.R(in.b);
  uint32_t left = mask;
  while (left != 0) {
    const uint32_t group = static_cast<uint32_t>(members[std::countr_zero(left)]) & mask;
    uint32_t lanes = 0;
    ForLanes(left, [&](int l) {
      if ((static_cast<uint32_t>(members[l]) & mask) == group) lanes |= 1u << l;
    });
    each(group, lanes);
    left &= ~lanes;
  }
}

// vote.sync.{all,any,uni,ballot} d, a, membermask: mode 0 all, 1 any, 2 uni, 3 ballot;
// flag: !a. Over the lanes of each lane's membermask (a ballot has 0 for the others).
void HVote(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  bool negate = in.flags & kFlagSigned;
  uint32_t ballot = 0;
  ForLanes(mask, [&](int l) { ballot |= static_cast<uint32_t>(((a[l] & 1) != 0) != negate) << l; });
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    const uint32_t votes = ballot & group;
    uint64_t r;
    switch (in.mode) {
      case 0: r = votes == group; break;
      case 1: r = votes != 0; break;
      case 2: r = votes == 0 || votes == group; break;
      default: r = votes; break;
    }
    ForLanes(lanes, [&](int l) { d[l] = r; });
  });
}

// match.any/all.sync.b32/b64 d[|p], a, membermask: among each lane's membermask.
void HMatch(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* p = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  uint64_t keep = in.width == 8 ? ~0ull : 0xffffffffull;
  uint64_t values[32];
  ForLanes(mask, [&](int l) { values[l] = a[l] & keep; });
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    bool all_same = true;
    uint32_t first = group ? static_cast<uint32_t>(std::countr_zero(group)) : 0;
    ForLanes(group, [&](int l) { all_same &= values[l] == values[first]; });
    ForLanes(lanes, [&](int l) {
      if (in.mode == 0) {
        uint32_t same = 0;
        ForLanes(group, [&](int k) { same |= static_cast<uint32_t>(values[k] == values[l]) << k; });
        d[l] = same;
      } else {
        d[l] = all_same ? group : 0;
        if (p) p[l] = all_same;
      }
    });
  });
}

// redux.sync (sm_80): every lane gets the reduction over the lanes of its membermask of the
// 32-bit values: mode 0 add, 1 min, 2 max, 3 and, 4 or, 5 xor; mode2 1: signed min/max.
void HRedux(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForMemberGroups(w, in, mask, [&](uint32_t group, uint32_t lanes) {
    uint32_t acc = in.mode == 1   ? (in.mode2 ? 0x7fffffffu : 0xffffffffu)
                   : in.mode == 2 ? (in.mode2 ? 0x80000000u : 0u)
                   : in.mode == 3 ? 0xffffffffu
                                  : 0u;
    ForLanes(group, [&](int l) {
      uint32_t v = static_cast<uint32_t>(a[l]);
      switch (in.mode) {
        case 0: acc += v; break;
        case 1:
          acc = in.mode2 ? static_cast<uint32_t>(
                               std::min(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                         : std::min(acc, v);
          break;
        case 2:
          acc = in.mode2 ? static_cast<uint32_t>(
                               std::max(static_cast<int32_t>(acc), static_cast<int32_t>(v)))
                         : std::max(acc, v);
          break;
        case 3: acc &= v; break;
        case 4: acc |= v; break;
        default: acc ^= v; break;
      }
    });
    ForLanes(lanes, [&](int l) { d[l] = acc; });
  });
}

void HActivemask(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  ForLanes(mask, [&](int l) { d[l] = mask; });
}

// mode: 0 %clock, 1 %clock64, 2 %globaltimer, 3 %globaltimer_lo, 4
// %globaltimer_hi
void HClock(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t value;
  if (in.mode <= 1) {
    value = w.launch->clock * 4;  // about 4 cycles per warp instruction
    if (in.mode == 0) value &= 0xffffffffu;
  } else {
    value = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count());
    if (in.mode == 3) value &= 0xffffffffu;
    if (in.mode == 4) value >>= 32;
  }
  ForLanes(mask, [&](int l) { d[l] = value; });
}

void HNop(Warp&, const Inst&, uint32_t) {}

// fence.sc beyond the CTA: CTAs on the two worker threads see memory in x86-64's order,
// where a store may wait in the store buffer past a later load; a sequentially consistent
// fence (MFENCE) keeps them in program order, as the PTX memory model asks (a CTA that
// stores its flag, fences and reads the other's must not miss it while the other misses
// its own). Acquire and release orders x86-64 gives without a fence.
void HFenceSc(Warp&, const Inst&, uint32_t) { std::atomic_thread_fence(std::memory_order_seq_cst); }

void HZero(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  ForLanes(mask, [&](int l) { d[l] = 0; });
}

// ---- Device printf
// ------------------------------------------------------------------------

std::string ReadString(Warp& w, uint64_t address, int lane) {
  std::string text;
  for (size_t i = 0; i < 4096; ++i) {
    uint8_t* p = w.Address(Space::kGeneric, address + i, 1, lane);
    if (p == nullptr) {
      if (text.empty()) return "(null)";
      break;
    }
    if (*p == 0) break;
    text.push_back(static_cast<char>(*p));
  }
  return text;
}

std::string FormatPrintf(Warp& w, const std::string& format, uint64_t args, int lane) {
  std::string out;
  uint64_t offset = 0;
  auto fetch = [&](uint32_t size) -> uint64_t {
    offset = (offset + size - 1) / size * size;
    uint64_t value = 0;
    if (args != 0) {
      uint8_t* p = w.Address(Space::kGeneric, args + offset, size, lane);
      if (p != nullptr) std::memcpy(&value, p, size);
    }
    offset += size;
    return value;
  };
  for (size_t i = 0; i < format.size(); ++i) {
    char ch = format[i];
    if (ch != '%') {
      out.push_back(ch);
      continue;
    }
    if (i + 1 < format.size() && format[i + 1] == '%') {
      out.push_back('%');
      ++i;
      continue;
    }
    size_t start = i++;
    while (i < format.size() && std::strchr("-+ #0", format[i])) ++i;
    while (i < format.size() &&
           (std::isdigit(static_cast<unsigned char>(format[i])) || format[i] == '.'))
      ++i;
    int longs = 0;
    bool half = false;
    while (i < format.size() && std::strchr("hlLqjzt", format[i])) {
      if (format[i] == 'l' || format[i] == 'q' || format[i] == 'j' || format[i] == 'z' ||
          format[i] == 't' || format[i] == 'L')
        ++longs;
      if (format[i] == 'h') half = true;
      ++i;
    }
    if (i >= format.size()) break;
    char conversion = format[i];
    std::string spec = format.substr(start, i - start);
    // Strip the length modifiers: we pass host types of our own.
    std::string flags;
    for (char c : spec) {
      if (!std::strchr("hlLqjzt", c)) flags.push_back(c);
    }
    char buffer[512];
    switch (conversion) {
      case 'd':
      case 'i': {
        int64_t v = longs ? static_cast<int64_t>(fetch(8)) : static_cast<int32_t>(fetch(4));
        if (half) v = static_cast<int16_t>(v);
        std::snprintf(buffer, sizeof(buffer), (flags + "lld").c_str(), static_cast<long long>(v));
        break;
      }
      case 'u':
      case 'x':
      case 'X':
      case 'o': {
        uint64_t v = longs ? fetch(8) : static_cast<uint32_t>(fetch(4));
        if (half) v = static_cast<uint16_t>(v);
        std::snprintf(buffer, sizeof(buffer), (flags + "ll" + conversion).c_str(),
                      static_cast<unsigned long long>(v));
        break;
      }
      case 'c':
        std::snprintf(buffer, sizeof(buffer), (flags + "c").c_str(), static_cast<int>(fetch(4)));
        break;
      case 'f':
      case 'F':
      case 'e':
      case 'E':
      case 'g':
      case 'G':
      case 'a':
      case 'A':
        std::snprintf(buffer, sizeof(buffer), (flags + conversion).c_str(),
                      std::bit_cast<double>(fetch(8)));
        break;
      case 's': {
        std::string text = ReadString(w, fetch(8), lane);
        std::snprintf(buffer, sizeof(buffer), (flags + "s").c_str(), text.c_str());
        break;
      }
      case 'p':
        std::snprintf(buffer, sizeof(buffer), "0x%llx", static_cast<unsigned long long>(fetch(8)));
        break;
      default: std::snprintf(buffer, sizeof(buffer), "%s", spec.c_str());
    }
    out += buffer;
  }
  return out;
}

// vprintf(format, args): in.printf_fmt/printf_args = local offsets of the
// call's parameters, in.offset = local offset of the return value (or -1).
void HPrintf(Warp& w, const Inst& in, uint32_t mask) {
  ForLanes(mask, [&](int l) {
    uint8_t* local = w.LocalOf(l);
    uint64_t format_address, args_address;
    std::memcpy(&format_address, local + in.printf_fmt, 8);
    std::memcpy(&args_address, local + in.printf_args, 8);
    std::string format = ReadString(w, format_address, l);
    std::string text = FormatPrintf(w, format, args_address, l);
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
  char text[1024];
  std::snprintf(text, sizeof(text),
                "%s:%u: %s: block: [%u,%u,%u], thread: [%u,%u,%u] Assertion "
                "`%s` failed.\n",
                ReadString(w, file, lane).c_str(), line, ReadString(w, function, lane).c_str(),
                launch.ctaid[0], launch.ctaid[1], launch.ctaid[2], tid % block[0],
                (tid / block[0]) % block[1], tid / (block[0] * block[1]),
                ReadString(w, message, lane).c_str());
  AppendPrintf(&w.launch->printf, text, &w.launch->printf_dropped);
}

// ---- Device-side malloc and free
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
  if (at < kHeapFirstBlock || at % 16 != 0 || at > header->top ||
      header->top - at < kHeapBlockHeader) {
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
        *reinterpret_cast<DeviceHeapBlock*>(heap + rest) =
            DeviceHeapBlock{block->size - need - kHeapBlockHeader, next};
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
  uint8_t* heap = w.Address(Space::kGlobal, static_cast<uint64_t>(in.offset),
                            static_cast<uint32_t>(DeviceHeapSize(in)), lane);
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
// condition's 4-byte slot (remote/client/graph_conditionals.cc), so the call is a store
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

// ---- The device runtime (dynamic parallelism)
// A parameter buffer is a block of the module's heap: this header, then the kernel's
// parameters, which the kernel writes before it launches the buffer.
struct ParamBufferHeader {
  uint64_t magic;
  uint32_t entry;  // index in DecodedKernel::entries
  uint32_t grid[3];
  uint32_t block[3];
  uint32_t shared;
  uint32_t param_size;
  uint32_t reserved;
};
static_assert(sizeof(ParamBufferHeader) == 48);
constexpr uint64_t kParamBufferMagic = 0x6370646275666672ull;
// The device runtime's error numbers (driver_types.h).
constexpr uint32_t kCudaErrorMemoryAllocation = 2;
constexpr uint32_t kCudaErrorInvalidConfiguration = 9;
constexpr uint32_t kCudaErrorLaunchMaxDepthExceeded = 65;
constexpr uint32_t kCudaErrorLaunchPendingCountExceeded = 69;
constexpr uint32_t kCudaErrorNotSupported = 801;
constexpr uint64_t kCudaStreamTailLaunch = 3;
constexpr uint32_t kMaxDeviceLaunchParams = 4096;

// One device-runtime call (DeviceRuntimeCall, by in.aux) for each lane, in lane order.
void HDeviceRuntime(Warp& w, const Inst& in, uint32_t mask) {
  const DecodedKernel& kernel = *w.launch->kernel;
  const DeviceRuntimeCall& call = kernel.device_calls[in.aux];
  const LaunchSpec& spec = *w.launch->spec;
  auto arg64 = [&](int l, int i) {
    uint64_t value = 0;
    std::memcpy(&value, w.LocalOf(l) + call.args[i], 8);
    return value;
  };
  // The call's result; an error is also the thread's last error (cudaGetLastError).
  const uint32_t cta_tag = w.launch->cta_linear + 1;
  auto result32 = [&](int l, uint32_t value) {
    std::memcpy(w.LocalOf(l) + call.result, &value, 4);
    if (value == kSuccess) return;
    const uint32_t last[2] = {value, cta_tag};
    std::memcpy(w.LocalOf(l) + call.last_error, last, 8);
  };
  uint8_t* heap = nullptr;
  const bool needs_heap = call.op == DeviceRuntimeCall::kGetParameterBuffer ||
                          call.op == DeviceRuntimeCall::kLaunchDevice ||
                          call.op == DeviceRuntimeCall::kMalloc ||
                          call.op == DeviceRuntimeCall::kFree;
  if (needs_heap) {
    heap = call.heap == 0
               ? nullptr
               : w.Address(Space::kGlobal, call.heap, static_cast<uint32_t>(call.heap_size),
                           std::countr_zero(mask));
    if (heap == nullptr) {
      w.Fault(call.heap, 16, "device heap");
      return;
    }
  }
  std::unique_lock<std::mutex> heap_lock(device_heap_mu, std::defer_lock);
  if (needs_heap) heap_lock.lock();
  ForLanes(mask, [&](int l) {
    switch (call.op) {
      case DeviceRuntimeCall::kGetParameterBuffer: {
        ParamBufferHeader header{};
        header.magic = kParamBufferMagic;
        const uint64_t function = arg64(l, 0);
        std::memcpy(header.grid, w.LocalOf(l) + call.args[1], 12);
        std::memcpy(header.block, w.LocalOf(l) + call.args[2], 12);
        std::memcpy(&header.shared, w.LocalOf(l) + call.args[3], 4);
        uint64_t buffer = 0;
        for (size_t i = 0; i < kernel.entries.size(); ++i) {
          // A kernel of more than 4 KiB of parameters gets none: queued launches' parameters
          // are held by the agent until they run.
          if (kernel.entries[i].address != function ||
              kernel.entries[i].param_size > kMaxDeviceLaunchParams) {
            continue;
          }
          header.entry = static_cast<uint32_t>(i);
          header.param_size = kernel.entries[i].param_size;
          const uint64_t offset =
              HeapAllocate(heap, call.heap_size, sizeof(header) + header.param_size);
          if (offset != 0) {
            std::memcpy(heap + offset, &header, sizeof(header));
            buffer = call.heap + offset + sizeof(header);
          }
          break;
        }
        std::memcpy(w.LocalOf(l) + call.result, &buffer, 8);  // NULL: no such kernel, or full
        break;
      }
      case DeviceRuntimeCall::kLaunchDevice: {
        const uint64_t buffer = arg64(l, 0), stream = arg64(l, 1);
        ParamBufferHeader header{};
        const uint64_t offset = buffer - call.heap - sizeof(header);
        if (buffer < call.heap + sizeof(header) || offset >= call.heap_size ||
            call.heap_size - offset < sizeof(header)) {
          result32(l, kInvalidValue);  // not a buffer of the device runtime
          return;
        }
        std::memcpy(&header, heap + offset, sizeof(header));
        if (header.magic != kParamBufferMagic || header.entry >= kernel.entries.size() ||
            header.param_size != kernel.entries[header.entry].param_size ||
            call.heap_size - offset - sizeof(header) < header.param_size) {
          result32(l, kInvalidValue);
          return;
        }
        DeviceLaunch launch;
        launch.kernel = kernel.entries[header.entry].name;
        std::memcpy(launch.grid, header.grid, sizeof(launch.grid));
        std::memcpy(launch.block, header.block, sizeof(launch.block));
        launch.dynamic_shared = header.shared;
        launch.tail = stream == kCudaStreamTailLaunch;
        launch.params.assign(heap + offset + sizeof(header),
                             heap + offset + sizeof(header) + header.param_size);
        // The buffer is the device runtime's again once launched.
        std::memset(heap + offset, 0, sizeof(header));
        if (!HeapFree(heap, call.heap_size, offset)) {
          w.Fault(buffer, 1, "launch of a parameter buffer the device heap does not hold");
          return;
        }
        const uint64_t threads = uint64_t{launch.block[0]} * launch.block[1] * launch.block[2];
        if (launch.grid[0] == 0 || launch.grid[1] == 0 || launch.grid[2] == 0 ||
            launch.grid[1] > 65535 || launch.grid[2] > 65535 || threads == 0 || threads > 1024 ||
            launch.block[2] > 64) {
          result32(l, kCudaErrorInvalidConfiguration);
          return;
        }
        if (spec.device_launches == nullptr) {
          result32(l, kCudaErrorNotSupported);
          return;
        }
        if (spec.depth + 1 >= kMaxLaunchDepth) {
          result32(l, kCudaErrorLaunchMaxDepthExceeded);
          return;
        }
        std::lock_guard<std::mutex> lock(spec.device_launches->mu);
        if (spec.device_launches->queued.size() >= kMaxPendingLaunches) {
          result32(l, kCudaErrorLaunchPendingCountExceeded);
          return;
        }
        spec.device_launches->queued.push_back(std::move(launch));
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kGetLastError:
      case DeviceRuntimeCall::kPeekAtLastError: {
        uint32_t last[2] = {0, 0};
        std::memcpy(last, w.LocalOf(l) + call.last_error, 8);
        const uint32_t error = last[1] == cta_tag ? last[0] : kSuccess;
        std::memcpy(w.LocalOf(l) + call.result, &error, 4);
        if (call.op == DeviceRuntimeCall::kGetLastError) {
          std::memset(w.LocalOf(l) + call.last_error, 0, 8);
        }
        break;
      }
      case DeviceRuntimeCall::kStreamCreate: {
        // A stream of the device runtime: a handle only, launches into it run in order.
        const uint64_t where = arg64(l, 0);
        const uint64_t handle = 0x100 + (static_cast<uint64_t>(w.launch->cta_linear) << 5) + l;
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaStreamCreateWithFlags' stream");
          return;
        }
        std::memcpy(target, &handle, 8);
        result32(l, kSuccess);
        break;
      }
      case DeviceRuntimeCall::kStreamDestroy:
        result32(l, kSuccess);
        break;
      case DeviceRuntimeCall::kMalloc: {
        const uint64_t where = arg64(l, 0), bytes = arg64(l, 1);
        uint8_t* target = w.Address(Space::kGeneric, where, 8, l);
        if (target == nullptr) {
          w.Fault(where, 8, "cudaMalloc's pointer");
          return;
        }
        const uint64_t offset = HeapAllocate(heap, call.heap_size, bytes);
        const uint64_t address = offset == 0 ? 0 : call.heap + offset;
        std::memcpy(target, &address, 8);
        result32(l, offset == 0 ? kCudaErrorMemoryAllocation : kSuccess);
        break;
      }
      case DeviceRuntimeCall::kFree: {
        const uint64_t address = arg64(l, 0);
        if (address != 0 && (address < call.heap || address - call.heap >= call.heap_size ||
                             !HeapFree(heap, call.heap_size, address - call.heap))) {
          w.Fault(address, 1, "cudaFree of a pointer device cudaMalloc did not return");
          return;
        }
        result32(l, kSuccess);
        break;
      }
    }
  });
}

// f16/bf16 arithmetic: mode 0 add, 1 sub, 2 mul, 3 fma, 4 neg, 5 abs, 6 min, 7 max,
// 8 setp (width = comparison); vec = halves per register; mode2 = 1 for bf16.
float HalfBitsToFloat(uint16_t bits, bool bf16) {
  return bf16 ? std::bit_cast<float>(static_cast<uint32_t>(bits) << 16) : HalfToFloat(bits);
}
uint16_t FloatToHalfBits(float value, bool bf16) {
  if (!bf16) return FloatToHalf(value);
  uint32_t x = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) return static_cast<uint16_t>((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1);  // round to nearest even
  return static_cast<uint16_t>(x >> 16);
}

// atom/red on 16-bit values and half pairs: .add (and .min, .max, .exch) of f16, f16x2,
// bf16, bf16x2, and .cas/.exch of b16 (atomicCAS on an unsigned short). A compare-and-swap
// on the aligned 32-bit word that holds the value (CTAs may run on two threads). vec: 16-bit
// values (1 or 2); mode2 1: bf16; mode2 2: plain bits (cas, exch).
void HAtom16(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  const uint32_t size = in.vec * 2u;
  const bool bf16 = in.mode2 == 1, bits = in.mode2 == 2;
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
        result = in.mode == kAtomCas ? (old_value == (v & 0xffffu)
                                            ? static_cast<uint32_t>(c[l]) & 0xffffu
                                            : old_value)
                                     : v & 0xffffu;
      } else {
        for (int h = 0; h < in.vec; ++h) {
          float x = HalfBitsToFloat(static_cast<uint16_t>(old_value >> (16 * h)), bf16);
          float y = HalfBitsToFloat(static_cast<uint16_t>(v >> (16 * h)), bf16);
          float r = in.mode == kAtomAdd   ? x + y
                    : in.mode == kAtomMin ? std::fmin(x, y)
                    : in.mode == kAtomMax ? std::fmax(x, y)
                                          : y;
          result |= static_cast<uint32_t>(FloatToHalfBits(r, bf16)) << (16 * h);
        }
      }
      uint32_t new_word = size == 4 ? result : (old_word & keep) | (result << shift);
      if (__atomic_compare_exchange_n(word, &old_word, new_word, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_RELAXED)) {
        break;
      }
    }
    if (d) d[l] = old_value;
  });
}

constexpr uint16_t kCanonicalHalfNaN = 0x7fff;  // f16 and bf16 alike

void HHalf(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = in.b >= 0 ? w.R(in.b) : nullptr;
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  bool bf16 = in.mode2 == 1;
  ForLanes(mask, [&](int l) {
    uint64_t result = 0;
    for (int k = 0; k < in.vec; ++k) {
      auto half = [&](const uint64_t* r) {
        return HalfBitsToFloat(static_cast<uint16_t>(r[l] >> (16 * k)), bf16);
      };
      float x = half(a);
      float y = b ? half(b) : 0.0f;
      float r = 0;
      switch (in.mode) {
        case 0: r = x + y; break;
        case 1: r = x - y; break;
        case 2: r = x * y; break;
        case 3: r = std::fma(x, y, half(c)); break;
        case 4: r = -x; break;
        case 5: r = std::fabs(x); break;
        case 6: r = std::fmin(x, y); break;
        case 7: r = std::fmax(x, y); break;
        case 8:
          r = std::tanh(x);
          break;  // tanh.approx: exact, then rounded
        case 9:
          r = std::exp2(x);
          break;  // ex2.approx
      }
      if ((in.flags & kFlagNaNOperand) && (std::isnan(x) || std::isnan(y))) {
        result |= uint64_t{kCanonicalHalfNaN} << (16 * k);
        continue;
      }
      if (in.flags & kFlagRelu) {
        if (std::isnan(r)) {
          result |= uint64_t{kCanonicalHalfNaN} << (16 * k);
          continue;
        }
        if (r < 0) r = 0;
      }
      if (in.flags & kFlagSat) r = Saturate01(r);
      result |= static_cast<uint64_t>(FloatToHalfBits(r, bf16)) << (16 * k);
    }
    d[l] = result;
  });
}

// setp and set on f16/bf16 sources, one half or two (.x2). mode: the comparison; mode2:
// bit 0 bf16, bits 1-2 the BoolOp with predicate c (1 and, 2 or, 3 xor; kFlagSigned: !c);
// width: what a true result writes (HalfTrue). setp.x2 writes the lower half's result to
// p (d[0]) and the upper's to q (d[1]); scalar setp writes to q the negated comparison,
// combined with c the same way.
enum HalfTrue : uint8_t { kTruePredicate, kTrueAllOnes, kTrueF16, kTrueBF16, kTrueF32 };

void HHalfCompare(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  uint64_t* q = in.d[1] >= 0 ? w.R(in.d[1]) : nullptr;
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = in.c >= 0 ? w.R(in.c) : nullptr;
  const bool bf16 = in.mode2 & 1;
  const uint8_t bool_op = (in.mode2 >> 1) & 3;
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
        case kTrueAllOnes: result |= (in.vec == 2 ? 0xffffull : 0xffffffffull) << (16 * k); break;
        case kTrueF16: result |= uint64_t{0x3c00} << (16 * k); break;
        case kTrueBF16: result |= uint64_t{0x3f80} << (16 * k); break;
        case kTrueF32: result = std::bit_cast<uint32_t>(1.0f); break;
      }
    }
    d[l] = result;
  });
}

// ---- Warp matrix operations (wmma)
//
// A fragment holds E elements in each of the 32 lanes; PTX leaves which matrix element
// each one is to the implementation. Here element e of lane l is element (l * E + e) mod
// (rows * cols) of the matrix in row-major order, whatever the layout in memory: the
// fragments of A and B hold 2 or 4 copies of each element on shapes where E * 32 exceeds
// the matrix, as a GPU's do. Loads and stores go through the ordinary address checks,
// lane by lane; mma gathers the three matrices from every lane's registers, multiplies
// in the precision a tensor core uses (f32 or f16 accumulators summed in f32, f64 in f64,
// integers in 64 bits) and scatters the result.

uint32_t WmmaSize(WmmaType t) {
  switch (t) {
    case WmmaType::kF16:
    case WmmaType::kBF16: return 2;
    case WmmaType::kS8:
    case WmmaType::kU8: return 1;
    case WmmaType::kF64: return 8;
    default: return 4;
  }
}
// Elements in one register of a fragment (16- and 8-bit elements are packed in .b32).
uint32_t WmmaPerRegister(WmmaType t) { return t == WmmaType::kF64 ? 1 : 4 / WmmaSize(t); }

void WmmaShape(const WmmaOp& op, char matrix, uint32_t* rows, uint32_t* cols) {
  *rows = matrix == 'a' ? op.m : matrix == 'b' ? op.k : op.m;
  *cols = matrix == 'a' ? op.k : matrix == 'b' ? op.n : op.n;
}

// Element e of a fragment, as its raw bits (zero-extended).
uint64_t WmmaBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l) {
  uint32_t per = WmmaPerRegister(t);
  uint64_t word = w.R(fragment[e / per])[l];
  if (per == 1) return t == WmmaType::kF64 ? word : word & 0xffffffffu;
  uint32_t bits = 8 * WmmaSize(t);
  return (word >> ((e % per) * bits)) & ((uint64_t{1} << bits) - 1);
}

void WmmaSetBits(Warp& w, const std::vector<int32_t>& fragment, WmmaType t, uint32_t e, int l,
                 uint64_t value) {
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

double WmmaValue(uint64_t bits, WmmaType t) {
  switch (t) {
    case WmmaType::kF16: return HalfToFloat(static_cast<uint16_t>(bits));
    case WmmaType::kBF16: return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
    case WmmaType::kTF32:  // the low 13 mantissa bits take no part
      return std::bit_cast<float>(static_cast<uint32_t>(bits) & ~0x1fffu);
    case WmmaType::kF32: return std::bit_cast<float>(static_cast<uint32_t>(bits));
    case WmmaType::kF64: return std::bit_cast<double>(bits);
    case WmmaType::kS8: return static_cast<int8_t>(bits);
    case WmmaType::kU8: return static_cast<uint8_t>(bits);
    case WmmaType::kS32: return static_cast<int32_t>(bits);
  }
  return 0;
}

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

// mma.sync's fragments (ptx_layout): the row-major index in its matrix of element e of
// lane l, as PTX's figures place them (groupID = lane / 4, threadID_in_group = lane % 4).
// matrix 0 d, 1 a, 2 b, 3 c; the shapes the decoder accepts: m16n8k16 and m16n8k8 of
// f16/bf16, m16n8k8 of tf32, m8n8k4 of f64.
uint32_t MmaIndex(const WmmaOp& op, int matrix, uint32_t e, uint32_t l) {
  const uint32_t g = l >> 2, t = l & 3;
  const WmmaType type = op.types[1];
  uint32_t row, col, cols;
  if (type == WmmaType::kF64) {  // m8n8k4
    if (matrix == 1) return g * 4 + t;
    if (matrix == 2) return t * 8 + g;
    return g * 8 + t * 2 + e;
  }
  if (matrix == 0 || matrix == 3) {  // 16 x 8
    row = g + 8 * (e >> 1);
    col = t * 2 + (e & 1);
    cols = 8;
  } else if (type == WmmaType::kTF32) {  // m16n8k8
    if (matrix == 1) {
      row = g + 8 * (e & 1);
      col = t + 4 * (e >> 1);
      cols = 8;
    } else {
      row = t + 4 * e;
      col = g;
      cols = 8;
    }
  } else if (matrix == 1) {  // A, 16 x k
    row = g + 8 * ((e >> 1) & 1);
    col = t * 2 + (e & 1) + 8 * (e >> 2);
    cols = op.k;
  } else {  // B, k x 8
    row = t * 2 + (e & 1) + 8 * (e >> 1);
    col = g;
    cols = 8;
  }
  return row * cols + col;
}

// wmma.mma and mma.sync: D = A * B + C over the whole warp.
void HWmmaMma(Warp& w, const Inst& in, uint32_t mask) {
  const WmmaOp& op = w.launch->kernel->wmma[in.aux];
  const uint32_t m = op.m, n = op.n, k = op.k;
  // Largest shape: 32x8x16 / 16x16x16 (256 elements of C, 512 of A or B).
  double a[512], b[512], c[256];
  auto gather = [&](int which, uint32_t count, double* out) {
    const WmmaType t = op.types[which];
    const uint32_t elements =
        static_cast<uint32_t>(op.fragments[which].size()) * WmmaPerRegister(t);
    for (int l = 0; l < 32; ++l) {
      for (uint32_t e = 0; e < elements; ++e) {
        uint32_t index = op.ptx_layout ? MmaIndex(op, which, e, static_cast<uint32_t>(l))
                                       : (static_cast<uint32_t>(l) * elements + e) % count;
        out[index] = WmmaValue(WmmaBits(w, op.fragments[which], t, e, l), t);
      }
    }
  };
  gather(1, m * k, a);
  gather(2, k * n, b);
  gather(3, m * n, c);
  const WmmaType dt = op.types[0];
  uint64_t result[256];
  for (uint32_t i = 0; i < m; ++i) {
    for (uint32_t j = 0; j < n; ++j) {
      uint64_t bits;
      if (dt == WmmaType::kS32) {
        int64_t sum = static_cast<int64_t>(c[i * n + j]);
        for (uint32_t q = 0; q < k; ++q) {
          sum += static_cast<int64_t>(a[i * k + q]) * static_cast<int64_t>(b[q * n + j]);
        }
        if (op.satfinite) {
          sum = std::clamp<int64_t>(sum, std::numeric_limits<int32_t>::min(),
                                    std::numeric_limits<int32_t>::max());
        }
        bits = static_cast<uint32_t>(static_cast<uint64_t>(sum));
      } else if (dt == WmmaType::kF64) {
        double sum = c[i * n + j];
        for (uint32_t q = 0; q < k; ++q) sum = std::fma(a[i * k + q], b[q * n + j], sum);
        bits = std::bit_cast<uint64_t>(sum);
      } else {
        float sum = static_cast<float>(c[i * n + j]);
        for (uint32_t q = 0; q < k; ++q) {
          sum = std::fma(static_cast<float>(a[i * k + q]), static_cast<float>(b[q * n + j]), sum);
        }
        if (op.satfinite && std::isinf(sum)) {
          sum = std::copysign(dt == WmmaType::kF16 ? 65504.0f : std::numeric_limits<float>::max(),
                              sum);
        }
        bits = dt == WmmaType::kF16 ? FloatToHalf(sum) : std::bit_cast<uint32_t>(sum);
      }
      result[i * n + j] = bits;
    }
  }
  const uint32_t elements = static_cast<uint32_t>(op.fragments[0].size()) * WmmaPerRegister(dt);
  ForLanes(mask, [&](int l) {
    for (uint32_t e = 0; e < elements; ++e) {
      uint32_t index = op.ptx_layout ? MmaIndex(op, 0, e, static_cast<uint32_t>(l))
                                     : (static_cast<uint32_t>(l) * elements + e) % (m * n);
      WmmaSetBits(w, op.fragments[0], dt, e, l, result[index]);
    }
  });
}

// cvt.rna.tf32.f32 (and .rn, .rz): f32 to TF32 (10 mantissa bits), kept in a .b32 with
// the low 13 bits clear. mode 0 rna (ties away from zero), 1 rn (ties to even), 2 rz.
void HCvtTf32(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  ForLanesIndependent(mask, [&](int l) {
    uint32_t x = static_cast<uint32_t>(a[l]);
    if ((x & 0x7f800000u) != 0x7f800000u) {  // NaN and infinity pass unchanged
      if (in.mode == 0) x += 0x1000u;
      if (in.mode == 1) x += 0xfffu + ((x >> 13) & 1);
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
      from_source = (in.flags & kFlagSigned)
                        ? ((size[l] & 1) != 0 ? 0u : in.width)
                        : static_cast<uint32_t>(std::min<uint64_t>(size[l], in.width));
    }
    uint64_t to = dst[l] + static_cast<uint64_t>(in.offset);
    uint64_t from =
        src[l] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.aux)));
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
// on one thread, so the operations need no atomics. mode: 0 init [a], b; 1 arrive d, [a],
// b (count); 2 arrive_drop (the same, and the expected count drops by b too); 3 test_wait
// d, [a], b (a state from arrive); 4 test_wait.parity d, [a], b (a phase parity); 5 inval
// [a]; 6 pending_count d, b (from a state). A state is the object as the arrival left it,
// with the phase the arrival was made in. try_wait runs as test_wait: a warp that waits
// loops, and the CTA's other warps get their turns.
constexpr uint64_t kMbarPhase = uint64_t{1} << 63;
constexpr uint64_t kMbarCount = 0x7fffffffu;

void HMbarrier(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = in.a >= 0 ? w.R(in.a) : nullptr;  // none for pending_count
  const uint64_t* b = in.b >= 0 ? w.R(in.b) : nullptr;
  uint64_t* d = in.d[0] >= 0 ? w.R(in.d[0]) : nullptr;
  ForLanes(mask, [&](int l) {
    if (in.mode == 6) {
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
      case 0: {
        uint64_t count = b[l] & kMbarCount;
        object = (count << 32) | count;
        break;
      }
      case 1:
      case 2: {
        uint64_t count = b != nullptr ? b[l] & kMbarCount : 1;
        uint64_t left = pending > count ? pending - count : 0;
        uint64_t keep = in.mode == 2 && expected > count ? expected - count
                        : in.mode == 2                   ? 0
                                                         : expected;
        if (d != nullptr) d[l] = phase | left;
        object = left == 0 ? ((phase ^ kMbarPhase) | (keep << 32) | keep)
                           : (phase | (keep << 32) | left);
        break;
      }
      case 3: d[l] = (b[l] & kMbarPhase) != phase; return;
      case 4: d[l] = ((b[l] & 1) != 0) != (phase != 0); return;
      default: object = 0; break;
    }
    std::memcpy(p, &object, 8);
  });
}

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {d...}, [a]: vec 8x8 matrices
// of 16-bit elements; row r of matrix j starts at the address lane 8j + r gives. Lane l
// receives in register j the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of
// matrix j, or with .trans (flag signed) the elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4).
void HLdmatrix(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  uint64_t rows[32];
  for (int l = 0; l < 32; ++l) rows[l] = a[l] + static_cast<uint64_t>(in.offset);
  const bool transpose = (in.flags & kFlagSigned) != 0;
  ForLanes(mask, [&](int l) {
    for (int j = 0; j < in.vec; ++j) {
      uint32_t word = 0;
      for (int h = 0; h < 2; ++h) {
        const int row = transpose ? 2 * (l % 4) + h : l / 4;
        const int col = transpose ? l / 4 : 2 * (l % 4) + h;
        const uint64_t address = rows[8 * j + row] + 2 * static_cast<uint64_t>(col);
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

// ---- Texture and surface hook (texture.h samples; this reads and writes the lanes'
// registers). Inst: aux the packed texture::Op, a the handle, b, c, e and `offset` the
// coordinate slots (-1: none), d[] the destinations (sust: the values stored).
void HTexture(Warp& w, const Inst& in, uint32_t mask) {
  const texture::Op op = texture::Unpack(in.aux);
  const texture::Memory memory{&w, [](void* context, uint64_t address, uint32_t size) {
                                 return static_cast<Warp*>(context)->Global(address, size);
                               }};
  const int32_t coordinate_slots[4] = {in.b, in.c, in.e, static_cast<int32_t>(in.offset)};
  texture::DescriptorCache cache;
  ForLanes(mask, [&](int l) {
    uint64_t coords[4] = {0, 0, 0, 0}, values[4] = {0, 0, 0, 0};
    for (int i = 0; i < 4; ++i) {
      if (coordinate_slots[i] >= 0) coords[i] = w.R(coordinate_slots[i])[l];
    }
    if (op.kind == texture::Kind::kSust) {
      for (int i = 0; i < op.vec; ++i) values[i] = w.R(in.d[i])[l];
    }
    texture::Fault fault;
    if (!texture::RunLane(op, memory, w.R(in.a)[l], coords, values, &fault, &cache)) {
      w.Fault(fault.address, fault.size, fault.what);
      return;
    }
    if (op.kind == texture::Kind::kSust) return;
    for (int i = 0; i < 4; ++i) {
      if (in.d[i] >= 0) w.R(in.d[i])[l] = values[i];
    }
  });
}
// ---- End of the texture and surface hook

// ---- Handler tables
// -----------------------------------------------------------------------

enum Ty : uint8_t {
  kU8,
  kU16,
  kU32,
  kU64,
  kS8,
  kS16,
  kS32,
  kS64,
  kF16,
  kF32,
  kF64,
  kPred,
  kF16x2,  // two halves in a .b32
  kBF16,
  kBF16x2,
  kNoType
};

Ty ParseType(const std::string& t) {
  if (t == "u8" || t == "b8") return kU8;
  if (t == "u16" || t == "b16") return kU16;
  if (t == "u32" || t == "b32") return kU32;
  if (t == "u64" || t == "b64") return kU64;
  if (t == "s8") return kS8;
  if (t == "s16") return kS16;
  if (t == "s32") return kS32;
  if (t == "s64") return kS64;
  if (t == "f16") return kF16;
  if (t == "bf16") return kBF16;
  if (t == "f16x2") return kF16x2;
  if (t == "bf16x2") return kBF16x2;
  if (t == "f32") return kF32;
  if (t == "f64") return kF64;
  if (t == "pred") return kPred;
  return kNoType;
}
int TySize(Ty t) {
  switch (t) {
    case kU8:
    case kS8: return 1;
    case kU16:
    case kS16:
    case kF16:
    case kBF16: return 2;
    case kF16x2:
    case kBF16x2: return 4;
    case kU32:
    case kS32:
    case kF32: return 4;
    case kPred: return 1;
    case kNoType: return 0;
    default: return 8;
  }
}
bool TySigned(Ty t) { return t == kS8 || t == kS16 || t == kS32 || t == kS64; }
bool TyFloat(Ty t) { return t == kF16 || t == kF32 || t == kF64 || t == kBF16; }
bool TyHalf(Ty t) { return t == kF16 || t == kF16x2 || t == kBF16 || t == kBF16x2; }

template <template <typename> class H>
Handler ByIntType(Ty t) {
  switch (t) {
    case kU8: return &H<uint8_t>::run;
    case kU16: return &H<uint16_t>::run;
    case kU32: return &H<uint32_t>::run;
    case kU64: return &H<uint64_t>::run;
    case kS8: return &H<int8_t>::run;
    case kS16: return &H<int16_t>::run;
    case kS32: return &H<int32_t>::run;
    case kS64: return &H<int64_t>::run;
    case kPred: return &H<uint8_t>::run;
    default: return nullptr;
  }
}
template <template <typename> class H>
Handler ByType(Ty t) {
  if (t == kF32) return &H<float>::run;
  if (t == kF64) return &H<double>::run;
  return ByIntType<H>(t);
}

#define GPUPOOL_WRAP_BIN(NAME, OP)                                                     \
  template <typename T>                                                                \
  struct NAME {                                                                        \
    static void run(Warp& w, const Inst& in, uint32_t m) { HBinary<T, OP>(w, in, m); } \
  };
GPUPOOL_WRAP_BIN(WAdd, kAdd)
GPUPOOL_WRAP_BIN(WSub, kSub)
GPUPOOL_WRAP_BIN(WMul, kMul)
GPUPOOL_WRAP_BIN(WMulHi, kMulHi)
GPUPOOL_WRAP_BIN(WDiv, kDiv)
GPUPOOL_WRAP_BIN(WRem, kRem)
GPUPOOL_WRAP_BIN(WMin, kMin)
GPUPOOL_WRAP_BIN(WMax, kMax)

// add, sub, mul, fma, div, sqrt and rcp on f32/f64 with .rz, .rm or .rp (__fadd_rz,
// __dmul_ru, __fdiv_rd, __fsqrt_ru...): the round-to-nearest handler (DecodedKernel::
// inner[in.aux]) run with the host's rounding mode set to kMode, then set back. The
// handler reads its operands after fesetround and stores its results before the second
// call (opaque calls that may touch memory), so the host operations fall in between.
template <int kMode>
void HDirectedRounding(Warp& w, const Inst& in, uint32_t mask) {
  const int saved = std::fegetround();
  std::fesetround(kMode);
  w.launch->kernel->inner[in.aux](w, in, mask);
  std::fesetround(saved);
}

// Integer dot products and SIMD absolute differences on bytes (sm_61 __dp4a, __dp2a_lo/hi;
// __vabsdiffu4 and __vsads4 through vabsdiff4, __vsadu2 through vabsdiff2). mode: 0 dp4a,
// 1 dp2a.lo, 2 dp2a.hi, 3 vabsdiff4 (per-byte |a - b| in d's bytes), 4 vabsdiff4.add (c +
// their sum), 5 vabsdiff2 (per-halfword, in d's halves), 6 vabsdiff2.add; mode2: bit 0
// a's elements signed, bit 1 b's, bit 2 .sat into a signed d (an element over its signed
// maximum, 127 or 32767, becomes that maximum).
void HByteDot(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  const uint64_t* c = w.R(in.c);
  const bool a_signed = in.mode2 & 1, b_signed = in.mode2 & 2, saturate = in.mode2 & 4;
  auto element = [](uint32_t word, int index, int bits, bool is_signed) -> int32_t {
    uint32_t v = (word >> (index * bits)) & ((1u << bits) - 1);
    if (is_signed && (v >> (bits - 1))) return static_cast<int32_t>(v) - (1 << bits);
    return static_cast<int32_t>(v);
  };
  ForLanes(mask, [&](int l) {
    const uint32_t x = static_cast<uint32_t>(a[l]), y = static_cast<uint32_t>(b[l]);
    uint32_t acc = static_cast<uint32_t>(c[l]);
    switch (in.mode) {
      case 0:
        for (int i = 0; i < 4; ++i)
          acc += static_cast<uint32_t>(element(x, i, 8, a_signed) * element(y, i, 8, b_signed));
        break;
      case 1:
      case 2:
        for (int i = 0; i < 2; ++i) {
          acc += static_cast<uint32_t>(element(x, i, 16, a_signed) *
                                       element(y, i + (in.mode == 2 ? 2 : 0), 8, b_signed));
        }
        break;
      case 3:
        acc = 0;
        for (int i = 0; i < 4; ++i) {
          int32_t diff = std::abs(element(x, i, 8, a_signed) - element(y, i, 8, b_signed));
          if (saturate) diff = std::min(diff, 127);
          acc |= static_cast<uint32_t>(diff & 0xff) << (8 * i);
        }
        break;
      case 4:
        for (int i = 0; i < 4; ++i)
          acc += static_cast<uint32_t>(
              std::abs(element(x, i, 8, a_signed) - element(y, i, 8, b_signed)));
        break;
      case 5:
        acc = 0;
        for (int i = 0; i < 2; ++i) {
          int32_t diff = std::abs(element(x, i, 16, a_signed) - element(y, i, 16, b_signed));
          if (saturate) diff = std::min(diff, 32767);
          acc |= static_cast<uint32_t>(diff & 0xffff) << (16 * i);
        }
        break;
      case 6:
        for (int i = 0; i < 2; ++i)
          acc += static_cast<uint32_t>(
              std::abs(element(x, i, 16, a_signed) - element(y, i, 16, b_signed)));
        break;
    }
    d[l] = acc;
  });
}

// min.NaN.f32 / max.NaN.f32: the canonical NaN when an operand is NaN, else min or max.
template <bool kIsMax>
void HMinMaxNaN(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t* d = w.R(in.d[0]);
  const uint64_t* a = w.R(in.a);
  const uint64_t* b = w.R(in.b);
  ForLanes(mask, [&](int l) {
    float x = Get<float>(a[l]), y = Get<float>(b[l]);
    if (std::isnan(x) || std::isnan(y)) {
      d[l] = 0x7fffffffu;
      return;
    }
    d[l] = Put<float>(FixFloat(kIsMax ? std::fmax(x, y) : std::fmin(x, y), in.flags));
  });
}
GPUPOOL_WRAP_BIN(WAnd, kAnd)
GPUPOOL_WRAP_BIN(WOr, kOr)
GPUPOOL_WRAP_BIN(WXor, kXor)
GPUPOOL_WRAP_BIN(WShl, kShl)
GPUPOOL_WRAP_BIN(WShr, kShr)
GPUPOOL_WRAP_BIN(WCopysign, kCopysign)
GPUPOOL_WRAP_BIN(WMul24, kMul24)
GPUPOOL_WRAP_BIN(WMul24Hi, kMul24Hi)
#undef GPUPOOL_WRAP_BIN

#define GPUPOOL_WRAP_UN(NAME, OP)                                                     \
  template <typename T>                                                               \
  struct NAME {                                                                       \
    static void run(Warp& w, const Inst& in, uint32_t m) { HUnary<T, OP>(w, in, m); } \
  };
GPUPOOL_WRAP_UN(WMov, kMov)
GPUPOOL_WRAP_UN(WNeg, kNeg)
GPUPOOL_WRAP_UN(WAbs, kAbs)
GPUPOOL_WRAP_UN(WNot, kNot)
GPUPOOL_WRAP_UN(WCnot, kCnot)
GPUPOOL_WRAP_UN(WBrev, kBrev)
GPUPOOL_WRAP_UN(WSqrt, kSqrt)
GPUPOOL_WRAP_UN(WRsqrt, kRsqrt)
GPUPOOL_WRAP_UN(WRcp, kRcp)
GPUPOOL_WRAP_UN(WSin, kSin)
GPUPOOL_WRAP_UN(WCos, kCos)
GPUPOOL_WRAP_UN(WLg2, kLg2)
GPUPOOL_WRAP_UN(WEx2, kEx2)
GPUPOOL_WRAP_UN(WTanh, kTanh)
#undef GPUPOOL_WRAP_UN

#define GPUPOOL_WRAP(NAME, FN)                                                \
  template <typename T>                                                       \
  struct NAME {                                                               \
    static void run(Warp& w, const Inst& in, uint32_t m) { FN<T>(w, in, m); } \
  };
GPUPOOL_WRAP(WSetp, HSetp)
GPUPOOL_WRAP(WSet, HSet)
GPUPOOL_WRAP(WAtom, HAtom)
GPUPOOL_WRAP(WBfe, HBfe)
GPUPOOL_WRAP(WBfi, HBfi)
GPUPOOL_WRAP(WSad, HSad)
GPUPOOL_WRAP(WCarry, HCarry)
GPUPOOL_WRAP(WMad24, HMad24)
#undef GPUPOOL_WRAP
template <typename T>
struct WMadLo {
  static void run(Warp& w, const Inst& in, uint32_t m) { HMad<T, 0>(w, in, m); }
};
template <typename T>
struct WMadHi {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (sizeof(T) >= 2)
      HMad<T, 1>(w, in, m);
    else
      HMad<T, 0>(w, in, m);
  }
};
template <typename T>
struct WFma {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (std::is_floating_point_v<T>)
      HMad<T, 2>(w, in, m);
    else
      HMad<T, 0>(w, in, m);
  }
};
template <typename T>
struct WMulWide {
  static void run(Warp& w, const Inst& in, uint32_t m) {
    if constexpr (sizeof(T) == 2 || sizeof(T) == 4) HMulWide<T>(w, in, m);
  }
};
template <typename T>
struct WPopc {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kPopc>(w, in, m); }
};
template <typename T>
struct WClz {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kClz>(w, in, m); }
};
template <typename T>
struct WBfind {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kBfind>(w, in, m); }
};
template <typename T>
struct WBfindShift {
  static void run(Warp& w, const Inst& in, uint32_t m) { HCount<T, kBfindShift>(w, in, m); }
};
template <typename T>
struct WNotPred {
  static void run(Warp& w, const Inst& in, uint32_t m) { HUnary<T, kNotPred>(w, in, m); }
};

// ---- Decoder
// ------------------------------------------------------------------------------

struct Symbol {
  Space space;
  uint64_t value;  // address in its own space
};

std::vector<std::string> Split(const std::string& opcode) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (start <= opcode.size()) {
    size_t dot = opcode.find('.', start);
    if (dot == std::string::npos) dot = opcode.size();
    parts.push_back(opcode.substr(start, dot - start));
    start = dot + 1;
  }
  return parts;
}

// ---- Hoisting
// -----------------------------------------------------------------------------

// Takes out of a decoded kernel's instruction stream what needs no running per CTA:
// 1. Copies: a `mov` into a register that nothing else writes, from a slot that no
//    instruction writes (an immediate, a special register such as %ctaid): its readers
//    read the source slot instead.
// 2. Invariants: a pure, unguarded instruction (Inst::pure) whose destinations nothing
//    else writes and whose sources are the same in every CTA of the launch (immediates,
//    kernel parameters, %tid, %ntid, %nctaid, %laneid, ... and earlier invariants) moves
//    to the prologue, which each warp runs once before its worker's first CTA. Warps keep
//    their registers from one CTA to the next, so the value is there in every CTA.
// Saxpy's 19 instructions per thread become 11 (docs/ptx-engine.md). A register read
// before its only write (undefined in PTX) may see the value of that write.
void Hoist(DecodedKernel* k) {
  const size_t n = k->code.size();
  const size_t slots = k->slot_count;
  std::vector<uint32_t> writes(slots, 0);
  for (const Inst& in : k->code) {
    for (int32_t d : in.d) {
      if (d >= 0) ++writes[d];  // a store's data too: fewer candidates, never a wrong one
    }
  }
  // The fragments of wmma instructions are in k->wmma, not in their Inst: counted as written
  // many times, they are never renamed or hoisted.
  for (const WmmaOp& op : k->wmma) {
    for (const std::vector<int32_t>& fragment : op.fragments) {
      for (int32_t slot : fragment) writes[slot] = UINT32_MAX;
    }
  }
  if (k->carry_slot >= 0) writes[k->carry_slot] = UINT32_MAX;
  std::map<int32_t, uint64_t> constant_value;
  std::vector<bool> invariant(slots, false);
  for (const auto& [slot, value] : k->constants) {
    constant_value[slot] = value;
    invariant[slot] = true;
  }
  auto mark = [&](int32_t slot) {
    if (slot >= 0) invariant[slot] = true;
  };
  for (int axis = 0; axis < 3; ++axis) {
    mark(k->tid[axis]);
    mark(k->ntid[axis]);
    mark(k->nctaid[axis]);
  }
  for (int32_t slot : {k->laneid, k->warpid, k->nwarpid, k->nsmid, k->gridid, k->lanemask_eq,
                       k->lanemask_lt, k->lanemask_le, k->lanemask_gt, k->lanemask_ge}) {
    mark(slot);
  }
  for (int32_t slot : k->envreg) mark(slot);

  std::vector<bool> removed(n, false);
  // 1. Copies.
  std::vector<int32_t> rename(slots, -1);
  for (size_t i = 0; i < n; ++i) {
    const Inst& in = k->code[i];
    if (in.run != &WMov<uint64_t>::run || in.guard >= 0 || in.flow != Flow::kNext) continue;
    if (in.d[0] < 0 || in.a < 0 || in.a == in.d[0]) continue;
    if (writes[in.d[0]] != 1 || writes[in.a] != 0) continue;
    rename[in.d[0]] = in.a;
    removed[i] = true;
  }
  auto renamed = [&](int32_t* slot) {
    if (*slot >= 0 && rename[*slot] >= 0) *slot = rename[*slot];
  };
  for (size_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    Inst& in = k->code[i];
    renamed(&in.a);
    renamed(&in.b);
    renamed(&in.c);
    renamed(&in.e);
    renamed(&in.guard);
  }

  // 2. Invariants, in an order where each one's sources come first.
  auto hoistable = [&](const Inst& in) {
    if (!in.pure || in.guard >= 0 || in.flow != Flow::kNext) return false;
    for (int32_t d : in.d) {
      if (d >= 0 && writes[d] != 1) return false;
    }
    for (int32_t source : {in.a, in.b, in.c, in.e}) {
      if (source >= 0 && !invariant[source]) return false;
    }
    if (in.uniform_address) {  // ld.param: inside the kernel's parameters
      auto found = constant_value.find(in.a);
      if (found == constant_value.end()) return false;
      uint64_t at = found->second + static_cast<uint64_t>(in.offset);
      uint64_t bytes = uint64_t{in.width} * in.vec;
      if (at > k->param_size || bytes > k->param_size - at) return false;
    }
    return true;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < n; ++i) {
      if (removed[i] || !hoistable(k->code[i])) continue;
      k->prologue.push_back(k->code[i]);
      for (int32_t d : k->code[i].d) mark(d);
      removed[i] = true;
      changed = true;
    }
  }

  // The rest, with branch targets moved to the next instruction kept.
  std::vector<int32_t> new_index(n + 1, 0);
  int32_t kept = 0;
  for (size_t i = 0; i < n; ++i) {
    new_index[i] = kept;
    if (!removed[i]) ++kept;
  }
  new_index[n] = kept;
  std::vector<Inst> code;
  code.reserve(static_cast<size_t>(kept));
  for (size_t i = 0; i < n; ++i) {
    if (removed[i]) continue;
    Inst in = k->code[i];
    if (in.target >= 0) in.target = new_index[static_cast<size_t>(in.target)];
    code.push_back(in);
  }
  k->code = std::move(code);
}

class Decoder {
 public:
  Decoder(const ParsedModule& module, const std::map<std::string, uint64_t>& addresses,
          DecodedKernel* kernel)
      : module_(module), addresses_(addresses), k_(kernel) {}

  // A kernel's parameters' offsets, by natural alignment; returns their bytes (what a
  // launch of it, from the host or from a kernel, passes).
  static uint64_t ParamLayout(const RawFunction& entry, std::vector<uint64_t>* offsets) {
    uint64_t offset = 0;
    for (const RawParam& param : entry.params) {
      offset = (offset + param.align - 1) / param.align * param.align;
      if (offsets != nullptr) offsets->push_back(offset);
      offset += param.size;
    }
    return offset;
  }

  Status Run(const RawFunction& entry) {
    k_->name = entry.name;
    std::vector<uint64_t> offsets;
    const uint64_t param_bytes = ParamLayout(entry, &offsets);
    // CUDA 12.1 on allows 32,764 bytes of kernel parameters; more (a size from a job's
    // PTX) would not fit the 32 bits a launch carries them in.
    if (param_bytes > kMaxParamBytes) {
      return Status::InvalidArgument("kernel " + entry.name + " declares " +
                                     std::to_string(param_bytes) +
                                     " bytes of parameters: more than " +
                                     std::to_string(kMaxParamBytes));
    }
    k_->param_size = static_cast<uint32_t>(param_bytes);
    for (size_t i = 0; i < entry.params.size(); ++i) {
      symbols_[entry.params[i].name] = Symbol{Space::kParam, offsets[i]};
    }
    // Module-level static shared variables are placed when the kernel first names them
    // (SymbolValue); dynamic shared memory comes after all static.
    for (const SharedVariable& var : module_.shared) {
      if (!var.is_extern) unplaced_shared_[var.name] = &var;
    }
    for (const ModuleVariable& var : module_.variables) {
      auto found = addresses_.find(var.name);
      symbols_[var.name] = Symbol{Space::kGlobal, found == addresses_.end() ? 0 : found->second};
      if (var.is_const && !var.is_declaration) k_->const_bytes += var.size;
    }
    k_->max_threads = entry.max_threads;
    // Device functions as values (mov.u64 %rd, f): their addresses.
    // Kernels too: a device-side launch names its kernel by address.
    for (const auto& [name, function] : module_.functions) {
      if (function.has_body)
        symbols_[name] = Symbol{Space::kGlobal, FunctionAddress(module_, name)};
    }
    for (const std::string& name : module_.unsupported_symbols) unsupported_symbols_.insert(name);
    k_->carry_slot = NewSlot();
    zero_slot_ = Constant(0);
    GPUPOOL_RETURN_IF_ERROR(Emit(entry, "", {}, -1, 0));
    k_->declared_shared = shared_size_;
    // Dynamic shared memory starts after the static variables.
    shared_size_ = (shared_size_ + 15) / 16 * 16;
    for (auto [slot, name] : dynamic_shared_constants_)
      k_->constants.push_back({slot, shared_size_});
    k_->static_shared = shared_size_;
    k_->local_size = (local_size_ + 15) / 16 * 16;
    // The layout the JIT tier takes as it is (jit/jit.h, SharedLayout).
    for (const auto& [name, symbol] : symbols_) {
      if (symbol.space == Space::kShared) k_->shared_layout.offsets[name] = symbol.value;
    }
    k_->shared_layout.size = k_->static_shared;
    for (auto& [index, label] : fixups_) {
      auto found = labels_.find(label);
      if (found == labels_.end()) return Status::InvalidArgument("PTX: unknown label " + label);
      k_->code[index].target = found->second;
    }
    // A final exit so that falling off the end ends the threads.
    Inst exit;
    exit.flow = Flow::kExit;
    exit.run = &HNop;
    k_->code.push_back(exit);
    k_->slot_count = static_cast<uint32_t>(next_slot_);
    Hoist(k_);
    return Status::OK();
  }

 private:
  struct Frame {
    std::string prefix;
    std::map<std::string, std::string> alias;  // callee param name -> caller's variable
    std::set<std::string> locals;              // names declared in this body
    std::string return_label;                  // "" at kernel level
  };

  int32_t NewSlot() { return next_slot_++; }

  int32_t Constant(uint64_t value) {
    auto found = constants_.find(value);
    if (found != constants_.end()) return found->second;
    int32_t slot = NewSlot();
    constants_[value] = slot;
    k_->constants.push_back({slot, value});
    return slot;
  }

  std::string Local(const Frame& frame, const std::string& name) const {
    auto alias = frame.alias.find(name);
    if (alias != frame.alias.end()) return alias->second;
    if (frame.locals.count(name)) return frame.prefix + name;
    return name;
  }

  void Unsupported(const std::string& why, int line) {
    if (k_->unsupported.empty()) k_->unsupported = why + " (PTX line " + std::to_string(line) + ")";
  }

  // Marks the kernel unsupported (`why`, at PTX `line`; its launches answer
  // CUDA_ERROR_NOT_SUPPORTED) and puts a trap where `inst` would have gone.
  Status Refuse(const std::string& why, int line, Inst inst) {
    Unsupported(why, line);
    inst.run = &HNop;
    inst.flow = Flow::kTrap;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // Slot of a special register, or -1.
  int32_t Special(const std::string& name) {
    static const char* kAxes = "xyz";
    for (int i = 0; i < 3; ++i) {
      std::string axis = std::string(".") + kAxes[i];
      if (name == "%tid" + axis) return Ensure(&k_->tid[i]);
      if (name == "%ntid" + axis) return Ensure(&k_->ntid[i]);
      if (name == "%ctaid" + axis) return Ensure(&k_->ctaid[i]);
      if (name == "%nctaid" + axis) return Ensure(&k_->nctaid[i]);
    }
    if (name == "%laneid") return Ensure(&k_->laneid);
    if (name == "%warpid") return Ensure(&k_->warpid);
    if (name == "%nwarpid") return Ensure(&k_->nwarpid);
    if (name == "%smid") return Ensure(&k_->smid);
    if (name == "%nsmid") return Ensure(&k_->nsmid);
    if (name == "%gridid") return Ensure(&k_->gridid);
    if (name == "%lanemask_eq") return Ensure(&k_->lanemask_eq);
    if (name == "%lanemask_lt") return Ensure(&k_->lanemask_lt);
    if (name == "%lanemask_le") return Ensure(&k_->lanemask_le);
    if (name == "%lanemask_gt") return Ensure(&k_->lanemask_gt);
    if (name == "%lanemask_ge") return Ensure(&k_->lanemask_ge);
    if (name.rfind("%envreg", 0) == 0 && name.size() > 7 && name.size() <= 9) {
      int n = 0;
      for (size_t i = 7; i < name.size(); ++i) {
        if (name[i] < '0' || name[i] > '9') return -1;
        n = n * 10 + (name[i] - '0');
      }
      if (n < 32) return Ensure(&k_->envreg[n]);
    }
    return -1;
  }
  int32_t Ensure(int32_t* slot) {
    if (*slot < 0) *slot = NewSlot();
    return *slot;
  }
  static int ClockMode(const std::string& name) {
    if (name == "%clock") return 0;
    if (name == "%clock64") return 1;
    if (name == "%globaltimer") return 2;
    if (name == "%globaltimer_lo") return 3;
    if (name == "%globaltimer_hi") return 4;
    return -1;
  }

  bool IsRegister(const Frame& frame, const std::string& name) const {
    std::string local = Local(frame, name);
    return registers_.count(local) > 0 || name.find('@') != std::string::npos;
  }

  // Value of a symbol as an operand (its address in its own space).
  bool SymbolValue(const Frame& frame, const std::string& name, Symbol* symbol) {
    std::string local = Local(frame, name);
    auto found = symbols_.find(local);
    if (found == symbols_.end()) {
      // A module's .shared variable takes its place in a CTA's shared memory when the
      // kernel, or a function it calls, first names it: as ptxas lays them out, a kernel's
      // static shared memory (cudaFuncAttributes::sharedSizeBytes) holds only its own.
      auto unplaced = unplaced_shared_.find(local);
      if (unplaced == unplaced_shared_.end()) return false;
      const SharedVariable& var = *unplaced->second;
      shared_size_ = (shared_size_ + var.align - 1) / var.align * var.align;
      found = symbols_.emplace(local, Symbol{Space::kShared, shared_size_}).first;
      shared_size_ += var.size;
      unplaced_shared_.erase(unplaced);
    }
    *symbol = found->second;
    return true;
  }

  // Slot holding a source operand's value; `type` decides how literals are
  // encoded.
  Result<int32_t> Source(const Frame& frame, const RawOperand& op, Ty type, int line) {
    switch (op.kind) {
      case RawOperand::kInt: {
        if (type == kF32)
          return Constant(Put<float>(static_cast<float>(static_cast<int64_t>(op.bits))));
        if (type == kF64)
          return Constant(Put<double>(static_cast<double>(static_cast<int64_t>(op.bits))));
        return Constant(op.bits);
      }
      case RawOperand::kF32: {
        float f = std::bit_cast<float>(static_cast<uint32_t>(op.bits));
        if (type == kF64) return Constant(Put<double>(f));
        return Constant(op.bits & 0xffffffffu);
      }
      case RawOperand::kF64: {
        double d = std::bit_cast<double>(op.bits);
        if (type == kF32) return Constant(Put<float>(static_cast<float>(d)));
        if (type == kF64) return Constant(op.bits);
        return Constant(static_cast<uint64_t>(static_cast<int64_t>(d)));
      }
      case RawOperand::kAddress: {
        if (!op.negated) break;  // sym+offset as a value
        Symbol symbol;
        if (!SymbolValue(frame, op.name, &symbol)) {
          return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unknown symbol " +
                                         op.name);
        }
        return Constant(symbol.value + op.bits);
      }
      case RawOperand::kName: {
        if (int32_t special = Special(op.name); special >= 0) return special;
        if (IsRegister(frame, op.name)) return RegisterSlot(frame, op.name);
        Symbol symbol;
        if (SymbolValue(frame, op.name, &symbol)) {
          if (IsDynamicShared(op.name)) {
            int32_t slot = NewSlot();
            dynamic_shared_constants_.push_back({slot, op.name});
            return slot;
          }
          return Constant(symbol.value);
        }
        if (unsupported_symbols_.count(op.name)) {
          Unsupported("texture, surface or external symbol '" + op.name + "'", line);
          return zero_slot_;
        }
        if (IsDynamicShared(op.name)) {
          int32_t slot = NewSlot();
          dynamic_shared_constants_.push_back({slot, op.name});
          return slot;
        }
        if (op.name == "WARP_SZ") return Constant(32);
        // An undeclared name used as a register (inline asm may omit
        // declarations).
        return RegisterSlot(frame, op.name);
      }
      default: break;
    }
    return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unexpected operand");
  }

  bool IsDynamicShared(const std::string& name) const {
    for (const SharedVariable& var : module_.shared) {
      if (var.is_extern && var.name == name) return true;
    }
    return false;
  }

  int32_t RegisterSlot(const Frame& frame, const std::string& name) {
    std::string local = Local(frame, name);
    if (local == "_") return NewSlot();  // sink
    auto found = slots_.find(local);
    if (found != slots_.end()) return found->second;
    int32_t slot = NewSlot();
    slots_[local] = slot;
    return slot;
  }

  Result<int32_t> Dest(const Frame& frame, const RawOperand& op, int line) {
    if (op.kind != RawOperand::kName) {
      return Status::InvalidArgument("PTX line " + std::to_string(line) +
                                     ": destination must be a register");
    }
    return RegisterSlot(frame, op.name);
  }

  // Address operand: sets inst.a (base slot), inst.offset and, for symbols, the
  // space.
  Status AddressOperand(const Frame& frame, const RawOperand& op, Inst* inst, int line) {
    if (op.kind != RawOperand::kAddress) {
      return Status::InvalidArgument("PTX line " + std::to_string(line) + ": expected an address");
    }
    inst->offset = static_cast<int64_t>(op.bits);
    if (op.name.empty()) {
      inst->a = zero_slot_;
      inst->uniform_address = true;
      return Status::OK();
    }
    if (IsRegister(frame, op.name) || Special(op.name) >= 0) {
      inst->a = Special(op.name) >= 0 ? Special(op.name) : RegisterSlot(frame, op.name);
      return Status::OK();
    }
    Symbol symbol;
    if (SymbolValue(frame, op.name, &symbol)) {
      // Variables of call parameters live in local memory; the rest keep the
      // stated space (a generic access through a symbol needs the generic
      // address).
      if (symbol.space == Space::kLocal &&
          (inst->space == Space::kParam || inst->space == Space::kLocal)) {
        inst->space = Space::kLocal;
      } else if (inst->space == Space::kGeneric) {
        switch (symbol.space) {
          case Space::kShared: symbol.value += kSharedWindow; break;
          case Space::kLocal: symbol.value += kLocalWindow; break;
          case Space::kParam: symbol.value += kParamWindow; break;
          default: break;
        }
      }
      inst->a = Constant(symbol.value);
      inst->uniform_address = true;
      return Status::OK();
    }
    if (IsDynamicShared(op.name)) {
      int32_t slot = NewSlot();
      dynamic_shared_constants_.push_back({slot, op.name});
      inst->a = slot;
      if (inst->space == Space::kGeneric) {
        return Status::InvalidArgument("PTX line " + std::to_string(line) +
                                       ": generic access to dynamic shared symbol");
      }
      return Status::OK();
    }
    if (unsupported_symbols_.count(op.name)) {
      Unsupported("texture, surface or external symbol '" + op.name + "'", line);
      inst->a = zero_slot_;
      return Status::OK();
    }
    return Status::InvalidArgument("PTX line " + std::to_string(line) + ": unknown symbol " +
                                   op.name);
  }

  static Space ParseSpace(const std::string& mod, bool* matched) {
    *matched = true;
    if (mod == "global") return Space::kGlobal;
    if (mod == "shared" || mod == "shared::cta") return Space::kShared;
    if (mod == "local") return Space::kLocal;
    if (mod == "param") return Space::kParam;
    if (mod == "const") return Space::kConst;
    *matched = false;
    return Space::kGeneric;
  }

  Status Emit(const RawFunction& function, const std::string& prefix,
              std::map<std::string, std::string> alias, int depth, int) {
    if (k_->code.size() > kMaxKernelInstructions) {
      return Status::InvalidArgument(
          "more than " + std::to_string(kMaxKernelInstructions) +
          " instructions once its device functions are inlined (deep or branching recursion?)"
          " at " +
          function.name);
    }
    Frame frame;
    frame.prefix = prefix;
    frame.alias = std::move(alias);
    frame.return_label = depth >= 0 ? prefix + "$return" : "";
    for (const RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction)
        frame.locals.insert(statement.name.empty() ? statement.opcode : statement.name);
    }
    // Register families (%r@3) are local too.
    for (const RawStatement& statement : function.body) {
      if (statement.kind != RawStatement::kInstruction) continue;
      auto note = [&](const RawOperand& op, auto&& self) -> void {
        if ((op.kind == RawOperand::kName || op.kind == RawOperand::kAddress) &&
            op.name.find('@') != std::string::npos) {
          frame.locals.insert(op.name);
        }
        if (!op.pair.empty() && op.pair.find('@') != std::string::npos)
          frame.locals.insert(op.pair);
        for (const RawOperand& item : op.items) self(item, self);
      };
      for (const RawOperand& op : statement.operands) note(op, note);
      if (statement.guard.find('@') != std::string::npos) frame.locals.insert(statement.guard);
    }
    for (const RawStatement& statement : function.body) {
      switch (statement.kind) {
        case RawStatement::kLabel:
          labels_[Local(frame, statement.opcode)] = static_cast<int32_t>(k_->code.size());
          break;
        case RawStatement::kRegister: registers_.insert(Local(frame, statement.name)); break;
        case RawStatement::kLocal:
        case RawStatement::kParam: {
          uint32_t align = std::max<uint32_t>(statement.align, 1);
          // Checked: declarations are bounded, but inlined calls add theirs up (a launch
          // refuses more than kMaxLocalPerThread; this keeps the sum from wrapping first).
          if (local_size_ > kMaxLocalSum) {
            return Status::InvalidArgument("PTX line " + std::to_string(statement.line) +
                                           ": more than " + std::to_string(kMaxLocalSum) +
                                           " bytes of local memory per thread");
          }
          local_size_ = (local_size_ + align - 1) / align * align;
          symbols_[Local(frame, statement.name)] = Symbol{Space::kLocal, local_size_};
          local_size_ += std::max<uint64_t>(statement.size, 1);
          break;
        }
        case RawStatement::kShared: {
          uint32_t align = std::max<uint32_t>(statement.align, 1);
          shared_size_ = (shared_size_ + align - 1) / align * align;
          symbols_[Local(frame, statement.name)] = Symbol{Space::kShared, shared_size_};
          shared_size_ += statement.size;
          break;
        }
        case RawStatement::kInstruction:
          GPUPOOL_RETURN_IF_ERROR(Instruction(frame, statement, depth));
          break;
      }
    }
    if (!frame.return_label.empty())
      labels_[frame.return_label] = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  Status Call(const Frame& frame, const RawStatement& s, Inst inst, int depth) {
    // call{.uni} (ret), name, (args);  call name, (args);  call (ret), name;
    const RawOperand* returns = nullptr;
    const RawOperand* callee = nullptr;
    const RawOperand* args = nullptr;
    for (const RawOperand& op : s.operands) {
      if (op.kind == RawOperand::kList) {
        if (callee == nullptr)
          returns = &op;
        else
          args = &op;
      } else if (op.kind == RawOperand::kName && callee == nullptr) {
        callee = &op;
      }
    }
    if (callee == nullptr)
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                     ": call without a target");
    auto local_offset = [&](const RawOperand* list, size_t i) {
      return ParamVariableOffset(frame, list, i);
    };
    if (callee->name == "vprintf") {
      inst.run = &HPrintf;
      int64_t format = local_offset(args, 0), arguments = local_offset(args, 1);
      if (format < 0 || arguments < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": vprintf arguments must be .param variables");
      }
      inst.printf_fmt = static_cast<uint32_t>(format);
      inst.printf_args = static_cast<uint32_t>(arguments);
      inst.offset = local_offset(returns, 0);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name);
        (callee->name == "malloc" || callee->name == "free") &&
        declared != module_.functions.end() && !declared->second.has_body) {
      // Device-side malloc/free on the module's heap variable (HMalloc).
      const bool is_malloc = callee->name == "malloc";
      int64_t argument = local_offset(args, 0), result = is_malloc ? local_offset(returns, 0) : 0;
      Symbol heap;
      if (argument < 0 || result < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + callee->name +
                                       " arguments must be .param variables");
      }
      if (!SymbolValue(frame, kDeviceHeapVariable, &heap) || heap.space != Space::kGlobal ||
          heap.value == 0) {
        return Status::Internal("PTX line " + std::to_string(s.line) + ": " + callee->name +
                                " without the module's device heap");
      }
      uint64_t heap_size = 0;
      for (const ModuleVariable& variable : module_.variables) {
        if (variable.name == kDeviceHeapVariable) heap_size = variable.size;
      }
      if (heap_size < 64 || heap_size % 16 != 0 || heap_size > kMaxDeviceHeapBytes) {
        return Status::Internal("PTX line " + std::to_string(s.line) +
                                ": the module's device heap has " + std::to_string(heap_size) +
                                " bytes");
      }
      inst.aux = static_cast<uint32_t>(heap_size / 16);
      inst.run = is_malloc ? &HMalloc : &HFree;
      inst.printf_fmt = static_cast<uint32_t>(argument);
      inst.printf_args = static_cast<uint32_t>(result);
      inst.offset = static_cast<int64_t>(heap.value);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name);
        callee->name == "cudaGraphSetConditional" && declared != module_.functions.end() &&
        !declared->second.has_body) {
      int64_t handle = local_offset(args, 0), value = local_offset(args, 1);
      if (handle < 0 || value < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": cudaGraphSetConditional arguments must be .param "
                                       "variables");
      }
      inst.run = &HSetConditional;
      inst.printf_fmt = static_cast<uint32_t>(handle);
      inst.printf_args = static_cast<uint32_t>(value);
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (auto declared = module_.functions.find(callee->name);
        declared != module_.functions.end() && !declared->second.has_body) {
      if (auto op = DeviceRuntimeOp(callee->name); op >= 0) {
        return DeviceRuntime(frame, s, static_cast<DeviceRuntimeCall::Op>(op), callee->name,
                             returns, args, inst);
      }
    }
    if (callee->name == "__assertfail" || callee->name == "__assert_fail") {
      inst.run = &HAssert;
      inst.flow = Flow::kAssert;
      int64_t message = local_offset(args, 0), file = local_offset(args, 1),
              line = local_offset(args, 2), function = local_offset(args, 3);
      if (message < 0 || file < 0 || line < 0 || function < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": __assertfail arguments must be .param variables");
      }
      inst.printf_fmt = static_cast<uint32_t>(message);
      inst.printf_args = static_cast<uint32_t>(file);
      inst.offset = line;
      inst.aux = static_cast<uint32_t>(function);  // not e: a source slot, renamed by Optimize
      k_->code.push_back(inst);
      return Status::OK();
    }
    const bool indirect = IsRegister(frame, callee->name);
    auto found = module_.functions.find(callee->name);
    if (!indirect && (found == module_.functions.end() || !found->second.has_body)) {
      return Refuse("call of external function '" + callee->name + "'", s.line, inst);
    }
    // A guarded call: jump around the call where the guard is false.
    int32_t skip_index = -1;
    if (inst.guard >= 0) {
      Inst skip;
      skip.run = &HNop;
      skip.flow = Flow::kBranch;
      skip.guard = inst.guard;
      skip.guard_negated = !inst.guard_negated;
      skip.line = s.line;
      skip_index = static_cast<int32_t>(k_->code.size());
      k_->code.push_back(skip);
    }
    if (indirect) {
      GPUPOOL_RETURN_IF_ERROR(IndirectCall(frame, s, *callee, returns, args, depth));
    } else {
      GPUPOOL_RETURN_IF_ERROR(InlineCall(frame, s, found->second, returns, args, depth));
    }
    if (skip_index >= 0) k_->code[skip_index].target = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  // The local-memory offset of item `i` of a call's argument or result list, which must
  // be a .param variable (calls of built-ins read and write them there); -1 otherwise.
  int64_t ParamVariableOffset(const Frame& frame, const RawOperand* list, size_t i) {
    if (list == nullptr || i >= list->items.size()) return -1;
    Symbol symbol;
    if (!SymbolValue(frame, list->items[i].name, &symbol) || symbol.space != Space::kLocal)
      return -1;
    return static_cast<int64_t>(symbol.value);
  }

  // The device runtime's entry points (CUDA 12's CDP2) the engine runs; -1 for others.
  static int DeviceRuntimeOp(const std::string& name) {
    static const std::map<std::string, DeviceRuntimeCall::Op> ops = {
        {"__cudaCDP2GetParameterBufferV2", DeviceRuntimeCall::kGetParameterBuffer},
        {"__cudaCDP2LaunchDeviceV2", DeviceRuntimeCall::kLaunchDevice},
        {"__cudaCDP2GetLastError", DeviceRuntimeCall::kGetLastError},
        {"__cudaCDP2PeekAtLastError", DeviceRuntimeCall::kPeekAtLastError},
        {"__cudaCDP2StreamCreateWithFlags", DeviceRuntimeCall::kStreamCreate},
        {"__cudaCDP2StreamDestroy", DeviceRuntimeCall::kStreamDestroy},
        {"__cudaCDP2Malloc", DeviceRuntimeCall::kMalloc},
        {"__cudaCDP2Free", DeviceRuntimeCall::kFree},
    };
    auto found = ops.find(name);
    return found == ops.end() ? -1 : found->second;
  }

  // A call of the device runtime: HDeviceRuntime with its arguments' offsets.
  Status DeviceRuntime(const Frame& frame, const RawStatement& s, DeviceRuntimeCall::Op op,
                       const std::string& name, const RawOperand* returns, const RawOperand* args,
                       Inst inst) {
    static constexpr size_t kArgCount[] = {4, 2, 0, 2, 1, 2, 1, 0};
    DeviceRuntimeCall call;
    call.op = op;
    auto local_offset = [&](const RawOperand* list, size_t i) {
      return ParamVariableOffset(frame, list, i);
    };
    for (size_t i = 0; i < kArgCount[op]; ++i) {
      const int64_t offset = local_offset(args, i);
      if (offset < 0) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + name +
                                       " arguments must be .param variables");
      }
      call.args[i] = static_cast<uint32_t>(offset);
    }
    const int64_t result = local_offset(returns, 0);
    if (result < 0) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + name +
                                     " needs a .param variable for its result");
    }
    call.result = static_cast<uint32_t>(result);
    if (runtime_error_offset_ < 0) {
      // Each thread's last error (cudaGetLastError) in local memory, which CTAs reuse:
      // the error, then its CTA's number + 1 (another CTA's error is none).
      local_size_ = (local_size_ + 3) / 4 * 4;
      runtime_error_offset_ = static_cast<int64_t>(local_size_);
      local_size_ += 8;
    }
    call.last_error = static_cast<uint32_t>(runtime_error_offset_);
    Symbol heap;
    if (SymbolValue(frame, kDeviceHeapVariable, &heap) && heap.space == Space::kGlobal) {
      call.heap = heap.value;
      for (const ModuleVariable& variable : module_.variables) {
        if (variable.name == kDeviceHeapVariable) call.heap_size = variable.size;
      }
    }
    if (k_->entries.empty()) {
      for (const auto& [entry_name, function] : module_.functions) {
        if (!function.is_entry || !function.has_body) continue;
        k_->entries.push_back(
            LaunchableEntry{FunctionAddress(module_, entry_name), entry_name,
                            static_cast<uint32_t>(ParamLayout(function, nullptr))});
      }
    }
    inst.run = &HDeviceRuntime;
    inst.aux = static_cast<uint32_t>(k_->device_calls.size());
    k_->device_calls.push_back(call);
    k_->code.push_back(inst);
    return Status::OK();
  }

  // A trap of `kind` (kTrap...): the launch fails where a lane reaches it.
  void EmitTrap(uint8_t kind, int line) {
    Inst trap;
    trap.run = &HNop;
    trap.flow = Flow::kTrap;
    trap.mode = kind;
    trap.line = line;
    k_->code.push_back(trap);
  }

  // The body of `target` inlined here, its parameters and results the call's variables.
  // Nested deeper than kMaxCallDepth: a trap where the call would run.
  Status InlineCall(const Frame& frame, const RawStatement& s, const RawFunction& target,
                    const RawOperand* returns, const RawOperand* args, int depth) {
    if (std::max(depth, 0) + 1 > kMaxCallDepth) {
      EmitTrap(kTrapCallsTooDeep, s.line);
      return Status::OK();
    }
    std::map<std::string, std::string> alias;
    for (size_t i = 0; i < target.params.size(); ++i) {
      if (args == nullptr || i >= args->items.size() || args->items[i].kind != RawOperand::kName) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": call of " +
                                       target.name + " with missing arguments");
      }
      alias[target.params[i].name] = Local(frame, args->items[i].name);
    }
    for (size_t i = 0; i < target.returns.size(); ++i) {
      if (returns != nullptr && i < returns->items.size()) {
        alias[target.returns[i].name] = Local(frame, returns->items[i].name);
      } else {
        std::string scratch = "ret$" + std::to_string(++call_count_);
        if (local_size_ > kMaxLocalSum) {
          return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": more than " +
                                         std::to_string(kMaxLocalSum) +
                                         " bytes of local memory per thread");
        }
        local_size_ = (local_size_ + 15) / 16 * 16;
        symbols_[scratch] = Symbol{Space::kLocal, local_size_};
        local_size_ += std::max<uint64_t>(target.returns[i].size, 8);
        alias[target.returns[i].name] = scratch;
      }
    }
    std::string prefix = "c" + std::to_string(++call_count_) + ":";
    return Emit(target, prefix, std::move(alias), std::max(depth, 0) + 1, 0);
  }

  // Device functions whose address the module takes (in an initialiser, as virtual tables
  // and function-pointer arrays have them, or as an instruction's operand): what an
  // indirect call may reach.
  const std::vector<const RawFunction*>& AddressTaken() {
    if (address_taken_ready_) return address_taken_;
    address_taken_ready_ = true;
    std::set<std::string> names;
    for (const ModuleVariable& variable : module_.variables) {
      for (const Relocation& relocation : variable.relocations) names.insert(relocation.symbol);
    }
    for (const auto& [name, function] : module_.functions) {
      for (const RawStatement& statement : function.body) {
        if (statement.kind != RawStatement::kInstruction || statement.opcode.rfind("call", 0) == 0)
          continue;
        for (const RawOperand& op : statement.operands) {
          if (op.kind == RawOperand::kName || op.kind == RawOperand::kAddress)
            names.insert(op.name);
        }
      }
    }
    for (const std::string& name : names) {
      auto found = module_.functions.find(name);
      if (found != module_.functions.end() && found->second.has_body && !found->second.is_entry)
        address_taken_.push_back(&found->second);
    }
    return address_taken_;
  }

  // call (ret), %rd, (args), prototype: the lanes compare %rd with the address of each
  // function it may reach (taken somewhere in the module, with as many parameters and
  // results as the call passes) and run that function's body inlined; a lane whose %rd
  // is none of them traps with CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU faults on a bad
  // function pointer. Lanes calling different functions diverge and reconverge after.
  Status IndirectCall(const Frame& frame, const RawStatement& s, const RawOperand& callee,
                      const RawOperand* returns, const RawOperand* args, int depth) {
    const size_t arg_count = args == nullptr ? 0 : args->items.size();
    const size_t return_count = returns == nullptr ? 0 : returns->items.size();
    const std::string tag = "$icall" + std::to_string(++call_count_);
    const std::string predicate = tag + "$p", end = tag + "$end";
    registers_.insert(predicate);
    int candidate = 0;
    for (const RawFunction* target : AddressTaken()) {
      if (target->params.size() != arg_count || target->returns.size() < return_count) continue;
      const std::string next = tag + "$" + std::to_string(candidate++);
      RawStatement compare;
      compare.opcode = "setp.eq.u64";
      compare.line = s.line;
      compare.operands.resize(3);
      compare.operands[0].kind = RawOperand::kName;
      compare.operands[0].name = predicate;
      compare.operands[1] = callee;
      compare.operands[2].kind = RawOperand::kInt;
      compare.operands[2].bits = FunctionAddress(module_, target->name);
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, compare, depth));
      RawStatement branch;
      branch.opcode = "bra";
      branch.line = s.line;
      branch.guard = predicate;
      branch.guard_negated = true;
      branch.operands.resize(1);
      branch.operands[0].kind = RawOperand::kName;
      branch.operands[0].name = next;
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, branch, depth));
      GPUPOOL_RETURN_IF_ERROR(InlineCall(frame, s, *target, returns, args, depth));
      branch.guard.clear();
      branch.operands[0].name = end;
      GPUPOOL_RETURN_IF_ERROR(Instruction(frame, branch, depth));
      labels_[next] = static_cast<int32_t>(k_->code.size());
    }
    EmitTrap(kTrapBadFunction, s.line);
    labels_[end] = static_cast<int32_t>(k_->code.size());
    return Status::OK();
  }

  // f16/bf16 arithmetic (scalar and x2): computed in float, rounded to nearest.
  Status HalfInstruction(const Frame& frame, const RawStatement& s, Inst inst,
                         const std::string& op, Ty type) {
    static const std::map<std::string, std::pair<uint8_t, int>> kOps = {
        {"add", {0, 2}}, {"sub", {1, 2}},  {"mul", {2, 2}}, {"fma", {3, 3}},
        {"mad", {3, 3}}, {"neg", {4, 1}},  {"abs", {5, 1}}, {"min", {6, 2}},
        {"max", {7, 2}}, {"tanh", {8, 1}}, {"ex2", {9, 1}}};
    auto found = kOps.find(op);
    if (found == kOps.end()) {
      return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line, inst);
    }
    inst.mode = found->second.first;
    int arity = found->second.second;
    for (const std::string& part : Split(s.opcode)) {
      if (part == "relu") inst.flags |= kFlagRelu;
      if (part == "NaN" && (op == "min" || op == "max")) inst.flags |= kFlagNaNOperand;
      if (part == "xorsign") {
        return Refuse("half-precision instruction '" + s.opcode + "' is not supported", s.line,
                      inst);
      }
    }
    inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
    inst.mode2 = (type == kBF16 || type == kBF16x2) ? 1 : 0;
    const auto& ops = s.operands;
    if (ops.size() < static_cast<size_t>(arity) + 1) {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode +
                                     " has too few operands");
    }
    auto dest = Dest(frame, ops[0], s.line);
    if (!dest.ok()) return dest.status();
    inst.d[0] = *dest;
    int32_t* sources[3] = {&inst.a, &inst.b, &inst.c};
    for (int i = 0; i < arity; ++i) {
      auto slot = Source(frame, ops[i + 1], kU32, s.line);
      if (!slot.ok()) return slot.status();
      *sources[i] = *slot;
    }
    inst.run = &HHalf;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // InvalidArgument naming the instruction and its PTX line.
  static Status BadInstruction(const RawStatement& s, const std::string& why) {
    return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode + ": " +
                                   why);
  }

  // Element types of wmma and mma.sync fragments, by their PTX names.
  inline static const std::map<std::string, WmmaType> kWmmaTypes = {
      {"f16", WmmaType::kF16}, {"bf16", WmmaType::kBF16}, {"tf32", WmmaType::kTF32},
      {"f32", WmmaType::kF32}, {"f64", WmmaType::kF64},   {"s8", WmmaType::kS8},
      {"u8", WmmaType::kU8},   {"s32", WmmaType::kS32}};

  // The registers of fragment operand `operand` ({%r1, ...}) of matrix `matrix` (a, b, c
  // or d) of `op`, into *slots: enough to hold the matrix across the warp (wmma, whose
  // fragments may hold copies), or exactly that many (exact: mma.sync).
  Status Fragment(const Frame& frame, const RawStatement& s, const RawOperand& operand,
                  const WmmaOp& op, char matrix, WmmaType type, bool exact,
                  std::vector<int32_t>* slots) {
    if (operand.kind != RawOperand::kVector)
      return BadInstruction(s, "a fragment must be a {list}");
    for (const RawOperand& item : operand.items) {
      if (item.kind != RawOperand::kName) {
        return BadInstruction(s, "a fragment holds registers only");
      }
      slots->push_back(RegisterSlot(frame, item.name));
    }
    uint32_t rows, cols;
    WmmaShape(op, matrix, &rows, &cols);
    const uint64_t held = slots->size() * WmmaPerRegister(type) * 32;
    if (exact ? held != rows * cols : held < rows * cols) {
      return BadInstruction(s, "fragment " + std::string(1, matrix) + " of " +
                                   std::to_string(slots->size()) + " registers does not fit a " +
                                   std::to_string(rows) + "x" + std::to_string(cols) + " matrix");
    }
    return Status::OK();
  }

  // The modifiers of a wmma or mma.sync instruction: its shape (into op's m, n, k), its
  // element types and layouts (true: row) in order, and .satfinite. False when it names a
  // sub-byte type (s4, u4, b1), which the sim does not run.
  static bool MatrixModifiers(const std::vector<std::string>& parts, WmmaOp* op,
                              std::vector<WmmaType>* types, std::vector<bool>* row_layouts) {
    for (size_t i = 1; i < parts.size(); ++i) {
      const std::string& part = parts[i];
      unsigned m = 0, n = 0, k = 0;
      char tail = 0;
      if (std::sscanf(part.c_str(), "m%un%uk%u%c", &m, &n, &k, &tail) == 3) {
        op->m = m;
        op->n = n;
        op->k = k;
      } else if (auto type = kWmmaTypes.find(part); type != kWmmaTypes.end()) {
        types->push_back(type->second);
      } else if (part == "row" || part == "col") {
        row_layouts->push_back(part == "row");
      } else if (part == "satfinite") {
        op->satfinite = true;
      } else if (part == "s4" || part == "u4" || part == "b1") {
        return false;
      }
    }
    return true;
  }

  // wmma.load / wmma.store / wmma.mma (HWmmaMemory, HWmmaMma). `inst` comes with
  // its guard and state space.
  Status Wmma(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
              Inst inst) {
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    WmmaOp op;
    std::vector<WmmaType> types;
    std::vector<bool> layouts;  // true: row
    if (!MatrixModifiers(parts, &op, &types, &layouts)) {
      return Refuse(
          "instruction '" + s.opcode + "' is not supported by the sim GPU (sub-byte wmma)", s.line,
          inst);
    }
    static const std::set<std::tuple<uint32_t, uint32_t, uint32_t>> kShapes = {
        {16, 16, 16}, {8, 32, 16}, {32, 8, 16}, {16, 16, 8}, {8, 8, 4}};
    if (!kShapes.count({op.m, op.n, op.k})) return invalid("unknown or missing shape");
    const std::string& what = parts.size() > 1 ? parts[1] : "";
    auto fragment = [&](const RawOperand& operand, char matrix, WmmaType type,
                        std::vector<int32_t>* slots) {
      return Fragment(frame, s, operand, op, matrix, type, /*exact=*/false, slots);
    };
    const auto& ops = s.operands;
    if (what == "load" || what == "store") {
      const bool store = what == "store";
      op.kind = store ? WmmaOp::kStore : WmmaOp::kLoad;
      op.matrix = parts.size() > 2 && parts[2].size() == 1 ? parts[2][0] : '?';
      if (store ? op.matrix != 'd' : (op.matrix < 'a' || op.matrix > 'c')) {
        return invalid(store ? "only d is stored" : "loads a, b or c");
      }
      if (layouts.size() != 1 || types.size() != 1) return invalid("needs one layout and one type");
      if (ops.size() != 2 && ops.size() != 3)
        return invalid("needs a fragment, an address and an optional stride");
      op.row_major = layouts[0];
      op.types[0] = types[0];
      GPUPOOL_RETURN_IF_ERROR(
          fragment(ops[store ? 1 : 0], op.matrix, op.types[0], &op.fragments[0]));
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[store ? 0 : 1], &inst, s.line));
      if (ops.size() == 3) {
        auto stride = Source(frame, ops[2], kU32, s.line);
        if (!stride.ok()) return stride.status();
        inst.b = *stride;
      }
      inst.run = store ? &HWmmaMemory<true> : &HWmmaMemory<false>;
    } else if (what == "mma") {
      op.kind = WmmaOp::kMma;
      if (layouts.size() != 2) return invalid("needs the layouts of a and b");
      if (types.size() == 2) {  // .dtype.ctype: f16 inputs
        types = {types[0], WmmaType::kF16, WmmaType::kF16, types[1]};
      }
      if (types.size() != 4 || ops.size() != 4) return invalid("needs d, a, b and c");
      for (int i = 0; i < 4; ++i) op.types[i] = types[i];
      const bool integer = types[1] == WmmaType::kS8 || types[1] == WmmaType::kU8;
      const bool valid = integer ? types[0] == WmmaType::kS32 && types[3] == WmmaType::kS32
                         : types[1] == WmmaType::kF64
                             ? types[0] == WmmaType::kF64 && types[3] == WmmaType::kF64
                             : (types[0] == WmmaType::kF32 || types[0] == WmmaType::kF16) &&
                                   (types[3] == WmmaType::kF32 || types[3] == WmmaType::kF16);
      if (!valid) return invalid("unsupported combination of types");
      static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
      for (int i = 0; i < 4; ++i) {
        GPUPOOL_RETURN_IF_ERROR(fragment(ops[i], kMatrices[i], op.types[i], &op.fragments[i]));
      }
      inst.run = &HWmmaMma;
    } else {
      return invalid("expected wmma.load, wmma.store or wmma.mma");
    }
    inst.aux = static_cast<uint32_t>(k_->wmma.size());
    k_->wmma.push_back(std::move(op));
    k_->code.push_back(inst);
    return Status::OK();
  }

  // cp.async (HCpAsync): the copy forms, cp.async.{ca,cg}.shared{::cta}.global
  // [dst], [src], cp-size{, src-size | ignore-src}, and commit_group, wait_group, wait_all,
  // which have nothing to wait for here. `inst` comes with its guard.
  Status CpAsync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                 Inst inst) {
    const std::string what = parts.size() > 2 ? parts[2] : "";
    if (what == "mbarrier") {
      // cp.async.mbarrier.arrive{.noinc}.shared.b64 [mbar]: an arrival once this thread's
      // copies are done, which they are. Without .noinc the pending count is raised by one
      // first, so the two cancel out.
      if (parts.size() < 4 || parts[3] != "arrive" || s.operands.size() != 1) {
        return BadInstruction(s, "expected cp.async.mbarrier.arrive [mbar]");
      }
      if (std::find(parts.begin(), parts.end(), "noinc") == parts.end()) {
        inst.run = &HNop;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (inst.space != Space::kShared) inst.space = Space::kGeneric;
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, s.operands[0], &inst, s.line));
      inst.mode = 1;
      inst.run = &HMbarrier;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (what == "commit_group" || what == "wait_group" || what == "wait_all") {
      inst.run = &HNop;
      k_->code.push_back(inst);
      return Status::OK();
    }
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    if (what != "ca" && what != "cg")
      return invalid("expected .ca, .cg, commit_group or wait_group");
    if (std::find(parts.begin(), parts.end(), "global") == parts.end() ||
        (std::find(parts.begin(), parts.end(), "shared") == parts.end() &&
         std::find(parts.begin(), parts.end(), "shared::cta") == parts.end())) {
      return invalid("copies from .global to .shared");
    }
    const bool cache_hint = std::find(parts.begin(), parts.end(), "L2::cache_hint") != parts.end();
    const auto& ops = s.operands;
    const size_t plain = cache_hint ? 4 : 3;  // the operands without src-size / ignore-src
    if (ops.size() != plain && ops.size() != plain + 1) return invalid("wrong number of operands");
    if (ops[2].kind != RawOperand::kInt ||
        (ops[2].bits != 4 && ops[2].bits != 8 && ops[2].bits != 16)) {
      return invalid("cp-size must be 4, 8 or 16");
    }
    if (what == "cg" && ops[2].bits != 16) return invalid(".cg copies 16 bytes");
    inst.width = static_cast<uint8_t>(ops[2].bits);
    inst.space = Space::kGlobal;
    Inst source = inst;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &source, s.line));
    if (source.offset < INT32_MIN || source.offset > INT32_MAX)
      return invalid("source offset too large");
    inst.b = source.a;
    inst.aux = static_cast<uint32_t>(static_cast<int32_t>(source.offset));
    inst.space = Space::kShared;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
    if (ops.size() == plain + 1) {
      const RawOperand& extra = ops[3];
      // ignore-src is a predicate (nvcc names them %p), src-size an integer.
      const bool predicate =
          extra.kind == RawOperand::kName && (extra.negated || extra.name.rfind("%p", 0) == 0);
      auto slot = Source(frame, extra, predicate ? kPred : kU32, s.line);
      if (!slot.ok()) return slot.status();
      inst.c = *slot;
      if (predicate) {
        if (extra.negated) return invalid("a negated ignore-src is not supported");
        inst.flags |= kFlagSigned;
      }
    }
    inst.run = &HCpAsync;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // mbarrier.{init,arrive,arrive_drop,test_wait,try_wait,inval,pending_count} (HMbarrier)
  // on the CTA's shared memory; the transaction-count forms (sm_90) are refused.
  Status Mbarrier(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                  Inst inst) {
    auto invalid = [&](const std::string& why) { return BadInstruction(s, why); };
    auto has = [&](const char* part) {
      return std::find(parts.begin(), parts.end(), part) != parts.end();
    };
    if (has("expect_tx") || has("complete_tx") || has("shared::cluster")) {
      return Refuse("instruction '" + s.opcode +
                        "' is not supported by the sim GPU (transaction counts, clusters)",
                    s.line, inst);
    }
    const std::string what = parts.size() > 1 ? parts[1] : "";
    const auto& ops = s.operands;
    auto destination = [&]() -> Status {
      auto slot = Dest(frame, ops[0], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[0] = *slot;
      return Status::OK();
    };
    // Generic addresses (a shared-memory barrier reached through a pointer) or shared ones.
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    if (what == "pending_count") {
      if (ops.size() != 2) return invalid("needs a destination and a state");
      GPUPOOL_RETURN_IF_ERROR(destination());
      auto state = Source(frame, ops[1], kU64, s.line);
      if (!state.ok()) return state.status();
      inst.b = *state;
      inst.mode = 6;
    } else if (what == "init" || what == "inval") {
      if (ops.size() != (what == "init" ? 2u : 1u)) return invalid("wrong number of operands");
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[0], &inst, s.line));
      if (what == "init") {
        auto count = Source(frame, ops[1], kU32, s.line);
        if (!count.ok()) return count.status();
        inst.b = *count;
      }
      inst.mode = what == "init" ? 0 : 5;
    } else if (what == "arrive" || what == "arrive_drop") {
      if (ops.size() != 2 && ops.size() != 3)
        return invalid("needs a state, an address and an optional count");
      if (!(ops[0].kind == RawOperand::kName && ops[0].name == "_")) {
        GPUPOOL_RETURN_IF_ERROR(destination());
      }
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
      if (ops.size() == 3) {
        auto count = Source(frame, ops[2], kU32, s.line);
        if (!count.ok()) return count.status();
        inst.b = *count;
      }
      inst.mode = what == "arrive" ? 1 : 2;
    } else if (what == "test_wait" || what == "try_wait") {
      // try_wait may take a suspend-time hint as a fourth operand: nothing waits here.
      if (ops.size() != 3 && !(what == "try_wait" && ops.size() == 4)) {
        return invalid("needs a predicate, an address and a state or parity");
      }
      GPUPOOL_RETURN_IF_ERROR(destination());
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
      auto state = Source(frame, ops[2], kU64, s.line);
      if (!state.ok()) return state.status();
      inst.b = *state;
      inst.mode = has("parity") ? 4 : 3;
    } else {
      return invalid(
          "expected init, arrive, arrive_drop, test_wait, try_wait, inval or pending_count");
    }
    inst.run = &HMbarrier;
    k_->code.push_back(inst);
    return Status::OK();
  }

  // mma.sync.aligned.shape.row.col.dtype.atype.btype.ctype d, a, b, c (HWmmaMma with the
  // lane layouts PTX defines): m16n8k16 and m16n8k8 of f16 and bf16 into f32 or f16 (f16
  // inputs only), m16n8k8 of tf32, m8n8k4 of f64. Other shapes and types are refused.
  Status MmaSync(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                 Inst inst) {
    WmmaOp op;
    op.kind = WmmaOp::kMma;
    op.ptx_layout = true;
    std::vector<WmmaType> types;
    std::vector<bool> layouts;  // true: row
    const bool whole_bytes = MatrixModifiers(parts, &op, &types, &layouts);
    const auto shape = std::make_tuple(op.m, op.n, op.k);
    bool supported = whole_bytes && types.size() == 4 && layouts == std::vector<bool>{true, false};
    if (supported) {
      for (int i = 0; i < 4; ++i) op.types[i] = types[i];
      const WmmaType a = types[1], d = types[0], c = types[3];
      const bool half_in =
          (a == WmmaType::kF16 || a == WmmaType::kBF16) && types[2] == a &&
          (shape == std::make_tuple(16u, 8u, 16u) || shape == std::make_tuple(16u, 8u, 8u));
      const bool half_out = d == WmmaType::kF16 || c == WmmaType::kF16;
      supported =
          (half_in && (d == WmmaType::kF32 || d == WmmaType::kF16) &&
           (c == WmmaType::kF32 || c == WmmaType::kF16) && (!half_out || a == WmmaType::kF16)) ||
          (a == WmmaType::kTF32 && types[2] == a && d == WmmaType::kF32 && c == WmmaType::kF32 &&
           shape == std::make_tuple(16u, 8u, 8u)) ||
          (a == WmmaType::kF64 && types[2] == a && d == a && c == a &&
           shape == std::make_tuple(8u, 8u, 4u));
    }
    if (!supported) {
      return Refuse("instruction '" + s.opcode +
                        "' is not supported by the sim GPU (mma.sync runs m16n8k16 and m16n8k8 "
                        "of f16/bf16, m16n8k8 of tf32 and m8n8k4 of f64)",
                    s.line, inst);
    }
    const auto& ops = s.operands;
    if (ops.size() != 4) return BadInstruction(s, "needs d, a, b and c");
    static const char kMatrices[4] = {'d', 'a', 'b', 'c'};
    for (int i = 0; i < 4; ++i) {
      GPUPOOL_RETURN_IF_ERROR(Fragment(frame, s, ops[i], op, kMatrices[i], op.types[i],
                                       /*exact=*/true, &op.fragments[i]));
    }
    inst.run = &HWmmaMma;
    inst.aux = static_cast<uint32_t>(k_->wmma.size());
    k_->wmma.push_back(std::move(op));
    k_->code.push_back(inst);
    return Status::OK();
  }

  // ---- Texture and surface hook: tex, tld4, txq, suld.b, sust.b, suq (HTexture).
  Status Texture(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                 Inst inst) {
    texture::Op op;
    std::string why;
    if (!texture::ParseOpcode(parts, &op, &why)) return Refuse(why, s.line, inst);
    const auto& ops = s.operands;
    const bool store = op.kind == texture::Kind::kSust;
    const bool query = op.kind == texture::Kind::kTxq || op.kind == texture::Kind::kSuq;
    if (ops.size() != 2) return Refuse(s.opcode + " with these operands", s.line, inst);
    const RawOperand& address = ops[store ? 0 : 1];
    const RawOperand& data = ops[store ? 1 : 0];
    if (address.kind != RawOperand::kAddress || !IsRegister(frame, address.name) ||
        address.bits != 0 || address.items.size() != (query ? 0u : 1u)) {
      // A .texref/.surfref name, or an explicit sampler: texture references.
      return Refuse("texture references and samplers are not supported by the sim GPU",
                    s.line, inst);
    }
    inst.a = RegisterSlot(frame, address.name);
    int32_t* coordinate_slots[4] = {&inst.b, &inst.c, &inst.e, nullptr};
    int32_t fourth = -1;
    coordinate_slots[3] = &fourth;
    if (!query) {
      const RawOperand& coords = address.items[0];
      const std::vector<RawOperand> single = {coords};
      const std::vector<RawOperand>& items =
          coords.kind == RawOperand::kVector ? coords.items : single;
      if (static_cast<int>(items.size()) != texture::CoordinateCount(op)) {
        return BadInstruction(s, "needs " + std::to_string(texture::CoordinateCount(op)) +
                                     " coordinates");
      }
      const bool surface = op.kind == texture::Kind::kSuld || store;
      for (size_t i = 0; i < items.size(); ++i) {
        const bool integer =
            surface || op.int_coords || static_cast<int>(i) == texture::LayerCoordinate(op);
        auto slot = Source(frame, items[i], integer ? kS32 : kF32, s.line);
        if (!slot.ok()) return slot.status();
        *coordinate_slots[i] = *slot;
      }
    }
    inst.offset = fourth;
    const std::vector<RawOperand> single = {data};
    const std::vector<RawOperand>& values = data.kind == RawOperand::kVector ? data.items : single;
    const size_t expected = query ? 1 : (op.kind == texture::Kind::kSuld || store) ? op.vec : 4;
    if (values.size() != expected) {
      return BadInstruction(s, "needs " + std::to_string(expected) + " values");
    }
    static const Ty kElement[9] = {kNoType, kU8,     kU16,    kNoType, kU32,
                                   kNoType, kNoType, kNoType, kU64};
    for (size_t i = 0; i < values.size(); ++i) {
      if (values[i].kind == RawOperand::kName && values[i].name == "_") continue;  // a sink
      auto slot = store ? Source(frame, values[i], kElement[op.width], s.line)
                        : Dest(frame, values[i], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[i] = *slot;
    }
    inst.aux = texture::Pack(op);
    inst.run = &HTexture;
    k_->code.push_back(inst);
    return Status::OK();
  }
  // ---- End of the texture and surface hook

  // ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}{.shared{::cta}}.b16 (HLdmatrix).
  Status Ldmatrix(const Frame& frame, const RawStatement& s, const std::vector<std::string>& parts,
                  Inst inst) {
    auto has = [&](const char* part) {
      return std::find(parts.begin(), parts.end(), part) != parts.end();
    };
    const int count = has("x1") ? 1 : has("x2") ? 2 : has("x4") ? 4 : 0;
    if (!has("m8n8") || !has("b16") || count == 0) {
      return Refuse("instruction '" + s.opcode +
                        "' is not supported by the sim GPU (ldmatrix runs m8n8 .b16)",
                    s.line, inst);
    }
    const auto& ops = s.operands;
    if (ops.size() != 2 || ops[0].kind != RawOperand::kVector ||
        ops[0].items.size() != static_cast<size_t>(count)) {
      return BadInstruction(
          s, "needs " + std::to_string(count) + " destination registers and an address");
    }
    for (int j = 0; j < count; ++j) {
      auto slot = Dest(frame, ops[0].items[j], s.line);
      if (!slot.ok()) return slot.status();
      inst.d[j] = *slot;
    }
    if (inst.space != Space::kShared) inst.space = Space::kGeneric;
    GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[1], &inst, s.line));
    inst.vec = static_cast<uint8_t>(count);
    if (has("trans")) inst.flags |= kFlagSigned;
    inst.run = &HLdmatrix;
    k_->code.push_back(inst);
    return Status::OK();
  }

  Status Instruction(const Frame& frame, const RawStatement& s, int depth) {
    const size_t first = k_->code.size();
    GPUPOOL_RETURN_IF_ERROR(InstructionBody(frame, s, depth));
    const std::string op = s.opcode.substr(0, s.opcode.find('.'));
    uint8_t sync = kSyncNone;
    if (op == "wmma" || op == "mma" || op == "ldmatrix") sync = kSyncWarp;
    if (op == "vote" || op == "match" || op == "redux") sync = kSyncMaskB;
    if (op == "shfl" || s.opcode.rfind("bar.warp", 0) == 0) sync = kSyncMaskE;
    for (size_t i = first; i < k_->code.size() && sync != kSyncNone; ++i) {
      Inst& inst = k_->code[i];
      inst.collective = sync;
      // Without a membermask (the old forms), the lanes executing are the lanes it names.
      if ((sync == kSyncMaskB && inst.b < 0) || (sync == kSyncMaskE && inst.e < 0)) {
        inst.collective = kSyncNone;
      }
    }
    return Status::OK();
  }

  // The first of `mods` that the arithmetic and logic handlers (the end of
  // InstructionBody) do not implement for `op`, or "" when they implement them all.
  // Rounding (.rn, .rz, .rm, .rp), .ftz and .sat are applied to floats; .approx and .full
  // are computed at least as exactly as the ISA bounds them.
  static std::string UnhonouredModifier(const std::string& op, const std::set<std::string>& mods) {
    static const std::map<std::string, std::set<std::string>> kHonoured = [] {
      const std::set<std::string> rounding = {"rn", "rz", "rm", "rp", "ftz", "sat"};
      auto with = [&](std::set<std::string> extra) {
        extra.insert(rounding.begin(), rounding.end());
        return extra;
      };
      std::map<std::string, std::set<std::string>> m;
      m["add"] = m["sub"] = with({"cc"});
      m["addc"] = m["subc"] = {"cc"};
      m["mul"] = with({"wide", "hi", "lo"});
      m["mad"] = m["fma"] = with({"wide", "hi", "lo", "cc"});
      m["madc"] = {"hi", "lo", "cc"};
      m["mul24"] = m["mad24"] = {"hi", "lo"};
      m["div"] = with({"approx", "full"});
      m["sqrt"] = m["rcp"] = with({"approx"});
      m["rsqrt"] = m["sin"] = m["cos"] = m["lg2"] = m["ex2"] = {"approx", "ftz"};
      m["tanh"] = {"approx"};
      m["min"] = m["max"] = {"ftz", "NaN"};
      m["neg"] = m["abs"] = {"ftz"};
      m["bfind"] = {"shiftamt"};
      m["prmt"] = {"f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
      m["shf"] = {"l", "r", "clamp", "wrap"};
      m["bmsk"] = {"clamp", "wrap"};
      return m;
    }();
    auto found = kHonoured.find(op);
    for (const std::string& mod : mods) {
      if (found == kHonoured.end() || found->second.count(mod) == 0) return mod;
    }
    return "";
  }

  Status InstructionBody(const Frame& frame, const RawStatement& s, int depth) {
    std::vector<std::string> parts = Split(s.opcode);
    const std::string& op = parts[0];
    Inst inst;
    inst.line = s.line;
    if (!s.guard.empty()) {
      inst.guard = RegisterSlot(frame, s.guard);
      inst.guard_negated = s.guard_negated;
    }
    // Modifiers: state space, types (in order), and the rest.
    std::vector<Ty> types;
    std::set<std::string> mods;
    int vec = 1;
    for (size_t i = 1; i < parts.size(); ++i) {
      bool matched = false;
      Space space = ParseSpace(parts[i], &matched);
      if (matched) {
        inst.space = space;
        continue;
      }
      if (parts[i].size() > 1 && parts[i][0] == 'v' &&
          std::isdigit(static_cast<unsigned char>(parts[i][1]))) {
        vec = std::atoi(parts[i].c_str() + 1);
        continue;
      }
      Ty type = ParseType(parts[i]);
      if (type != kNoType) {
        types.push_back(type);
        continue;
      }
      mods.insert(parts[i]);
    }
    if (mods.count("ftz")) inst.flags |= kFlagFtz;
    if (mods.count("sat")) inst.flags |= kFlagSat;
    Ty type = types.empty() ? kNoType : types.back();
    if (mods.count("shared::cluster") ||
        ((op == "bar" || op == "barrier") && mods.count("cluster")) ||
        ((op == "ld" || op == "ldu" || op == "st" || op == "atom" || op == "red") &&
         mods.count("async"))) {
      // st.async / red.async complete on an mbarrier of another CTA of the cluster, and
      // .shared::cluster addresses (ld, st, atom, cvta, isspacep) are another CTA's shared
      // memory: run as plain accesses to generic addresses they would go astray, so the
      // kernel is refused instead, as are cluster barriers (the sim launches no clusters).
      return Refuse("instruction '" + s.opcode +
                        "' is not supported by the sim GPU (clusters, asynchronous stores)",
                    s.line, inst);
    }

    const auto& ops = s.operands;
    auto need = [&](size_t n) -> Status {
      if (ops.size() < n) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) + ": " + s.opcode +
                                       " needs " + std::to_string(n) + " operands");
      }
      return Status::OK();
    };
    auto src = [&](size_t i, Ty t) -> Result<int32_t> { return Source(frame, ops[i], t, s.line); };
    auto bad_type = [&]() {
      return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                     ": unsupported type in " + s.opcode);
    };
#define GPUPOOL_SRC(field, index, ty)       \
  do {                                      \
    auto value = src(index, ty);            \
    if (!value.ok()) return value.status(); \
    inst.field = *value;                    \
  } while (0)
#define GPUPOOL_DST(index)                        \
  do {                                            \
    auto value = Dest(frame, ops[index], s.line); \
    if (!value.ok()) return value.status();       \
    inst.d[0] = *value;                           \
  } while (0)

    // Textures, surfaces and the like: the kernel is marked unsupported (at
    // launch).
    static const std::set<std::string> kUnsupported = {"tex",
                                                       "tld4",
                                                       "txq",
                                                       "suld",
                                                       "sust",
                                                       "sured",
                                                       "suq",
                                                       "istypep",
                                                       "cp",
                                                       "stmatrix",
                                                       "cp.async",
                                                       "multimem",
                                                       "tensormap",
                                                       "elect",
                                                       "griddepcontrol",
                                                       "setmaxnreg",
                                                       "getctarank",
                                                       "alloca",
                                                       "stackrestore",
                                                       "stacksave",
                                                       "wgmma",
                                                       "tcgen05",
                                                       "clusterlaunchcontrol"};
    if (op == "cp" && parts.size() > 1 && parts[1] == "async") {
      const bool bulk = std::find(parts.begin(), parts.end(), "bulk") != parts.end();
      if (!bulk) return CpAsync(frame, s, parts, inst);
    }
    if (op == "mbarrier") return Mbarrier(frame, s, parts, inst);
    if (op == "tex" || op == "tld4" || op == "txq" || op == "suld" || op == "sust" ||
        op == "suq") {
      return Texture(frame, s, parts, inst);  // texture/surface hook
    }
    if (kUnsupported.count(op)) {
      std::string what = (op == "tex" || op == "tld4" || op == "txq")
                             ? "textures are not supported by the sim GPU"
                         : (op[0] == 's' && op[1] == 'u')
                             ? "surfaces are not supported by the sim GPU"
                             : "instruction '" + s.opcode + "' is not supported by the sim GPU";
      return Refuse(what, s.line, inst);
    }

    if (op == "bra" || op == "brx") {
      if (op == "brx") {
        Unsupported("brx.idx is not supported", s.line);
      }
      GPUPOOL_RETURN_IF_ERROR(need(1));
      inst.flow = Flow::kBranch;
      inst.run = &HNop;
      fixups_.push_back({static_cast<int32_t>(k_->code.size()), Local(frame, ops[0].name)});
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "ret" || op == "exit") {
      inst.run = &HNop;
      if (op == "ret" && !frame.return_label.empty()) {
        inst.flow = Flow::kBranch;
        fixups_.push_back({static_cast<int32_t>(k_->code.size()), frame.return_label});
      } else {
        inst.flow = Flow::kExit;
      }
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "bar" || op == "barrier") {
      bool warp_only = mods.count("warp");
      if (warp_only) {
        inst.run = &HNop;                           // bar.warp.sync: warps run in lockstep here
        if (!ops.empty()) GPUPOOL_SRC(e, 0, kU32);  // membermask: see RunWarp
      } else if (mods.count("red")) {
        // __syncthreads_count/and/or: bar.red.{popc.u32,and.pred,or.pred} d, b, [n,] {!}p
        GPUPOOL_RETURN_IF_ERROR(need(3));
        inst.mode = mods.count("popc") ? 1 : mods.count("and") ? 2 : 3;
        GPUPOOL_DST(0);
        GPUPOOL_SRC(b, 1, kU32);
        if (ops.size() > 3) GPUPOOL_SRC(c, 2, kU32);
        GPUPOOL_SRC(a, ops.size() - 1, kPred);
        if (ops.back().negated) inst.flags |= kFlagSigned;
        inst.run = &HNop;
        inst.flow = Flow::kBarrier;
      } else {
        // bar.sync ID{, COUNT} (__syncthreads is bar.sync 0) and bar.arrive ID, COUNT
        // (mode2 1: arrives without waiting). IDs and counts may be registers.
        bool arrive = mods.count("arrive");
        GPUPOOL_RETURN_IF_ERROR(need(arrive ? 2 : 1));
        GPUPOOL_SRC(b, 0, kU32);
        if (ops.size() > 1) GPUPOOL_SRC(c, 1, kU32);
        inst.mode2 = arrive ? 1 : 0;
        inst.run = &HNop;
        inst.flow = Flow::kBarrier;
      }
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "trap" || op == "brkpt") {
      inst.run = &HNop;
      inst.flow = Flow::kTrap;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if ((op == "membar" && !mods.count("cta")) ||
        (op == "fence" && mods.count("sc") && !mods.count("cta"))) {
      // membar.{gl,sys} is fence.sc.{gpu,sys}: see HFenceSc. At CTA scope (one thread runs
      // the whole CTA) and for acquire-release (the x86-64 order) nothing is needed.
      inst.run = &HFenceSc;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "membar" || op == "fence" || op == "nanosleep" || op == "pmevent" ||
        op == "prefetch" || op == "prefetchu" || op == "discard" || op == "applypriority" ||
        op == "griddepcontrol") {
      inst.run = &HNop;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "call") return Call(frame, s, inst, depth);
    if (op == "createpolicy") {
      GPUPOOL_RETURN_IF_ERROR(need(1));
      GPUPOOL_DST(0);
      inst.run = &HZero;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "ld" || op == "ldu" || op == "st") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      bool is_store = op == "st";
      const RawOperand& data = is_store ? ops[1] : ops[0];
      const RawOperand& address = is_store ? ops[0] : ops[1];
      inst.width = static_cast<uint8_t>(TySize(type));
      if (type == kNoType || inst.width == 0) return bad_type();
      if (TySigned(type)) inst.flags |= kFlagSigned;
      inst.vec = static_cast<uint8_t>(vec);
      if (vec > 4)
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": vectors wider than 4");
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, address, &inst, s.line));
      if (vec == 1) {
        if (is_store) {
          GPUPOOL_SRC(d[0], is_store ? 1 : 0, type);
        } else {
          auto slot = Dest(frame, data, s.line);
          if (!slot.ok()) return slot.status();
          inst.d[0] = *slot;
        }
      } else {
        if (data.kind != RawOperand::kVector || data.items.size() != static_cast<size_t>(vec)) {
          return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                         ": vector operand expected");
        }
        for (int i = 0; i < vec; ++i) {
          auto slot = is_store ? Source(frame, data.items[i], type, s.line)
                               : Dest(frame, data.items[i], s.line);
          if (!slot.ok()) return slot.status();
          inst.d[i] = *slot;
        }
      }
      inst.run = LoadStoreHandler(inst, is_store);
      // A kernel parameter at a fixed address (Hoist checks it is inside the parameters).
      inst.pure = !is_store && inst.space == Space::kParam && inst.uniform_address;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "atom" || op == "red") {
      bool has_dest = op == "atom";
      GPUPOOL_RETURN_IF_ERROR(need(has_dest ? 3 : 2));
      static const std::map<std::string, AtomOp> kOps = {
          {"add", kAtomAdd}, {"min", kAtomMin}, {"max", kAtomMax},   {"and", kAtomAnd},
          {"or", kAtomOr},   {"xor", kAtomXor}, {"exch", kAtomExch}, {"cas", kAtomCas},
          {"inc", kAtomInc}, {"dec", kAtomDec}};
      bool known = false;
      for (const auto& [name, value] : kOps) {
        if (mods.count(name)) {
          inst.mode = value;
          known = true;
        }
      }
      if (!known || vec != 1) return bad_type();
      size_t first = has_dest ? 1 : 0;
      if (has_dest) GPUPOOL_DST(0);
      GPUPOOL_RETURN_IF_ERROR(AddressOperand(frame, ops[first], &inst, s.line));
      GPUPOOL_SRC(b, first + 1, type);
      if (inst.mode == kAtomCas) {
        GPUPOOL_RETURN_IF_ERROR(need(first + 3));
        GPUPOOL_SRC(c, first + 2, type);
      }
      if ((type == kF32 || type == kF64) && !(inst.mode == kAtomAdd || inst.mode == kAtomMin ||
                                              inst.mode == kAtomMax || inst.mode == kAtomExch)) {
        return bad_type();
      }
      if (TyHalf(type) || type == kU16 || type == kS16) {
        const bool half = TyHalf(type);
        if (half ? !(inst.mode == kAtomAdd || inst.mode == kAtomMin || inst.mode == kAtomMax ||
                     inst.mode == kAtomExch)
                 : !(inst.mode == kAtomCas || inst.mode == kAtomExch)) {
          return bad_type();
        }
        inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
        inst.mode2 = !half ? 2 : (type == kBF16 || type == kBF16x2) ? 1 : 0;
        inst.run = &HAtom16;
        k_->code.push_back(inst);
        return Status::OK();
      }
      switch (type) {
        case kU32: inst.run = AtomHandlerOf<uint32_t>(inst.space); break;
        case kS32: inst.run = AtomHandlerOf<int32_t>(inst.space); break;
        case kU64: inst.run = AtomHandlerOf<uint64_t>(inst.space); break;
        case kS64: inst.run = AtomHandlerOf<int64_t>(inst.space); break;
        case kF32: inst.run = AtomHandlerOf<float>(inst.space); break;
        case kF64: inst.run = AtomHandlerOf<double>(inst.space); break;
        default:
          inst.run = ByType<WAtom>(
              type == kU8 || type == kU16 || type == kS8 || type == kS16 ? kNoType : type);
      }
      if (inst.run == nullptr) return bad_type();
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "mov") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (ops[1].kind == RawOperand::kName && ClockMode(ops[1].name) >= 0) {
        GPUPOOL_DST(0);
        inst.mode = static_cast<uint8_t>(ClockMode(ops[1].name));
        inst.run = &HClock;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[1].kind == RawOperand::kVector) {  // pack
        GPUPOOL_DST(0);
        inst.vec = static_cast<uint8_t>(ops[1].items.size());
        if (inst.vec < 2 || inst.vec > 4) return bad_type();
        inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
        int32_t* sources[4] = {&inst.a, &inst.b, &inst.c, &inst.e};
        for (size_t i = 0; i < ops[1].items.size(); ++i) {
          auto slot = Source(frame, ops[1].items[i], kNoType, s.line);
          if (!slot.ok()) return slot.status();
          *sources[i] = *slot;
        }
        inst.run = &HPack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[0].kind == RawOperand::kVector) {  // unpack
        inst.vec = static_cast<uint8_t>(ops[0].items.size());
        if (inst.vec < 2 || inst.vec > 4) return bad_type();
        inst.width = static_cast<uint8_t>(TySize(type) / inst.vec);
        for (size_t i = 0; i < ops[0].items.size(); ++i) {
          auto slot = Dest(frame, ops[0].items[i], s.line);
          if (!slot.ok()) return slot.status();
          inst.d[i] = *slot;
        }
        GPUPOOL_SRC(a, 1, type);
        inst.run = &HUnpack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      inst.run = &WMov<uint64_t>::run;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "cvta") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      inst.mode = mods.count("to") ? 1 : 0;
      inst.width = static_cast<uint8_t>(TySize(type));
      switch (inst.space) {
        case Space::kShared: inst.offset = static_cast<int64_t>(kSharedWindow); break;
        case Space::kLocal: inst.offset = static_cast<int64_t>(kLocalWindow); break;
        case Space::kParam: inst.offset = static_cast<int64_t>(kParamWindow); break;
        default: inst.offset = 0; break;
      }
      inst.run = &HCvta;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "isspacep") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kU64);
      inst.mode = static_cast<uint8_t>(inst.space);
      inst.run = &HIsspacep;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "cvt" && parts.size() > 2 &&
        std::find(parts.begin(), parts.end(), "tf32") != parts.end()) {
      // cvt.{rna,rn,rz}{.satfinite}.tf32.f32 (sm_80: wmma::__float_to_tf32).
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (types.size() != 1 || types[0] != kF32 || parts[parts.size() - 2] != "tf32") {
        return bad_type();
      }
      inst.mode = mods.count("rna") ? 0 : mods.count("rn") ? 1 : mods.count("rz") ? 2 : 3;
      if (inst.mode == 3) {
        return Status::InvalidArgument("PTX line " + std::to_string(s.line) +
                                       ": cvt to tf32 needs .rna, .rn or .rz");
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kF32);
      inst.run = &HCvtTf32;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "cvt") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      if (types.size() < 2) return bad_type();
      Ty dst = types[types.size() - 2], source = types.back();
      auto kind = [](Ty t) -> int {
        if (t == kBF16) return kKindB;
        if (TyFloat(t)) return kKindF;
        if (TySigned(t)) return kKindS;
        return kKindU;
      };
      int rounding = 0;
      if (mods.count("rz")) rounding = 1;
      if (mods.count("rm")) rounding = 2;
      if (mods.count("rp")) rounding = 3;
      if (mods.count("rni")) rounding = 4;
      if (mods.count("rzi")) rounding = 5;
      if (mods.count("rmi")) rounding = 6;
      if (mods.count("rpi")) rounding = 7;
      if ((dst == kF16x2 || dst == kBF16x2) && source == kF32 && ops.size() == 3) {
        // cvt.f16x2.f32 d, a, b (sm_80, as __floats2half2_rn compiles): d's upper half is
        // a converted, its lower half b. Two conversions into slots of their own, then a
        // pack.
        if (mods.count("relu") || mods.count("satfinite")) {
          return Refuse("cvt." + std::string(mods.count("relu") ? "relu" : "satfinite") +
                            " to a packed type is not supported by the sim GPU",
                        s.line, inst);
        }
        const Ty half = dst == kF16x2 ? kF16 : kBF16;
        int32_t halves[2];  // lower, upper
        for (int i = 0; i < 2; ++i) {
          Inst part = inst;
          halves[i] = NewSlot();
          part.d[0] = halves[i];
          auto value = src(i == 0 ? 2 : 1, source);
          if (!value.ok()) return value.status();
          part.a = *value;
          part.mode = static_cast<uint8_t>(kind(half) | (TySize(half) << 2));
          part.mode2 = static_cast<uint8_t>(kind(source) | (TySize(source) << 2));
          part.width = static_cast<uint8_t>(rounding);
          part.run = CvtHandler(part);
          part.pure = true;
          k_->code.push_back(part);
        }
        GPUPOOL_DST(0);
        inst.a = halves[0];
        inst.b = halves[1];
        inst.vec = 2;
        inst.width = 2;
        inst.run = &HPack;
        k_->code.push_back(inst);
        return Status::OK();
      }
      if (ops[0].kind == RawOperand::kVector || ops[1].kind == RawOperand::kVector) {
        return Refuse("packed conversions (cvt with vectors) are not supported", s.line, inst);
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, source);
      inst.mode = static_cast<uint8_t>(kind(dst) | (TySize(dst) << 2));
      inst.mode2 = static_cast<uint8_t>(kind(source) | (TySize(source) << 2));
      // Float -> integer without an explicit mode rounds toward zero (as C
      // does).
      if (TyFloat(source) && !TyFloat(dst) && rounding < 4)
        rounding = rounding == 0 ? 5 : rounding + 4;
      inst.width = static_cast<uint8_t>(rounding);
      inst.run = CvtHandler(inst);
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "setp" || op == "set") {
      GPUPOOL_RETURN_IF_ERROR(need(3));
      if (TyHalf(type)) {
        // Half sources (HHalfCompare): the destination type, for set, before the source's.
        inst.run = &HHalfCompare;
        inst.vec = (type == kF16x2 || type == kBF16x2) ? 2 : 1;
        inst.mode2 = (type == kBF16 || type == kBF16x2) ? 1 : 0;
        inst.width = kTruePredicate;
        if (op == "set") {
          switch (types.size() >= 2 ? types[types.size() - 2] : kNoType) {
            case kU16:
            case kS16:
            case kU32:
            case kS32: inst.width = kTrueAllOnes; break;
            case kF16:
            case kF16x2: inst.width = kTrueF16; break;
            case kBF16:
            case kBF16x2: inst.width = kTrueBF16; break;
            case kF32: inst.width = kTrueF32; break;
            default: return bad_type();
          }
        }
      }
      if (inst.run == &HHalfCompare && inst.vec == 2 && op == "setp" && ops[0].pair.empty()) {
        return BadInstruction(s, "setp on .x2 halves needs two predicates (p|q)");
      }
      static const std::map<std::string, Cmp> kCmps = {
          {"eq", kEq},   {"ne", kNe},   {"lt", kLt},   {"le", kLe},   {"gt", kGt},   {"ge", kGe},
          {"lo", kLt},   {"ls", kLe},   {"hi", kGt},   {"hs", kGe},   {"equ", kEqu}, {"neu", kNeu},
          {"ltu", kLtu}, {"leu", kLeu}, {"gtu", kGtu}, {"geu", kGeu}, {"num", kNum}, {"nan", kNan}};
      bool found = false;
      for (const auto& [name, cmp] : kCmps) {
        if (mods.count(name)) {
          inst.mode = cmp;
          found = true;
        }
      }
      if (!found) return bad_type();
      const uint8_t bool_op = mods.count("and")   ? 1
                              : mods.count("or")  ? 2
                              : mods.count("xor") ? 3
                                                  : 0;
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      if (inst.run == &HHalfCompare) {
        GPUPOOL_SRC(a, 1, kU32);
        GPUPOOL_SRC(b, 2, kU32);
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        if ((bool_op != 0) != (inst.c >= 0)) {
          return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
        }
        inst.mode2 |= bool_op << 1;
        k_->code.push_back(inst);
        return Status::OK();
      }
      inst.mode2 = bool_op;
      GPUPOOL_SRC(a, 1, type);
      GPUPOOL_SRC(b, 2, type);
      if (op == "setp") {
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        inst.run = ByType<WSetp>(type);
        if (inst.c < 0 && inst.mode2 == 0) {
          // Plain comparisons of the common types: no switch per lane.
          Handler plain = nullptr;
          switch (type) {
            case kU32: plain = WSetpPlain<uint32_t>::For(inst.mode); break;
            case kS32: plain = WSetpPlain<int32_t>::For(inst.mode); break;
            case kU64: plain = WSetpPlain<uint64_t>::For(inst.mode); break;
            case kS64: plain = WSetpPlain<int64_t>::For(inst.mode); break;
            case kF32: plain = WSetpPlain<float>::For(inst.mode, inst.flags & kFlagFtz); break;
            case kF64: plain = WSetpPlain<double>::For(inst.mode); break;
            default: break;
          }
          if (plain != nullptr) inst.run = plain;
        }
      } else {
        // mode2: bits 0-1 what true writes (0 all ones, 1 1.0f, 2 f16 1.0, 3 bf16 1.0),
        // bits 2-3 the BoolOp with c.
        Ty dst = types.size() >= 2 ? types[types.size() - 2] : kU32;
        inst.mode2 = (dst == kF32 ? 1 : dst == kF16 ? 2 : dst == kBF16 ? 3 : 0) | bool_op << 2;
        if (ops.size() >= 4) {
          GPUPOOL_SRC(c, 3, kPred);
          if (ops[3].negated) inst.flags |= kFlagSigned;
        }
        if ((bool_op != 0) != (inst.c >= 0)) {
          return BadInstruction(s, "a BoolOp (.and/.or/.xor) goes with a fourth operand, {!}c");
        }
        inst.run = ByType<WSet>(type);
      }
      if (inst.run == nullptr) return bad_type();
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "selp") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      GPUPOOL_SRC(b, 2, type);
      GPUPOOL_SRC(c, 3, kPred);
      inst.run = &HSelp;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "slct") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      Ty dst = types.size() >= 2 ? types[0] : type;
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, dst);
      GPUPOOL_SRC(b, 2, dst);
      GPUPOOL_SRC(c, 3, type);
      inst.mode = type == kF32 ? 1 : 0;
      inst.run = &HSlct;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "testp") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      static const char* kClasses[] = {"finite",     "infinite", "number",
                                       "notanumber", "normal",   "subnormal"};
      for (int i = 0; i < 6; ++i) {
        if (mods.count(kClasses[i])) inst.mode = static_cast<uint8_t>(i);
      }
      inst.width = static_cast<uint8_t>(TySize(type));
      inst.run = &HTestp;
      k_->code.push_back(inst);
      return Status::OK();
    }

    // Warp-level operations.
    if (op == "shfl") {
      GPUPOOL_RETURN_IF_ERROR(need(4));
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      GPUPOOL_SRC(a, 1, kU32);
      GPUPOOL_SRC(b, 2, kU32);
      GPUPOOL_SRC(c, 3, kU32);
      if (ops.size() > 4) GPUPOOL_SRC(e, 4, kU32);  // membermask (.sync): see RunWarp
      inst.mode = mods.count("up") ? 0 : mods.count("down") ? 1 : mods.count("bfly") ? 2 : 3;
      inst.run = &HShfl;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "vote") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kPred);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask (.sync)
      if (ops[1].negated) inst.flags |= kFlagSigned;
      inst.mode = mods.count("all") ? 0 : mods.count("any") ? 1 : mods.count("uni") ? 2 : 3;
      inst.run = &HVote;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "match") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      GPUPOOL_DST(0);
      if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
      GPUPOOL_SRC(a, 1, type);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
      inst.mode = mods.count("all") ? 1 : 0;
      inst.width = static_cast<uint8_t>(TySize(type));
      inst.run = &HMatch;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "redux") {
      GPUPOOL_RETURN_IF_ERROR(need(2));
      static const std::map<std::string, uint8_t> kOps = {{"add", 0}, {"min", 1}, {"max", 2},
                                                          {"and", 3}, {"or", 4},  {"xor", 5}};
      int found = -1;
      for (const auto& [name, mode] : kOps) {
        if (mods.count(name)) found = mode;
      }
      if (found < 0 || TySize(type) != 4 || TyFloat(type)) {
        return Refuse("instruction '" + s.opcode +
                          "' is not supported by the sim GPU (redux on 32-bit integers only)",
                      s.line, inst);
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, type);
      if (ops.size() > 2) GPUPOOL_SRC(b, 2, kU32);  // membermask
      inst.mode = static_cast<uint8_t>(found);
      inst.mode2 = TySigned(type) ? 1 : 0;
      inst.run = &HRedux;
      k_->code.push_back(inst);
      return Status::OK();
    }
    if (op == "wmma") return Wmma(frame, s, parts, inst);
    if (op == "mma") return MmaSync(frame, s, parts, inst);
    if (op == "ldmatrix") return Ldmatrix(frame, s, parts, inst);
    if (op == "activemask") {
      GPUPOOL_RETURN_IF_ERROR(need(1));
      GPUPOOL_DST(0);
      inst.run = &HActivemask;
      k_->code.push_back(inst);
      return Status::OK();
    }

    if (op == "dp4a" || op == "dp2a" || op == "vabsdiff4" || op == "vabsdiff2") {
      // dp4a.atype.btype, dp2a.{lo,hi}.atype.btype, vabsdiff{4,2}.dtype.atype.btype{.sat}{.add}
      // d, a, b, c: HByteDot. Video selectors and masks (a.b0, d.h1) are not supported.
      GPUPOOL_RETURN_IF_ERROR(need(4));
      if (types.size() < 2) return bad_type();
      for (Ty t : types) {
        if (t != kU32 && t != kS32) return bad_type();
      }
      const Ty a_type = types[types.size() - 2], b_type = types.back();
      inst.mode2 = (a_type == kS32 ? 1 : 0) | (b_type == kS32 ? 2 : 0);
      if (op == "dp4a") {
        inst.mode = 0;
      } else if (op == "dp2a") {
        if (mods.count("lo") == mods.count("hi")) {
          return BadInstruction(s, "dp2a needs one of .lo and .hi");
        }
        inst.mode = mods.count("hi") ? 2 : 1;
      } else {
        if (types.size() != 3) return bad_type();
        inst.mode = op == "vabsdiff4" ? (mods.count("add") ? 4 : 3) : (mods.count("add") ? 6 : 5);
        if (mods.count("sat") && types[0] == kS32) inst.mode2 |= 4;
      }
      for (size_t i = 0; i < 4; ++i) {
        if (ops[i].kind == RawOperand::kName && ops[i].name.find('.') != std::string::npos) {
          return Refuse("SIMD video selectors and masks ('" + ops[i].name +
                            "') are not supported by the sim GPU",
                        s.line, inst);
        }
      }
      GPUPOOL_DST(0);
      GPUPOOL_SRC(a, 1, kU32);
      GPUPOOL_SRC(b, 2, kU32);
      GPUPOOL_SRC(c, 3, kU32);
      inst.run = &HByteDot;
      inst.pure = true;
      k_->code.push_back(inst);
      return Status::OK();
    }

    // Arithmetic and logic.
    bool is_float = TyFloat(type);
    if (TyHalf(type)) return HalfInstruction(frame, s, inst, op, type);
    // A modifier the handlers below do not honour would be ignored and the kernel would
    // run with other results than a GPU's: such an instruction is refused instead.
    if (std::string unknown = UnhonouredModifier(op, mods); !unknown.empty()) {
      return Refuse("instruction '" + s.opcode + "': modifier ." + unknown +
                        " is not supported by the sim GPU",
                    s.line, inst);
    }
    Handler handler = nullptr;
    int arity = 2;
    if (op == "add" || op == "sub" || op == "addc" || op == "subc") {
      bool carry = op == "addc" || op == "subc" || mods.count("cc");
      if (carry) {
        handler = ByIntType<WCarry>(type);
        inst.mode = (op == "sub" || op == "subc") ? 1 : 0;
        if (op == "addc" || op == "subc") inst.flags |= kFlagCarryIn;
        if (mods.count("cc")) inst.flags |= kFlagCarryOut;
      } else if (mods.count("sat") && type == kS32) {
        handler = op == "add" ? &HBinary<int32_t, kAddSat> : &HBinary<int32_t, kSubSat>;
        inst.flags &= static_cast<uint8_t>(~kFlagSat);
      } else {
        handler = op == "add" ? ByType<WAdd>(type) : ByType<WSub>(type);
      }
    } else if (op == "mul") {
      if (mods.count("wide"))
        handler = ByIntType<WMulWide>(type);
      else if (mods.count("hi"))
        handler = ByIntType<WMulHi>(type);
      else
        handler = ByType<WMul>(type);
    } else if (op == "mul24") {
      handler = mods.count("hi") ? ByIntType<WMul24Hi>(type) : ByIntType<WMul24>(type);
    } else if (op == "mad24") {
      handler = ByIntType<WMad24>(type);
      inst.mode = mods.count("hi") ? 1 : 0;
      arity = 3;
    } else if (op == "mad" || op == "madc" || op == "fma") {
      arity = 3;
      if (is_float) {
        handler = ByType<WFma>(type);
#if defined(__x86_64__)
        if (HostHasFma() && type == kF32) handler = &HFmaHw<float>;
        if (HostHasFma() && type == kF64) handler = &HFmaHw<double>;
#endif
      } else if (op == "madc" || mods.count("cc")) {
        handler = ByIntType<WCarry>(type);
        inst.mode = mods.count("hi") ? 3 : 2;
        if (op == "madc") inst.flags |= kFlagCarryIn;
        if (mods.count("cc")) inst.flags |= kFlagCarryOut;
      } else if (mods.count("wide")) {
        handler = ByIntType<WMulWide>(type);
      } else if (mods.count("hi")) {
        handler = ByIntType<WMadHi>(type);
      } else {
        handler = ByIntType<WMadLo>(type);
      }
    } else if (op == "div") {
      handler = ByType<WDiv>(type);
    } else if (op == "rem") {
      handler = ByIntType<WRem>(type);
    } else if ((op == "min" || op == "max") &&
               (mods.count("xorsign") || mods.count("relu") || ops.size() > 3)) {
      return Refuse("instruction '" + s.opcode + "' with " + std::to_string(ops.size() - 1) +
                        " sources is not supported by the sim GPU",
                    s.line, inst);
    } else if ((op == "min" || op == "max") && mods.count("NaN")) {
      if (type != kF32) return bad_type();
      handler = op == "max" ? &HMinMaxNaN<true> : &HMinMaxNaN<false>;
    } else if (op == "min") {
      handler = ByType<WMin>(type);
    } else if (op == "max") {
      handler = ByType<WMax>(type);
    } else if (op == "and") {
      handler = ByIntType<WAnd>(type);
    } else if (op == "or") {
      handler = ByIntType<WOr>(type);
    } else if (op == "xor") {
      handler = ByIntType<WXor>(type);
    } else if (op == "shl") {
      handler = ByIntType<WShl>(type);
    } else if (op == "shr") {
      handler = ByIntType<WShr>(type);
    } else if (op == "copysign") {
      handler = ByType<WCopysign>(type);
    } else if (op == "sad") {
      handler = ByIntType<WSad>(type);
      arity = 3;
    } else if (op == "bfe") {
      handler = ByIntType<WBfe>(type);
      arity = 3;
    } else if (op == "bfi") {
      handler = ByIntType<WBfi>(type);
      arity = 4;
    } else if (op == "prmt") {
      handler = &HPrmt;
      arity = 3;
      static const char* kModes[] = {"", "f4e", "b4e", "rc8", "ecl", "ecr", "rc16"};
      for (int i = 1; i < 7; ++i) {
        if (mods.count(kModes[i])) inst.mode = static_cast<uint8_t>(i);
      }
    } else if (op == "shf") {
      handler = &HShf;
      arity = 3;
      inst.mode = mods.count("r") ? 1 : 0;
      inst.mode2 = mods.count("clamp") ? 1 : 0;
    } else if (op == "lop3") {
      handler = &HLop3;
      arity = 4;
    } else if (op == "fns") {
      if (type != kU32) return bad_type();
      handler = &HFns;
      arity = 3;
    } else if (op == "bmsk") {
      if (type != kU32) return bad_type();
      handler = &HBmsk;
      arity = 2;
      inst.mode = mods.count("clamp") ? 1 : 0;
    } else {
      arity = 1;
      if (op == "neg")
        handler = ByType<WNeg>(type);
      else if (op == "abs")
        handler = ByType<WAbs>(type);
      else if (op == "not")
        handler = type == kPred ? &WNotPred<uint8_t>::run : ByIntType<WNot>(type);
      else if (op == "cnot")
        handler = ByIntType<WCnot>(type);
      else if (op == "popc")
        handler = ByIntType<WPopc>(type);
      else if (op == "clz")
        handler = ByIntType<WClz>(type);
      else if (op == "brev")
        handler = ByIntType<WBrev>(type);
      else if (op == "bfind")
        handler = mods.count("shiftamt") ? ByIntType<WBfindShift>(type) : ByIntType<WBfind>(type);
      else if (op == "sqrt" && is_float)
        handler = ByType<WSqrt>(type);
      else if (op == "rsqrt" && is_float)
        handler = ByType<WRsqrt>(type);
      else if (op == "rcp" && is_float)
        handler = ByType<WRcp>(type);
      else if (op == "sin" && is_float)
        handler = ByType<WSin>(type);
      else if (op == "cos" && is_float)
        handler = ByType<WCos>(type);
      else if (op == "lg2" && is_float)
        handler = ByType<WLg2>(type);
      else if (op == "ex2" && is_float)
        handler = ByType<WEx2>(type);
      else if (op == "tanh" && is_float)
        handler = ByType<WTanh>(type);
      else {
        return Refuse("instruction '" + s.opcode + "' is not supported by the sim GPU", s.line,
                      inst);
      }
    }
    if (handler == nullptr) return bad_type();
    GPUPOOL_RETURN_IF_ERROR(need(static_cast<size_t>(arity) + 1));
    GPUPOOL_DST(0);
    if (!ops[0].pair.empty()) inst.d[1] = RegisterSlot(frame, ops[0].pair);
    // Shift amounts and bit positions are .u32 whatever the data type.
    bool u32_b = op == "shl" || op == "shr" || op == "bfe" || op == "prmt" || op == "shf";
    Ty narrow = (mods.count("wide") && !is_float) ? type : type;
    GPUPOOL_SRC(a, 1, narrow);
    if (arity >= 2) GPUPOOL_SRC(b, 2, u32_b && op != "prmt" && op != "shf" ? kU32 : type);
    if (arity >= 3) {
      Ty third = type;
      if (op == "bfe" || op == "prmt" || op == "shf") third = kU32;
      if (op == "mad" && mods.count("wide")) {
        // mad.wide: the addend is twice as wide.
        third = type == kS32 ? kS64 : kU64;
      }
      GPUPOOL_SRC(c, 3, third);
    }
    if (arity >= 4) GPUPOOL_SRC(e, 4, op == "bfi" ? kU32 : type);
    if (op == "bfi") {
      GPUPOOL_SRC(c, 3, kU32);
    }
    inst.run = handler;
    const bool directed = mods.count("rz") || mods.count("rm") || mods.count("rp");
    if (directed && (type == kF32 || type == kF64)) {
      static const std::set<std::string> kRounded = {"add", "sub", "mul",  "fma",
                                                     "mad", "div", "sqrt", "rcp"};
      if (!kRounded.count(op) || mods.count("approx") || mods.count("full")) return bad_type();
      inst.aux = static_cast<uint32_t>(k_->inner.size());
      k_->inner.push_back(handler);
      inst.run = mods.count("rz")   ? &HDirectedRounding<FE_TOWARDZERO>
                 : mods.count("rm") ? &HDirectedRounding<FE_DOWNWARD>
                                    : &HDirectedRounding<FE_UPWARD>;
    }
    // Integer division by zero would trap on the host; carries touch the carry slot.
    inst.pure = op != "div" && op != "rem" && (inst.flags & (kFlagCarryIn | kFlagCarryOut)) == 0;
    k_->code.push_back(inst);
    return Status::OK();
#undef GPUPOOL_SRC
#undef GPUPOOL_DST
  }

  const ParsedModule& module_;
  const std::map<std::string, uint64_t>& addresses_;
  DecodedKernel* k_;
  int32_t next_slot_ = 0;
  int32_t zero_slot_ = -1;
  std::map<uint64_t, int32_t> constants_;
  std::map<std::string, int32_t> slots_;
  std::set<std::string> registers_;
  std::map<std::string, Symbol> symbols_;
  std::map<std::string, int32_t> labels_;
  std::vector<std::pair<int32_t, std::string>> fixups_;
  std::vector<std::pair<int32_t, std::string>> dynamic_shared_constants_;
  std::set<std::string> unsupported_symbols_;
  std::map<std::string, const SharedVariable*> unplaced_shared_;  // not yet named
  int64_t runtime_error_offset_ = -1;  // DeviceRuntimeCall::last_error, once reserved
  uint64_t shared_size_ = 0;
  uint64_t local_size_ = 0;
  int call_count_ = 0;
  std::vector<const RawFunction*> address_taken_;
  bool address_taken_ready_ = false;
};

// ---- Scheduling
// ---------------------------------------------------------------------------

void Materialize(Warp& w) {
  if (!w.uniform) return;
  for (int l = 0; l < 32; ++l) w.lane_pc[l] = w.pc;
  w.uniform = false;
}

void MoveLanes(Warp& w, uint32_t lanes, int32_t target) {
  if (lanes == 0) return;
  if (w.uniform && lanes == w.live) {
    w.pc = target;
    return;
  }
  Materialize(w);
  ForLanes(lanes, [&](int l) { w.lane_pc[l] = target; });
}

void TryReconverge(Warp& w) {
  if (w.uniform || w.live == 0) return;
  int first = std::countr_zero(w.live);
  int32_t pc = w.lane_pc[first];
  bool same = true;
  ForLanes(w.live, [&](int l) { same &= w.lane_pc[l] == pc; });
  if (same) {
    w.uniform = true;
    w.pc = pc;
    w.deferred = 0;
    w.spin = 0;
  }
}

// The lanes warp-synchronous instruction `in` waits for, run by `mask` (0: none).
uint32_t SyncLanes(Warp& w, const Inst& in, uint32_t mask) {
  if (in.collective == kSyncWarp) return kFullMask;
  if (in.collective != kSyncMaskB && in.collective != kSyncMaskE) return 0;
  const uint64_t* members = w.R(in.collective == kSyncMaskB ? in.b : in.e);
  uint32_t lanes = 0;
  ForLanes(mask, [&](int l) { lanes |= static_cast<uint32_t>(members[l]); });
  return lanes;
}

constexpr uint32_t kSpinLimit = 1024;
constexpr uint32_t kDeferSteps = 4096;

// Releases the lanes of `w` waiting at barrier `id` (every barrier: -1).
void ReleaseBarrier(Warp& w, const Inst* code, int id) {
  uint32_t waiting = 0;
  ForLanes(w.waiting, [&](int l) {
    if (id < 0 || w.wait_id[l] == id) waiting |= 1u << l;
  });
  w.waiting &= ~waiting;
  if (waiting == 0) return;
  // bar.red: each waiting lane receives the CTA-wide reduction.
  const LaunchState& launch = *w.launch;
  ForLanes(waiting, [&](int l) {
    const Inst& in = code[w.uniform ? w.pc : w.lane_pc[l]];
    if (in.mode == 0 || in.d[0] < 0) return;
    int b = w.wait_id[l];
    w.R(in.d[0])[l] = in.mode == 1   ? launch.reduce_count[b]
                      : in.mode == 2 ? launch.reduce_all[b]
                                     : launch.reduce_any[b];
  });
  if (w.uniform && waiting == w.live) {
    ++w.pc;
    return;
  }
  Materialize(w);
  ForLanes(waiting, [&](int l) { ++w.lane_pc[l]; });
  TryReconverge(w);
}

// Bit l: bit 0 of lane l of predicate slot `g` (all 32 lanes; the caller masks).
inline uint32_t PredicateBits(const uint64_t* g) {
#if defined(__SSE2__)
  uint32_t bits = 0;
  for (int l = 0; l < 32; l += 2) {
    __m128i v = _mm_slli_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + l)), 63);
    bits |= static_cast<uint32_t>(_mm_movemask_pd(_mm_castsi128_pd(v))) << l;
  }
  return bits;
#else
  uint32_t bits = 0;
  for (int l = 0; l < 32; ++l) bits |= static_cast<uint32_t>(g[l] & 1) << l;
  return bits;
#endif
}

// Runs `w` until every live lane waits at a barrier, all exited, the slice is
// used up, or the launch failed.
void RunWarp(Warp& w, const Inst* code) {
  LaunchState& launch = *w.launch;
  const uint64_t slice = launch.slice;
  for (uint64_t step = 0; step < slice; ++step) {
    if (w.uniform && w.waiting == 0 && w.live != 0) {
      // Uniform warp: every live lane at w.pc, none waiting. Straight-line instructions
      // and branches taken by all lanes stay here; anything else (a branch that splits
      // the warp, exit, barrier, trap) leaves for the general step below.
      const uint32_t mask = w.live;
      const uint64_t lanes = static_cast<uint64_t>(std::popcount(mask));
      int32_t pc = w.pc;
      for (; step < slice; ++step) {
        if (launch.error != kSuccess) {
          w.pc = pc;
          return;
        }
        const Inst& in = code[pc];
        uint32_t exec = mask;
        if (in.guard >= 0) {
          uint32_t bits = PredicateBits(w.R(in.guard)) & mask;
          exec = in.guard_negated ? (mask & ~bits) : bits;
        }
        if (in.flow == Flow::kNext) {
          ++launch.clock;
          launch.thread_instructions += exec == mask ? lanes : std::popcount(exec);
          if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
            launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
          }
          if (exec) in.run(w, in, exec);
          ++pc;
        } else if (in.flow == Flow::kBranch && (exec == mask || exec == 0)) {
          ++launch.clock;
          launch.thread_instructions += exec == mask ? lanes : 0;
          if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
            launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
          }
          pc = exec ? in.target : pc + 1;
        } else {
          break;
        }
      }
      w.pc = pc;
      if (step == slice) return;
    }
    uint32_t ready = w.live & ~w.waiting;
    if (ready == 0 || launch.error != kSuccess) return;
    int32_t pc;
    uint32_t mask;
    if (w.uniform) {
      pc = w.pc;
      mask = ready;
    } else {
      uint32_t candidates = ready & ~w.deferred;
      if (w.deferred != 0 && (candidates == 0 || --w.defer_left == 0)) {
        w.deferred = 0;
        candidates = ready;
      }
      pc = std::numeric_limits<int32_t>::max();
      ForLanes(candidates, [&](int l) { pc = std::min(pc, w.lane_pc[l]); });
      mask = 0;
      ForLanes(candidates, [&](int l) { mask |= static_cast<uint32_t>(w.lane_pc[l] == pc) << l; });
      if (w.deferred != 0 && (SyncLanes(w, code[pc], mask) & w.deferred) != 0) {
        // It waits for deferred lanes, as a GPU's .sync forms do: let them run first.
        w.deferred = 0;
        continue;
      }
    }
    const Inst& in = code[pc];
    uint32_t exec = mask;
    if (in.guard >= 0) {
      uint32_t bits = PredicateBits(w.R(in.guard)) & mask;
      exec = in.guard_negated ? (mask & ~bits) : bits;
    }
    ++launch.clock;
    launch.thread_instructions += static_cast<uint64_t>(std::popcount(exec));
    // Progress for the agent's watchdog every 64 Ki warp instructions: one CTA of a
    // grid-stride loop can run for seconds, and is no hang.
    if ((launch.clock & 0xffff) == 0 && launch.spec->progress != nullptr) {
      launch.spec->progress->fetch_add(1, std::memory_order_relaxed);
    }
    switch (in.flow) {
      case Flow::kNext:
        if (exec) in.run(w, in, exec);
        MoveLanes(w, mask, pc + 1);
        break;
      case Flow::kBranch:
        if (exec != 0 && in.target <= pc && (ready & ~mask) != 0) {
          // A loop's backward branch while other lanes of the warp wait elsewhere.
          if (mask != w.spin_mask) {
            w.spin_mask = mask;
            w.spin = 0;
          }
          if (++w.spin >= kSpinLimit) {
            w.deferred = exec;
            w.defer_left = kDeferSteps;
            w.spin = 0;
          }
        }
        if (exec == mask) {
          MoveLanes(w, mask, in.target);
        } else {
          MoveLanes(w, exec, in.target);
          MoveLanes(w, mask & ~exec, pc + 1);
        }
        break;
      case Flow::kExit:
        w.live &= ~exec;
        MoveLanes(w, mask & ~exec, pc + 1);
        break;
      case Flow::kBarrier: {
        if (exec == 0) {
          MoveLanes(w, mask, pc + 1);
          break;
        }
        // The barrier and count of the first lane (they must be the same in every lane).
        const int first = __builtin_ctz(exec);
        const int id = in.b >= 0 ? static_cast<int>(w.R(in.b)[first] & 15) : 0;
        const uint32_t count = in.c >= 0 ? static_cast<uint32_t>(w.R(in.c)[first]) : 0;
        // Threads arriving: the lanes, and a warp's missing lanes when it arrives whole
        // (a CTA's last, partial warp counts as a warp, as on a GPU).
        uint32_t threads = __builtin_popcount(exec);
        if (exec == w.live) threads += 32 - __builtin_popcount(w.live);
        launch.active_barriers |= 1u << id;
        launch.barrier_arrived[id] += threads;
        if (count != 0) launch.barrier_expected[id] = count;
        if (in.mode2 == 1) {  // bar.arrive: on without waiting
          MoveLanes(w, mask, pc + 1);
          break;
        }
        if (in.mode != 0) {
          const uint64_t* p = w.R(in.a);
          bool negate = in.flags & kFlagSigned;
          ForLanes(exec, [&](int l) {
            bool value = ((p[l] & 1) != 0) != negate;
            launch.reduce_count[id] += value;
            launch.reduce_all[id] = launch.reduce_all[id] && value;
            launch.reduce_any[id] = launch.reduce_any[id] || value;
          });
        }
        ForLanes(exec, [&](int l) { w.wait_id[l] = static_cast<uint8_t>(id); });
        launch.barrier_waiting[id] += __builtin_popcount(exec);
        w.waiting |= exec;
        MoveLanes(w, mask & ~exec, pc + 1);
        break;
      }
      case Flow::kTrap:
        if (exec) {
          switch (in.mode) {
            case kTrapBadFunction:
              launch.error = kIllegalAddress;
              launch.detail = "indirect call (PTX line " + std::to_string(in.line) +
                              ") to an address that is no device function of the module";
              break;
            case kTrapCallsTooDeep:
              launch.error = kLaunchFailed;
              launch.detail = "device function calls nested deeper than " +
                              std::to_string(kMaxCallDepth) + " (PTX line " +
                              std::to_string(in.line) + "): recursion this deep is not run";
              break;
            default:
              launch.error = kLaunchFailed;
              launch.detail = "trap";
          }
          return;
        }
        MoveLanes(w, mask, pc + 1);
        break;
      case Flow::kAssert:
        if (exec) {
          in.run(w, in, exec);
          launch.error = kAssertFailed;
          launch.detail = "device assertion failed";
          return;
        }
        MoveLanes(w, mask, pc + 1);
        break;
    }
    if (!w.uniform) TryReconverge(w);
  }
}

// One CTA's resources: its shared and local memory, registers and warps. A worker reuses
// one for every CTA it runs; a cooperative launch keeps one per CTA.
struct CtaContext {
  std::vector<uint8_t> shared;
  std::vector<uint8_t> local;
  std::vector<uint64_t> registers;
  std::vector<Warp> warps;
  std::vector<uint32_t> range_hints;  // LaunchState::range_hints
};

// The CtaContext of the thread that calls RunKernel (the agent's GPU thread), kept from
// launch to launch while it holds at most kKeptScratchBytes (jit/jit.h).

CtaContext* CallerContext() {
  thread_local CtaContext context;
  return &context;
}

void TrimCallerContext(CtaContext* context) {
  size_t held = context->shared.capacity() + context->local.capacity() +
                context->registers.capacity() * sizeof(uint64_t) +
                context->warps.capacity() * sizeof(Warp) +
                context->range_hints.capacity() * sizeof(uint32_t);
  if (held > kKeptScratchBytes) *context = CtaContext{};
}

// Makes `cta`'s memory and warps, with the registers that are the same in every CTA.
void PrepareCta(const DecodedKernel& kernel, const LaunchSpec& spec, LaunchState* state,
                CtaContext* cta) {
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  const uint64_t shared_size = kernel.static_shared + spec.dynamic_shared;
  const uint32_t warps = (threads + 31) / 32;

  LaunchState& launch = *state;
  launch.kernel = &kernel;
  launch.spec = &spec;
  cta->range_hints.assign(kernel.code.size(), 0);
  launch.range_hints = cta->range_hints.data();
  cta->shared.assign(shared_size + 16, 0);
  launch.shared = cta->shared.data();
  launch.shared_size = shared_size;
  cta->local.assign(static_cast<size_t>(kernel.local_size) * warps * 32 + 16, 0);
  launch.local = cta->local.data();

  cta->registers.assign(static_cast<size_t>(kernel.slot_count) * 32 * warps, 0);
  cta->warps.assign(warps, Warp{});
  for (uint32_t i = 0; i < warps; ++i) {
    Warp& w = cta->warps[i];
    w.regs = cta->registers.data() + static_cast<size_t>(kernel.slot_count) * 32 * i;
    w.launch = &launch;
    w.index = i;
    auto fill = [&](int32_t slot, uint64_t value) {
      if (slot >= 0) std::fill_n(w.R(slot), 32, value);
    };
    for (const auto& [slot, value] : kernel.constants) fill(slot, value);
    for (int axis = 0; axis < 3; ++axis) {
      fill(kernel.ntid[axis], spec.block[axis]);
      fill(kernel.nctaid[axis], spec.grid[axis]);
    }
    fill(kernel.warpid, i);
    fill(kernel.nwarpid, 64);
    fill(kernel.nsmid, spec.sm_count);
    fill(kernel.gridid, 1);
    for (int n = 0; n < 32; ++n) fill(kernel.envreg[n], 0);
    fill(kernel.envreg[1], spec.grid_workspace >> 32);
    fill(kernel.envreg[2], spec.grid_workspace & 0xffffffffu);
    // Per-lane values, one slot at a time, and only for the slots the kernel has.
    auto fill_lanes = [&](int32_t slot, auto value_of_lane) {
      if (slot < 0) return;
      uint64_t* lanes = w.R(slot);
      for (uint32_t l = 0; l < 32; ++l) lanes[l] = value_of_lane(l);
    };
    if (kernel.tid[0] >= 0 || kernel.tid[1] >= 0 || kernel.tid[2] >= 0) {
      // Lane 0's coordinates, then counted up lane by lane (no division per lane).
      uint32_t tid[3][32];
      uint32_t coords[3] = {(i * 32) % spec.block[0], (i * 32 / spec.block[0]) % spec.block[1],
                            i * 32 / (spec.block[0] * spec.block[1])};
      for (int l = 0; l < 32; ++l) {
        for (int axis = 0; axis < 3; ++axis) tid[axis][l] = coords[axis];
        if (++coords[0] == spec.block[0]) {
          coords[0] = 0;
          if (++coords[1] == spec.block[1]) {
            coords[1] = 0;
            ++coords[2];
          }
        }
      }
      for (int axis = 0; axis < 3; ++axis) {
        fill_lanes(kernel.tid[axis], [&](uint32_t l) { return tid[axis][l]; });
      }
    }
    fill_lanes(kernel.laneid, [](uint32_t l) { return l; });
    fill_lanes(kernel.lanemask_eq, [](uint32_t l) { return 1u << l; });
    fill_lanes(kernel.lanemask_lt, [](uint32_t l) { return (1u << l) - 1; });
    fill_lanes(kernel.lanemask_le, [](uint32_t l) { return ((1u << l) - 1) | (1u << l); });
    fill_lanes(kernel.lanemask_gt, [](uint32_t l) { return ~(((1u << l) - 1) | (1u << l)); });
    fill_lanes(kernel.lanemask_ge, [](uint32_t l) { return ~((1u << l) - 1); });
    if (kernel.carry_slot >= 0) fill(kernel.carry_slot, 0);
    for (const Inst& in : kernel.prologue) in.run(w, in, kFullMask);
  }
}

// Sets `context` up to run CTA number `cta` (linear) from its first instruction.
void ResetBarrier(LaunchState& launch, int id) {
  launch.barrier_waiting[id] = launch.barrier_arrived[id] = launch.barrier_expected[id] = 0;
  launch.reduce_count[id] = 0;
  launch.reduce_all[id] = true;
  launch.reduce_any[id] = false;
}

void StartCta(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t cta,
              LaunchState* state, CtaContext* context) {
  LaunchState& launch = *state;
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  launch.ctaid[0] = static_cast<uint32_t>(cta % spec.grid[0]);
  launch.ctaid[1] = static_cast<uint32_t>((cta / spec.grid[0]) % spec.grid[1]);
  launch.ctaid[2] = static_cast<uint32_t>(cta / (uint64_t{spec.grid[0]} * spec.grid[1]));
  launch.cta_linear = static_cast<uint32_t>(cta);
  if (launch.shared_size) std::memset(launch.shared, 0, launch.shared_size);
  for (int id = 0; id < LaunchState::kBarriers; ++id) ResetBarrier(launch, id);
  launch.active_barriers = 0;
  for (uint32_t i = 0; i < context->warps.size(); ++i) {
    Warp& w = context->warps[i];
    uint32_t lanes = std::min<uint32_t>(32, threads - i * 32);
    w.live = lanes == 32 ? kFullMask : ((1u << lanes) - 1);
    w.waiting = 0;
    w.uniform = true;
    w.pc = 0;
    w.spin_mask = w.spin = w.deferred = w.defer_left = 0;
    for (int axis = 0; axis < 3; ++axis) {
      if (kernel.ctaid[axis] >= 0) std::fill_n(w.R(kernel.ctaid[axis]), 32, launch.ctaid[axis]);
    }
    if (kernel.smid >= 0) std::fill_n(w.R(kernel.smid), 32, cta % spec.sm_count);
  }
}

// Releases every barrier that is complete: a barrier given a thread count once that many
// threads arrived (bar.sync and bar.red wait, bar.arrive does not), a barrier without one
// once every live lane of the CTA waits there. True if any was.
bool ReleaseBarriers(CtaContext* context, LaunchState* state, const Inst* code) {
  LaunchState& launch = *state;
  uint32_t live = 0;
  for (const Warp& w : context->warps) live += __builtin_popcount(w.live);
  bool released = false;
  for (uint32_t active = launch.active_barriers; active != 0; active &= active - 1) {
    const int id = __builtin_ctz(active);
    const uint32_t expected = launch.barrier_expected[id];
    bool complete =
        expected != 0 ? launch.barrier_arrived[id] >= expected : launch.barrier_waiting[id] >= live;
    if (!complete) continue;
    for (Warp& w : context->warps) ReleaseBarrier(w, code, id);
    ResetBarrier(launch, id);
    launch.active_barriers &= ~(1u << id);
    released = true;
  }
  return released;
}

// Why a CTA whose every live thread waits at a barrier can go no further: its coordinates
// and, for each barrier waited at, the threads waiting and what it needs.
std::string DeadlockDetail(const CtaContext& context, const LaunchState& launch) {
  uint32_t live = 0;
  for (const Warp& w : context.warps) live += __builtin_popcount(w.live);
  std::string text = "deadlock: every running thread of block (" +
                     std::to_string(launch.ctaid[0]) + "," + std::to_string(launch.ctaid[1]) +
                     "," + std::to_string(launch.ctaid[2]) + ") waits at a barrier that cannot complete (";
  bool first = true;
  for (uint32_t active = launch.active_barriers; active != 0; active &= active - 1) {
    const int id = __builtin_ctz(active);
    if (launch.barrier_waiting[id] == 0) continue;
    if (!first) text += "; ";
    first = false;
    text += "barrier " + std::to_string(id) + ": " + std::to_string(launch.barrier_waiting[id]) +
            " threads waiting, ";
    text += launch.barrier_expected[id] != 0
                ? std::to_string(launch.barrier_arrived[id]) + " of the " +
                      std::to_string(launch.barrier_expected[id]) + " its count names arrived"
                : "all " + std::to_string(live) + " running threads needed";
  }
  return text + ")";
}

// One round of a CTA: each warp with lanes ready runs for a slice; a barrier that is
// complete is released. False once every warp has exited (or on an error).
bool StepCta(CtaContext* context, LaunchState* state, const Inst* code) {
  LaunchState& launch = *state;
  // A round is a bounded number of warp instructions (a slice per warp): a cancelled
  // launch ends here, however long its kernel would run.
  if (launch.spec->cancel != nullptr && launch.spec->cancel->load(std::memory_order_relaxed)) {
    launch.error = kLaunchTimeout;
    launch.detail = kCancelledDetail;
    return false;
  }
  bool any_live = false;
  bool any_ready = false;
  for (Warp& w : context->warps) {
    if (w.live & ~w.waiting) RunWarp(w, code);
    if (launch.error != kSuccess) return false;
    any_live |= w.live != 0;
    any_ready |= (w.live & ~w.waiting) != 0;
  }
  if (!any_live) return false;
  if (launch.active_barriers != 0 && !ReleaseBarriers(context, state, code) && !any_ready) {
    // Every live lane waits, at barriers that cannot complete (counts that the waiting
    // threads do not reach, or threads split over two barriers): a GPU would hang until
    // the job's time ran out. Nothing outside the CTA can release a barrier of its own, so
    // this is the tenant's deadlock, told apart for certain: the launch fails naming it
    // (releasing the threads instead would run on with wrong answers).
    launch.error = kLaunchFailed;
    launch.detail = DeadlockDetail(*context, launch);
    return false;
  }
  return true;
}

// How many CTAs of this launch one worker keeps resident once a CTA seems to wait for
// others: its share of what the GPU holds at once (blocks per SM by threads and shared
// memory, as on sm_80 and later: 2048 threads, 32 blocks, 228 KiB), within the memory a
// cooperative launch may take.
uint64_t ResidentPerWorker(const DecodedKernel& kernel, const LaunchSpec& spec, uint32_t workers) {
  const uint64_t threads = uint64_t{spec.block[0]} * spec.block[1] * spec.block[2];
  const uint64_t warps = (threads + 31) / 32;
  const uint64_t shared = kernel.static_shared + spec.dynamic_shared;
  uint64_t per_sm = std::min<uint64_t>(32, std::max<uint64_t>(1, 2048 / (warps * 32)));
  if (shared > 0) per_sm = std::min<uint64_t>(per_sm, std::max<uint64_t>(1, 228 * 1024 / shared));
  // What PrepareCta allocates for one: registers, local and shared memory, range hints.
  const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size) +
                           shared + kernel.code.size() * sizeof(uint32_t) + 4096;
  uint64_t resident = uint64_t{std::max(spec.sm_count, 1u)} * per_sm;
  resident = std::min(resident, std::max<uint64_t>(1, kMaxCooperativeBytes / per_cta));
  return std::max<uint64_t>(1, (resident + workers - 1) / workers);
}

// Runs the worker's CTAs from `cta` on (cta, cta + stride, ...) with several resident at
// once, taking turns with short slices: `cta` itself is under way in *state and *context;
// the others get states and contexts of their own. The resident CTAs double, up to what a
// GPU of the model holds (ResidentPerWorker), each time they together run
// kResidentAfter warp instructions per CTA with none finishing: CTAs waiting for others
// soon have them resident, while long CTAs that do finish stay few (their memory, and
// the slices' switching, cost little). Their printf text, instruction counts and first
// error end up in *state.
void RunResident(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t cta, uint64_t stride,
                 uint32_t workers, std::atomic<bool>* stop, LaunchState* state,
                 CtaContext* context) {
  const Inst* code = kernel.code.data();
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  const uint64_t limit = ResidentPerWorker(kernel, spec, workers);
  struct Slot {
    LaunchState* state;
    CtaContext* context;
    bool running;
  };
  std::vector<std::unique_ptr<LaunchState>> own_states;
  std::vector<std::unique_ptr<CtaContext>> own_contexts;
  state->slice = kCooperativeWarpSlice;
  std::vector<Slot> slots{{state, context, true}};
  uint64_t next = cta + stride;
  auto start_next = [&](Slot& slot) {
    if (next >= ctas || stop->load(std::memory_order_relaxed)) return false;
    if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
    StartCta(kernel, spec, next, slot.state, slot.context);
    next += stride;
    return true;
  };
  auto instructions = [&] {
    uint64_t total = 0;
    for (const Slot& slot : slots) total += slot.state->clock;
    return total;
  };
  uint64_t wanted = 2;
  uint64_t epoch_start = instructions();
  bool finished_in_epoch = false;
  for (bool any = true; any;) {
    while (slots.size() < std::min(wanted, limit) && next < ctas) {
      own_states.push_back(std::make_unique<LaunchState>());
      own_contexts.push_back(std::make_unique<CtaContext>());
      own_states.back()->slice = kCooperativeWarpSlice;
      PrepareCta(kernel, spec, own_states.back().get(), own_contexts.back().get());
      slots.push_back({own_states.back().get(), own_contexts.back().get(), false});
      slots.back().running = start_next(slots.back());
    }
    // Short turns while CTAs share the thread; a CTA left alone runs as RunCtas runs it.
    size_t running = 0;
    for (const Slot& slot : slots) running += slot.running;
    any = false;
    for (Slot& slot : slots) {
      if (!slot.running) continue;
      any = true;
      slot.state->slice = running > 1 ? kCooperativeWarpSlice : kWarpSlice;
      if (StepCta(slot.context, slot.state, code)) continue;
      finished_in_epoch = true;
      if (slot.state->error != kSuccess) {
        stop->store(true);
        slot.running = false;
        continue;
      }
      slot.running = start_next(slot);
    }
    // Another worker failed: its CTAs will never arrive; the waiting ones are abandoned.
    if (stop->load(std::memory_order_relaxed)) break;
    if (const uint64_t now = instructions(); now - epoch_start > kResidentAfter * slots.size()) {
      if (!finished_in_epoch) wanted = std::min(limit, wanted * 2);
      epoch_start = now;
      finished_in_epoch = false;
    }
  }
  for (size_t i = 1; i < slots.size(); ++i) {
    LaunchState& other = *slots[i].state;
    AppendPrintf(&state->printf, other.printf, &state->printf_dropped);
    state->printf_dropped += other.printf_dropped;
    state->thread_instructions += other.thread_instructions;
    if (other.error != kSuccess &&
        (state->error == kSuccess || other.cta_linear < state->cta_linear)) {
      state->error = other.error;
      state->detail = other.detail;
      state->cta_linear = other.cta_linear;
    }
  }
}

// Runs CTAs first, first + stride, ... of the launch into *state (one worker thread of
// `workers`), one at a time until one seems to wait for others (RunResident).
void RunCtas(const DecodedKernel& kernel, const LaunchSpec& spec, uint64_t first, uint64_t stride,
             std::atomic<bool>* stop, LaunchState* state, CtaContext* cta_context) {
  CtaContext& context = *cta_context;
  PrepareCta(kernel, spec, state, &context);
  const Inst* code = kernel.code.data();
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  for (uint64_t cta = first; cta < ctas; cta += stride) {
    if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
    if (stop->load(std::memory_order_relaxed)) break;
    StartCta(kernel, spec, cta, state, &context);
    const uint64_t started = state->clock;
    while (StepCta(&context, state, code)) {
      if (state->clock - started > kResidentAfter && cta + stride < ctas) {
        RunResident(kernel, spec, cta, stride, static_cast<uint32_t>(stride), stop, state,
                    &context);
        return;
      }
    }
    if (state->error != kSuccess) {
      stop->store(true);
      break;
    }
  }
}

// A cooperative launch: every CTA resident at once, each with a state of its own, taking
// rounds on this thread until all have exited. A CTA spinning on memory that another
// will write (grid.sync()) uses its slice and lets the others run.
void RunCooperative(const DecodedKernel& kernel, const LaunchSpec& spec,
                    std::vector<LaunchState>* states) {
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  states->resize(ctas);
  std::vector<CtaContext> contexts(ctas);
  for (uint64_t cta = 0; cta < ctas; ++cta) {
    // Short turns: a warp waiting for the other CTAs spins until its turn ends.
    (*states)[cta].slice = kCooperativeWarpSlice;
    PrepareCta(kernel, spec, &(*states)[cta], &contexts[cta]);
    StartCta(kernel, spec, cta, &(*states)[cta], &contexts[cta]);
  }
  const Inst* code = kernel.code.data();
  std::vector<bool> running(ctas, true);
  for (uint64_t left = ctas; left > 0;) {
    for (uint64_t cta = 0; cta < ctas; ++cta) {
      if (!running[cta]) continue;
      if (!StepCta(&contexts[cta], &(*states)[cta], code)) {
        if ((*states)[cta].error != kSuccess) return;
        running[cta] = false;
        --left;
        if (spec.progress != nullptr) spec.progress->fetch_add(1, std::memory_order_relaxed);
      }
    }
  }
}

}  // namespace

// ---- Public API
// ---------------------------------------------------------------------------

void AppendPrintf(std::string* out, std::string_view text, uint64_t* dropped) {
  if (out->size() > kMaxPrintfBytes || text.size() > kMaxPrintfBytes - out->size()) {
    *dropped += text.size();
    return;
  }
  out->append(text);
}

Result<const DecodedKernel*> PtxModule::Decode(const std::string& name,
                                               const std::map<std::string, uint64_t>& addresses) {
  if (auto done = decoded_.find(name); done != decoded_.end()) return done->second.get();
  if (auto failed = failed_.find(name); failed != failed_.end()) return failed->second;
  if (!HasKernel(name)) return Status::NotFound("no kernel " + name + " in the PTX");
  auto kernel = std::make_unique<DecodedKernel>();
  Decoder decoder(*parsed_, addresses, kernel.get());
  Status status = decoder.Run(parsed_->functions.at(name));
  if (!status.ok()) {
    failed_[name] = status;
    return status;
  }
  kernel->source = &parsed_->functions.at(name);
  const DecodedKernel* result = kernel.get();
  decoded_[name] = std::move(kernel);
  return result;
}

KernelNeeds NeedsOf(const DecodedKernel& kernel) {
  KernelNeeds needs;
  needs.max_threads = kernel.max_threads != 0 ? std::min<uint32_t>(kernel.max_threads, 1024) : 1024;
  needs.static_shared = kernel.declared_shared;
  needs.const_bytes = kernel.const_bytes;
  needs.local_bytes = kernel.local_size;
  return needs;
}

uint32_t KernelParamSize(const DecodedKernel& kernel) { return kernel.param_size; }

// The kernel's compiled form when this launch should run it (jit/jit.h): not for what the
// tier leaves to the interpreter (cooperative launches, dynamic shared memory). Under
// GPUPOOL_PTX_JIT=auto the kernel is compiled in the background once it has run
// kJitAfterThreads threads, and its launches run on the interpreter until the code is there.
static const CompiledKernel* CompiledFor(const DecodedKernel& kernel, const LaunchSpec& spec,
                                         uint64_t threads) {
  const JitMode mode = CurrentJitMode();
  if (mode == JitMode::kOff || kernel.source == nullptr || spec.cooperative ||
      spec.dynamic_shared != 0) {
    return nullptr;
  }
  JitSlot& slot = *kernel.jit;
  if (mode == JitMode::kAuto &&
      slot.threads_run.fetch_add(std::max(threads, kJitLaunchThreads)) < kJitAfterThreads) {
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(slot.mu);
  if (!slot.tried) {
    slot.tried = true;
    if (mode == JitMode::kAuto) {
      CompileInBackground(kernel.jit, *kernel.source, kernel.shared_layout, kernel.param_size);
    } else {
      slot.compiled =
          CompileKernel(*kernel.source, kernel.shared_layout, kernel.param_size, &slot.refused);
    }
  }
  return slot.compiled.get();
}

int32_t RunKernel(const DecodedKernel& kernel, const LaunchSpec& spec) {
  if (!kernel.unsupported.empty()) {
    if (spec.error_detail) *spec.error_detail = kernel.unsupported;
    return kNotSupported;
  }
  if (spec.param_size < kernel.param_size) {
    if (spec.error_detail)
      *spec.error_detail = "parameter buffer smaller than the kernel's parameters";
    return kInvalidValue;
  }
  const uint32_t threads = spec.block[0] * spec.block[1] * spec.block[2];
  if (threads == 0 || threads > 1024) return kInvalidValue;
  if (kernel.max_threads != 0 && threads > kernel.max_threads) {
    // As a GPU refuses a block larger than the kernel's __launch_bounds__.
    if (spec.error_detail) {
      *spec.error_detail = "kernel " + kernel.name + " was compiled for at most " +
                           std::to_string(kernel.max_threads) +
                           " threads per block, launched with " + std::to_string(threads);
    }
    return kOutOfResources;
  }
  const uint64_t shared_size = kernel.static_shared + spec.dynamic_shared;
  if (shared_size > 228 * 1024) return kOutOfResources;
  // What a CTA holds in host memory: bounded, as a GPU bounds local memory (512 KiB per
  // thread) and registers, so that a job's PTX cannot make the agent allocate without end.
  {
    const uint64_t warps = (threads + 31) / 32;
    const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size);
    if (kernel.local_size > kMaxLocalPerThread || per_cta > kMaxCtaBytes) {
      if (spec.error_detail) {
        *spec.error_detail = "kernel " + kernel.name + " needs " +
                             std::to_string(kernel.local_size) + " bytes of local memory and " +
                             std::to_string(kernel.slot_count) +
                             " registers per thread: more than the sim GPU holds";
      }
      return kOutOfResources;
    }
  }
  const uint64_t ctas = uint64_t{spec.grid[0]} * spec.grid[1] * spec.grid[2];
  // CTAs are independent: two workers take every other one when there are enough.
  const uint32_t workers = ctas >= 4 && std::thread::hardware_concurrency() >= 2 ? kMaxWorkers : 1;
  if (const CompiledKernel* compiled = CompiledFor(kernel, spec, threads * ctas)) {
    kernel.jit->jit_launches.fetch_add(1, std::memory_order_relaxed);
    return RunCompiled(*compiled, spec, workers);
  }
  std::vector<LaunchState> cooperative_states;
  LaunchState worker_states[kMaxWorkers];
  std::span<LaunchState> states;
  if (spec.cooperative) {
    // All CTAs at once: their registers, local and shared memory together must fit.
    const uint64_t warps = (threads + 31) / 32;
    const uint64_t per_cta = warps * 32 * (uint64_t{kernel.slot_count} * 8 + kernel.local_size) +
                             shared_size + sizeof(LaunchState);
    if (ctas > kMaxCooperativeCtas || per_cta * ctas > kMaxCooperativeBytes) {
      if (spec.error_detail) {
        *spec.error_detail = "a cooperative launch of " + std::to_string(ctas) +
                             " blocks does not fit the sim GPU at once";
      }
      return kCooperativeTooLarge;
    }
    RunCooperative(kernel, spec, &cooperative_states);
    states = cooperative_states;
  } else {
    std::atomic<bool> stop{false};
    states = std::span<LaunchState>(worker_states, workers);
    // No exception leaves a worker (a helper thread's would end the process): a worker
    // that runs out of host memory fails the launch.
    auto run = [&](uint32_t worker, CtaContext* context) {
      try {
        RunCtas(kernel, spec, worker, workers, &stop, &states[worker], context);
      } catch (const std::exception&) {
        *context = CtaContext{};
        states[worker].error = kOutOfResources;
        states[worker].detail = "the launch ran out of host memory";
        states[worker].cta_linear = 0;
        stop.store(true);
      }
    };
    std::vector<std::thread> threads_of_workers;
    std::vector<uint32_t> inline_workers;  // whose thread could not be started: run here
    for (uint32_t worker = 1; worker < workers; ++worker) {
      try {
        threads_of_workers.emplace_back([&, worker] {
          CtaContext context;
          run(worker, &context);
        });
      } catch (const std::exception&) {
        inline_workers.push_back(worker);
      }
    }
    CtaContext* context = CallerContext();
    run(0, context);
    for (uint32_t worker : inline_workers) run(worker, context);
    TrimCallerContext(context);
    for (std::thread& thread : threads_of_workers) thread.join();
  }
  int32_t error = kSuccess;
  uint64_t first_failed_cta = UINT64_MAX;
  for (LaunchState& state : states) {
    if (spec.printf_out != nullptr) {
      uint64_t dropped = state.printf_dropped;
      AppendPrintf(spec.printf_out, state.printf, &dropped);
      if (spec.printf_dropped != nullptr) *spec.printf_dropped += dropped;
    }
    if (spec.thread_instructions) *spec.thread_instructions += state.thread_instructions;
    if (state.error != kSuccess && state.cta_linear < first_failed_cta) {
      first_failed_cta = state.cta_linear;
      error = state.error;
      if (spec.error_detail) *spec.error_detail = state.detail;
    }
  }
  return error;
}

}  // namespace gpupool::sim
