// Warp-level mma.sync and ldmatrix in inline PTX, as hand-tuned GEMMs write them (sm_80):
// each lane builds its fragments by the lane layouts PTX documents, or loads them with
// ldmatrix (plain and .trans) from shared memory, and stores D by the same layout.
// Checked against CPU references; exits 0 only if every result matches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "device_copies.h"
#include "tf32.h"

namespace {

__device__ uint32_t Pack(const half* p, int i0, int i1) {
  return static_cast<uint32_t>(__half_as_ushort(p[i0])) | (static_cast<uint32_t>(__half_as_ushort(p[i1])) << 16);
}

// m16n8k16, f16 into f32: A 16x16 row-major, bt = B transposed (8 rows of 16 k), C and D
// 16x8 row-major. Fragments from the layouts in the PTX ISA.
__global__ void mma_m16n8k16(const half* a, const half* bt, const float* c, float* d) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  uint32_t ra[4], rb[2];
  for (int r = 0; r < 4; ++r) {
    int row = g + 8 * (r & 1), col = t * 2 + 8 * (r >> 1);
    ra[r] = Pack(a, row * 16 + col, row * 16 + col + 1);
  }
  for (int r = 0; r < 2; ++r) {
    int k = t * 2 + 8 * r;
    rb[r] = Pack(bt, g * 16 + k, g * 16 + k + 1);
  }
  float rc[4], rd[4];
  for (int e = 0; e < 4; ++e) rc[e] = c[(g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)];
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%11,%12,%13};\n"
      : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(rc[0]), "f"(rc[1]), "f"(rc[2]),
        "f"(rc[3]));
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)] = rd[e];
}

// The same multiply with fragments from ldmatrix: A by .x4, B by .x2 from bt, and again by
// .x2.trans from B row-major (16 k-rows of 8); D = A * B twice, stored as d[0..127] and
// d[128..255].
__global__ void mma_ldmatrix(const half* a, const half* bt, const half* b, float* d) {
  __shared__ alignas(16) half sa[16 * 16], sbt[8 * 16], sb[16 * 8];
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  for (int i = lane; i < 256; i += 32) sa[i] = a[i];
  for (int i = lane; i < 128; i += 32) {
    sbt[i] = bt[i];
    sb[i] = b[i];
  }
  __syncwarp();
  uint32_t ra[4], rb[2], rbt[2];
  const half* a_row = &sa[((lane % 8) + 8 * ((lane / 8) % 2)) * 16 + 8 * (lane / 16)];
  const half* bt_row = &sbt[(lane % 8) * 16 + 8 * ((lane / 8) % 2)];
  const half* b_row = &sb[(lane % 16) * 8];
  uint32_t a_addr = static_cast<uint32_t>(__cvta_generic_to_shared(a_row));
  uint32_t bt_addr = static_cast<uint32_t>(__cvta_generic_to_shared(bt_row));
  uint32_t b_addr = static_cast<uint32_t>(__cvta_generic_to_shared(b_row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(ra[0]), "=r"(ra[1]), "=r"(ra[2]), "=r"(ra[3])
               : "r"(a_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n" : "=r"(rb[0]), "=r"(rb[1]) : "r"(bt_addr));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(rbt[0]), "=r"(rbt[1])
               : "r"(b_addr));
  for (int pass = 0; pass < 2; ++pass) {
    const uint32_t* frag_b = pass == 0 ? rb : rbt;
    float rd[4];
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%10,%10,%10,%10};\n"
        : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
        : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(frag_b[0]), "r"(frag_b[1]), "f"(0.0f));
    for (int e = 0; e < 4; ++e) d[pass * 128 + (g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)] = rd[e];
  }
}

// m16n8k8 of tf32 (A 16x8 row-major, bt 8 rows of 8 k) and m8n8k4 of f64 (A 8x4, bt 8x4).
__global__ void mma_tf32_f64(const float* a, const float* bt, float* d, const double* a64, const double* bt64,
                             double* d64) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  uint32_t ra[4], rb[2];
  for (int e = 0; e < 4; ++e) {
    float v = a[(g + 8 * (e & 1)) * 8 + t + 4 * (e >> 1)];
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(ra[e]) : "f"(v));
  }
  for (int e = 0; e < 2; ++e) {
    float v = bt[g * 8 + t + 4 * e];
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(rb[e]) : "f"(v));
  }
  float rd[4];
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%10,%10,%10,%10};\n"
      : "=f"(rd[0]), "=f"(rd[1]), "=f"(rd[2]), "=f"(rd[3])
      : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(0.0f));
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)] = rd[e];
  double da = a64[g * 4 + t], db = bt64[g * 4 + t], d0, d1;
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%4};\n"
               : "=d"(d0), "=d"(d1)
               : "d"(da), "d"(db), "d"(1.0));
  d64[g * 8 + t * 2] = d0;
  d64[g * 8 + t * 2 + 1] = d1;
}

bool Check(const char* what, const std::vector<float>& got, const std::vector<double>& want, double tolerance) {
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::fabs(got[i] - want[i]) > tolerance * (1 + std::fabs(want[i]))) {
      std::fprintf(stderr, "%s[%zu] = %.9g, want %.9g\n", what, i, got[i], want[i]);
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  // A 16x16, B 16x8 (as bt: B transposed, and b: row-major), C 16x8.
  std::vector<float> af(256), bf(128), c(128);
  std::vector<half> a(256), bt(128), b(128);
  for (int i = 0; i < 256; ++i) a[i] = __float2half(af[i] = (i % 9 - 4) * 0.25f);
  for (int k = 0; k < 16; ++k) {
    for (int n = 0; n < 8; ++n) {
      bf[k * 8 + n] = ((k * 8 + n) % 7 - 3) * 0.5f;
      b[k * 8 + n] = __float2half(bf[k * 8 + n]);
      bt[n * 16 + k] = __float2half(bf[k * 8 + n]);
    }
  }
  for (int i = 0; i < 128; ++i) c[i] = i * 0.125f - 3;
  std::vector<double> product(128), with_c(128);
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      double sum = 0;
      for (int k = 0; k < 16; ++k) sum += af[m * 16 + k] * bf[k * 8 + n];
      product[m * 8 + n] = sum;
      with_c[m * 8 + n] = sum + c[m * 8 + n];
    }
  }
  half *da = ToDevice(a), *dbt = ToDevice(bt), *db = ToDevice(b);
  float* dc = ToDevice(c);
  float* dd = nullptr;
  CHECK(cudaMalloc(&dd, 256 * sizeof(float)));

  mma_m16n8k16<<<1, 32>>>(da, dbt, dc, dd);
  bool ok = Check("mma_m16n8k16", ToHost(dd, 128), with_c, 1e-6);
  std::printf("mma.sync m16n8k16 f16 -> f32: %s\n", ok ? "ok" : "WRONG");

  mma_ldmatrix<<<1, 32>>>(da, dbt, db, dd);
  std::vector<float> both = ToHost(dd, 256);
  bool here = Check("ldmatrix.x4/.x2", std::vector<float>(both.begin(), both.begin() + 128), product, 1e-6) &&
              Check("ldmatrix.x2.trans", std::vector<float>(both.begin() + 128, both.end()), product, 1e-6);
  std::printf("ldmatrix (x4, x2, x2.trans) into mma.sync: %s\n", here ? "ok" : "WRONG");
  ok &= here;

  std::vector<float> a32(128), bt32(64);
  for (int i = 0; i < 128; ++i) a32[i] = 1.0f + (i % 5) * 0.000123f;
  for (int i = 0; i < 64; ++i) bt32[i] = -2.0f + (i % 3) * 0.000456f;
  std::vector<double> a64(32), bt64(32), want32(128), want64(64);
  for (int i = 0; i < 32; ++i) {
    a64[i] = 1.0 / (i + 1);
    bt64[i] = std::sqrt(i + 1.0);
  }
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      double sum = 0;
      for (int k = 0; k < 8; ++k) sum += double{Tf32(a32[m * 8 + k])} * Tf32(bt32[n * 8 + k]);
      want32[m * 8 + n] = sum;
    }
  }
  for (int m = 0; m < 8; ++m) {
    for (int n = 0; n < 8; ++n) {
      double sum = 1.0;
      for (int k = 0; k < 4; ++k) sum += a64[m * 4 + k] * bt64[n * 4 + k];
      want64[m * 8 + n] = sum;
    }
  }
  float *d_a32 = ToDevice(a32), *d_bt32 = ToDevice(bt32);
  double *d_a64 = ToDevice(a64), *d_bt64 = ToDevice(bt64), *d_d64 = nullptr;
  CHECK(cudaMalloc(&d_d64, 64 * sizeof(double)));
  mma_tf32_f64<<<1, 32>>>(d_a32, d_bt32, dd, d_a64, d_bt64, d_d64);
  here = Check("mma_tf32", ToHost(dd, 128), want32, 1e-6);
  std::vector<double> got64 = ToHost(d_d64, 64);
  for (int i = 0; i < 64 && here; ++i) {
    if (std::fabs(got64[i] - want64[i]) > 1e-13) {
      std::fprintf(stderr, "mma_f64[%d] = %.17g, want %.17g\n", i, got64[i], want64[i]);
      here = false;
    }
  }
  std::printf("mma.sync m16n8k8 tf32 and m8n8k4 f64: %s\n", here ? "ok" : "WRONG");
  ok &= here;

  return FinishProgram("mma_sync", ok);
}
