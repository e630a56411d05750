// Cache and register blocking that keeps every output's summation order: each C element is a
// register accumulator that receives a[i][k] * b[k][j] for k = 0, 1, ... in turn, chunk after chunk
// of K, so the result is bit-identical to the textbook triple loop. Only independent outputs are
// computed side by side (vectorised over j), never one output's terms. On CPUs with AVX2 the tile is
// 4 x 8 in 256-bit registers: separate multiply and add instructions (no FMA), so the same IEEE
// roundings as the scalar loop and the same bits.
#include "k_ordered_gemm.h"

#include <algorithm>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

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

#if defined(__x86_64__)
// The AVX2 tile: kRows x 8 outputs in eight 256-bit accumulators.
constexpr int64_t kColsAvx2 = 8;
__attribute__((target("avx2"))) void tile_avx2(const double* a, int64_t lda, const double* bt, int64_t ldb,
                                               double* c, int64_t ldc, int64_t depth) {
  __m256d acc[kRows][2];
  for (int64_t r = 0; r < kRows; ++r) {
    acc[r][0] = _mm256_loadu_pd(c + r * ldc);
    acc[r][1] = _mm256_loadu_pd(c + r * ldc + 4);
  }
  for (int64_t k = 0; k < depth; ++k) {
    const __m256d b0 = _mm256_loadu_pd(bt + k * ldb), b1 = _mm256_loadu_pd(bt + k * ldb + 4);
    for (int64_t r = 0; r < kRows; ++r) {
      const __m256d ar = _mm256_broadcast_sd(a + r * lda + k);
      acc[r][0] = _mm256_add_pd(acc[r][0], _mm256_mul_pd(ar, b0));
      acc[r][1] = _mm256_add_pd(acc[r][1], _mm256_mul_pd(ar, b1));
    }
  }
  for (int64_t r = 0; r < kRows; ++r) {
    _mm256_storeu_pd(c + r * ldc, acc[r][0]);
    _mm256_storeu_pd(c + r * ldc + 4, acc[r][1]);
  }
}

bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#else
constexpr int64_t kColsAvx2 = kCols;
void tile_avx2(const double*, int64_t, const double*, int64_t, double*, int64_t, int64_t) {}
bool have_avx2() { return false; }
#endif

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

Matrix gemm_nt_f64_seq(const Matrix& A, const Matrix& B, const Vector* bias, KOrderedKernel kernel) {
  const int64_t M = A.rows(), N = B.rows(), K = A.cols();
  MOENUM_CHECK(B.cols() == K, "gemm_nt_f64_seq: A and B disagree on K");
  MOENUM_CHECK(!bias || bias->size() == N, "gemm_nt_f64_seq: bias length must be N");
  const Matrix Bt = B.transpose();  // K x N: a row piece of B^T feeds kCols outputs at once
  Matrix C = Matrix::Zero(M, N);
  const double* a = A.data();
  const double* bt = Bt.data();
  double* c = C.data();
  const bool avx2 = kernel == KOrderedKernel::kBest && have_avx2();
  const int64_t width = avx2 ? kColsAvx2 : kCols;
  // A piece of B^T, packed tile by tile ([tile][k][width], contiguous), so that a tile streams one
  // block of memory instead of one cache line per page of B^T.
  std::vector<double> packed(size_t(kDepth * kPanel));
  for (int64_t k0 = 0; k0 < K; k0 += kDepth) {  // K chunks in order: each output's sum stays in k order
    const int64_t depth = std::min(kDepth, K - k0);
    for (int64_t j0 = 0; j0 < N; j0 += kPanel) {
      const int64_t panel = std::min(kPanel, N - j0), tiles = panel / width;
      for (int64_t t = 0; t < tiles; ++t)
        for (int64_t k = 0; k < depth; ++k)
          std::copy_n(bt + (k0 + k) * N + j0 + t * width, width, packed.data() + (t * depth + k) * width);
      for (int64_t i = 0; i < M; i += kRows) {
        const int64_t rows = std::min(kRows, M - i);
        const double* ap = a + i * K + k0;
        for (int64_t t = 0; t < tiles; ++t) {
          double* cp = c + i * N + j0 + t * width;
          const double* bp = packed.data() + t * depth * width;
          if (rows < kRows) edge(ap, K, bp, width, cp, N, depth, rows, width);
          else if (avx2) tile_avx2(ap, K, bp, width, cp, N, depth);
          else tile<kRows, kCols>(ap, K, bp, width, cp, N, depth);
        }
        if (const int64_t rest = panel - tiles * width; rest > 0)
          edge(ap, K, bt + k0 * N + j0 + tiles * width, N, c + i * N + j0 + tiles * width, N, depth, rows, rest);
      }
    }
  }
  if (bias)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) c[i * N + j] += (*bias)(j);
  return C;
}

}  // namespace moenum::reference
