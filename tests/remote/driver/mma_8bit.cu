// mma.sync of 8-bit matrices, m16n8k32, in inline PTX as hand-tuned int8 and FP8 GEMMs
// write them: s8 x s8 and u8 x s8 into s32 (sm_80), with and without .satfinite, and
// e4m3 x e4m3, e5m2 x e4m3 into f32 (sm_89). Each lane packs its fragments by the lane
// layout the PTX ISA documents for m16n8k32 (four elements a register: a's registers 0 and
// 2 rows g, 1 and 3 rows g + 8, 2 and 3 columns 16 on; b's register 0 rows 4t to 4t + 3, 1
// those + 16; c and d as for m16n8k16), and stores D by it. The FP8 values are small
// multiples of a half, so every sum is exact in f32 and the CPU reference is exact in any
// order. Built for sm_90 (run on a simulated H100).
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

namespace {

// The register of 4 bytes at (row, col..col+3) of a row-major matrix of `cols` columns.
__device__ uint32_t PackRow(const uint8_t* m, int cols, int row, int col) {
  uint32_t r = 0;
  for (int j = 0; j < 4; ++j) r |= static_cast<uint32_t>(m[row * cols + col + j]) << (8 * j);
  return r;
}

// a: 16x32 row-major bytes; bt: B transposed (8 rows of 32 k) bytes; c, d: 16x8 words.
// `form`: 0 s8.s8 into s32, 1 u8.s8, 2 s8.s8 .satfinite, 3 e4m3.e4m3 into f32, 4 e5m2.e4m3.
__global__ void Mma8(const uint8_t* a, const uint8_t* bt, const uint32_t* c, uint32_t* d, int form) {
  const int lane = threadIdx.x, g = lane >> 2, t = lane & 3;
  uint32_t ra[4], rb[2], rc[4], rd[4];
  for (int r = 0; r < 4; ++r) ra[r] = PackRow(a, 32, g + 8 * (r & 1), t * 4 + 16 * (r >> 1));
  for (int r = 0; r < 2; ++r) rb[r] = PackRow(bt, 32, g, t * 4 + 16 * r);  // column g of B: row g of bt
  for (int e = 0; e < 4; ++e) rc[e] = c[(g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)];
#define MMA8(TYPES)                                                                                              \
  asm volatile("mma.sync.aligned.m16n8k32.row.col." TYPES                                                        \
               " {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "                                                        \
               "{%10,%11,%12,%13};\n"                                                                            \
               : "=r"(rd[0]), "=r"(rd[1]), "=r"(rd[2]), "=r"(rd[3])                                              \
               : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "r"(rc[0]), "r"(rc[1]), \
                 "r"(rc[2]), "r"(rc[3]))
  switch (form) {
    case 0:
      MMA8("s32.s8.s8.s32");
      break;
    case 1:
      MMA8("s32.u8.s8.s32");
      break;
    case 2:
      MMA8("satfinite.s32.s8.s8.s32");
      break;
    case 3:
      MMA8("f32.e4m3.e4m3.f32");
      break;
    default:
      MMA8("f32.e5m2.e4m3.f32");
  }
#undef MMA8
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e >> 1)) * 8 + t * 2 + (e & 1)] = rd[e];
}

}  // namespace

int main() {
  uint8_t *da = nullptr, *dbt = nullptr;
  uint32_t *dc = nullptr, *dd = nullptr;
  CHECK(cudaMalloc(&da, 16 * 32));
  CHECK(cudaMalloc(&dbt, 8 * 32));
  CHECK(cudaMalloc(&dc, 16 * 8 * 4));
  CHECK(cudaMalloc(&dd, 16 * 8 * 4));
  uint32_t state = 2024;
  auto next = [&] { return (state = state * 1664525u + 1013904223u) >> 8; };
  const char* names[] = {"s32.s8.s8.s32", "s32.u8.s8.s32", "satfinite.s32.s8.s8.s32", "f32.e4m3.e4m3.f32",
                         "f32.e5m2.e4m3.f32"};
  int wrong = 0;
  for (int form = 0; form < 5; ++form) {
    for (int round = 0; round < 3; ++round) {
      std::vector<uint8_t> a(16 * 32), bt(8 * 32);
      std::vector<double> av(16 * 32), bv(8 * 32);
      std::vector<uint32_t> c(16 * 8);
      std::vector<double> cv(16 * 8);
      const bool fp8 = form >= 3;
      // FP8: multiples of 0.5 in [-4, 4]; e5m2 for a in form 4.
      auto fp8_byte = [&](double v, bool e5m2) {
        return static_cast<uint8_t>(
            __nv_cvt_float_to_fp8(static_cast<float>(v), __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3));
      };
      for (int i = 0; i < 16 * 32; ++i) {
        if (fp8) {
          av[i] = (static_cast<int>(next() % 17) - 8) * 0.5;
          a[i] = fp8_byte(av[i], form == 4);
        } else if (form == 1) {
          a[i] = static_cast<uint8_t>(next());
          av[i] = a[i];
        } else {
          a[i] = static_cast<uint8_t>(next());
          av[i] = static_cast<int8_t>(a[i]);
        }
      }
      for (int i = 0; i < 8 * 32; ++i) {
        if (fp8) {
          bv[i] = (static_cast<int>(next() % 17) - 8) * 0.5;
          bt[i] = fp8_byte(bv[i], false);
        } else {
          bt[i] = static_cast<uint8_t>(next());
          bv[i] = static_cast<int8_t>(bt[i]);
        }
      }
      for (int i = 0; i < 16 * 8; ++i) {
        if (fp8) {
          cv[i] = (static_cast<int>(next() % 41) - 20) * 0.25;
          const float f = static_cast<float>(cv[i]);
          std::memcpy(&c[i], &f, 4);
        } else {
          // Form 2 (.satfinite) near the ends of the s32 range in round 1 and 2.
          const int32_t v = form == 2 && round > 0 ? (round == 1 ? INT32_MAX - 1000 : INT32_MIN + 1000)
                                                   : static_cast<int32_t>(next() % 200000) - 100000;
          c[i] = static_cast<uint32_t>(v);
          cv[i] = v;
        }
      }
      CHECK(cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(dbt, bt.data(), bt.size(), cudaMemcpyHostToDevice));
      CHECK(cudaMemcpy(dc, c.data(), c.size() * 4, cudaMemcpyHostToDevice));
      Mma8<<<1, 32>>>(da, dbt, dc, dd, form);
      CHECK(cudaGetLastError());
      std::vector<uint32_t> d(16 * 8);
      CHECK(cudaMemcpy(d.data(), dd, d.size() * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 16; ++i) {
        for (int j = 0; j < 8; ++j) {
          double sum = cv[i * 8 + j];
          for (int k = 0; k < 32; ++k) sum += av[i * 32 + k] * bv[j * 32 + k];
          uint32_t want;
          if (fp8) {
            const float f = static_cast<float>(sum);
            std::memcpy(&want, &f, 4);
          } else {
            int64_t s = static_cast<int64_t>(sum);
            if (form == 2) s = std::max<int64_t>(INT32_MIN, std::min<int64_t>(INT32_MAX, s));
            want = static_cast<uint32_t>(s);  // without .satfinite, wrapped
          }
          if (d[i * 8 + j] != want && ++wrong <= 10) {
            std::fprintf(stderr, "mma %s round %d: d[%d][%d] = %#x, want %#x\n", names[form], round, i, j, d[i * 8 + j],
                         want);
          }
        }
      }
    }
  }
  CHECK_FREE(da, dbt, dc, dd);
  std::printf("mma m16n8k32 of 8-bit types: 5 forms x 3 rounds, %d wrong\n", wrong);
  return wrong == 0 ? 0 : 1;
}
