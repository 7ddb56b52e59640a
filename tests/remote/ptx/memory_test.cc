// The PTX engine's tests: loads, stores, atomics, fences, async copies and faults (interp/memory.*).
// The fixture and helpers: engine_fixture.h.
#include "tests/remote/ptx/engine_fixture.h"

namespace gpupool::dataplane {
namespace {

using ptx_test::Engine;
using ptx_test::KernelText;
using ptx_test::ToHalf;

// A parameter's ".ptr [.space] .align N" (as the toolkit's libraries write their pointer
// parameters) gives the pointee's alignment: the pointer itself stays 8-aligned, so the
// parameters after it are where the host packed them. cuBLAS's reductions read their
// pointer mode 4 bytes early, and faulted, when ".align 1" was taken for the parameter's.
TEST_F(Engine, PointerParameterAlignmentIsThePointees) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(11, 98, "PointerParameterAlignmentIsThePointees.ptx", "ptr_params"));
  uint64_t out = Zeros<uint32_t>(4), in = Upload(std::vector<uint32_t>{7});
  struct {
    uint32_t a;
    uint64_t out;  // at 8
    uint32_t b;    // at 16
    uint64_t in;   // at 24
    uint32_t c;    // at 32
  } params{0xa, out, 0xb, in, 0xc};
  static_assert(offsetof(decltype(params), in) == 24);
  ASSERT_EQ(LaunchLoaded(98, 1, 1, params), kCuSuccess) << executor_.TakeErrorDetail();
  EXPECT_EQ(Download<uint32_t>(out, 4), (std::vector<uint32_t>{0xa, 0xb, 0xc, 7}));
}

// Atomics on 16-bit values (atomicAdd on __half, __half2, __nv_bfloat16; atomicCAS on an
// unsigned short): 64 threads add into neighbouring halves of one word, so a wrong word
// update would spill into the neighbour. Hand-written, like the tests above.
TEST_F(Engine, SixteenBitAtomics) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(4, 97, "SixteenBitAtomics.ptx", "atomics16"));
  const auto got = LaunchForOutput<uint16_t>(97, 1, 64, 8);
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(got[0], ToHalf(64.0f));   // 64 x 1.0 into the lower half
  EXPECT_EQ(got[1], ToHalf(128.0f));  // 64 x 2.0 into the upper half
  EXPECT_EQ(got[2], ToHalf(32.0f));   // 64 x 0.5
  EXPECT_EQ(got[3], 0x4280);          // bf16: 64 x 1.0 = 64
  EXPECT_EQ(got[4], 0);               // untouched neighbour
  EXPECT_EQ(got[5], 64);              // the compare-and-swap chain, thread by thread
  EXPECT_EQ(got[6], 0);
}

// cp.async (sm_80): the ignore-src form (inline PTX only; nvcc's own code is in
// tests/remote/driver/async_copies.cu) zero fills instead of reading, a source offset
// applies, and a source past the end of its allocation faults like any load.
// An mbarrier's phase completes once no arrival is pending and its transaction count is 0,
// in whichever order the bytes are expected and completed (sm_90: bulk copies).
TEST_F(Engine, MbarrierPhasesWaitForTheirTransactionCounts) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(16, 98, "MbarrierTransactionCounts.ptx", "transaction_counts"));
  const auto got = LaunchForOutput<uint32_t>(98, 1, 1, 7);
  // Phase 0: bytes completed early (no), then the arrival expecting them (yes). Phase 1:
  // bytes expected (no), the arrival (no: bytes outstanding), part of them (no), the rest
  // (yes); then the arrivals the arrival left pending (0).
  EXPECT_EQ(got, (std::vector<uint32_t>{0, 1, 0, 0, 0, 1, 0}));
}

// A bulk copy whose size is no multiple of 16, or that leaves the block's shared memory,
// faults (CUDA_ERROR_ILLEGAL_ADDRESS naming it) and copies nothing.
TEST_F(Engine, BulkCopiesOutOfBoundsOrMisalignedFault) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(17, 99, "MbarrierTransactionCounts.ptx", "bad_bulk"));
  const uint64_t in = Zeros<uint32_t>(64);
  for (uint32_t mode : {0u, 1u}) {
    struct {
      uint64_t in;
      uint32_t mode;
    } params{in, mode};
    EXPECT_EQ(LaunchLoaded(99, 1, 1, params), kCuIllegalAddress) << mode;
    const std::string detail = executor_.TakeErrorDetail();
    EXPECT_NE(detail.find(mode == 0 ? "misaligned cp.async.bulk" : "cp.async.bulk store of 64 bytes"),
              std::string::npos)
        << detail;
  }
}

TEST_F(Engine, AsyncCopiesToSharedMemory) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(7, 94, "AsyncCopiesToSharedMemory.ptx", "copy_async"));
  const int threads = 32;
  std::vector<uint32_t> in(4 * (threads + 1));
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint32_t>(i * 7 + 1);
  struct {
    uint64_t in, out;
  } params{Upload(in), Zeros<uint32_t>(4 * threads)};
  device::LaunchConfig config;
  config.block[0] = threads;
  ASSERT_EQ(executor_.Launch(94, config, &params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(params.out, 4 * threads);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got[4 * t + i], t % 4 == 3 ? 0u : in[4 * (t + 1) + i]) << t << "," << i;
    }
  }
  // One thread more reads 16 bytes past the end of `in`.
  params.out = Zeros<uint32_t>(4 * (threads + 1));
  config.block[0] = threads + 1;
  EXPECT_EQ(executor_.Launch(94, config, &params, sizeof(params)), kCuIllegalAddress);
  std::string detail = executor_.TakeErrorDetail();
  EXPECT_NE(detail.find("cp.async load"), std::string::npos) << detail;
}

// mbarrier (sm_80: cuda::barrier): 64 threads arrive on a barrier initialised for 64 and
// wait on phase 0's parity (the pending counts they see are 63 down to 0, in some order);
// phase 1's parity is not complete yet; in phase 1 the second warp drops out
// (arrive_drop), so phase 2 completes with the first warp's 32 arrivals alone, which each
// thread checks with test_wait on its own state.
TEST_F(Engine, MemoryBarriers) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(8, 93, "MemoryBarriers.ptx", "mbar"));
  const auto got = LaunchForOutput<uint32_t>(93, 1, 64, 4 * 64);
  ASSERT_FALSE(got.empty());
  std::vector<uint32_t> pending;
  for (int t = 0; t < 64; ++t) {
    pending.push_back(got[4 * t]);
    EXPECT_EQ(got[4 * t + 1], 0u) << t;                // phase 1 not complete in phase 1
    EXPECT_EQ(got[4 * t + 2], t < 32 ? 1u : 2u) << t;  // phase 1 complete after bar.sync
    EXPECT_EQ(got[4 * t + 3], t < 32 ? 1u : 2u) << t;  // phase 2: 32 arrivals were enough
  }
  std::sort(pending.begin(), pending.end());
  for (uint32_t i = 0; i < 64; ++i) EXPECT_EQ(pending[i], i);
}

// A vector load or store of one thread is one access, as on a GPU, even when another CTA
// (which may run on the engine's other worker thread) watches it. CUB's decoupled
// look-back scan relies on that: a CTA publishes {status, value} with one
// st.relaxed.gpu.v2 and the next polls it with one ld.relaxed.gpu.v2. Here CTA 0 publishes
// rounds {s, 3s} (v2.u32) or {s, 3s, 5s, 7s} (v4.u32, 16 bytes), one slot per thread, and
// CTA 1 polls the slots until it sees the last round, counting pairs that do not match
// (a new status with an old value). Blocks of 32 (a whole warp: coalesced accesses) and
// of 1 (a lone lane) take the engine's two paths.
TEST_F(Engine, VectorAccessesAreWholeAcrossCtas) {
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(9, 94, "VectorAccessesAreWholeAcrossCtas.ptx", "publish2"));
  ASSERT_EQ(executor_.GetFunction(9, 95, "publish4"), kCuSuccess) << executor_.TakeErrorDetail();
  constexpr uint32_t kRounds = 20000;
  for (uint64_t function : {94, 95}) {
    for (uint32_t threads : {32u, 1u}) {
      uint64_t slots = Zeros<uint32_t>(4 * threads);
      uint64_t torn = Upload(std::vector<uint32_t>(threads, 0xdeadbeef));
      uint8_t params[20] = {};
      std::memcpy(params, &slots, 8);
      std::memcpy(params + 8, &torn, 8);
      std::memcpy(params + 16, &kRounds, 4);
      device::LaunchConfig config;
      config.grid[0] = 4;  // enough CTAs for two workers: CTA 0 on one, CTA 1 on the other
      config.block[0] = threads;
      ASSERT_EQ(executor_.Launch(function, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
      auto counts = Download<uint32_t>(torn, threads);
      for (uint32_t t = 0; t < threads; ++t) {
        EXPECT_EQ(counts[t], 0u) << (function == 94 ? "v2" : "v4") << ", " << threads << " threads: thread " << t
                                 << " saw torn vectors";
      }
    }
  }
}

// membar.gl orders a thread's store before its later load for every other thread, as
// fence.sc does (the store-buffering litmus test): in round r CTA 0 stores x = r, fences
// and loads y, while CTA 1 (on the engine's other worker thread) stores y = r, fences and
// loads x. At least one of them must see the other's round-r store. The two meet between
// rounds on counters of their own.
TEST_F(Engine, FencesOrderStoresBeforeLoadsAcrossCtas) {
  // One worker runs CTA 0 to its end before CTA 1 begins: CTA 0 would wait for ever.
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two worker threads";
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(10, 96, "FencesOrderStoresBeforeLoadsAcrossCtas.ptx", "litmus"));
  constexpr uint32_t kRounds = 200000;
  uint64_t cells = Zeros<uint32_t>(4);
  uint64_t seen = Zeros<uint32_t>(2 * kRounds);
  uint8_t params[20] = {};
  std::memcpy(params, &cells, 8);
  std::memcpy(params + 8, &seen, 8);
  std::memcpy(params + 16, &kRounds, 4);
  device::LaunchConfig config;
  config.grid[0] = 4;  // enough CTAs for two workers: CTA 0 on one, CTA 1 on the other
  ASSERT_EQ(executor_.Launch(96, config, params, sizeof(params)), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint32_t>(seen, 2 * kRounds);
  uint32_t both_missed = 0;
  for (uint32_t r = 0; r < kRounds; ++r) {
    both_missed += got[r] < r + 1 && got[kRounds + r] < r + 1;
  }
  EXPECT_EQ(both_missed, 0u) << "rounds in which neither CTA saw the other's store";
}

TEST_F(Engine, LocalMemoryArrays) {
  const int n = 64;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = i * 37 + 5;
  uint64_t din = Upload(in), out = Zeros<int>(n);
  ASSERT_EQ(Run("local_array", {2}, {32}, 0, din, out, n), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, n);
  for (int i = 0; i < n; ++i) {
    int idx = in[i] & 15;
    EXPECT_EQ(got[i], in[i] * idx + in[i] * ((idx + 3) & 15)) << i;
  }
}

TEST_F(Engine, AtomicsOnGlobalAndSharedMemory) {
  const int blocks = 4, threads = 64, n = blocks * threads;
  std::vector<int> counters = {0, 0, -1, 0, -1, 0, 0, 0, 0, 0};
  uint64_t c = Upload(counters), u = Zeros<unsigned>(2), f = Zeros<float>(1), d = Zeros<double>(1),
           w = Zeros<unsigned long long>(1);
  ASSERT_EQ(Run("atomics", {blocks}, {threads}, 0, c, u, f, d, w), kCuSuccess) << last_detail_;
  auto got = Download<int>(c, 10);
  int xor_all = 0, or_all = 0;
  for (int i = 0; i < n; ++i) {
    xor_all ^= i;
    or_all |= 1 << (i % 31);
  }
  EXPECT_EQ(got[0], n);
  EXPECT_EQ(got[1], -2 * n);
  EXPECT_EQ(got[2], n - 1);
  EXPECT_EQ(got[3], -(n - 1));
  EXPECT_EQ(got[4], ~or_all);
  EXPECT_EQ(got[5], or_all);
  EXPECT_EQ(got[6], xor_all);
  EXPECT_EQ(got[7], 42);
  EXPECT_EQ(got[8], 3 * n);
  EXPECT_EQ(got[9], n);
  unsigned inc = 0, dec = 0;
  for (int i = 0; i < n; ++i) {
    inc = inc >= 9 ? 0 : inc + 1;
    dec = (dec == 0 || dec > 9) ? 9 : dec - 1;
  }
  auto ug = Download<unsigned>(u, 2);
  EXPECT_EQ(ug[0], inc);
  EXPECT_EQ(ug[1], dec);
  EXPECT_EQ(Download<float>(f, 1)[0], 0.5f * n);
  EXPECT_EQ(Download<double>(d, 1)[0], 0.25 * n);
  EXPECT_EQ(Download<unsigned long long>(w, 1)[0], static_cast<unsigned long long>(n) << 33);
}

TEST_F(Engine, StrayAccessesAreIllegalAddresses) {
  uint64_t own = Zeros<int>(16);
  ASSERT_EQ(Run("poke", {1}, {1}, 0, own, 15LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(own, 16)[15], 1);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, own, 16LL),
            kCuIllegalAddress);  // one past the end
  EXPECT_NE(last_detail_.find("store of 4 bytes"), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("poke", {1}, {1}, 0, own, -1LL), kCuIllegalAddress);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, uint64_t{0}, 0LL),
            kCuIllegalAddress);  // null
  // Another session's memory of the same GPU is not reachable.
  devices::SimExecutor other(&memory_);
  uint64_t theirs = 0;
  ASSERT_EQ(other.Allocate(64, &theirs), kCuSuccess);
  EXPECT_EQ(Run("poke", {1}, {1}, 0, theirs, 0LL), kCuIllegalAddress);
  const void* data = nullptr;
  ASSERT_EQ(other.CopyFromDevice(theirs, 4, 0, &data), kCuSuccess);
  EXPECT_EQ(*static_cast<const int*>(data), 0);
}

// A warp's loads and stores are checked once for the span of its lanes' addresses; a
// stray lane must still fault as the per-lane path does: the first stray lane's address,
// and the stores of the lanes before it done.
TEST_F(Engine, StrayLaneOfAWholeWarpFaults) {
  uint64_t own = Zeros<int>(32);
  ASSERT_EQ(Run("warp_poke", {1}, {32}, 0, own, 0LL), kCuSuccess) << last_detail_;
  auto got = Download<int>(own, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i + 1) << i;
  uint64_t fresh = Zeros<int>(32);
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, 2LL), kCuIllegalAddress);
  char expected[96];
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  got = Download<int>(fresh, 32);
  EXPECT_EQ(got[0], 0);
  EXPECT_EQ(got[1], 0);
  for (int i = 2; i < 32; ++i) EXPECT_EQ(got[i], i - 1) << i;
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, 1LL), kCuIllegalAddress);  // lane 31 only
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("warp_poke", {1}, {32}, 0, fresh, -1LL), kCuIllegalAddress);
  std::snprintf(expected, sizeof(expected), "store of 4 bytes at 0x%llx", static_cast<unsigned long long>(fresh - 4));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;

  uint64_t in = Upload(std::vector<int>(32, 5));
  uint64_t out = Zeros<int>(32);
  ASSERT_EQ(Run("warp_peek", {1}, {32}, 0, in, out, 0LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(out, 32), std::vector<int>(32, 5));
  EXPECT_EQ(Run("warp_peek", {1}, {32}, 0, in, out, 1LL), kCuIllegalAddress);
  std::snprintf(expected, sizeof(expected), "load of 4 bytes at 0x%llx", static_cast<unsigned long long>(in + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;

  // Shared memory: 32 ints of dynamic shared memory; lane 31 one past the end.
  ASSERT_EQ(Run("warp_poke_shared", {1}, {32}, 128, 0LL, out), kCuSuccess) << last_detail_;
  got = Download<int>(out, 32);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(got[i], i + 1) << i;
  EXPECT_EQ(Run("warp_poke_shared", {1}, {32}, 128, 1LL, out), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("store of 4 bytes"), std::string::npos) << last_detail_;
}

// Partial masks, lanes in two allocations, generic pointers to shared and global memory,
// vector and signed narrow loads, a vector store under a mask.
TEST_F(Engine, LoadAndStorePathsAgree) {
  const int n = 64;
  std::vector<int> v(4 * n), a(n + 1), b(n + 1);
  std::vector<signed char> s(n);
  std::vector<short> h(n);
  for (int i = 0; i < 4 * n; ++i) v[i] = (i * 37) % 23 - 11;
  for (int i = 0; i <= n; ++i) {
    a[i] = i * i - 50;
    b[i] = 1000 - 7 * i;
  }
  for (int i = 0; i < n; ++i) {
    s[i] = static_cast<signed char>(i * 9 - 100);
    h[i] = static_cast<short>(i * 1001 - 30000);
  }
  uint64_t dv = Upload(v), ds = Upload(s), dh = Upload(h), da = Upload(a), db = Upload(b);
  uint64_t out = Zeros<int>(2 * n);
  ASSERT_EQ(Run("mem_paths", {1}, {n}, 0, dv, ds, dh, da, db, out), kCuSuccess) << last_detail_;
  auto got = Download<int>(out, 2 * n);
  std::vector<int> tile(65);
  for (int t = 0; t < n; ++t) tile[t] = a[t] * 3;
  tile[64] = 7;
  for (int t = 0; t < n; ++t) {
    int r = 0;
    if (t % 3 != 1) {
      r += v[4 * t] - v[4 * t + 1] + v[4 * t + 2] * v[4 * t + 3];
      r += s[t];
      r += h[t];
    }
    r += (t & 1) ? a[t] : b[t];
    r += tile[t] + 2 * tile[t + 1];
    const std::vector<int>& p = t % 5 == 0 ? b : a;
    r += p[t] + 2 * p[t + 1];
    int want0 = (t & 4) ? r : 0, want1 = (t & 4) ? -r : 0;
    EXPECT_EQ(got[2 * t], want0) << t;
    EXPECT_EQ(got[2 * t + 1], want1) << t;
  }
}

TEST_F(Engine, AtomicPathsReturnValuesAndFaults) {
  const int blocks = 4, threads = 96, n = blocks * threads;
  uint64_t tickets = Zeros<int>(n + 2), shared_tickets = Zeros<int>(n), generic_tickets = Zeros<int>(n),
           bins = Zeros<int>(8);
  ASSERT_EQ(Run("atomic_paths", {blocks}, {threads}, 0, tickets, shared_tickets, generic_tickets, bins), kCuSuccess)
      << last_detail_;
  auto t = Download<int>(tickets, n + 2);
  auto st = Download<int>(shared_tickets, n);
  auto gt = Download<int>(generic_tickets, n);
  EXPECT_EQ(t[n], n);
  EXPECT_EQ(t[n + 1], n);
  std::vector<int> global(t.begin(), t.begin() + n), global_generic(n);
  for (int i = 0; i < n; ++i) global_generic[i] = gt[i] / 1000;
  std::sort(global.begin(), global.end());
  std::sort(global_generic.begin(), global_generic.end());
  for (int i = 0; i < n; ++i) {
    EXPECT_EQ(global[i], i);
    EXPECT_EQ(global_generic[i], i);
  }
  for (int b = 0; b < blocks; ++b) {
    std::vector<int> shared(st.begin() + b * threads, st.begin() + (b + 1) * threads), generic;
    for (int k = 0; k < threads; ++k) generic.push_back(gt[b * threads + k] % 1000);
    std::sort(shared.begin(), shared.end());
    std::sort(generic.begin(), generic.end());
    for (int k = 0; k < threads; ++k) {
      EXPECT_EQ(shared[k], k) << b;
      EXPECT_EQ(generic[k], k) << b;
    }
  }
  auto got = Download<int>(bins, 8);
  for (int k = 0; k < 8; ++k) {
    int want = 0;
    for (int x = 0; x < threads; ++x) want += (x % 3 && x % 8 == k) ? x : 0;
    EXPECT_EQ(got[k], blocks * want) << k;
  }

  uint64_t p = Zeros<int>(32);
  ASSERT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 0LL), kCuSuccess) << last_detail_;
  EXPECT_EQ(Download<int>(p, 32), std::vector<int>(32, 1));
  EXPECT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 2LL), kCuIllegalAddress);
  EXPECT_NE(last_detail_.find("misaligned atomic of 4 bytes"), std::string::npos) << last_detail_;
  EXPECT_EQ(Run("atomic_poke", {1}, {32}, 0, p, 4LL), kCuIllegalAddress);
  char expected[96];
  std::snprintf(expected, sizeof(expected), "atomic of 4 bytes at 0x%llx", static_cast<unsigned long long>(p + 128));
  EXPECT_NE(last_detail_.find(expected), std::string::npos) << last_detail_;
  auto after = Download<int>(p, 32);
  EXPECT_EQ(after[0], 1);
  for (int i = 1; i < 32; ++i) EXPECT_EQ(after[i], 2) << i;
}

// Loads whose destination is their own address register (pointer chasing), whole warp
// and under a guard: each lane reads its address before its destination is written.
TEST_F(Engine, LoadIntoItsAddressRegister) {
  const std::string ptx = KernelText("LoadIntoItsAddressRegister.ptx");
  ASSERT_EQ(executor_.LoadModule(2, ptx.c_str(), ptx.size() + 1, {}), kCuSuccess) << executor_.TakeErrorDetail();
  ASSERT_EQ(executor_.GetFunction(2, 7, "chase"), kCuSuccess) << executor_.TakeErrorDetail();
  uint64_t nodes = Zeros<uint64_t>(64), out = Zeros<uint64_t>(64);
  std::vector<uint64_t> init(64);
  for (int t = 0; t < 32; ++t) {
    init[2 * t] = nodes + 16 * ((t + 5) % 32);
    init[2 * t + 1] = 100 + t;
  }
  ASSERT_EQ(executor_.CopyToDevice(nodes, init.data(), init.size() * 8, 0), kCuSuccess);
  uint64_t params[2] = {nodes, out};
  ASSERT_EQ(LaunchLoaded(7, 1, 32, params), kCuSuccess) << executor_.TakeErrorDetail();
  auto got = Download<uint64_t>(out, 64);
  for (int t = 0; t < 32; ++t) {
    EXPECT_EQ(got[2 * t], 100u + t) << t;
    EXPECT_EQ(got[2 * t + 1], nodes + 16 * ((t + (t < 20 ? 10 : 5)) % 32)) << t;
  }
}

// sm_100's 256-bit loads and stores of 32-bit elements (ld/st.v8, ld.global.nc.v8: cuBLASLt's
// epilogue kernels use them) move 8 elements in order: run as two 16-byte halves.
TEST_F(Engine, WideVectorAccessesMoveEightElements) {
  const uint32_t n = 64;
  std::vector<float> in(8 * n);
  for (uint32_t i = 0; i < 8 * n; ++i) in[i] = static_cast<float>(i) * 0.5f;
  ASSERT_NO_FATAL_FAILURE(LoadKernelFile(16, 100, "WideVectorAccesses.ptx", "wide"));
  const uint64_t din = Upload(in), dout = Zeros<float>(8 * n);
  struct {
    uint64_t in, out;
  } params{din, dout};
  ASSERT_EQ(LaunchLoaded(100, 1, n, params), kCuSuccess) << executor_.TakeErrorDetail();
  const std::vector<float> out = Download<float>(dout, 8 * n);
  for (uint32_t t = 0; t < n; ++t) {
    std::vector<float> want(in.begin() + 8 * t, in.begin() + 8 * t + 8);
    want[0] += static_cast<float>(t);
    want[1] += in[8 * t];
    want[7] += in[8 * t + 7];
    want[4] += in[8 * t + 4];
    for (int k = 0; k < 8; ++k) ASSERT_EQ(out[8 * t + k], want[k]) << "thread " << t << " element " << k;
  }
}

}  // namespace
}  // namespace gpupool::dataplane
