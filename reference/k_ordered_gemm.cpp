// Cache and register blocking that keeps every output's summation order: each C element is a
// register accumulator that receives a[i][k] * b[k][j] for k = 0, 1, ... in turn, chunk after chunk
// of K, so the result is bit-identical to the textbook triple loop. Only independent outputs are
// computed side by side (vectorised over j), never one output's terms.
#include "k_ordered_gemm.h"

#include <algorithm>

#include "moenum/error.h"

namespace moenum::reference {
namespace {

constexpr int64_t kRows = 4;     // MR: rows of A sharing each loaded row piece of B^T
constexpr int64_t kCols = 4;     // NR: outputs per row kept in registers (4 x 4 fit the 16 SSE registers)
constexpr int64_t kDepth = 256;  // KC: K chunk; a kDepth x kPanel piece of B^T stays in L2
constexpr int64_t kPanel = 256;  // NC

// c[r][j] (r < rows, j < cols, row stride ldc) += sum over k in [0, depth) of a[r][k] * bt[k][j],
// in k order. rows/cols at compile time for the full tile, at run time for the edges.
template <int64_t R, int64_t Cn>
void tile(const double* a, int64_t lda, const double* bt, int64_t ldb, double* c, int64_t ldc, int64_t depth) {
  double acc[R][Cn];
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < Cn; ++j) acc[r][j] = c[r * ldc + j];
  for (int64_t k = 0; k < depth; ++k) {
    const double* b = bt + k * ldb;
    for (int64_t r = 0; r < R; ++r) {
      const double ar = a[r * lda + k];
      for (int64_t j = 0; j < Cn; ++j) acc[r][j] += ar * b[j];
    }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t j = 0; j < Cn; ++j) c[r * ldc + j] = acc[r][j];
}

void edge(const double* a, int64_t lda, const double* bt, int64_t ldb, double* c, int64_t ldc, int64_t depth,
          int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < depth; ++k) {
      const double ar = a[r * lda + k];
      const double* b = bt + k * ldb;
      double* cr = c + r * ldc;
      for (int64_t j = 0; j < cols; ++j) cr[j] += ar * b[j];
    }
}

}  // namespace

Matrix gemm_nt_f64_seq(const Matrix& A, const Matrix& B, const Vector* bias) {
  const int64_t M = A.rows(), N = B.rows(), K = A.cols();
  MOENUM_CHECK(B.cols() == K, "gemm_nt_f64_seq: A and B disagree on K");
  MOENUM_CHECK(!bias || bias->size() == N, "gemm_nt_f64_seq: bias length must be N");
  const Matrix Bt = B.transpose();  // K x N: a row piece of B^T feeds kCols outputs at once
  Matrix C = Matrix::Zero(M, N);
  const double* a = A.data();
  const double* bt = Bt.data();
  double* c = C.data();
  for (int64_t k0 = 0; k0 < K; k0 += kDepth) {  // K chunks in order: each output's sum stays in k order
    const int64_t depth = std::min(kDepth, K - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
      const int64_t panel = std::min(kPanel, N - j0);
      for (int64_t i = 0; i < M; i += kRows) {
        const int64_t rows = std::min(kRows, M - i);
        for (int64_t j = j0; j < j0 + panel; j += kCols) {
          const int64_t cols = std::min(kCols, j0 + panel - j);
          const double* ap = a + i * K + k0;
          const double* bp = bt + k0 * N + j;
          double* cp = c + i * N + j;
          if (rows == kRows && cols == kCols)
            tile<kRows, kCols>(ap, K, bp, N, cp, N, depth);
          else
            edge(ap, K, bp, N, cp, N, depth, rows, cols);
        }
      }
    }
  }
  if (bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += (*bias)(j);
  return C;
}

}  // namespace moenum::reference
