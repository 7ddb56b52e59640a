// cuSPARSE's generic API, as iterative solvers use it, on a simulated GPU of the model
// ctest names (GPUPOOL_EXPECT_MODEL: an RTX PRO 6000 Blackwell, whose compute capability
// 12.0 cuSPARSE 12 ships PTX for, for most of its kernels; an A100 or an L4, where the sim
// runs that PTX in place of the SASS a real GPU of the model runs): a banded CSR matrix
// times a vector (single and double precision, plain and transposed), times a dense
// matrix, turned into a dense matrix, and a lower-triangular solve with its analysis phase,
// each against the CPU.
#include <cusparse.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "../programs/check.h"
#include "device_copies.h"

#define SPARSE_CHECK(call) LIBRARY_CHECK(call, CUSPARSE_STATUS_SUCCESS, cusparseGetErrorString)

namespace {

// A banded n x n matrix in CSR: 4 on the diagonal, entries two to the left and three to the
// right (so the transpose differs).
struct Csr {
  int n = 0;
  std::vector<int> row_offsets, columns;
  std::vector<double> values;
  double At(int row, int column) const {
    for (int p = row_offsets[row]; p < row_offsets[row + 1]; ++p) {
      if (columns[p] == column) return values[p];
    }
    return 0;
  }
};

Csr Banded(int n) {
  Csr a;
  a.n = n;
  for (int i = 0; i < n; ++i) {
    a.row_offsets.push_back(static_cast<int>(a.columns.size()));
    for (int j : {i - 2, i, i + 3}) {
      if (j < 0 || j >= n) continue;
      a.columns.push_back(j);
      a.values.push_back(j == i ? 4.0 : -1.0 + 0.01 * (i % 50));
    }
  }
  a.row_offsets.push_back(static_cast<int>(a.columns.size()));
  return a;
}

template <typename T>
double MaxError(const std::vector<T>& got, const std::vector<double>& want) {
  double error = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    error = std::fmax(error, std::fabs(static_cast<double>(got[i]) - want[i]));
  }
  return error;
}

// y = A x and y = A^T x in single and double precision.
template <typename T>
void MatrixVector(cusparseHandle_t sparse, const Csr& a, cudaDataType type, double tolerance) {
  const int n = a.n;
  std::vector<T> values(a.values.begin(), a.values.end()), x(n);
  for (int i = 0; i < n; ++i) x[i] = static_cast<T>(std::sin(0.5 * i));
  int* offsets = ToDevice(a.row_offsets);
  int* columns = ToDevice(a.columns);
  T* dvalues = ToDevice(values);
  T* dx = ToDevice(x);
  T* dy = nullptr;
  CHECK(cudaMalloc(&dy, n * sizeof(T)));
  cusparseSpMatDescr_t matrix;
  cusparseDnVecDescr_t vx, vy;
  SPARSE_CHECK(cusparseCreateCsr(&matrix, n, n, static_cast<int64_t>(a.columns.size()), offsets, columns, dvalues,
                                 CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, type));
  SPARSE_CHECK(cusparseCreateDnVec(&vx, n, dx, type));
  SPARSE_CHECK(cusparseCreateDnVec(&vy, n, dy, type));
  const T one = 1, zero = 0;
  for (cusparseOperation_t op : {CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_TRANSPOSE}) {
    size_t workspace_size = 0;
    SPARSE_CHECK(cusparseSpMV_bufferSize(sparse, op, &one, matrix, vx, &zero, vy, type, CUSPARSE_SPMV_ALG_DEFAULT,
                                         &workspace_size));
    void* workspace = nullptr;
    CHECK(cudaMalloc(&workspace, workspace_size + 1));
    SPARSE_CHECK(cusparseSpMV(sparse, op, &one, matrix, vx, &zero, vy, type, CUSPARSE_SPMV_ALG_DEFAULT, workspace));
    std::vector<double> want(n, 0.0);
    for (int r = 0; r < n; ++r) {
      for (int c = 0; c < n; ++c) {
        want[r] += (op == CUSPARSE_OPERATION_NON_TRANSPOSE ? a.At(r, c) : a.At(c, r)) * x[c];
      }
    }
    const double error = MaxError(ToHost(dy, n), want);
    std::printf("SpMV %s%s: max error %.3g\n", sizeof(T) == 4 ? "float" : "double",
                op == CUSPARSE_OPERATION_TRANSPOSE ? ", transposed" : "", error);
    EXPECT(error < tolerance);
    CHECK(cudaFree(workspace));
  }
  SPARSE_CHECK(cusparseDestroySpMat(matrix));
  SPARSE_CHECK(cusparseDestroyDnVec(vx));
  SPARSE_CHECK(cusparseDestroyDnVec(vy));
  for (void* p : {static_cast<void*>(offsets), static_cast<void*>(columns), static_cast<void*>(dvalues),
                  static_cast<void*>(dx), static_cast<void*>(dy)}) {
    CHECK(cudaFree(p));
  }
}

// C = A B for a dense B of k columns; the matrix as a dense one; L z = x for A's lower
// triangle (analysis, then solve), checked by multiplying back.
void MatrixMatrixDenseAndSolve(cusparseHandle_t sparse, const Csr& a) {
  const int n = a.n, k = 5;
  std::vector<double> b(n * k), x(n);
  for (int i = 0; i < n * k; ++i) b[i] = std::cos(0.1 * i);
  for (int i = 0; i < n; ++i) x[i] = 1.0 + (i % 9);
  int* offsets = ToDevice(a.row_offsets);
  int* columns = ToDevice(a.columns);
  double* values = ToDevice(a.values);
  double* db = ToDevice(b);
  double* dx = ToDevice(x);
  double *dc = nullptr, *dense = nullptr, *dz = nullptr;
  CHECK(cudaMalloc(&dc, n * k * sizeof(double)));
  CHECK(cudaMalloc(&dense, static_cast<size_t>(n) * n * sizeof(double)));
  CHECK(cudaMalloc(&dz, n * sizeof(double)));
  cusparseSpMatDescr_t matrix;
  cusparseDnMatDescr_t mb, mc, md;
  cusparseDnVecDescr_t vx, vz;
  SPARSE_CHECK(cusparseCreateCsr(&matrix, n, n, static_cast<int64_t>(a.columns.size()), offsets, columns, values,
                                 CUSPARSE_INDEX_32I, CUSPARSE_INDEX_32I, CUSPARSE_INDEX_BASE_ZERO, CUDA_R_64F));
  SPARSE_CHECK(cusparseCreateDnMat(&mb, n, k, n, db, CUDA_R_64F, CUSPARSE_ORDER_COL));
  SPARSE_CHECK(cusparseCreateDnMat(&mc, n, k, n, dc, CUDA_R_64F, CUSPARSE_ORDER_COL));
  SPARSE_CHECK(cusparseCreateDnMat(&md, n, n, n, dense, CUDA_R_64F, CUSPARSE_ORDER_COL));
  SPARSE_CHECK(cusparseCreateDnVec(&vx, n, dx, CUDA_R_64F));
  SPARSE_CHECK(cusparseCreateDnVec(&vz, n, dz, CUDA_R_64F));
  const double one = 1, zero = 0;
  void* workspace = nullptr;
  size_t size = 0, largest = 0;
  SPARSE_CHECK(cusparseSpMM_bufferSize(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one,
                                       matrix, mb, &zero, mc, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT, &size));
  largest = size;
  SPARSE_CHECK(cusparseSparseToDense_bufferSize(sparse, matrix, md, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, &size));
  largest = std::max(largest, size);
  CHECK(cudaMalloc(&workspace, largest + 1));

  SPARSE_CHECK(cusparseSpMM(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix,
                            mb, &zero, mc, CUDA_R_64F, CUSPARSE_SPMM_ALG_DEFAULT, workspace));
  std::vector<double> want(n * k, 0.0);
  for (int c = 0; c < k; ++c) {
    for (int r = 0; r < n; ++r) {
      for (int p = a.row_offsets[r]; p < a.row_offsets[r + 1]; ++p) {
        want[r + c * n] += a.values[p] * b[a.columns[p] + c * n];
      }
    }
  }
  double error = MaxError(ToHost(dc, n * k), want);
  std::printf("SpMM: max error %.3g\n", error);
  EXPECT(error < 1e-12);

  SPARSE_CHECK(cusparseSparseToDense(sparse, matrix, md, CUSPARSE_SPARSETODENSE_ALG_DEFAULT, workspace));
  std::vector<double> got = ToHost(dense, static_cast<size_t>(n) * n);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) EXPECT(got[r + static_cast<size_t>(c) * n] == a.At(r, c));
  }

  cusparseSpSVDescr_t solve;
  SPARSE_CHECK(cusparseSpSV_createDescr(&solve));
  cusparseFillMode_t fill = CUSPARSE_FILL_MODE_LOWER;
  cusparseDiagType_t diagonal = CUSPARSE_DIAG_TYPE_NON_UNIT;
  SPARSE_CHECK(cusparseSpMatSetAttribute(matrix, CUSPARSE_SPMAT_FILL_MODE, &fill, sizeof(fill)));
  SPARSE_CHECK(cusparseSpMatSetAttribute(matrix, CUSPARSE_SPMAT_DIAG_TYPE, &diagonal, sizeof(diagonal)));
  SPARSE_CHECK(cusparseSpSV_bufferSize(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix, vx, vz, CUDA_R_64F,
                                       CUSPARSE_SPSV_ALG_DEFAULT, solve, &size));
  void* solve_workspace = nullptr;
  CHECK(cudaMalloc(&solve_workspace, size + 1));
  SPARSE_CHECK(cusparseSpSV_analysis(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix, vx, vz, CUDA_R_64F,
                                     CUSPARSE_SPSV_ALG_DEFAULT, solve, solve_workspace));
  SPARSE_CHECK(cusparseSpSV_solve(sparse, CUSPARSE_OPERATION_NON_TRANSPOSE, &one, matrix, vx, vz, CUDA_R_64F,
                                  CUSPARSE_SPSV_ALG_DEFAULT, solve));
  std::vector<double> z = ToHost(dz, n), back(n, 0.0);
  for (int r = 0; r < n; ++r) {
    for (int p = a.row_offsets[r]; p < a.row_offsets[r + 1]; ++p) {
      if (a.columns[p] <= r) back[r] += a.values[p] * z[a.columns[p]];
    }
  }
  error = MaxError(back, x);
  std::printf("SpSV: max error %.3g\n", error);
  EXPECT(error < 1e-12);

  SPARSE_CHECK(cusparseSpSV_destroyDescr(solve));
  SPARSE_CHECK(cusparseDestroySpMat(matrix));
  for (cusparseDnMatDescr_t m : {mb, mc, md}) SPARSE_CHECK(cusparseDestroyDnMat(m));
  for (cusparseDnVecDescr_t v : {vx, vz}) SPARSE_CHECK(cusparseDestroyDnVec(v));
  for (void* p : {static_cast<void*>(offsets), static_cast<void*>(columns), static_cast<void*>(values),
                  static_cast<void*>(db), static_cast<void*>(dx), static_cast<void*>(dc), static_cast<void*>(dense),
                  static_cast<void*>(dz), workspace, solve_workspace}) {
    CHECK(cudaFree(p));
  }
}

}  // namespace

int main() {
  const cudaDeviceProp properties = DescribeDeviceExpectingModel();
  cusparseHandle_t sparse;
  SPARSE_CHECK(cusparseCreate(&sparse));
  const Csr a = Banded(400);
  MatrixVector<float>(sparse, a, CUDA_R_32F, 1e-5);
  MatrixVector<double>(sparse, a, CUDA_R_64F, 1e-12);
  MatrixMatrixDenseAndSolve(sparse, a);
  SPARSE_CHECK(cusparseDestroy(sparse));
  std::printf("PASS\n");
  return 0;
}
