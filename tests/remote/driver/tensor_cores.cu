// Tensor-core code (wmma, as CUDA's mma.h compiles it for sm_80) through the sim GPU: the
// fragment loads, multiplies and stores of every element type the sim runs (f16 into f32
// and into f16, bf16, tf32, f64, u8), whole-fragment element-wise steps, a tiled GEMM that
// stages tiles in shared memory, checked against CPU references. Exits 0 only if every
// result matches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <mma.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "device_copies.h"
#include "tf32.h"

using namespace nvcuda;

namespace {

constexpr int kM = 64, kN = 48,
              kK = 32;  // the GEMM: D (MxN) = alpha * A (MxK) * B (KxN) + beta * C

// One warp per 16x16 tile of D; A row-major, B column-major, C and D row-major. The tiles of
// A and B go through shared memory (as cudaTensorCoreGemm stages them), with a padded stride.
__global__ void gemm_f16(const half* a, const half* b, const float* c, float* d, float alpha, float beta) {
  constexpr int kPad = 24;  // halves per staged row: 16 + 8, a multiple of 8 as wmma needs
  __shared__ half tile_a[4][16 * kPad];
  __shared__ half tile_b[4][16 * kPad];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tile = blockIdx.x * 4 + warp;
  const int tile_row = tile / (kN / 16), tile_col = tile % (kN / 16);
  if (tile_row >= kM / 16) return;
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  for (int k0 = 0; k0 < kK; k0 += 16) {
    for (int i = lane; i < 256; i += 32) {
      int r = i / 16, q = i % 16;
      tile_a[warp][r * kPad + q] = a[(tile_row * 16 + r) * kK + k0 + q];
      tile_b[warp][r * kPad + q] = b[(tile_col * 16 + r) * kK + k0 + q];  // column r of B
    }
    __syncwarp();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;
    wmma::load_matrix_sync(fa, tile_a[warp], kPad);
    wmma::load_matrix_sync(fb, tile_b[warp], kPad);
    wmma::mma_sync(acc, fa, fb, acc);
    __syncwarp();
  }
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> old;
  const int at = tile_row * 16 * kN + tile_col * 16;
  wmma::load_matrix_sync(old, c + at, kN, wmma::mem_row_major);
  for (int i = 0; i < acc.num_elements; ++i) acc.x[i] = alpha * acc.x[i] + beta * old.x[i];
  wmma::store_matrix_sync(d + at, acc, kN, wmma::mem_row_major);
}

// 32x8x16 with an f16 accumulator, stored column-major.
__global__ void mma_f16_acc(const half* a, const half* b, half* d) {
  wmma::fragment<wmma::matrix_a, 32, 8, 16, half, wmma::col_major> fa;
  wmma::fragment<wmma::matrix_b, 32, 8, 16, half, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 32, 8, 16, half> acc;
  wmma::fill_fragment(acc, __float2half(1.0f));
  wmma::load_matrix_sync(fa, a, 32);
  wmma::load_matrix_sync(fb, b, 8);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 32, wmma::mem_col_major);
}

__global__ void mma_bf16(const __nv_bfloat16* a, const __nv_bfloat16* b, float* d) {
  wmma::fragment<wmma::matrix_a, 8, 32, 16, __nv_bfloat16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 32, 16, __nv_bfloat16, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 32, 16, float> acc;
  wmma::fill_fragment(acc, 0.5f);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 32, wmma::mem_row_major);
}

__global__ void mma_tf32(const float* a, const float* b, float* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 8, float> acc;
  wmma::fill_fragment(acc, 0.0f);
  wmma::load_matrix_sync(fa, a, 8);
  wmma::load_matrix_sync(fb, b, 16);
  for (int i = 0; i < fa.num_elements; ++i) fa.x[i] = wmma::__float_to_tf32(fa.x[i]);
  for (int i = 0; i < fb.num_elements; ++i) fb.x[i] = wmma::__float_to_tf32(fb.x[i]);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

__global__ void mma_f64(const double* a, const double* b, const double* c, double* d) {
  wmma::fragment<wmma::matrix_a, 8, 8, 4, double, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 8, 8, 4, double, wmma::col_major> fb;
  wmma::fragment<wmma::accumulator, 8, 8, 4, double> acc;
  wmma::load_matrix_sync(acc, c, 8, wmma::mem_col_major);
  wmma::load_matrix_sync(fa, a, 4);
  wmma::load_matrix_sync(fb, b, 4);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 8, wmma::mem_row_major);
}

__global__ void mma_u8(const unsigned char* a, const unsigned char* b, int* d) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, unsigned char, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, unsigned char, wmma::row_major> fb;
  wmma::fragment<wmma::accumulator, 16, 16, 16, int> acc;
  wmma::fill_fragment(acc, -7);
  wmma::load_matrix_sync(fa, a, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(d, acc, 16, wmma::mem_row_major);
}

bool Near(double got, double want, double tolerance, const char* what, int index) {
  if (std::fabs(got - want) <= tolerance * (1 + std::fabs(want))) return true;
  std::fprintf(stderr, "%s[%d] = %.9g, want %.9g\n", what, index, got, want);
  return false;
}

}  // namespace

int main() {
  bool ok = true;

  {  // Tiled f16 GEMM into f32, with alpha and beta.
    std::vector<float> af(kM * kK), bf(kK * kN), c(kM * kN);
    std::vector<half> a(af.size()), b(bf.size());
    for (int i = 0; i < kM * kK; ++i) a[i] = __float2half(af[i] = (i % 13 - 6) * 0.25f);
    for (int i = 0; i < kK * kN; ++i) b[i] = __float2half(bf[i] = (i % 7 - 3) * 0.5f);  // column-major
    for (int i = 0; i < kM * kN; ++i) c[i] = (i % 5) - 2.0f;
    half *da = ToDevice(a), *db = ToDevice(b);
    float* dc = ToDevice(c);
    float* dd = nullptr;
    CHECK(cudaMalloc(&dd, c.size() * sizeof(float)));
    const int tiles = (kM / 16) * (kN / 16);
    gemm_f16<<<(tiles + 3) / 4, 128>>>(da, db, dc, dd, 2.0f, -0.5f);
    CHECK(cudaGetLastError());
    std::vector<float> d = ToHost(dd, c.size());
    for (int i = 0; i < kM && ok; ++i) {
      for (int j = 0; j < kN; ++j) {
        double sum = 0;
        for (int k = 0; k < kK; ++k) sum += af[i * kK + k] * bf[j * kK + k];
        ok &= Near(d[i * kN + j], 2.0 * sum - 0.5 * c[i * kN + j], 1e-5, "gemm_f16", i * kN + j);
      }
    }
    std::printf("gemm_f16 %dx%dx%d: %s\n", kM, kN, kK, ok ? "ok" : "WRONG");
  }
  {  // f16 accumulator, 32x8x16, A column-major, D column-major.
    std::vector<float> af(32 * 16), bf(16 * 8);
    std::vector<half> a(af.size()), b(bf.size());
    for (int i = 0; i < 32 * 16; ++i) a[i] = __float2half(af[i] = (i % 9 - 4) * 0.125f);
    for (int i = 0; i < 16 * 8; ++i) b[i] = __float2half(bf[i] = (i % 6 - 2) * 0.25f);
    half *da = ToDevice(a), *db = ToDevice(b), *dd = nullptr;
    CHECK(cudaMalloc(&dd, 32 * 8 * sizeof(half)));
    mma_f16_acc<<<1, 32>>>(da, db, dd);
    std::vector<half> d = ToHost(dd, 32 * 8);
    bool here = true;
    for (int i = 0; i < 32; ++i) {
      for (int j = 0; j < 8; ++j) {
        double sum = 1.0;
        for (int k = 0; k < 16; ++k) sum += af[k * 32 + i] * bf[k * 8 + j];
        here &= Near(__half2float(d[j * 32 + i]), sum, 1e-3, "mma_f16_acc", j * 32 + i);
      }
    }
    std::printf("f16 accumulator 32x8x16: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {  // bf16 8x32x16.
    std::vector<float> af(8 * 16), bf(16 * 32);
    std::vector<__nv_bfloat16> a(af.size()), b(bf.size());
    for (int i = 0; i < 8 * 16; ++i) a[i] = __float2bfloat16(af[i] = (i % 11 - 5) * 0.5f);
    for (int i = 0; i < 16 * 32; ++i) b[i] = __float2bfloat16(bf[i] = (i % 3 - 1) * 1.5f);
    __nv_bfloat16 *da = ToDevice(a), *db = ToDevice(b);
    float* dd = nullptr;
    CHECK(cudaMalloc(&dd, 8 * 32 * sizeof(float)));
    mma_bf16<<<1, 32>>>(da, db, dd);
    std::vector<float> d = ToHost(dd, 8 * 32);
    bool here = true;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 32; ++j) {
        double sum = 0.5;
        for (int k = 0; k < 16; ++k) sum += af[i * 16 + k] * bf[j * 16 + k];  // B column-major
        here &= Near(d[i * 32 + j], sum, 1e-6, "mma_bf16", i * 32 + j);
      }
    }
    std::printf("bf16 8x32x16: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {  // tf32 16x16x8: inputs that TF32 rounds, so a multiply of the full f32 values shows.
    std::vector<float> a(16 * 8), b(8 * 16);
    for (int i = 0; i < 16 * 8; ++i) a[i] = 1.0f + (i % 7) * 0.0001234f;
    for (int i = 0; i < 8 * 16; ++i) b[i] = 2.0f - (i % 5) * 0.0003456f;
    float *da = ToDevice(a), *db = ToDevice(b), *dd = nullptr;
    CHECK(cudaMalloc(&dd, 16 * 16 * sizeof(float)));
    mma_tf32<<<1, 32>>>(da, db, dd);
    std::vector<float> d = ToHost(dd, 16 * 16);
    bool here = true;
    for (int i = 0; i < 16; ++i) {
      for (int j = 0; j < 16; ++j) {
        double sum = 0, full = 0;
        for (int k = 0; k < 8; ++k) {
          sum += double{Tf32(a[i * 8 + k])} * Tf32(b[k * 16 + j]);
          full += double{a[i * 8 + k]} * b[k * 16 + j];
        }
        here &= Near(d[i * 16 + j], sum, 1e-6, "mma_tf32", i * 16 + j);
        if (i == 0 && j == 1 && std::fabs(sum - full) < 1e-5) {
          std::fprintf(stderr, "tf32 test data does not tell TF32 from f32\n");
          here = false;
        }
      }
    }
    std::printf("tf32 16x16x8: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {  // f64 8x8x4, C column-major.
    std::vector<double> a(8 * 4), b(4 * 8), c(8 * 8);
    for (int i = 0; i < 8 * 4; ++i) a[i] = 1.0 / (i + 1);
    for (int i = 0; i < 4 * 8; ++i) b[i] = std::sqrt(i + 2.0);
    for (int i = 0; i < 8 * 8; ++i) c[i] = i * 0.1;
    double *da = ToDevice(a), *db = ToDevice(b), *dc = ToDevice(c), *dd = nullptr;
    CHECK(cudaMalloc(&dd, 8 * 8 * sizeof(double)));
    mma_f64<<<1, 32>>>(da, db, dc, dd);
    std::vector<double> d = ToHost(dd, 8 * 8);
    bool here = true;
    for (int i = 0; i < 8; ++i) {
      for (int j = 0; j < 8; ++j) {
        double sum = c[j * 8 + i];
        for (int k = 0; k < 4; ++k) sum += a[i * 4 + k] * b[j * 4 + k];
        here &= Near(d[i * 8 + j], sum, 1e-14, "mma_f64", i * 8 + j);
      }
    }
    std::printf("f64 8x8x4: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  {  // u8 16x16x16 into s32.
    std::vector<unsigned char> a(256), b(256);
    for (int i = 0; i < 256; ++i) {
      a[i] = static_cast<unsigned char>(255 - i);
      b[i] = static_cast<unsigned char>(i * 7);
    }
    unsigned char *da = ToDevice(a), *db = ToDevice(b);
    int* dd = nullptr;
    CHECK(cudaMalloc(&dd, 256 * sizeof(int)));
    mma_u8<<<1, 32>>>(da, db, dd);
    std::vector<int> d = ToHost(dd, 256);
    bool here = true;
    for (int i = 0; i < 16 && here; ++i) {
      for (int j = 0; j < 16; ++j) {
        long sum = -7;
        for (int k = 0; k < 16; ++k) sum += a[i * 16 + k] * b[k * 16 + j];
        if (d[i * 16 + j] != sum) {
          std::fprintf(stderr, "mma_u8[%d] = %d, want %ld\n", i * 16 + j, d[i * 16 + j], sum);
          here = false;
          break;
        }
      }
    }
    std::printf("u8 16x16x16: %s\n", here ? "ok" : "WRONG");
    ok &= here;
  }
  return FinishProgram("tensor_cores", ok);
}
