// cuBLAS, the toolkit's BLAS, as programs use it, on a simulated GPU of the model ctest
// names (GPUPOOL_EXPECT_MODEL: an RTX PRO 6000 Blackwell, compute capability 12.0, whose
// PTX cuBLAS 13 ships; an A100 or an L4, where the sim runs that PTX in place of the
// SASS a real GPU of the model runs): level-1 routines in single and double precision, with
// host and device pointer modes and on a stream of the program's own; level-2 rank-1
// update, symmetric product and triangular solve; small and batched matrix products,
// matrix add and diagonal scaling; each against the CPU. cuBLAS keys its per-stream scratch
// buffers through two entries of an undocumented driver table (a stream's execution context
// and its id). Its general matrix-vector product and larger matrix products ship as SASS
// only for some GPUs: each such call either gives the right answer or fails cleanly, and
// the handle goes on.
#include <cublas_v2.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "device_copies.h"

#define BLAS_CHECK(call) LIBRARY_CHECK(call, CUBLAS_STATUS_SUCCESS, cublasGetStatusName)

namespace {

// Largest difference relative to the largest magnitude of `want` (1 when it is all zero).
template <typename T>
double RelativeError(const std::vector<T>& got, const std::vector<double>& want) {
  double error = 0, magnitude = 1e-30;
  for (size_t i = 0; i < want.size(); ++i) {
    error = std::fmax(error, std::fabs(static_cast<double>(got[i]) - want[i]));
    magnitude = std::fmax(magnitude, std::fabs(want[i]));
  }
  return error / magnitude;
}

constexpr int kN = 1000;

void LevelOne(cublasHandle_t blas) {
  std::vector<float> x(kN), y(kN);
  for (int i = 0; i < kN; ++i) x[i] = std::sin(0.3f * i) * (i % 13), y[i] = std::cos(0.7f * i);
  float* dx = ToDevice(x);
  float* dy = ToDevice(y);
  double dot = 0, norm = 0, asum = 0;
  int amax = 0;
  for (int i = 0; i < kN; ++i) {
    dot += double(x[i]) * y[i], norm += double(x[i]) * x[i], asum += std::fabs(x[i]);
    if (std::fabs(x[i]) > std::fabs(x[amax])) amax = i;
  }
  float got = 0;
  BLAS_CHECK(cublasSdot(blas, kN, dx, 1, dy, 1, &got));
  std::printf("Sdot %.6g (CPU %.6g)\n", got, dot);
  EXPECT(std::fabs(got - dot) < 1e-4 * std::sqrt(norm) * kN);
  BLAS_CHECK(cublasSnrm2(blas, kN, dx, 1, &got));
  EXPECT(std::fabs(got - std::sqrt(norm)) < 1e-5 * std::sqrt(norm));
  BLAS_CHECK(cublasSasum(blas, kN, dx, 1, &got));
  EXPECT(std::fabs(got - asum) < 1e-5 * asum);
  int index = 0;
  BLAS_CHECK(cublasIsamax(blas, kN, dx, 1, &index));
  EXPECT(index == amax + 1);  // BLAS indices start at 1

  // y = 2.5 x + y, then y *= -0.5, with a stride of 2 over the first half.
  const float alpha = 2.5f, scale = -0.5f;
  BLAS_CHECK(cublasSaxpy(blas, kN, &alpha, dx, 1, dy, 1));
  BLAS_CHECK(cublasSscal(blas, kN / 2, &scale, dy, 2));
  std::vector<double> want(kN);
  for (int i = 0; i < kN; ++i) {
    want[i] = alpha * double(x[i]) + y[i];
    if (i % 2 == 0) want[i] *= scale;
  }
  EXPECT(RelativeError(ToHost(dy, kN), want) < 1e-6);

  // The result left in device memory (device pointer mode), on a stream of our own.
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  BLAS_CHECK(cublasSetStream(blas, stream));
  BLAS_CHECK(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_DEVICE));
  float* dresult = nullptr;
  CHECK(cudaMalloc(&dresult, sizeof(float)));
  BLAS_CHECK(cublasSnrm2(blas, kN, dx, 1, dresult));
  CHECK(cudaStreamSynchronize(stream));
  EXPECT(std::fabs(ToHost(dresult, 1)[0] - std::sqrt(norm)) < 1e-5 * std::sqrt(norm));
  BLAS_CHECK(cublasSetPointerMode(blas, CUBLAS_POINTER_MODE_HOST));
  BLAS_CHECK(cublasSetStream(blas, nullptr));
  CHECK(cudaStreamDestroy(stream));

  // Double precision.
  std::vector<double> xd(kN), yd(kN);
  double dotd = 0;
  for (int i = 0; i < kN; ++i) xd[i] = 1.0 / (i + 1), yd[i] = i % 7 - 3, dotd += xd[i] * yd[i];
  double* dxd = ToDevice(xd);
  double* dyd = ToDevice(yd);
  double gotd = 0;
  BLAS_CHECK(cublasDdot(blas, kN, dxd, 1, dyd, 1, &gotd));
  std::printf("Ddot %.15g (CPU %.15g)\n", gotd, dotd);
  EXPECT(std::fabs(gotd - dotd) < 1e-12);
  for (void* p : {static_cast<void*>(dx), static_cast<void*>(dy), static_cast<void*>(dresult), static_cast<void*>(dxd),
                  static_cast<void*>(dyd)}) {
    CHECK(cudaFree(p));
  }
}

// Column-major n x n helpers for the CPU side.
double At(const std::vector<float>& m, int n, int row, int column) { return m[row + static_cast<size_t>(column) * n]; }

void LevelTwo(cublasHandle_t blas) {
  const int n = 96;
  std::vector<float> a(n * n), x(n), y(n);
  for (int i = 0; i < n * n; ++i) a[i] = std::sin(0.37f * i);
  for (int i = 0; i < n; ++i) x[i] = 0.01f * i - 0.3f, y[i] = std::cos(0.2f * i);
  // A lower-triangular, well-conditioned system for the solve.
  std::vector<float> lower(n * n, 0.0f);
  for (int c = 0; c < n; ++c) {
    for (int r = c; r < n; ++r) lower[r + c * n] = r == c ? 4.0f : 0.5f * std::sin(r + 2.0f * c) / n;
  }
  float* da = ToDevice(a);
  float* dl = ToDevice(lower);
  float* dx = ToDevice(x);
  float* dy = ToDevice(y);
  const float alpha = 0.75f, beta = -1.5f;

  // Rank-1 update: A += alpha x y^T.
  BLAS_CHECK(cublasSger(blas, n, n, &alpha, dx, 1, dy, 1, da, n));
  std::vector<double> want(n * n);
  for (int c = 0; c < n; ++c) {
    for (int r = 0; r < n; ++r) want[r + c * n] = At(a, n, r, c) + alpha * double(x[r]) * y[c];
  }
  EXPECT(RelativeError(ToHost(da, n * n), want) < 1e-6);

  // Symmetric product from the lower triangle: y = alpha L_sym x + beta y.
  CHECK(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  BLAS_CHECK(cublasSsymv(blas, CUBLAS_FILL_MODE_LOWER, n, &alpha, da, n, dx, 1, &beta, dy, 1));
  std::vector<double> wanty(n);
  for (int r = 0; r < n; ++r) {
    double sum = 0;
    for (int c = 0; c < n; ++c) sum += (r >= c ? At(a, n, r, c) : At(a, n, c, r)) * x[c];
    wanty[r] = alpha * sum + beta * double(y[r]);
  }
  EXPECT(RelativeError(ToHost(dy, n), wanty) < 1e-5);

  // Triangular solve L z = x, checked by multiplying back on the CPU.
  BLAS_CHECK(cublasStrsv(blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, CUBLAS_DIAG_NON_UNIT, n, dl, n, dx, 1));
  std::vector<float> z = ToHost(dx, n);
  std::vector<double> back(n, 0.0), wantx(x.begin(), x.end());
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c <= r; ++c) back[r] += At(lower, n, r, c) * z[c];
  }
  EXPECT(RelativeError(back, wantx) < 1e-5);
  for (float* p : {da, dl, dx, dy}) CHECK(cudaFree(p));
}

// A status of a routine whose kernel may ship as SASS only.
bool SassOnlyRoutineFailed(cublasStatus_t status) {
  return status == CUBLAS_STATUS_EXECUTION_FAILED || status == CUBLAS_STATUS_INTERNAL_ERROR ||
         status == CUBLAS_STATUS_NOT_SUPPORTED;
}

// True on a real GPU and on the model whose PTX cuBLAS ships (12.0): every kernel runs.
bool g_every_kernel_runs = true;

// Whether a matrix product ran (its answer is then checked). On other sim models cuBLAS
// picks some products' kernels (ampere_sgemm_* on 8.x) from modules that hold SASS only,
// which the sim cannot run: the call fails cleanly instead, never with a wrong answer.
bool ProductRan(cublasStatus_t status, const char* what) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  std::printf("%s: %s (its kernel ships as SASS only for this GPU)\n", what, cublasGetStatusName(status));
  EXPECT(!g_every_kernel_runs && SassOnlyRoutineFailed(status));
  return false;
}

void MatrixProducts(cublasHandle_t blas) {
  // A small product (cuBLAS's small-matrix kernels, which ship PTX), every transpose
  // combination.
  const int n = 12;
  std::vector<float> a(n * n), b(n * n);
  for (int i = 0; i < n * n; ++i) a[i] = (i % 17) * 0.25f - 2, b[i] = std::sin(0.11f * i);
  float* da = ToDevice(a);
  float* db = ToDevice(b);
  float* dc = nullptr;
  CHECK(cudaMalloc(&dc, n * n * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  for (cublasOperation_t ta : {CUBLAS_OP_N, CUBLAS_OP_T}) {
    for (cublasOperation_t tb : {CUBLAS_OP_N, CUBLAS_OP_T}) {
      if (!ProductRan(cublasSgemm(blas, ta, tb, n, n, n, &one, da, n, db, n, &zero, dc, n), "Sgemm 12 x 12")) continue;
      std::vector<double> want(n * n);
      for (int r = 0; r < n; ++r) {
        for (int c = 0; c < n; ++c) {
          double sum = 0;
          for (int k = 0; k < n; ++k) {
            sum += (ta == CUBLAS_OP_N ? At(a, n, r, k) : At(a, n, k, r)) *
                   (tb == CUBLAS_OP_N ? At(b, n, k, c) : At(b, n, c, k));
          }
          want[r + c * n] = sum;
        }
      }
      EXPECT(RelativeError(ToHost(dc, n * n), want) < 1e-5);
    }
  }

  // 200 independent 8 x 8 products (a batched call, as in many small solvers).
  const int m = 8, batch = 200;
  std::vector<float> as(m * m * batch), bs(m * m * batch);
  for (size_t i = 0; i < as.size(); ++i) as[i] = std::sin(0.01f * i), bs[i] = (i % 9) - 4.0f;
  float* das = ToDevice(as);
  float* dbs = ToDevice(bs);
  float* dcs = nullptr;
  CHECK(cudaMalloc(&dcs, as.size() * sizeof(float)));
  const bool batched = ProductRan(cublasSgemmStridedBatched(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, m, m, &one, das, m,
                                                            m * m, dbs, m, m * m, &zero, dcs, m, m * m, batch),
                                  "SgemmStridedBatched 8 x 8 x 200");
  std::vector<double> want(as.size());
  for (int p = 0; p < batch; ++p) {
    for (int r = 0; r < m; ++r) {
      for (int c = 0; c < m; ++c) {
        double sum = 0;
        for (int k = 0; k < m; ++k) sum += double(as[p * m * m + r + k * m]) * bs[p * m * m + k + c * m];
        want[p * m * m + r + c * m] = sum;
      }
    }
  }
  if (batched) EXPECT(RelativeError(ToHost(dcs, as.size()), want) < 1e-5);

  // C = A + 2 B^T (geam), then C = diag(x) C (dgmm).
  const float two = 2.0f;
  BLAS_CHECK(cublasSgeam(blas, CUBLAS_OP_N, CUBLAS_OP_T, n, n, &one, da, n, &two, db, n, dc, n));
  std::vector<float> x(n);
  for (int i = 0; i < n; ++i) x[i] = i - 7.5f;
  float* dx = ToDevice(x);
  BLAS_CHECK(cublasSdgmm(blas, CUBLAS_SIDE_LEFT, n, n, dc, n, dx, 1, dc, n));
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) want[r + c * n] = x[r] * (At(a, n, r, c) + 2.0 * At(b, n, c, r));
  }
  want.resize(n * n);
  EXPECT(RelativeError(ToHost(dc, n * n), want) < 1e-6);

  for (void* p : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dc), static_cast<void*>(das),
                  static_cast<void*>(dbs), static_cast<void*>(dcs), static_cast<void*>(dx)}) {
    CHECK(cudaFree(p));
  }
}

// On the sim. Some of cuBLAS's general matrix-vector kernels and larger matrix products
// (CUTLASS kernels) ship as SASS only, for some GPUs: such a call fails (EXECUTION_FAILED,
// INTERNAL_ERROR or NOT_SUPPORTED; the library logs why), no sticky error is left, and the
// handle works on. Where it succeeds, its answer must be right: never a wrong one.

void SassOnlyRoutineRightOrAnError(cublasHandle_t blas) {
  const int n = 64;
  std::vector<float> a(n * n), x(n);
  for (int i = 0; i < n * n; ++i) a[i] = std::sin(0.013f * i);
  for (int i = 0; i < n; ++i) x[i] = 0.5f - 0.01f * i;
  float* da = ToDevice(a);
  float* dx = ToDevice(x);
  float* dy = nullptr;
  CHECK(cudaMalloc(&dy, n * sizeof(float)));
  const float one = 1.0f, zero = 0.0f;
  cublasStatus_t status = cublasSgemv(blas, CUBLAS_OP_N, n, n, &one, da, n, dx, 1, &zero, dy, 1);
  std::printf("Sgemv: %s\n", cublasGetStatusName(status));
  if (status == CUBLAS_STATUS_SUCCESS) {
    std::vector<double> want(n, 0.0);
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) want[r] += At(a, n, r, c) * x[c];
    }
    EXPECT(RelativeError(ToHost(dy, n), want) < 1e-5);
  } else {
    EXPECT(SassOnlyRoutineFailed(status));
  }
  float* dc = nullptr;
  CHECK(cudaMalloc(&dc, n * n * sizeof(float)));
  status = cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, da, n, da, n, &zero, dc, n);
  std::printf("Sgemm %d x %d: %s\n", n, n, cublasGetStatusName(status));
  if (status == CUBLAS_STATUS_SUCCESS) {
    std::vector<double> want(n * n, 0.0);
    for (int c = 0; c < n; ++c) {
      for (int r = 0; r < n; ++r) {
        for (int k = 0; k < n; ++k) want[r + c * n] += At(a, n, r, k) * At(a, n, k, c);
      }
    }
    EXPECT(RelativeError(ToHost(dc, n * n), want) < 1e-5);
  } else {
    EXPECT(SassOnlyRoutineFailed(status));
  }
  CHECK(cudaDeviceSynchronize());
  float sum = 0;
  std::vector<float> ones(n, 1.0f);
  CHECK(cudaMemcpy(dx, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  BLAS_CHECK(cublasSasum(blas, n, dx, 1, &sum));
  EXPECT(sum == n);
  for (float* p : {da, dx, dy, dc}) CHECK(cudaFree(p));
}

}  // namespace

int main() {
  cudaDeviceProp properties;
  CHECK(cudaGetDeviceProperties(&properties, 0));
  std::printf("%s, compute capability %d.%d, %d SMs\n", properties.name, properties.major, properties.minor,
              properties.multiProcessorCount);
  // The model the test server was asked for (--model; GPUPOOL_EXPECT_MODEL from ctest).
  const char* model = std::getenv("GPUPOOL_EXPECT_MODEL");
  if (OnTheSim() && model != nullptr) EXPECT(std::strstr(properties.name, model) != nullptr);
  g_every_kernel_runs = !OnTheSim() || (properties.major == 12 && properties.minor == 0);
  cublasHandle_t blas;
  BLAS_CHECK(cublasCreate(&blas));
  LevelOne(blas);
  LevelTwo(blas);
  MatrixProducts(blas);
  SassOnlyRoutineRightOrAnError(blas);
  BLAS_CHECK(cublasDestroy(blas));
  std::printf("PASS\n");
  return 0;
}
