// Kernels for the PTX engine's unit suite (tests/remote/ptx/*_test.cc): each covers one feature of
// the engine; the test checks every output against a CPU reference. Compiled to PTX
// (nvcc -ptx) at build time. extern "C" so the test finds them by plain names.
#include <cstdio>
#include <cassert>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

__constant__ float c_coeffs[4] = {1.5f, -2.0f, 0.25f, 8.0f};
__device__ int d_counter = 7;
__device__ unsigned long long d_table[3] = {1, 2, 3};

extern "C" {

// Grid and block in 3 dimensions: every thread writes its linear id and coordinates.
__global__ void dims(unsigned* out) {
  unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  unsigned threads = blockDim.x * blockDim.y * blockDim.z;
  unsigned local = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  unsigned id = block * threads + local;
  out[4 * id + 0] = id;
  out[4 * id + 1] = threadIdx.x | (threadIdx.y << 10) | (threadIdx.z << 20);
  out[4 * id + 2] = blockIdx.x | (blockIdx.y << 10) | (blockIdx.z << 20);
  out[4 * id + 3] = blockDim.x | (blockDim.y << 10) | (gridDim.z << 20);
}

// Divergence and reconvergence: lanes take different paths, loop different counts, then
// meet again for a warp vote.
__global__ void diverge(int* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = 0;
  if (i % 3 == 0) {
    for (int k = 0; k < i % 7; ++k) v += k * i;
  } else if (i % 3 == 1) {
    v = -i;
  } else {
    while (v < i) v += 5;
  }
  unsigned ballot = __ballot_sync(0xffffffffu, v > 10);
  out[2 * i] = v;
  out[2 * i + 1] = static_cast<int>(ballot);
}

// Static and dynamic shared memory with barriers: block-wide reversal and a tree sum.
extern __shared__ float dyn[];
__global__ void shared_reduce(const float* in, float* reversed, float* sums) {
  __shared__ float tile[256];
  unsigned t = threadIdx.x;
  unsigned i = blockIdx.x * blockDim.x + t;
  tile[t] = in[i];
  dyn[t] = in[i];
  __syncthreads();
  reversed[i] = tile[blockDim.x - 1 - t];
  for (unsigned s = blockDim.x / 2; s > 0; s >>= 1) {
    if (t < s) dyn[t] += dyn[t + s];
    __syncthreads();
  }
  if (t == 0) sums[blockIdx.x] = dyn[0];
}

// Block-wide votes: __syncthreads_count/and/or (bar.red).
__global__ void block_votes(const int* in, int* out) {
  unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  int count = __syncthreads_count(v > 0);
  int all = __syncthreads_and(v > -100);
  int any = __syncthreads_or(v > 1000);
  out[3 * i] = count;
  out[3 * i + 1] = all;
  out[3 * i + 2] = any;
}

// Half precision: f16 and f16x2 arithmetic, comparisons, bf16 conversions.
__global__ void halves(const __half* a, const __half2* b, float* out) {
  int i = threadIdx.x;
  __half x = a[i];
  __half2 y = b[i];
  __half s = __hadd(x, __hmul(x, x));
  __half2 t = __hfma2(y, y, y);
  __nv_bfloat16 bf = __float2bfloat16(__half2float(x) * 3.0f);
  out[4 * i] = __half2float(s);
  out[4 * i + 1] = __low2float(t);
  out[4 * i + 2] = __high2float(t);
  out[4 * i + 3] = __bfloat162float(bf) + (__hlt(x, __float2half(1.0f)) ? 100.0f : 0.0f);
}

// Comparisons of halves: packed results as 1.0/0.0 per half (set.cmp.f16x2.f16x2) or as
// masks (set.cmp.u32.f16x2), both halves at once (__hbge2), NaN tests (set.nan, also
// inside cuda_fp16's h2sin), unordered comparisons and the scalar setp.f16.
__global__ void half_compares(const __half2* a, const __half2* b, unsigned* out) {
  int i = threadIdx.x;
  __half2 x = a[i], y = b[i];
  __half2 gt = __hgt2(x, y);
  __half2 nan = __hisnan2(x);
  __half2 equ = __hequ2(x, y);
  out[8 * i] = *reinterpret_cast<unsigned*>(&gt);
  out[8 * i + 1] = __hlt2_mask(x, y);
  out[8 * i + 2] = __hbge2(x, y);
  out[8 * i + 3] = *reinterpret_cast<unsigned*>(&nan);
  out[8 * i + 4] = *reinterpret_cast<unsigned*>(&equ);
  out[8 * i + 5] = __hisnan(__low2half(x)) | __hgt(__high2half(x), __high2half(y)) << 1;
  __half2 s = h2sin(x);
  out[8 * i + 6] = *reinterpret_cast<unsigned*>(&s);
  out[8 * i + 7] = __hne2_mask(x, y);
}

// Directed rounding of float and double arithmetic (__fadd_rz, __dmul_ru, ...: add.rz.f32,
// mul.rp.f64 and so on), as interval arithmetic uses it.
__global__ void directed_rounding(const float* a, const float* b, const double* x, const double* y, float* f,
                                  double* d) {
  int i = threadIdx.x;
  float p = a[i], q = b[i];
  double u = x[i], v = y[i];
  f[8 * i] = __fadd_rz(p, q);
  f[8 * i + 1] = __fadd_ru(p, q);
  f[8 * i + 2] = __fadd_rd(p, q);
  f[8 * i + 3] = __fmul_rd(p, q);
  f[8 * i + 4] = __fdiv_ru(p, q);
  f[8 * i + 5] = __fsqrt_rd(fabsf(p));
  f[8 * i + 6] = __frcp_ru(q);
  f[8 * i + 7] = __fmaf_rz(p, q, 1.0f);
  d[4 * i] = __dadd_ru(u, v);
  d[4 * i + 1] = __dmul_rz(u, v);
  d[4 * i + 2] = __ddiv_rd(u, v);
  d[4 * i + 3] = __dsqrt_ru(fabs(u));
}

// Conversions into float types with directed rounding: integers to float and double
// (cvt.rz.f32.s32, cvt.rm.f32.s64, cvt.rp.f64.u64...) and float to half and bfloat16
// (cvt.rz.f16.f32, cvt.rm.bf16.f32...).
__global__ void directed_conversions(const int* k, const long long* l, const float* x, float* f, double* d,
                                     unsigned short* h) {
  int i = threadIdx.x;
  int p = k[i];
  long long q = l[i];
  float v = x[i];
  f[6 * i] = __int2float_rz(p);
  f[6 * i + 1] = __int2float_ru(p);
  f[6 * i + 2] = __uint2float_rd(static_cast<unsigned>(p));
  f[6 * i + 3] = __ll2float_rd(q);
  f[6 * i + 4] = __ull2float_ru(static_cast<unsigned long long>(q));
  f[6 * i + 5] = __ll2float_rz(q);
  d[3 * i] = __ll2double_rz(q);
  d[3 * i + 1] = __ull2double_ru(static_cast<unsigned long long>(q));
  d[3 * i + 2] = __ll2double_rd(q);
  h[6 * i] = __half_as_ushort(__float2half_rz(v));
  h[6 * i + 1] = __half_as_ushort(__float2half_rd(v));
  h[6 * i + 2] = __half_as_ushort(__float2half_ru(v));
  h[6 * i + 3] = __bfloat16_as_ushort(__float2bfloat16_rz(v));
  h[6 * i + 4] = __bfloat16_as_ushort(__float2bfloat16_rd(v));
  h[6 * i + 5] = __bfloat16_as_ushort(__float2bfloat16_ru(v));
}

// Device-side malloc and free: each thread allocates, fills and sums a buffer of its own
// size; odd threads free theirs, even ones keep it for the next launch, which reads it and
// frees it. The sum carries a million per misaligned pointer (CUDA's malloc gives 16-byte
// alignment).
__global__ void heap_sums(int* out, int** kept) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  int n = 1 + t % 37;
  int* p = static_cast<int*>(malloc(n * sizeof(int)));
  if (p == nullptr) {
    out[t] = -1;
    return;
  }
  int sum = 0;
  for (int i = 0; i < n; ++i) p[i] = t + i;
  for (int i = 0; i < n; ++i) sum += p[i];
  out[t] = sum + static_cast<int>(reinterpret_cast<unsigned long long>(p) % 16) * 1000000;
  if (t % 2 == 1) {
    free(p);
  } else {
    kept[t] = p;
  }
}

__global__ void heap_free_kept(int** kept, int* out) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t % 2 == 0) {
    out[t] = kept[t][0];
    free(kept[t]);
  }
}

// One allocation of `bytes` (NULL when the heap has no room), written at both ends, freed.
__global__ void heap_big(unsigned long long bytes, unsigned long long* got) {
  char* p = static_cast<char*>(malloc(bytes));
  *got = reinterpret_cast<unsigned long long>(p);
  if (p != nullptr) {
    p[0] = 1;
    p[bytes - 1] = 2;
    free(p);
  }
  free(nullptr);  // does nothing
}

// A stray write over a block's bookkeeping: later allocations still work, and freeing the
// block fails the launch instead of corrupting the agent.
__global__ void heap_scribble(unsigned long long* got) {
  unsigned long long* p = static_cast<unsigned long long*>(malloc(32));
  p[-2] = 0xffffffffffffull;  // its size
  p[-1] = 12345;              // its link
  *got = reinterpret_cast<unsigned long long>(malloc(32));
  free(p);
}

__global__ void heap_double_free() {
  void* p = malloc(64);
  free(p);
  free(p);
}

// Byte and half-word dot products (sm_61 dp4a, dp2a) and SIMD absolute differences
// (vabsdiff4, under __vabsdiffu4 and __vsads4; vabsdiff2, under __vsadu2), signed and
// unsigned.
__global__ void byte_dots(const unsigned* a, const unsigned* b, unsigned* out) {
  int i = threadIdx.x;
  unsigned x = a[i], y = b[i], halves;
  out[10 * i] = __dp4a(static_cast<int>(x), static_cast<int>(y), -5);
  out[10 * i + 1] = __dp4a(x, y, 9u);
  out[10 * i + 2] = __dp2a_lo(static_cast<int>(x), static_cast<int>(y), 7);
  out[10 * i + 3] = __dp2a_hi(x, y, 3u);
  out[10 * i + 4] = __vabsdiffu4(x, y);
  out[10 * i + 5] = __vsads4(x, y);
  out[10 * i + 6] = __vsadu4(x, y);
  out[10 * i + 7] = __dp2a_hi(static_cast<int>(x), static_cast<int>(y), -1);
  out[10 * i + 8] = __vsadu2(x, y);
  asm("vabsdiff2.u32.u32.u32 %0, %1, %2, %3;" : "=r"(halves) : "r"(x), "r"(y), "r"(0u));
  out[10 * i + 9] = halves;
}

// Local memory: a per-thread array indexed at run time.
__global__ void local_array(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int buf[16];
  for (int k = 0; k < 16; ++k) buf[k] = in[i] * k;
  int idx = in[i] & 15;
  out[i] = buf[idx] + buf[(idx + 3) & 15];
}

// Atomics on global and shared memory.
__global__ void atomics(int* counters, unsigned* ucounters, float* fsum, double* dsum, unsigned long long* u64) {
  __shared__ int block_count;
  if (threadIdx.x == 0) block_count = 0;
  __syncthreads();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  atomicAdd(&counters[0], 1);
  atomicSub(&counters[1], 2);
  atomicMax(&counters[2], i);
  atomicMin(&counters[3], -i);
  atomicAnd(&counters[4], ~(1 << (i % 31)));
  atomicOr(&counters[5], 1 << (i % 31));
  atomicXor(&counters[6], i);
  atomicExch(&counters[7], 42);
  atomicInc(&ucounters[0], 9u);
  atomicDec(&ucounters[1], 9u);
  int old;
  do {
    old = counters[8];
  } while (atomicCAS(&counters[8], old, old + 3) != old);
  atomicAdd(fsum, 0.5f);
  atomicAdd(dsum, 0.25);
  atomicAdd(u64, 1ull << 33);
  atomicAdd(&block_count, 1);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(&counters[9], block_count);
}

// Warp shuffles, votes, match and the active mask.
__global__ void warp_ops(int* out) {
  int lane = threadIdx.x & 31;
  int v = threadIdx.x * 3 + 1;
  int sum = v;
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  int up = __shfl_up_sync(0xffffffffu, v, 1);
  int down = __shfl_down_sync(0xffffffffu, v, 2);
  int bcast = __shfl_sync(0xffffffffu, v, 5);
  int all = __all_sync(0xffffffffu, v > 0);
  int any = __any_sync(0xffffffffu, v == 10);
  unsigned match = __match_any_sync(0xffffffffu, lane / 4);
  unsigned active = 0;
  if (lane & 1) active = __activemask();
  int* o = out + 8 * threadIdx.x;
  o[0] = sum;
  o[1] = up;
  o[2] = down;
  o[3] = bcast;
  o[4] = all;
  o[5] = any;
  o[6] = static_cast<int>(match);
  o[7] = static_cast<int>(active);
}

// Special registers: lane and warp ids, SM ids in range, clocks that advance.
__global__ void specials(unsigned* out, long long* clocks) {
  unsigned laneid, warpid, smid, nsmid;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(laneid));
  asm volatile("mov.u32 %0, %%warpid;" : "=r"(warpid));
  asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsmid));
  long long c0 = clock64();
  unsigned c32 = clock();
  unsigned long long t0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  float x = 0;
  for (int k = 0; k < 100; ++k) x += k;
  long long c1 = clock64();
  unsigned i = threadIdx.x;
  out[4 * i] = laneid;
  out[4 * i + 1] = warpid;
  out[4 * i + 2] = smid < nsmid;
  out[4 * i + 3] = static_cast<unsigned>(x) + (c32 != 0 ? 0 : 0);
  clocks[2 * i] = c1 - c0;
  clocks[2 * i + 1] = static_cast<long long>(t0);
}

// Integer arithmetic and bit operations.
__global__ void int_ops(const int* a, const int* b, long long* out) {
  int i = threadIdx.x;
  int x = a[i], y = b[i];
  unsigned ux = x, uy = y;
  long long* o = out + 16 * i;
  o[0] = __mulhi(x, y);
  o[1] = __umulhi(ux, uy);
  o[2] = static_cast<long long>(x) * y;
  o[3] = y != 0 ? x / y : 0;
  o[4] = y != 0 ? x % y : 0;
  o[5] = uy != 0 ? ux / uy : 0;
  o[6] = __popc(ux);
  o[7] = __clz(x);
  o[8] = __brev(ux);
  o[9] = __byte_perm(ux, uy, 0x5140);
  o[10] = (ux >> 3) & 0x1f;  // bfe
  o[11] = x >> (uy & 31);
  o[12] = ux >> (uy & 31);
  o[13] = __ffs(x);
  o[14] = __sad(x, y, 5u);
  o[15] = min(x, y) + max(ux, uy) + abs(x);
}

// Float and double math, including the fast approximations.
__global__ void float_ops(const float* a, const float* b, const double* da, float* out, double* dout) {
  int i = threadIdx.x;
  float x = a[i], y = b[i];
  double d = da[i];
  float* o = out + 16 * i;
  o[0] = x * y + c_coeffs[i & 3];
  o[1] = x / y;
  o[2] = sqrtf(fabsf(x));
  o[3] = rsqrtf(fabsf(x) + 1.0f);
  o[4] = __sinf(x);
  o[5] = __cosf(x);
  o[6] = __expf(y);
  o[7] = __logf(fabsf(x) + 1.0f);
  o[8] = fmaf(x, y, 1.0f);
  o[9] = fminf(x, y);
  o[10] = fmaxf(x, y);
  o[11] = copysignf(x, y);
  o[12] = __saturatef(x);
  o[13] = floorf(x) + ceilf(y) + truncf(x) + rintf(y);
  o[14] = __fdividef(x, y);
  // x / 0 by a literal 0 on purpose: div.rn.f32 with an immediate zero divisor, inf for
  // every x here but 0 (NaN only for 0). The front end warns of it (#39); not here.
#pragma nv_diag_suppress 39
  o[15] = isnan(x / 0.0f) ? 1.0f : 0.0f;
#pragma nv_diag_default 39
  double* p = dout + 8 * i;
  p[0] = d * d + 1.0;
  p[1] = d / 3.0;
  p[2] = sqrt(fabs(d));
  p[3] = fma(d, 2.0, -1.0);
  p[4] = static_cast<double>(x) + d;
  p[5] = sin(d);
  p[6] = exp(d / 10.0);
  p[7] = static_cast<double>(static_cast<float>(d));
}

// Conversions: float <-> int of every size, rounding, saturation.
__global__ void conversions(const float* in, int* out) {
  int i = threadIdx.x;
  float x = in[i];
  int* o = out + 12 * i;
  o[0] = static_cast<int>(x);
  o[1] = __float2int_rn(x);
  o[2] = __float2int_rd(x);
  o[3] = __float2int_ru(x);
  o[4] = static_cast<int>(static_cast<unsigned char>(static_cast<int>(x)));
  o[5] = static_cast<int>(static_cast<short>(static_cast<int>(x * 1000.0f)));
  o[6] = static_cast<int>(static_cast<unsigned>(x < 0 ? 0 : x));
  o[7] = static_cast<int>(static_cast<long long>(x * 1e6f) >> 8);
  float back = static_cast<float>(o[1]);
  o[8] = __float_as_int(back);
  o[9] = __float_as_int(__int2float_rn(i * 1234567));
  o[10] = static_cast<int>(__double2float_rn(static_cast<double>(x) * 3.0) * 100.0f);
  o[11] = __float2uint_rn(fabsf(x));
}

// Device functions with parameters and return values (not inlined).
__device__ __noinline__ float poly(float x, int degree) {
  float r = 0;
  for (int k = 0; k <= degree; ++k) r = r * x + c_coeffs[k & 3];
  return r;
}
__device__ __noinline__ void accumulate(int* counter, int v) { atomicAdd(counter, v); }

__global__ void calls(const float* in, float* out) {
  int i = threadIdx.x;
  out[i] = poly(in[i], i % 4);
  accumulate(&d_counter, i);
  d_table[i % 3] += 1;  // one warp: the lanes of an index load and store together
}

// Device printf.
__global__ void hello(int base) {
  printf("hello from %d.%d value %d %5.2f %s\n", blockIdx.x, threadIdx.x, base + threadIdx.x, 1.5 * threadIdx.x, "ok");
}

// Reads and writes a pointer given by the test: out of bounds gives an illegal address.
__global__ void poke(int* p, long long offset) { p[offset] = 1; }

// Whole-warp loads and stores (the engine checks a warp's span of addresses once) and the
// cases that must take its per-lane path: a lane past the end, partial masks, lanes in two
// allocations, generic pointers into shared and global memory, vectors, signed bytes.
__global__ void warp_poke(int* p, long long offset) { p[threadIdx.x + offset] = threadIdx.x + 1; }
__global__ void warp_peek(const int* in, int* out, long long offset) { out[threadIdx.x] = in[threadIdx.x + offset]; }
__global__ void warp_poke_shared(long long offset, int* out) {
  extern __shared__ int dyn_ints[];
  dyn_ints[threadIdx.x] = 0;
  __syncthreads();
  dyn_ints[threadIdx.x + offset] = threadIdx.x + 1;
  __syncthreads();
  out[threadIdx.x] = dyn_ints[threadIdx.x];
}
__device__ __noinline__ int generic_pair(const int* p, int i) { return p[i] + 2 * p[i + 1]; }
__global__ void mem_paths(const int4* v, const signed char* s, const short* h, const int* a, const int* b, int2* out) {
  __shared__ int tile[65];
  int t = threadIdx.x;
  tile[t] = a[t] * 3;
  if (t == 0) tile[64] = 7;
  __syncthreads();
  int r = 0;
  if (t % 3 != 1) {
    int4 q = v[t];
    r += q.x - q.y + q.z * q.w;
    r += s[t];
    r += h[t];
  }
  const int* src = (t & 1) ? a : b;
  r += src[t];
  r += generic_pair(tile, t);
  r += generic_pair(t % 5 == 0 ? b : a, t);
  if (t & 4) out[t] = make_int2(r, -r);
}

// Atomics of whole warps (their span checked once; shared ones as plain updates, the CTA
// being the only user of its shared memory): returned values, colliding lanes, partial
// masks, generic pointers, and a misaligned or stray lane.
__device__ __noinline__ int generic_add(int* p, int v) { return atomicAdd(p, v); }
__global__ void atomic_paths(int* tickets, int* shared_tickets, int* generic_tickets, int* bins) {
  __shared__ int counter, generic_counter;
  __shared__ int sbins[8];
  if (threadIdx.x < 8) sbins[threadIdx.x] = 0;
  if (threadIdx.x == 0) counter = generic_counter = 0;
  __syncthreads();
  int n = gridDim.x * blockDim.x;
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tickets[i] = atomicAdd(&tickets[n], 1);
  shared_tickets[i] = atomicAdd(&counter, 1);
  generic_tickets[i] = generic_add(&generic_counter, 1) + 1000 * generic_add(&tickets[n + 1], 1);
  if (threadIdx.x % 3) atomicAdd(&sbins[threadIdx.x % 8], threadIdx.x);
  __syncthreads();
  if (threadIdx.x < 8) generic_add(&bins[threadIdx.x], sbins[threadIdx.x]);
}
__global__ void atomic_poke(int* p, long long byte_offset) {
  atomicAdd(reinterpret_cast<int*>(reinterpret_cast<char*>(p) + byte_offset) + threadIdx.x, 1);
}

// Traps and assertions.
__global__ void trap_kernel() { __trap(); }
__global__ void assert_kernel(int v) { assert(v != 3); }

// Uses a texture object (the test gives it a handle that is none).
__global__ void texture_kernel(cudaTextureObject_t tex, float* out) {
  out[threadIdx.x] = tex1Dfetch<float>(tex, threadIdx.x);
}

}  // extern "C"

// Device-side virtual functions, function pointers, addresses in initialisers and
// recursion: indirect calls reach the functions whose address the module takes.
struct Shape {
  __device__ virtual int Area() const = 0;
  __device__ virtual ~Shape() {}
};
struct Rect : Shape {
  int w, h;
  __device__ Rect(int w, int h) : w(w), h(h) {}
  __device__ int Area() const override { return w * h; }
};
struct Tri : Shape {
  int b, h;
  __device__ Tri(int b, int h) : b(b), h(h) {}
  __device__ int Area() const override { return b * h / 2; }
};
struct Square : Rect {
  __device__ explicit Square(int s) : Rect(s, s) {}
  __device__ int Area() const override { return Rect::Area() + 1; }
};
__device__ int op_twice(int x) { return 2 * x; }
__device__ int op_negate(int x) { return -x; }
__device__ int op_square(int x) { return x * x; }
typedef int (*IntOp)(int);
__device__ IntOp op_table[3] = {op_twice, op_negate, op_square};
__device__ IntOp chosen_op = op_negate;  // the host reads it and passes it back
__device__ const char* op_names[3] = {"twice", "negate", "square"};
struct Named {
  int id;
  const int* value;
  const char* name;
};
__device__ int named_values[4] = {10, 20, 30, 40};
__device__ Named named = {7, named_values + 2, "seven"};
// Recursion the compiler cannot turn into a loop (its result is not an accumulator).
__device__ int mix_down(int n) {
  if (n <= 0) return 1;
  int r = mix_down(n - 1);
  return (r * r + n) % 1009;
}

extern "C" {
// Each thread makes a shape of its own kind (neighbouring lanes call different functions),
// takes its area through the virtual call and deletes it through the virtual destructor.
__global__ void virtual_shapes(int* out) {
  int t = threadIdx.x + blockIdx.x * blockDim.x;
  Shape* s = t % 3 == 0   ? static_cast<Shape*>(new Rect(t, 3))
             : t % 3 == 1 ? static_cast<Shape*>(new Tri(t, 4))
                          : static_cast<Shape*>(new Square(t));
  out[t] = s == nullptr ? -1 : s->Area();
  delete s;
}
__global__ void function_pointers(int* out, IntOp passed) {
  int t = threadIdx.x;
  out[3 * t] = op_table[t % 3](t);
  out[3 * t + 1] = passed(t);
  out[3 * t + 2] = op_names[t % 3][0];
}
__global__ void initialised_pointers(int* out) {
  out[0] = named.id;
  out[1] = *named.value;
  out[2] = named.name[1];
  out[3] = op_names[2][1];
}
__global__ void recursion(int* out, int n) { out[threadIdx.x] = mix_down(threadIdx.x % n); }
__global__ void call_pointer(int* out, IntOp op) { out[threadIdx.x] = op(threadIdx.x); }
}  // extern "C"

extern "C" {
// Half-precision tanh.approx and ex2.approx (htanh_approx, h2exp2 on some targets), one
// half and two, and bmsk (CUB's radix sort builds its digit masks with it).
__global__ void half_approx(const unsigned* in, unsigned* out) {
  unsigned x = in[threadIdx.x], t, e;
  unsigned short h = static_cast<unsigned short>(x), th, eh;
  asm("tanh.approx.f16x2 %0, %1;" : "=r"(t) : "r"(x));
  asm("ex2.approx.f16x2 %0, %1;" : "=r"(e) : "r"(x));
  asm("tanh.approx.f16 %0, %1;" : "=h"(th) : "h"(h));
  asm("ex2.approx.f16 %0, %1;" : "=h"(eh) : "h"(h));
  out[4 * threadIdx.x] = t;
  out[4 * threadIdx.x + 1] = e;
  out[4 * threadIdx.x + 2] = th;
  out[4 * threadIdx.x + 3] = eh;
}
// __fns: the n-th set bit from a base, up or down.
__global__ void nth_set_bit(const unsigned* masks, const unsigned* bases, const int* offsets, unsigned* out) {
  const int i = threadIdx.x;
  out[i] = __fns(masks[i], bases[i], offsets[i]);
}
__global__ void bit_masks(const unsigned* positions, const unsigned* widths, unsigned* out) {
  unsigned a = positions[threadIdx.x], b = widths[threadIdx.x], c, w;
  asm("bmsk.clamp.b32 %0, %1, %2;" : "=r"(c) : "r"(a), "r"(b));
  asm("bmsk.wrap.b32 %0, %1, %2;" : "=r"(w) : "r"(a), "r"(b));
  out[2 * threadIdx.x] = c;
  out[2 * threadIdx.x + 1] = w;
}
}  // extern "C"

extern "C" {
// Lanes of one warp that wait for each other (independent thread scheduling, sm_70 on):
// an intra-warp spin lock taken without the pre-Volta "done flag" idiom, and lane 0
// spinning on a flag that lane 31 sets after work of its own.
__global__ void intra_warp_lock(int* lock, int* counter) {
  while (atomicCAS(lock, 0, 1) != 0) {
  }
  int v = *reinterpret_cast<volatile int*>(counter);
  *reinterpret_cast<volatile int*>(counter) = v + 1;
  __threadfence();
  atomicExch(lock, 0);
}
__global__ void intra_warp_flag(int* flag, int* out) {
  const unsigned lane = threadIdx.x % 32;
  if (lane == 0) {
    while (atomicAdd(flag + blockIdx.x * blockDim.x / 32 + threadIdx.x / 32, 0) == 0) {
    }
    out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
  } else if (lane == 31) {
    int work = 0;
    for (int i = 0; i < 2000; ++i) work += i % 7;
    out[blockIdx.x * blockDim.x + threadIdx.x] = work;
    atomicExch(flag + blockIdx.x * blockDim.x / 32 + threadIdx.x / 32, 1);
  }
}
// Lanes 16-31 loop 20000 times or more while lanes 0-15 wait at the shuffles after the
// loop (long enough for the spinning lanes to be held back), then the whole warp reduces
// with shuffles: every lane's count must be in the sum.
__global__ void long_divergent_loop_then_shuffle(int* out) {
  const unsigned lane = threadIdx.x % 32;
  unsigned count = 0;
  for (unsigned i = 0; i < (lane >= 16 ? 20000 + lane : lane); ++i) count = count * 3 + (i & 7);
  for (int offset = 16; offset > 0; offset /= 2) count += __shfl_xor_sync(0xffffffff, count, offset);
  out[threadIdx.x] = count;
}
// Named barriers with thread counts (warp specialisation): in each of `rounds`, warp 0
// writes a row and arrives at barrier 3 (bar.arrive: no wait), warp 1 waits there
// (bar.sync 3, 64), copies the row and arrives at barrier 4, which warp 0 waits at before
// overwriting the row. Warps 2-3 meanwhile pass barrier 5 (64 threads) among themselves
// `rounds` times, and the id and count may come from registers.
__global__ void named_barriers(int* out, int rounds, int id5) {
  __shared__ int row[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = 0; r < rounds; ++r) {
    if (warp == 0) {
      row[lane] = r * 100 + lane;
      __threadfence_block();
      asm volatile("bar.arrive 3, 64;" ::: "memory");
      asm volatile("bar.sync 4, 64;" ::: "memory");
    } else if (warp == 1) {
      asm volatile("bar.sync 3, 64;" ::: "memory");
      out[r * 32 + lane] = row[lane];
      asm volatile("bar.arrive 4, 64;" ::: "memory");
    } else {
      asm volatile("bar.sync %0, %1;" ::"r"(id5), "r"(64) : "memory");
      if (lane == 0) atomicAdd(&out[rounds * 32 + warp - 2], 1);
    }
  }
  __syncthreads();  // barrier 0, every thread
  if (threadIdx.x == 0) out[rounds * 32 + 2] = 1;
}
// CTAs that wait for each other, as programs do where a GPU holds the whole grid at once:
// a grid barrier of the program's own (every CTA counts itself in and spins until all
// have), after which each reads what its neighbour wrote before the barrier.
__global__ void software_grid_barrier(int* counter, int* values, int* out) {
  if (threadIdx.x == 0) values[blockIdx.x] = blockIdx.x * 3 + 1;
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(counter, 1);
    while (atomicAdd(counter, 0) < static_cast<int>(gridDim.x)) {
    }
  }
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = values[(blockIdx.x + 1) % gridDim.x];
}
// The first CTA waits for a flag that only the last one sets.
__global__ void first_waits_for_last(int* flag, int* out) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    while (atomicAdd(flag, 0) == 0) {
    }
    out[0] = out[1] + 1;
  } else if (blockIdx.x == gridDim.x - 1) {
    out[1] = 41;
    __threadfence();
    atomicExch(flag, 1);
  }
}
// One CTA traps while the others wait for all to arrive: the launch fails, and returns.
__global__ void trap_while_others_wait(int* counter) {
  if (blockIdx.x == 3) asm volatile("trap;");
  if (threadIdx.x == 0) {
    atomicAdd(counter, 1);
    while (atomicAdd(counter, 0) < static_cast<int>(gridDim.x)) {
    }
  }
}
}  // extern "C"
