// The interpreter's Warp matrix operations (wmma load/store/mma, mma.sync, ldmatrix), cvt
// to tf32, cp.async and mbarrier. Private interface: wmma.h and internal.h.
#include "remote/ptx/interp/internal.h"
#include "remote/ptx/interp/wmma.h"
#include "remote/ptx/tensor_copy.h"

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
// memory holds the arrivals still pending in bits 0-20, the expected count in bits 21-41,
// the transaction count (sm_90: bytes expected less bytes completed, signed) in bits 42-62
// and the phase in bit 63; PTX leaves the layout to the implementation, and bounds the
// counts to 2^20 - 1 and the transaction count to +-(2^20 - 1). A phase completes once no
// arrival is pending and the transaction count is 0 (bytes may complete before they are
// expected: a bulk copy the sim does at once). A CTA's warps (a cluster's blocks) run on one
// thread, so the operations need no atomics. mode (MbarrierOp): init [a], b; arrive d, [a],
// b (count); arrive_drop (the same, and the expected count drops by b too); expect_tx and
// complete_tx [a], b (bytes); arrive{_drop}.expect_tx d, [a], b (bytes; one arrival);
// test_wait d, [a], b (a state from arrive); test_wait.parity d, [a], b (a phase parity);
// inval [a]; pending_count d, b (from a state). A state is the object's phase and pending
// arrivals as the arrival left them. try_wait runs as test_wait: a warp that waits loops,
// and its turn ends at a wait that finds the phase incomplete (Warp::yield), so that the
// CTA's other warps, which it waits for, run next.
namespace {

constexpr uint64_t kMbarPhase = uint64_t{1} << 63;
constexpr uint64_t kMbarCount = (uint64_t{1} << 21) - 1;
constexpr int kMbarExpectedShift = 21;
constexpr int kMbarTxShift = 42;

struct MbarrierState {
  uint64_t phase = 0;  // kMbarPhase or 0
  uint64_t pending = 0;
  uint64_t expected = 0;
  int64_t tx = 0;

  static MbarrierState Of(uint64_t object) {
    MbarrierState state;
    state.phase = object & kMbarPhase;
    state.pending = object & kMbarCount;
    state.expected = (object >> kMbarExpectedShift) & kMbarCount;
    // The 21-bit transaction count, sign-extended.
    state.tx = static_cast<int64_t>(((object >> kMbarTxShift) & kMbarCount) << 43) >> 43;
    return state;
  }
  // The phase completes once nothing is pending: the next starts with the expected count.
  uint64_t Object() {
    if (pending == 0 && tx == 0) {
      phase ^= kMbarPhase;
      pending = expected;
    }
    return phase | (static_cast<uint64_t>(tx) & kMbarCount) << kMbarTxShift |
           (expected & kMbarCount) << kMbarExpectedShift | (pending & kMbarCount);
  }
  // Transaction bytes within PTX's bound (a count past it is the program's error; kept in
  // range here so that the fields never overlap).
  void AddTx(int64_t bytes) { tx = std::clamp<int64_t>(tx + bytes, -kMaxTx, kMaxTx); }
  static constexpr int64_t kMaxTx = (int64_t{1} << 20) - 1;
};

}  // namespace

void MbarrierCompleteTx(uint8_t* object_bytes, uint32_t bytes) {
  uint64_t object;
  std::memcpy(&object, object_bytes, 8);
  MbarrierState state = MbarrierState::Of(object);
  state.AddTx(-static_cast<int64_t>(bytes));
  object = state.Object();
  std::memcpy(object_bytes, &object, 8);
}

// cp.async.bulk [a + offset], [b + aux], c{, [e + printf_fmt]} (mode BulkCopyKind): c
// bytes, a multiple of 16 at 16-byte aligned addresses (else a misaligned-address fault),
// copied at once; a copy into shared memory then completes its bytes on the mbarrier
// (which the destination's block holds).
void HBulkCopy(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* dst = w.R(in.a);
  const uint64_t* src = w.R(in.b);
  const uint64_t* size = w.R(in.c);
  const uint64_t* barrier = in.e >= 0 ? w.R(in.e) : nullptr;
  const Space from_space = in.mode == kBulkGlobalToShared ? Space::kGlobal : Space::kShared;
  const Space to_space = in.mode == kBulkSharedToGlobal ? Space::kGlobal : Space::kShared;
  ForLanes(mask, [&](int l) {
    const uint32_t bytes = static_cast<uint32_t>(size[l]);
    const uint64_t to = dst[l] + static_cast<uint64_t>(in.offset);
    const uint64_t from = src[l] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.aux)));
    if (bytes % 16 != 0 || to % 16 != 0 || from % 16 != 0) {
      w.Fault(to % 16 != 0 || bytes % 16 != 0 ? to : from, bytes, "misaligned cp.async.bulk");
      return;
    }
    uint8_t* target = w.Address(to_space, to, bytes, l);
    if (target == nullptr) {
      w.Fault(to, bytes, "cp.async.bulk store");
      return;
    }
    const uint8_t* source = w.Address(from_space, from, bytes, l);
    if (source == nullptr) {
      w.Fault(from, bytes, "cp.async.bulk load");
      return;
    }
    if (bytes > 0) std::memmove(target, source, bytes);
    if (barrier == nullptr) return;
    const uint64_t at = barrier[l] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.printf_fmt)));
    uint8_t* object = w.Address(Space::kShared, at, 8, l);
    if (object == nullptr) {
      w.Fault(at, 8, "mbarrier");
      return;
    }
    MbarrierCompleteTx(object, bytes);
  });
}

// cp.async.bulk.tensor (DecodedKernel::tensor_copies[aux]): per lane, the tensor map at its
// generic address (64-byte aligned, 128 bytes, checked by tensor::ParseMap), the box at the
// coordinates between global memory and the shared memory at a + offset (128-byte aligned);
// a load then completes the box's bytes on the mbarrier at e + printf_fmt. A map that is
// not a sim map, or is corrupt, fails the launch (CUDA_ERROR_LAUNCH_FAILED) and names why.
void HTensorCopy(Warp& w, const Inst& in, uint32_t mask) {
  const TensorCopyOp& op = w.launch->kernel->tensor_copies[in.aux];
  const tensor::Memory memory{&w, [](void* context, uint64_t address, uint32_t size) {
                                return static_cast<Warp*>(context)->Global(address, size);
                              }};
  ForLanes(mask, [&](int l) {
    const uint64_t map_address = w.R(op.map)[l] + static_cast<uint64_t>(op.map_offset);
    const uint8_t* bytes = map_address % 64 == 0 ? w.Address(Space::kGeneric, map_address, 128, l) : nullptr;
    if (bytes == nullptr) {
      w.Fault(map_address, 128, map_address % 64 != 0 ? "misaligned tensor map" : "tensor map");
      return;
    }
    tensor::Map map;
    std::string why;
    if (!tensor::ParseMap(bytes, &map, &why) || map.raw.rank != op.rank) {
      if (w.launch->error != kSuccess) return;
      char at[24];
      std::snprintf(at, sizeof(at), "0x%llx", static_cast<unsigned long long>(map_address));
      w.launch->error = kLaunchFailed;
      w.launch->detail = "cp.async.bulk.tensor." + std::to_string(op.rank) + "d (PTX line " + std::to_string(in.line) +
                         ") with the tensor map at " + at + ": " +
                         (why.empty() ? "tensor map: rank " + std::to_string(map.raw.rank) : why);
      return;
    }
    const uint64_t box = w.R(in.a)[l] + static_cast<uint64_t>(in.offset);
    if (box % 128 != 0) {
      w.Fault(box, static_cast<uint32_t>(std::min<uint64_t>(map.box_bytes, UINT32_MAX)),
              "misaligned cp.async.bulk.tensor");
      return;
    }
    uint8_t* shared =
        map.box_bytes <= UINT32_MAX ? w.Address(Space::kShared, box, static_cast<uint32_t>(map.box_bytes), l) : nullptr;
    if (shared == nullptr) {
      w.Fault(box, static_cast<uint32_t>(std::min<uint64_t>(map.box_bytes, UINT32_MAX)), "cp.async.bulk.tensor box");
      return;
    }
    int32_t coords[5] = {};
    for (int i = 0; i < op.rank; ++i) coords[i] = static_cast<int32_t>(w.R(op.coords[i])[l]);
    tensor::Fault fault;
    const auto direction = op.store ? tensor::Direction::kStore : tensor::Direction::kLoad;
    if (!tensor::Copy(map, coords, direction, shared, box, memory, &fault)) {
      w.Fault(fault.address, fault.size, fault.what);
      return;
    }
    if (op.store) return;
    const uint64_t at = w.R(in.e)[l] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.printf_fmt)));
    uint8_t* object = w.Address(Space::kShared, at, 8, l);
    if (object == nullptr) {
      w.Fault(at, 8, "mbarrier");
      return;
    }
    MbarrierCompleteTx(object, static_cast<uint32_t>(map.box_bytes));
  });
}

namespace {

// The mbarrier of an asynchronous store (e + printf_fmt) completes `bytes`.
void CompleteAsyncStore(Warp& w, const Inst& in, int lane, uint32_t bytes) {
  const uint64_t at =
      w.R(in.e)[lane] + static_cast<uint64_t>(static_cast<int64_t>(static_cast<int32_t>(in.printf_fmt)));
  uint8_t* object = w.Address(Space::kShared, at, 8, lane);
  if (object == nullptr) {
    w.Fault(at, 8, "mbarrier");
    return;
  }
  MbarrierCompleteTx(object, bytes);
}

template <typename T>
void RedAsyncLane(Warp& w, const Inst& in, int lane, uint64_t address) {
  uint8_t* p = w.Address(Space::kShared, address, sizeof(T), lane);
  if (p == nullptr || address % sizeof(T) != 0) {
    w.Fault(address, sizeof(T), p == nullptr ? "red.async" : "misaligned red.async");
    return;
  }
  T old;
  std::memcpy(&old, p, sizeof(T));
  const T result = AtomicResult<T>(in.mode, old, Get<T>(w.R(in.b)[lane]), T(0));
  std::memcpy(p, &result, sizeof(T));
  CompleteAsyncStore(w, in, lane, sizeof(T));
}

}  // namespace

// st.async{.vec}.type [a + offset], {d...}, [e + printf_fmt]: the elements (width bytes
// each) stored into the cluster's shared memory, then their bytes completed on the
// mbarrier. A cluster's blocks run on one thread: no atomics needed.
void HStoreAsync(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  const uint32_t bytes = uint32_t{in.width} * in.vec;
  ForLanes(mask, [&](int l) {
    const uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    uint8_t* p = w.Address(Space::kShared, address, bytes, l);
    if (p == nullptr || address % bytes != 0) {
      w.Fault(address, bytes, p == nullptr ? "st.async" : "misaligned st.async");
      return;
    }
    for (int i = 0; i < in.vec; ++i) {
      const uint64_t value = w.R(in.d[i])[l];
      std::memcpy(p + i * in.width, &value, in.width);  // little-endian: the low bytes
    }
    CompleteAsyncStore(w, in, l, bytes);
  });
}

// red.async.op.type [a + offset], b, [e + printf_fmt] (mode AtomOp; mode2: 0 u32, 1 s32,
// 2 64-bit): the reduction on the cluster's shared memory, then its bytes completed.
void HRedAsync(Warp& w, const Inst& in, uint32_t mask) {
  const uint64_t* a = w.R(in.a);
  ForLanes(mask, [&](int l) {
    const uint64_t address = a[l] + static_cast<uint64_t>(in.offset);
    if (in.mode2 == 2) {
      RedAsyncLane<uint64_t>(w, in, l, address);
    } else if (in.mode2 == 1) {
      RedAsyncLane<int32_t>(w, in, l, address);
    } else {
      RedAsyncLane<uint32_t>(w, in, l, address);
    }
  });
}

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
    MbarrierState state = MbarrierState::Of(object);
    switch (in.mode) {
      case kMbarrierInit: {
        const uint64_t count = b[l] & kMbarCount;
        state = MbarrierState{};
        state.pending = state.expected = count;
        object = state.phase | (count << kMbarExpectedShift) | count;  // no phase completes at init
        break;
      }
      case kMbarrierExpectTx:
      case kMbarrierCompleteTx: {
        const int64_t bytes = static_cast<int64_t>(b[l] & 0xffffffffu);
        state.AddTx(in.mode == kMbarrierExpectTx ? bytes : -bytes);
        object = state.Object();
        break;
      }
      case kMbarrierArrive:
      case kMbarrierArriveDrop:
      case kMbarrierArriveExpectTx:
      case kMbarrierArriveDropExpectTx: {
        const bool with_tx = in.mode == kMbarrierArriveExpectTx || in.mode == kMbarrierArriveDropExpectTx;
        const bool drop = in.mode == kMbarrierArriveDrop || in.mode == kMbarrierArriveDropExpectTx;
        if (with_tx) state.AddTx(static_cast<int64_t>(b[l] & 0xffffffffu));
        const uint64_t count = b != nullptr && !with_tx ? b[l] & kMbarCount : 1;
        state.pending = state.pending > count ? state.pending - count : 0;
        if (drop) state.expected = state.expected > count ? state.expected - count : 0;
        if (d != nullptr) d[l] = state.phase | state.pending;
        object = state.Object();
        break;
      }
      case kMbarrierTestWait:
        d[l] = (b[l] & kMbarPhase) != state.phase;
        w.yield |= d[l] == 0;
        return;
      case kMbarrierTestParity:
        d[l] = ((b[l] & 1) != 0) != (state.phase != 0);
        w.yield |= d[l] == 0;
        return;
      default:
        object = 0;
        break;
    }
    std::memcpy(p, &object, 8);
  });
}

namespace {

// The host address of the 16-bit element h (0 or 1) of register j of lane l in ldmatrix's
// and stmatrix's layout (LdmatrixAddress over the lanes' row addresses in *rows); nullptr,
// with the fault named `what`, when it is stray.
uint8_t* MatrixHalf(Warp& w, const Inst& in, const uint64_t* rows, int l, int j, int h, const char* what) {
  const uint64_t address = LdmatrixAddress(rows, static_cast<uint32_t>(l), static_cast<uint32_t>(j),
                                           static_cast<uint32_t>(h), (in.flags & kFlagSigned) != 0);
  uint8_t* p = w.Address(in.space, address, 2, l);
  if (p == nullptr) w.Fault(address, 2, what);
  return p;
}

// The 32 lanes' row addresses: lane 8j + r gives row r of matrix j.
void MatrixRows(Warp& w, const Inst& in, uint64_t rows[32]) {
  const uint64_t* a = w.R(in.a);
  for (int l = 0; l < 32; ++l) rows[l] = a[l] + static_cast<uint64_t>(in.offset);
}

}  // namespace

// ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 {d...}, [a]: vec 8x8 matrices
// of 16-bit elements; row r of matrix j starts at the address lane 8j + r gives. Lane l
// receives in register j the elements (l / 4, 2 (l % 4)) and (l / 4, 2 (l % 4) + 1) of
// matrix j, or with .trans (flag signed) the elements (2 (l % 4), l / 4) and
// (2 (l % 4) + 1, l / 4): LdmatrixAddress (matrix_ops.h), which compiled code places them by too.
void HLdmatrix(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t rows[32];
  MatrixRows(w, in, rows);
  ForLanes(mask, [&](int l) {
    for (int j = 0; j < in.vec; ++j) {
      uint32_t word = 0;
      for (int h = 0; h < 2; ++h) {
        const uint8_t* p = MatrixHalf(w, in, rows, l, j, h, "ldmatrix");
        if (p == nullptr) return;
        uint16_t half;
        std::memcpy(&half, p, 2);
        word |= static_cast<uint32_t>(half) << (16 * h);
      }
      w.R(in.d[j])[l] = word;
    }
  });
}

// stmatrix.sync.aligned.m8n8.{x1,x2,x4}{.trans}.shared.b16 [a], {d...}: the inverse of
// ldmatrix: lane l's register j holds the two elements ldmatrix would give it, stored
// where ldmatrix would read them.
void HStmatrix(Warp& w, const Inst& in, uint32_t mask) {
  uint64_t rows[32];
  MatrixRows(w, in, rows);
  ForLanes(mask, [&](int l) {
    for (int j = 0; j < in.vec; ++j) {
      const uint32_t word = static_cast<uint32_t>(w.R(in.d[j])[l]);
      for (int h = 0; h < 2; ++h) {
        uint8_t* p = MatrixHalf(w, in, rows, l, j, h, "stmatrix");
        if (p == nullptr) return;
        const uint16_t half = static_cast<uint16_t>(word >> (16 * h));
        std::memcpy(p, &half, 2);
      }
    }
  });
}

}  // namespace gpupool::sim::interp
