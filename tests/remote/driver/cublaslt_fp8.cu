// cuBLASLt's FP8 matrix product, as inference code calls it: E4M3 x E4M3 into BF16 in the
// TN layout FP8 needs, the algorithm its heuristics rank first, against the CPU. The
// operands are small multiples of a half, so every sum is exact and the BF16 result is the
// exact sum rounded once. On a simulated L4 (8.9) or RTX PRO 6000 (12.0) cuBLASLt picks its
// sm89_xmma FP8 kernels, which the sim runs from their compute_120 PTX (8-bit mma.sync,
// FP8 conversions): the product must be right. On a simulated H100 (9.0) it picks nvjet_sm90
// kernels it ships as SASS only: the product must be right or fail cleanly, the program
// going on (its heuristics used to crash the program there: they call an undocumented driver
// table without checking that the driver gave it). On a real GPU: right.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../programs/check.h"

#define LT_CHECK(call) LIBRARY_CHECK(call, CUBLAS_STATUS_SUCCESS, cublasLtGetStatusName)

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  EXPECT(properties.major * 10 + properties.minor >= 89);  // FP8 products need 8.9
  const bool must_run = !OnTheSim() || properties.major != 9;
  const int m = 64, n = 32, k = 64;
  // A is m x k, given transposed (k x m, column-major: each row of A contiguous); B k x n.
  std::vector<__nv_fp8_e4m3> a(k * m), b(k * n);
  std::vector<double> av(k * m), bv(k * n);
  for (int i = 0; i < k * m; ++i) {
    av[i] = ((i * 7) % 9 - 4) * 0.5;
    a[i] = __nv_fp8_e4m3(static_cast<float>(av[i]));
  }
  for (int i = 0; i < k * n; ++i) {
    bv[i] = ((i * 5) % 7 - 3) * 0.5;
    b[i] = __nv_fp8_e4m3(static_cast<float>(bv[i]));
  }
  void *da = nullptr, *db = nullptr, *dd = nullptr, *workspace = nullptr;
  size_t workspace_bytes = 32 << 20;
  CHECK(cudaMalloc(&da, k * m));
  CHECK(cudaMalloc(&db, k * n));
  CHECK(cudaMalloc(&dd, m * n * sizeof(__nv_bfloat16)));
  CHECK(cudaMalloc(&workspace, workspace_bytes));
  CHECK(cudaMemcpy(da, a.data(), k * m, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), k * n, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dd, 0, m * n * sizeof(__nv_bfloat16)));

  cublasLtHandle_t lt;
  LT_CHECK(cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  LT_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)));
  LT_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
  cublasLtMatrixLayout_t la, lb, ld;
  LT_CHECK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k));
  LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, m, n, m));
  cublasLtMatmulPreference_t preference;
  LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
  LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace_bytes,
                                                sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t results[4];
  int found = 0;
  LT_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, ld, ld, preference, 4, results, &found));
  EXPECT(found > 0);
  const float alpha = 1, beta = 0;
  const cublasStatus_t status = cublasLtMatmul(lt, op, &alpha, da, la, db, lb, &beta, dd, ld, dd, ld, &results[0].algo,
                                               workspace, workspace_bytes, nullptr);
  if (status != CUBLAS_STATUS_SUCCESS) {
    std::printf("FP8 product: %s\n", cublasLtGetStatusName(status));
    EXPECT(!must_run);
    EXPECT(cudaGetLastError() == cudaSuccess);  // nothing sticky: the program goes on
  } else {
    CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> d(m * n);
    CHECK(cudaMemcpy(d.data(), dd, d.size() * sizeof(d[0]), cudaMemcpyDeviceToHost));
    int wrong = 0;
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < n; ++j) {
        double sum = 0;
        for (int q = 0; q < k; ++q) sum += av[i * k + q] * bv[j * k + q];
        const float want = __bfloat162float(__float2bfloat16(static_cast<float>(sum)));
        const float got = __bfloat162float(d[i + j * m]);
        if (got != want && ++wrong <= 5) std::fprintf(stderr, "d[%d][%d] = %g, want %g\n", i, j, got, want);
      }
    }
    std::printf("FP8 product %dx%dx%d: %d wrong\n", m, n, k, wrong);
    EXPECT(wrong == 0);
  }
  LT_CHECK(cublasLtMatmulPreferenceDestroy(preference));
  LT_CHECK(cublasLtMatrixLayoutDestroy(la));
  LT_CHECK(cublasLtMatrixLayoutDestroy(lb));
  LT_CHECK(cublasLtMatrixLayoutDestroy(ld));
  LT_CHECK(cublasLtMatmulDescDestroy(op));
  LT_CHECK(cublasLtDestroy(lt));
  CHECK_FREE(da, db, dd, workspace);
  std::printf("PASS\n");
  return 0;
}
