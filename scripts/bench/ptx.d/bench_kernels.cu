// Kernels of the PTX engine benchmark (scripts/bench/ptx): element-wise, shared-memory
// tiled matrix multiply (plain loads, and cp.async), calls of a device function, atomics,
// a barrier-heavy block scan, bilinear texture sampling and a filter of __constant__ taps.
// extern "C" for plain names; sm_80 for cp.async. And a cooperative launch's grid-wide
// reduction (grid_sum: cooperative groups' grid.sync()).
#include <cooperative_groups.h>

constexpr int kTile = 16;

extern "C" {

__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// C = A * B for n x n row-major matrices, n a multiple of kTile.
__global__ void matmul_tiled(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y;
  int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0;
  for (int t = 0; t < n; t += kTile) {
    ta[threadIdx.y][threadIdx.x] = a[row * n + t + threadIdx.x];
    tb[threadIdx.y][threadIdx.x] = b[(t + threadIdx.y) * n + col];
    __syncthreads();
    for (int k = 0; k < kTile; ++k) sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  c[row * n + col] = sum;
}

// 4 bytes from global to shared memory by cp.async, src_bytes (0 or 4) of them from the
// source, the rest zeros (as a tiled kernel pads its edge tiles).
__device__ __forceinline__ void CopyAsync4(float* to, const float* from, int src_bytes) {
  unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared), "l"(from), "r"(src_bytes));
}

// matmul_tiled with its tiles staged by cp.async (issue 41's kind of kernel): commit, wait
// for the group, then the barrier.
__global__ void matmul_cp_async(const float* a, const float* b, float* c, int n) {
  __shared__ float ta[kTile][kTile];
  __shared__ float tb[kTile][kTile];
  int row = blockIdx.y * kTile + threadIdx.y;
  int col = blockIdx.x * kTile + threadIdx.x;
  float sum = 0;
  for (int t = 0; t < n; t += kTile) {
    bool a_in = row < n && t + threadIdx.x < n;
    bool b_in = t + threadIdx.y < n && col < n;
    CopyAsync4(&ta[threadIdx.y][threadIdx.x], a + (a_in ? row * n + t + threadIdx.x : 0), a_in ? 4 : 0);
    CopyAsync4(&tb[threadIdx.y][threadIdx.x], b + (b_in ? (t + threadIdx.y) * n + col : 0), b_in ? 4 : 0);
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    for (int k = 0; k < kTile; ++k) sum += ta[threadIdx.y][k] * tb[k][threadIdx.x];
    __syncthreads();
  }
  if (row < n && col < n) c[row * n + col] = sum;
}

// 16 bytes from global to shared memory by cp.async (cp.async.cg: the whole 16 bytes).
__device__ __forceinline__ void CopyAsync16(float* to, const float* from) {
  unsigned shared = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(shared), "l"(from));
}

// The shape of NVIDIA's async-copy sample's default kernel: a four-stage pipeline of
// float4 copies by a quarter of each 16 x 16 block's threads (x < 4), the products of a
// tile once its group arrived, stages reused after the barrier that ends each tile's
// products; n a multiple of kTile.
__global__ void matmul_pipeline4(const float* a, const float* b, float* c, int n) {
  constexpr int kStages = 4;
  __shared__ alignas(16) float sa[kStages][kTile][kTile];
  __shared__ alignas(16) float sb[kStages][kTile][kTile];
  const int tx = threadIdx.x, ty = threadIdx.y, x4 = tx * 4;
  const int row = blockIdx.y * kTile + ty, col = blockIdx.x * kTile + tx;
  const int tiles = n / kTile;
  float sum = 0;
  for (int t = 0; t < tiles + kStages - 1; ++t) {
    if (t < tiles && x4 < kTile) {
      const int s = t % kStages;
      CopyAsync16(&sa[s][ty][x4], &a[row * n + t * kTile + x4]);
      CopyAsync16(&sb[s][ty][x4], &b[(t * kTile + ty) * n + blockIdx.x * kTile + x4]);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    if (t < kStages - 1) continue;
    asm volatile("cp.async.wait_group 3;\n" ::);
    __syncthreads();
    const int s = (t - (kStages - 1)) % kStages;
#pragma unroll
    for (int k = 0; k < kTile; ++k) sum += sa[s][ty][k] * sb[s][k][tx];
    __syncthreads();
  }
  c[row * n + col] = sum;
}

// matmul_tiled as samples write it for wider tiles: 32 x 32 tiles of float4 (each thread 4
// columns of a row, blocks of 8 x 32) in dynamic shared memory (extern __shared__, the
// launch's 2 * 32 * 32 floats), float4 loads and stores (ld/st .v4); n a multiple of 32.
__global__ void matmul_float4_dynamic(const float* a, const float* b, float* c, int n) {
  extern __shared__ float4 tiles[];
  float4* ta = tiles;           // [32][8]
  float4* tb = tiles + 32 * 8;  // [32][8]
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int row = blockIdx.y * 32 + ty;
  const int col4 = blockIdx.x * 8 + tx;
  float4 acc = make_float4(0, 0, 0, 0);
  for (int t = 0; t < n; t += 32) {
    ta[ty * 8 + tx] = reinterpret_cast<const float4*>(a + row * n + t)[tx];
    tb[ty * 8 + tx] = reinterpret_cast<const float4*>(b + (t + ty) * n)[col4];
    __syncthreads();
    for (int k4 = 0; k4 < 8; ++k4) {
      const float4 av = ta[ty * 8 + k4];
      const float x[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 bv = tb[(k4 * 4 + j) * 8 + tx];
        acc.x += x[j] * bv.x;
        acc.y += x[j] * bv.y;
        acc.z += x[j] * bv.z;
        acc.w += x[j] * bv.w;
      }
    }
    __syncthreads();
  }
  reinterpret_cast<float4*>(c + row * n)[col4] = acc;
}

// A polynomial by Horner's rule in a device function nvcc keeps as a call (__noinline__:
// its arguments and result in .param variables), called twice per element.
__device__ __noinline__ float horner(const float* coeffs, int degree, float x) {
  float r = 0;
  for (int k = degree; k >= 0; --k) r = r * x + coeffs[k];
  return r;
}

__global__ void poly_call(int n, const float* coeffs, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = horner(coeffs, 8, x[i]) - horner(coeffs + 9, 4, x[i]);
}

// 256-bin histogram of bytes: shared-memory bins, then one global atomic per bin.
__global__ void histogram(const unsigned char* data, int n, unsigned* bins) {
  __shared__ unsigned local[256];
  for (int i = threadIdx.x; i < 256; i += blockDim.x) local[i] = 0;
  __syncthreads();
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    atomicAdd(&local[data[i]], 1u);
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 256; i += blockDim.x) atomicAdd(&bins[i], local[i]);
}

// Stream compaction: each odd input appended to out at a ticket of one global counter (an
// atomicAdd whose result is read), in a grid-stride loop.
__global__ void compact(const unsigned* in, int n, unsigned* out, unsigned* count) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const unsigned v = in[i];
    if (v & 1) out[atomicAdd(count, 1u)] = v;
  }
}

// Inclusive scan of each block's 256 elements (Hillis-Steele): 8 steps of two
// __syncthreads() each, so a thread does little work between barriers.
__global__ void block_scan(const unsigned* in, unsigned* out) {
  __shared__ unsigned buffer[256];
  const int t = threadIdx.x;
  const int i = blockIdx.x * 256 + t;
  buffer[t] = in[i];
  __syncthreads();
  for (int offset = 1; offset < 256; offset *= 2) {
    const unsigned before = t >= offset ? buffer[t - offset] : 0;
    __syncthreads();
    buffer[t] += before;
    __syncthreads();
  }
  out[i] = buffer[t];
}

// The same scan by warp shuffles: each warp's inclusive scan by five __shfl_up_sync, the
// warps' totals scanned by warp 0 the same way, added after a barrier (2 barriers per
// thread, 5 shuffles per thread and 5 more in warp 0).
__global__ void warp_scan(const unsigned* in, unsigned* out) {
  __shared__ unsigned totals[8];
  const int t = threadIdx.x, lane = t % 32, warp = t / 32;
  const int i = blockIdx.x * 256 + t;
  unsigned v = in[i];
#pragma unroll
  for (int offset = 1; offset < 32; offset *= 2) {
    const unsigned up = __shfl_up_sync(0xffffffffu, v, offset);
    if (lane >= offset) v += up;
  }
  if (lane == 31) totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    unsigned s = lane < 8 ? totals[lane] : 0;
#pragma unroll
    for (int offset = 1; offset < 8; offset *= 2) {
      const unsigned up = __shfl_up_sync(0xffffffffu, s, offset);
      if (lane >= offset) s += up;
    }
    if (lane < 8) totals[lane] = s;
  }
  __syncthreads();
  out[i] = warp > 0 ? v + totals[warp - 1] : v;
}

// A grid-stride sum of n floats reduced in each warp by five __shfl_down_sync; lane 0 of
// each warp writes its warp's sum (a loop of loads and adds per thread, then the shuffles).
__global__ void warp_sum(const float* in, float* out, int n) {
  float v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_down_sync(0xffffffffu, v, offset);
  if (threadIdx.x % 32 == 0) out[(blockIdx.x * blockDim.x + threadIdx.x) / 32] = v;
}

// out[y][x] = the bilinear sample of a w x h float texture (unnormalised coordinates,
// clamped) at (x + 0.3, y + 0.7): one tex.2d with linear filtering per thread.
__global__ void bilinear(cudaTextureObject_t image, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(image, x + 0.3f, y + 0.7f);
}

// y[i] = the 16 taps of fir_taps (constant memory: ld.const at [fir_taps+4k]) over
// x[i..i+15], clamped to the last element.
__constant__ float fir_taps[16] = {0.01f, -0.02f, 0.03f, -0.04f, 0.05f,  0.1f,  0.2f,   0.3f,
                                   0.3f,  0.2f,   0.1f,  0.05f,  -0.04f, 0.03f, -0.02f, 0.01f};
__global__ void fir_constant(int n, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = 0;
#pragma unroll
  for (int k = 0; k < 16; ++k) s += fir_taps[k] * x[min(i + k, n - 1)];
  y[i] = s;
}

// C (n x n floats) = A (n x n halves, row-major) times B (given as its transpose, row-major
// halves) by mma.sync.m16n8k16 (f16 inputs, f32 sums): each warp one 16 x 8 tile of C, k in
// steps of 16, each lane's fragments loaded from global memory as PTX lays them out (a and
// bt as 32-bit words, two halves each). n a multiple of 16; n * n / 128 warps.
__global__ void mma_gemm(const unsigned* a, const unsigned* bt, float* c, int n) {
  const int warp = (blockIdx.x * blockDim.x + threadIdx.x) / 32, lane = threadIdx.x % 32;
  const int row0 = warp / (n / 8) * 16, col0 = warp % (n / 8) * 8;
  const int g = lane / 4, t = lane % 4, words = n / 2;
  float d0 = 0, d1 = 0, d2 = 0, d3 = 0;
  for (int k = 0; k < n; k += 16) {
    const unsigned a0 = a[(row0 + g) * words + k / 2 + t], a1 = a[(row0 + g + 8) * words + k / 2 + t];
    const unsigned a2 = a[(row0 + g) * words + k / 2 + t + 4], a3 = a[(row0 + g + 8) * words + k / 2 + t + 4];
    const unsigned b0 = bt[(col0 + g) * words + k / 2 + t], b1 = bt[(col0 + g) * words + k / 2 + t + 4];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
  }
  c[(row0 + g) * n + col0 + 2 * t] = d0;
  c[(row0 + g) * n + col0 + 2 * t + 1] = d1;
  c[(row0 + g + 8) * n + col0 + 2 * t] = d2;
  c[(row0 + g + 8) * n + col0 + 2 * t + 1] = d3;
}

// A cooperative launch's reduction of n floats: each block sums its grid-stride share
// (a shared-memory tree of 256), block b's total into partial[b]; grid.sync(); block 0's
// first thread adds the partials into out[0].
__global__ void grid_sum(const float* in, float* partial, float* out, int n) {
  namespace cg = cooperative_groups;
  __shared__ float sums[256];
  float v = 0;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) v += in[i];
  sums[threadIdx.x] = v;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
  cg::this_grid().sync();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    float total = 0;
    for (int b = 0; b < gridDim.x; ++b) total += partial[b];
    out[0] = total;
  }
}

}  // extern "C"
