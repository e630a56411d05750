// golden's GEMM: the blocked kernel must give the bits of the textbook loop (k order per output)
// on every shape, edges of the blocking included, and with signed zeros, infinities and NaN.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>

#include "k_ordered_gemm.h"

using namespace moenum::reference;

namespace {

Matrix textbook(const Matrix& A, const Matrix& B, const Vector* bias) {
  Matrix C(A.rows(), B.rows());
  for (int64_t i = 0; i < A.rows(); ++i)
    for (int64_t j = 0; j < B.rows(); ++j) {
      double c = 0.0;
      for (int64_t k = 0; k < A.cols(); ++k) c += A(i, k) * B(j, k);
      if (bias) c += (*bias)(j);
      C(i, j) = c;
    }
  return C;
}

Matrix random_matrix(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  // wide exponent spread, so the summation order shows in the low bits
  std::normal_distribution<double> n(0.0, 1.0);
  std::uniform_int_distribution<int> e(-20, 20);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = std::ldexp(n(rng), e(rng));
  return m;
}

void expect_same_bits(const Matrix& got, const Matrix& want) {
  ASSERT_EQ(got.rows(), want.rows());
  ASSERT_EQ(got.cols(), want.cols());
  int64_t differ = 0;
  for (int64_t i = 0; i < got.size(); ++i) {
    const double g = got.data()[i], w = want.data()[i];
    const bool same = std::bit_cast<uint64_t>(g) == std::bit_cast<uint64_t>(w) || (std::isnan(g) && std::isnan(w));
    differ += !same;
  }
  EXPECT_EQ(differ, 0) << "of " << got.size() << " outputs";
}

}  // namespace

TEST(KOrderedGemm, BitIdenticalToTheTextbookLoopOnEveryShape) {
  std::mt19937_64 rng(7);
  // edges of the 4 x 4 and 4 x 8 register tiles, the 256-wide panel and the 256-deep K chunk
  for (auto [M, N, K] : {std::tuple{1, 1, 1}, {3, 7, 5}, {4, 8, 256}, {5, 9, 257}, {37, 263, 600}, {64, 512, 513}}) {
    const Matrix A = random_matrix(M, K, rng), B = random_matrix(N, K, rng);
    const Vector bias = random_matrix(N, 1, rng).col(0);
    for (KOrderedKernel kernel : {KOrderedKernel::kBest, KOrderedKernel::kPortable}) {
      expect_same_bits(gemm_nt_f64_seq(A, B, nullptr, kernel), textbook(A, B, nullptr));
      expect_same_bits(gemm_nt_f64_seq(A, B, &bias, kernel), textbook(A, B, &bias));
    }
  }
}

TEST(KOrderedGemm, SignedZerosAndNonFiniteValuesAsTheTextbookLoop) {
  std::mt19937_64 rng(11);
  Matrix A = random_matrix(9, 300, rng), B = random_matrix(10, 300, rng);
  A.row(0).setZero();
  B.row(1) *= -0.0;  // -0 * x terms: the sum starts at +0, so +0 stays
  A(2, 7) = std::numeric_limits<double>::infinity();
  A(3, 8) = std::numeric_limits<double>::quiet_NaN();
  B(4, 9) = -std::numeric_limits<double>::infinity();
  for (KOrderedKernel kernel : {KOrderedKernel::kBest, KOrderedKernel::kPortable})
    expect_same_bits(gemm_nt_f64_seq(A, B, nullptr, kernel), textbook(A, B, nullptr));
}
