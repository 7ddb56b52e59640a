// Float semantics as the GPU has them (issue 41): each intrinsic below is one PTX
// instruction (fma.rn, add/mul/fma/div/sqrt/rcp with .rn/.rz/.rm/.rp, cvt with directed
// rounding), checked bit for bit against the host computing what the PTX ISA defines (one
// IEEE operation in that rounding mode, std::fma for a fused multiply-add). Then the
// issue's numerical kernels against a CPU reference, to the tolerances of the programs
// that failed: a dot-product loop per thread (x[i] += A[i*N+j] * y[j], N = 256, 0.05%)
// and correlation (column means, standard deviations with sqrt, division; 1.05%).
#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

namespace {

constexpr int kOps = 17;

__global__ void Operations(const float* a, const float* b, const float* c, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float x = a[i], y = b[i], z = c[i];
  float* o = out + static_cast<size_t>(i) * kOps;
  o[0] = __fmaf_rn(x, y, z);
  o[1] = __fadd_rz(x, y);
  o[2] = __fadd_rd(x, y);
  o[3] = __fadd_ru(x, y);
  o[4] = __fmul_rz(x, y);
  o[5] = __fmul_rd(x, y);
  o[6] = __fmul_ru(x, y);
  o[7] = __fmaf_rz(x, y, z);
  o[8] = __fmaf_rd(x, y, z);
  o[9] = __fmaf_ru(x, y, z);
  o[10] = __fdiv_rn(x, y);
  o[11] = __fdiv_rz(x, y);
  o[12] = __fsqrt_rn(fabsf(x));
  o[13] = __fsqrt_ru(fabsf(x));
  o[14] = __frcp_rn(y);
  o[15] = __frcp_rd(y);
  o[16] = __int_as_float(__float2int_rd(x * 1000.0f));
}

float Host(int op, float x, float y, float z) {
  auto in_mode = [](int mode, auto f) {
    const int saved = std::fegetround();
    std::fesetround(mode);
    volatile float r = f();
    std::fesetround(saved);
    return static_cast<float>(r);
  };
  volatile float vx = x, vy = y, vz = z;
  switch (op) {
    case 0:
      return std::fma(x, y, z);
    case 1:
      return in_mode(FE_TOWARDZERO, [&] { return vx + vy; });
    case 2:
      return in_mode(FE_DOWNWARD, [&] { return vx + vy; });
    case 3:
      return in_mode(FE_UPWARD, [&] { return vx + vy; });
    case 4:
      return in_mode(FE_TOWARDZERO, [&] { return vx * vy; });
    case 5:
      return in_mode(FE_DOWNWARD, [&] { return vx * vy; });
    case 6:
      return in_mode(FE_UPWARD, [&] { return vx * vy; });
    case 7:
      return in_mode(FE_TOWARDZERO, [&] { return std::fma(vx, vy, vz); });
    case 8:
      return in_mode(FE_DOWNWARD, [&] { return std::fma(vx, vy, vz); });
    case 9:
      return in_mode(FE_UPWARD, [&] { return std::fma(vx, vy, vz); });
    case 10:
      return vx / vy;
    case 11:
      return in_mode(FE_TOWARDZERO, [&] { return vx / vy; });
    case 12:
      return std::sqrt(std::fabs(x));
    case 13:
      return in_mode(FE_UPWARD, [&] { return std::sqrt(std::fabs(vx)); });
    case 14:
      return 1.0f / vy;
    case 15:
      return in_mode(FE_DOWNWARD, [&] { return 1.0f / vy; });
    default: {
      const float scaled = x * 1000.0f;  // one rounding to nearest, as on the GPU
      int32_t floored = static_cast<int32_t>(std::floor(scaled));
      float bits;
      std::memcpy(&bits, &floored, 4);
      return bits;
    }
  }
}

constexpr int kN = 256;

// The dot-product loop of the failing program, one output per thread.
__global__ void MatrixVector(const float* a, float* x1, float* x2, const float* y1, const float* y2) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < kN) {
    for (int j = 0; j < kN; j++) x1[i] += a[i * kN + j] * y1[j];
    for (int j = 0; j < kN; j++) x2[i] += a[j * kN + i] * y2[j];
  }
}

// Correlation of `m` columns over `n` rows: means, standard deviations (sqrt), the data
// centred and scaled (division), then the correlation of each pair of columns.
__global__ void ColumnStatistics(float* data, float* mean, float* stddev, int n, int m) {
  int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= m) return;
  float sum = 0;
  for (int i = 0; i < n; i++) sum += data[i * m + j];
  mean[j] = sum / n;
  float square = 0;
  for (int i = 0; i < n; i++) square += (data[i * m + j] - mean[j]) * (data[i * m + j] - mean[j]);
  stddev[j] = sqrtf(square / n);
  if (stddev[j] <= 0.005f) stddev[j] = 1.0f;
  for (int i = 0; i < n; i++) data[i * m + j] = (data[i * m + j] - mean[j]) / (sqrtf(n) * stddev[j]);
}

__global__ void Correlation(const float* data, float* corr, int n, int m) {
  int j1 = blockIdx.x * blockDim.x + threadIdx.x;
  if (j1 >= m) return;
  for (int j2 = 0; j2 < m; j2++) {
    float sum = 0;
    for (int i = 0; i < n; i++) sum += data[i * m + j1] * data[i * m + j2];
    corr[j1 * m + j2] = sum;
  }
}

bool Close(float got, float want, float percent) {
  const float diff = std::fabs(got - want);
  return diff <= std::fabs(want) * percent / 100.0f || diff < 1e-6f;
}

}  // namespace

int main() {
  // Operands whose results are mostly inexact (so that each rounding shows), both signs,
  // and products whose fused and unfused sums differ.
  const int n = 4096;
  std::vector<float> a(n), b(n), c(n);
  uint32_t state = 12345;
  auto next = [&] {
    state = state * 1664525u + 1013904223u;
    return static_cast<float>(state >> 8) / 16777216.0f;
  };
  for (int i = 0; i < n; ++i) {
    a[i] = (next() - 0.5f) * std::ldexp(1.0f, static_cast<int>(next() * 40) - 20);
    b[i] = (next() + 0.01f) * (i % 2 ? -1.0f : 1.0f) * std::ldexp(1.0f, static_cast<int>(next() * 20) - 10);
    c[i] = -a[i] * b[i] * (1.0f + next() * 1e-6f);  // near cancellation: fusion shows
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr, *dout = nullptr;
  CHECK(cudaMalloc(&da, n * sizeof(float)));
  CHECK(cudaMalloc(&db, n * sizeof(float)));
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  CHECK(cudaMalloc(&dout, static_cast<size_t>(n) * kOps * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dc, c.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  Operations<<<(n + 127) / 128, 128>>>(da, db, dc, dout, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<float> out(static_cast<size_t>(n) * kOps);
  CHECK(cudaMemcpy(out.data(), dout, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  static const char* kNames[kOps] = {"fma.rn",  "add.rz",  "add.rm", "add.rp", "mul.rz",         "mul.rm",
                                     "mul.rp",  "fma.rz",  "fma.rm", "fma.rp", "div.rn",         "div.rz",
                                     "sqrt.rn", "sqrt.rp", "rcp.rn", "rcp.rm", "cvt.rmi.s32.f32"};
  int fused_differs = 0;
  for (int i = 0; i < n; ++i) {
    for (int op = 0; op < kOps; ++op) {
      const float got = out[static_cast<size_t>(i) * kOps + op], want = Host(op, a[i], b[i], c[i]);
      if (std::memcmp(&got, &want, 4) != 0 && !(std::isnan(got) && std::isnan(want))) {
        std::fprintf(stderr, "FAIL: %s(%a, %a, %a) = %a, want %a\n", kNames[op], a[i], b[i], c[i], got, want);
        return 1;
      }
    }
    fused_differs += Host(0, a[i], b[i], c[i]) != a[i] * b[i] + c[i];
  }
  EXPECT(fused_differs > n / 2);  // the operands do tell fused from unfused

  // The dot-product loop.
  std::vector<float> m(kN * kN), y1(kN), y2(kN), x1(kN, 0.0f), x2(kN, 0.0f);
  for (int i = 0; i < kN; ++i) {
    y1[i] = static_cast<float>(i) / kN;
    y2[i] = static_cast<float>(i + 1) / kN;
    for (int j = 0; j < kN; ++j) m[i * kN + j] = static_cast<float>(i) * j / kN;
  }
  float *dm = nullptr, *dx1 = nullptr, *dx2 = nullptr, *dy1 = nullptr, *dy2 = nullptr;
  CHECK(cudaMalloc(&dm, m.size() * sizeof(float)));
  CHECK(cudaMalloc(&dx1, kN * sizeof(float)));
  CHECK(cudaMalloc(&dx2, kN * sizeof(float)));
  CHECK(cudaMalloc(&dy1, kN * sizeof(float)));
  CHECK(cudaMalloc(&dy2, kN * sizeof(float)));
  CHECK(cudaMemcpy(dm, m.data(), m.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dx1, x1.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dx2, x2.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy1, y1.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy2, y2.data(), kN * sizeof(float), cudaMemcpyHostToDevice));
  MatrixVector<<<1, 256>>>(dm, dx1, dx2, dy1, dy2);
  CHECK(cudaGetLastError());
  std::vector<float> g1(kN), g2(kN);
  CHECK(cudaMemcpy(g1.data(), dx1, kN * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(g2.data(), dx2, kN * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < kN; ++i) {
    for (int j = 0; j < kN; ++j) {
      x1[i] += m[i * kN + j] * y1[j];
      x2[i] += m[j * kN + i] * y2[j];
    }
    if (!Close(g1[i], x1[i], 0.05f) || !Close(g2[i], x2[i], 0.05f)) {
      std::fprintf(stderr, "FAIL: dot products %d: %g %g, want %g %g\n", i, g1[i], g2[i], x1[i], x2[i]);
      return 1;
    }
  }

  // Correlation.
  const int rows = 128, cols = 64;
  std::vector<float> data(rows * cols);
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) data[i * cols + j] = static_cast<float>(i * (j + 1)) / rows + j;
  float *ddata = nullptr, *dmean = nullptr, *dstd = nullptr, *dcorr = nullptr;
  CHECK(cudaMalloc(&ddata, data.size() * sizeof(float)));
  CHECK(cudaMalloc(&dmean, cols * sizeof(float)));
  CHECK(cudaMalloc(&dstd, cols * sizeof(float)));
  CHECK(cudaMalloc(&dcorr, cols * cols * sizeof(float)));
  CHECK(cudaMemcpy(ddata, data.data(), data.size() * sizeof(float), cudaMemcpyHostToDevice));
  ColumnStatistics<<<1, cols>>>(ddata, dmean, dstd, rows, cols);
  Correlation<<<1, cols>>>(ddata, dcorr, rows, cols);
  CHECK(cudaGetLastError());
  std::vector<float> corr(cols * cols);
  CHECK(cudaMemcpy(corr.data(), dcorr, corr.size() * sizeof(float), cudaMemcpyDeviceToHost));
  std::vector<float> mean(cols), stddev(cols);
  for (int j = 0; j < cols; ++j) {
    float sum = 0;
    for (int i = 0; i < rows; ++i) sum += data[i * cols + j];
    mean[j] = sum / rows;
    float square = 0;
    for (int i = 0; i < rows; ++i) square += (data[i * cols + j] - mean[j]) * (data[i * cols + j] - mean[j]);
    stddev[j] = std::sqrt(square / rows);
    if (stddev[j] <= 0.005f) stddev[j] = 1.0f;
    for (int i = 0; i < rows; ++i)
      data[i * cols + j] = (data[i * cols + j] - mean[j]) / (std::sqrt(static_cast<float>(rows)) * stddev[j]);
  }
  for (int j1 = 0; j1 < cols; ++j1) {
    for (int j2 = 0; j2 < cols; ++j2) {
      float sum = 0;
      for (int i = 0; i < rows; ++i) sum += data[i * cols + j1] * data[i * cols + j2];
      if (!Close(corr[j1 * cols + j2], sum, 1.05f)) {
        std::fprintf(stderr, "FAIL: correlation (%d, %d): %g, want %g\n", j1, j2, corr[j1 * cols + j2], sum);
        return 1;
      }
    }
  }
  std::printf("float semantics: ok (%d operands, %d operations each; dot products; correlation)\n", n, kOps);
  return 0;
}
