// 8-bit floats as cuda_fp8.h converts them on sm_89 and later: pairs of floats and of
// halves to E4M3 and E5M2 (cvt.rn.satfinite.{e4m3x2,e5m2x2}.{f32,f16x2}) and every pair of
// 8-bit values back to halves (cvt.rn.f16x2.{e4m3x2,e5m2x2}). The reference is the same
// header's host code, NVIDIA's software conversions: each result must equal it bit for
// bit, a NaN being any NaN of the format (the host keeps a NaN's sign, the ISA's canonical
// NaN does not). Built for sm_90 (run on a simulated H100).
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "../programs/check.h"

namespace {

__global__ void FloatsToFp8(const float2* in, __nv_fp8x2_storage_t* e4m3, __nv_fp8x2_storage_t* e5m2, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  e4m3[i] = __nv_cvt_float2_to_fp8x2(in[i], __NV_SATFINITE, __NV_E4M3);
  e5m2[i] = __nv_cvt_float2_to_fp8x2(in[i], __NV_SATFINITE, __NV_E5M2);
}

__global__ void HalvesToFp8(const __half2_raw* in, __nv_fp8x2_storage_t* e4m3, __nv_fp8x2_storage_t* e5m2, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  e4m3[i] = __nv_cvt_halfraw2_to_fp8x2(in[i], __NV_SATFINITE, __NV_E4M3);
  e5m2[i] = __nv_cvt_halfraw2_to_fp8x2(in[i], __NV_SATFINITE, __NV_E5M2);
}

// Every pair of 8-bit values: i's upper and lower bytes.
__global__ void Fp8ToHalves(__half2_raw* e4m3, __half2_raw* e5m2) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 65536) return;
  e4m3[i] = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(i), __NV_E4M3);
  e5m2[i] = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(i), __NV_E5M2);
}

bool Fp8IsNan(unsigned byte, bool e4m3) { return e4m3 ? (byte & 0x7f) == 0x7f : (byte & 0x7f) > 0x7c; }

// Both bytes of a pair equal, or NaNs of the format.
bool SamePair(unsigned got, unsigned want, bool e4m3) {
  for (int shift : {0, 8}) {
    const unsigned g = (got >> shift) & 0xff, w = (want >> shift) & 0xff;
    if (g != w && !(Fp8IsNan(g, e4m3) && Fp8IsNan(w, e4m3))) return false;
  }
  return true;
}

bool HalfIsNan(unsigned short h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool SameHalf(unsigned short got, unsigned short want) { return got == want || (HalfIsNan(got) && HalfIsNan(want)); }

// Floats that probe both formats: each value of either, the floats next to it, the
// midpoints between neighbours (ties) and next to them, the ends of the ranges, zeros,
// infinities, NaN, and a spread of other magnitudes.
std::vector<float> ProbeFloats() {
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1e-30f,
                               -1e-30f,
                               1e30f,
                               -1e30f,
                               448.0f,
                               464.0f,
                               480.0f,
                               57344.0f,
                               61440.0f,
                               65536.0f,
                               std::numeric_limits<float>::infinity(),
                               -std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN(),
                               std::numeric_limits<float>::max(),
                               std::numeric_limits<float>::denorm_min()};
  for (int format = 0; format < 2; ++format) {
    std::vector<float> representable;
    for (int byte = 0; byte < 128; ++byte) {
      const __half_raw h =
          __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(byte), format == 0 ? __NV_E4M3 : __NV_E5M2);
      const float v = __half2float(__half(h));
      if (std::isfinite(v)) representable.push_back(v);
    }
    for (size_t i = 0; i < representable.size(); ++i) {
      const float v = representable[i];
      for (float x : {v, std::nextafter(v, 1e38f), std::nextafter(v, -1e38f)}) {
        values.push_back(x);
        values.push_back(-x);
      }
      if (i + 1 < representable.size()) {
        const float mid = (v + representable[i + 1]) / 2;  // exact: both have few bits
        for (float x : {mid, std::nextafter(mid, 1e38f), std::nextafter(mid, -1e38f)}) {
          values.push_back(x);
          values.push_back(-x);
        }
      }
    }
  }
  uint32_t state = 12345;
  for (int i = 0; i < 4000; ++i) {
    state = state * 1664525u + 1013904223u;
    const float mantissa = 1.0f + static_cast<float>(state >> 9) / 8388608.0f;
    state = state * 1664525u + 1013904223u;
    values.push_back(std::ldexp((state & 1) ? -mantissa : mantissa, static_cast<int>(state >> 24) % 48 - 24));
  }
  return values;
}

}  // namespace

int main() {
  const std::vector<float> probes = ProbeFloats();
  const int n = static_cast<int>(probes.size()) - 1;  // pairs (x[i], x[i + 1]): each value high and low
  std::vector<float2> pairs(n);
  for (int i = 0; i < n; ++i) pairs[i] = make_float2(probes[i], probes[i + 1]);
  float2* d_pairs = nullptr;
  __nv_fp8x2_storage_t *d_e4m3 = nullptr, *d_e5m2 = nullptr;
  CHECK(cudaMalloc(&d_pairs, n * sizeof(float2)));
  CHECK(cudaMalloc(&d_e4m3, 65536 * sizeof(__nv_fp8x2_storage_t)));
  CHECK(cudaMalloc(&d_e5m2, 65536 * sizeof(__nv_fp8x2_storage_t)));
  CHECK(cudaMemcpy(d_pairs, pairs.data(), n * sizeof(float2), cudaMemcpyHostToDevice));
  FloatsToFp8<<<(n + 255) / 256, 256>>>(d_pairs, d_e4m3, d_e5m2, n);
  CHECK(cudaGetLastError());
  std::vector<__nv_fp8x2_storage_t> e4m3(65536), e5m2(65536);
  CHECK(cudaMemcpy(e4m3.data(), d_e4m3, n * sizeof(e4m3[0]), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(e5m2.data(), d_e5m2, n * sizeof(e5m2[0]), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) {
    const unsigned want4 = __nv_cvt_float2_to_fp8x2(pairs[i], __NV_SATFINITE, __NV_E4M3);
    const unsigned want5 = __nv_cvt_float2_to_fp8x2(pairs[i], __NV_SATFINITE, __NV_E5M2);
    if (!SamePair(e4m3[i], want4, true) || !SamePair(e5m2[i], want5, false)) {
      if (++wrong <= 8) {
        std::fprintf(stderr, "floats (%a, %a): e4m3x2 %#06x want %#06x, e5m2x2 %#06x want %#06x\n", pairs[i].x,
                     pairs[i].y, e4m3[i], want4, e5m2[i], want5);
      }
    }
  }
  // Every f16 value, as the upper half beside another as the lower.
  std::vector<__half2_raw> halves(65536);
  for (int i = 0; i < 65536; ++i) {
    halves[i].x = static_cast<unsigned short>((i * 7919) & 0xffff);
    halves[i].y = static_cast<unsigned short>(i);
  }
  __half2_raw* d_halves = nullptr;
  CHECK(cudaMalloc(&d_halves, 65536 * sizeof(__half2_raw)));
  CHECK(cudaMemcpy(d_halves, halves.data(), 65536 * sizeof(__half2_raw), cudaMemcpyHostToDevice));
  HalvesToFp8<<<256, 256>>>(d_halves, d_e4m3, d_e5m2, 65536);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpy(e4m3.data(), d_e4m3, 65536 * sizeof(e4m3[0]), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(e5m2.data(), d_e5m2, 65536 * sizeof(e5m2[0]), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 65536; ++i) {
    const unsigned want4 = __nv_cvt_halfraw2_to_fp8x2(halves[i], __NV_SATFINITE, __NV_E4M3);
    const unsigned want5 = __nv_cvt_halfraw2_to_fp8x2(halves[i], __NV_SATFINITE, __NV_E5M2);
    if (!SamePair(e4m3[i], want4, true) || !SamePair(e5m2[i], want5, false)) {
      if (++wrong <= 16) {
        std::fprintf(stderr, "halves (%#06x, %#06x): e4m3x2 %#06x want %#06x, e5m2x2 %#06x want %#06x\n", halves[i].y,
                     halves[i].x, e4m3[i], want4, e5m2[i], want5);
      }
    }
  }
  __half2_raw *d_from4 = nullptr, *d_from5 = nullptr;
  CHECK(cudaMalloc(&d_from4, 65536 * sizeof(__half2_raw)));
  CHECK(cudaMalloc(&d_from5, 65536 * sizeof(__half2_raw)));
  Fp8ToHalves<<<256, 256>>>(d_from4, d_from5);
  CHECK(cudaGetLastError());
  std::vector<__half2_raw> from4(65536), from5(65536);
  CHECK(cudaMemcpy(from4.data(), d_from4, 65536 * sizeof(__half2_raw), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(from5.data(), d_from5, 65536 * sizeof(__half2_raw), cudaMemcpyDeviceToHost));
  for (int i = 0; i < 65536; ++i) {
    const __half2_raw want4 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(i), __NV_E4M3);
    const __half2_raw want5 = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(i), __NV_E5M2);
    if (!SameHalf(from4[i].x, want4.x) || !SameHalf(from4[i].y, want4.y) || !SameHalf(from5[i].x, want5.x) ||
        !SameHalf(from5[i].y, want5.y)) {
      if (++wrong <= 24) {
        std::fprintf(stderr,
                     "fp8x2 %#06x: e4m3 (%#06x, %#06x) want (%#06x, %#06x), e5m2 (%#06x, %#06x) want (%#06x, %#06x)\n",
                     i, from4[i].y, from4[i].x, want4.y, want4.x, from5[i].y, from5[i].x, want5.y, want5.x);
      }
    }
  }
  CHECK_FREE(d_pairs, d_e4m3, d_e5m2, d_halves, d_from4, d_from5);
  std::printf("fp8 conversions: %d float pairs, 65536 half pairs, 65536 fp8 pairs each way, %d wrong\n", n, wrong);
  return wrong == 0 ? 0 : 1;
}
