// The reference GEMM: correctly rounded fp32 of the exact sum of products, whatever the path,
// order or thread count.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <random>

#include "bounds.h"
#include "exact_gemm.h"
#include "moenum/bf16.h"

using namespace moenum::reference;

namespace {

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

// An independent oracle for operands of at most 24 significant bits in a narrow exponent range:
// every product is an integer times 2^emin, summed exactly in __int128, then rounded to fp32 by
// comparing the remainder with half an ulp.
float oracle_dot(const double* a, const double* b, int64_t K) {
  struct Term {
    __int128 m;
    int e;
  };
  std::vector<Term> terms;
  int emin = 1 << 20;
  for (int64_t k = 0; k < K; ++k) {
    if (a[k] == 0 || b[k] == 0) continue;
    int ea, eb;
    const double fa = std::frexp(a[k], &ea), fb = std::frexp(b[k], &eb);
    const int64_t ma = int64_t(std::ldexp(fa, 24)), mb = int64_t(std::ldexp(fb, 24));
    EXPECT_EQ(double(ma), std::ldexp(fa, 24)) << "oracle needs <= 24-bit operands";
    terms.push_back({__int128(ma) * mb, ea + eb - 48});
    emin = std::min(emin, ea + eb - 48);
  }
  __int128 sum = 0;
  for (const auto& t : terms) {
    EXPECT_LT(t.e - emin, 70) << "oracle exponent range exceeded";
    sum += t.m << (t.e - emin);
  }
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  unsigned __int128 u = neg ? (unsigned __int128)(-sum) : (unsigned __int128)sum;
  int top = 127;
  while (!((u >> top) & 1)) --top;
  const int q = std::max(top + emin - 23, -149);  // exponent of the fp32 ulp
  const int sh = q - emin;
  unsigned __int128 mant;
  if (sh <= 0) {
    mant = u << -sh;
  } else if (sh >= 127) {
    mant = 0;  // u < 2^126 < half an ulp
  } else {
    mant = u >> sh;
    const unsigned __int128 rem = u - (mant << sh), half = (unsigned __int128)1 << (sh - 1);
    if (rem > half || (rem == half && (mant & 1))) ++mant;
  }
  const float f = float(std::ldexp(double(uint64_t(mant)), q));
  return neg ? -f : f;
}

Matrix random_bf16(int64_t rows, int64_t cols, std::mt19937_64& gen, double scale = 1.0) {
  std::normal_distribution<double> nd(0.0, scale);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = moenum::round_bf16(float(nd(gen)));
  return m;
}

// fp32 values spread over 2^-12 .. 2^12 in magnitude, both signs.
Matrix random_f32_wide(int64_t rows, int64_t cols, std::mt19937_64& gen) {
  std::uniform_real_distribution<double> ud(-12.0, 12.0);
  std::normal_distribution<double> nd;
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = double(float(nd(gen) * std::exp2(ud(gen))));
  return m;
}

void expect_bitwise_equal(const Matrix& x, const Matrix& y) {
  ASSERT_EQ(x.rows(), y.rows());
  ASSERT_EQ(x.cols(), y.cols());
  int64_t bad = 0;
  for (int64_t i = 0; i < x.size(); ++i)
    if (bits(float(x.data()[i])) != bits(float(y.data()[i])) && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": " << x.data()[i] << " vs " << y.data()[i];
  EXPECT_EQ(bad, 0);
}

float gemm1(std::vector<double> a, std::vector<double> b, GemmStats* st = nullptr) {
  const int64_t K = int64_t(a.size());
  const Matrix A = Eigen::Map<Matrix>(a.data(), 1, K), B = Eigen::Map<Matrix>(b.data(), 1, K);
  return float(gemm_nt_rn_f32(A, B, nullptr, st)(0, 0));
}

}  // namespace

TEST(ExactGemm, RandomBf16MatchesInt128Oracle) {
  std::mt19937_64 gen(1);
  for (int64_t K : {1, 7, 64, 333}) {
    const Matrix A = random_bf16(13, K, gen), B = random_bf16(11, K, gen);
    const Matrix C = gemm_nt_rn_f32(A, B);
    Matrix O(13, 11);
    for (int i = 0; i < 13; ++i)
      for (int j = 0; j < 11; ++j) O(i, j) = oracle_dot(A.data() + i * K, B.data() + j * K, K);
    expect_bitwise_equal(C, O);
  }
}

TEST(ExactGemm, RandomFp32MatchesInt128Oracle) {
  std::mt19937_64 gen(2);
  std::uniform_real_distribution<double> ud(-8.0, 8.0);
  std::normal_distribution<double> nd;
  const int64_t K = 200;
  Matrix A(9, K), B(10, K);
  for (int64_t i = 0; i < A.size(); ++i) A.data()[i] = float(nd(gen) * std::exp2(ud(gen)));
  for (int64_t i = 0; i < B.size(); ++i) B.data()[i] = float(nd(gen) * std::exp2(ud(gen)));
  const Matrix C = gemm_nt_rn_f32(A, B);
  for (int i = 0; i < 9; ++i)
    for (int j = 0; j < 10; ++j)
      EXPECT_EQ(bits(float(C(i, j))), bits(oracle_dot(A.data() + i * K, B.data() + j * K, K)));
}

TEST(ExactGemm, ForcedExactPathAgreesWithFastPath) {
  std::mt19937_64 gen(3);
  const Matrix A = random_f32_wide(31, 257, gen), B = random_f32_wide(29, 257, gen);
  Vector bias(29);
  for (int j = 0; j < 29; ++j) bias(j) = moenum::round_bf16(float(j) - 14.5f);
  GemmStats fast, forced;
  const Matrix C1 = gemm_nt_rn_f32(A, B, &bias, &fast);
  const Matrix C2 = gemm_nt_rn_f32(A, B, &bias, &forced, {.force_exact = true});
  expect_bitwise_equal(C1, C2);
  EXPECT_EQ(fast.outputs, 31 * 29);
  EXPECT_EQ(forced.exact_path, 31 * 29);
  EXPECT_LT(fast.exact_path, fast.outputs / 10);
}

TEST(ExactGemm, CancellationForcesExactPath) {
  GemmStats st;
  // huge + tiny - huge: fp64 loses the tiny term entirely.
  EXPECT_EQ(gemm1({0x1p100, 0x1p-30, -0x1p100}, {1.0, 1.0, 1.0}, &st), 0x1p-30f);
  EXPECT_EQ(gemm1({0x1p60, 3.0, -0x1p60}, {0x1p60, 0x1p-90, 0x1p60}, &st), float(3 * 0x1p-90));
  // order does not matter
  EXPECT_EQ(gemm1({-0x1p100, 0x1p100, -0x1p-30}, {1.0, 1.0, 1.0}, &st), -0x1p-30f);
  // complete cancellation gives +0
  EXPECT_EQ(bits(gemm1({0x1p70, -0x1p70, 0x1p-70, -0x1p-70}, {1.0, 1.0, 1.0, 1.0}, &st)), 0u);
  EXPECT_EQ(st.exact_path, 4);
  // bf16 products that cancel to a few ulps of the inputs, in a longer dot product
  std::vector<double> a, b;
  for (int i = 0; i < 100; ++i) {
    const double v = moenum::round_bf16(1.0f + float(i) / 128.0f);
    a.push_back(v), b.push_back(v), a.push_back(-v), b.push_back(v);
  }
  a.push_back(0x1p-20), b.push_back(0x1p-20);
  EXPECT_EQ(gemm1(a, b, &st), 0x1p-40f);
}

TEST(ExactGemm, MidpointTies) {
  struct Case {
    std::vector<double> a;
    float want;
  };
  const float one_up = std::nextafter(1.0f, 2.0f), two_up = std::nextafter(one_up, 2.0f);
  const std::vector<Case> cases = {
      {{1.0, 0x1p-24}, 1.0f},                       // tie, to even (down)
      {{1.0, 0x1p-24, 0x1p-80}, one_up},            // just above the tie
      {{1.0, 0x1p-24, -0x1p-80}, 1.0f},             // just below
      {{1.0, 3 * 0x1p-24}, two_up},                 // tie, to even (up)
      {{1.0, 3 * 0x1p-24, -0x1p-100}, one_up},
      {{-1.0, -0x1p-24}, -1.0f},                    // negative tie
      {{-1.0, -0x1p-24, -0x1p-90}, -one_up},
      {{0x1p-150}, 0.0f},                           // half the smallest subnormal: to even = 0
      {{0x1p-150, 0x1p-200}, 0x1p-149f},            // above it
      {{-0x1p-150, -0x1p-200}, -0x1p-149f},
      {{3 * 0x1p-150}, 0x1p-148f},                  // subnormal tie, to even (up)
      {{0x1p-126, -0x1p-150}, 0x1p-126f},           // tie at the normal/subnormal edge: to even
      {{FLT_MAX, 0x1p103}, INFINITY},               // FLT_MAX + half ulp: overflows
      {{FLT_MAX, 0x1p103, -0x1p40}, FLT_MAX},
  };
  for (const Case& c : cases) {
    // as products a_i * 1, and as products of two halves (a_i * 2^-40) * 2^40
    std::vector<double> ones(c.a.size(), 1.0);
    // fast path (exact ties are certified by the grid test, near-ties go to the accumulator) ...
    EXPECT_EQ(bits(gemm1(c.a, ones)), bits(c.want)) << c.a[0] << " + " << c.a[1];
    // ... and the accumulator alone
    const Matrix A = Eigen::Map<const Matrix>(c.a.data(), 1, int64_t(c.a.size()));
    const Matrix B = Matrix::Ones(1, int64_t(c.a.size()));
    EXPECT_EQ(bits(float(gemm_nt_rn_f32(A, B, nullptr, nullptr, {.force_exact = true})(0, 0))), bits(c.want));
    ExactSum s;
    for (double v : c.a) s.add(v);
    EXPECT_EQ(bits(s.round_f32()), bits(c.want));
    std::vector<double> half(c.a.size()), scale(c.a.size(), 0x1p40);
    for (size_t i = 0; i < c.a.size(); ++i) half[i] = c.a[i] * 0x1p-40;
    if (std::fabs(c.a[0]) < 0x1p100 && std::fabs(c.a[0]) > 0x1p-100)
      EXPECT_EQ(bits(gemm1(half, scale)), bits(c.want));
  }
}

TEST(ExactGemm, ExactSumRoundsToF64) {
  ExactSum s;
  s.add(1.0);
  s.add(0x1p-53);  // tie at fp64 precision: to even
  EXPECT_EQ(s.round_f64(), 1.0);
  s.add(0x1p-200);
  EXPECT_EQ(s.round_f64(), 1.0 + 0x1p-52);
  ExactSum t;
  t.add(DBL_MAX);
  t.add(DBL_MAX);
  t.add(-DBL_MAX);
  EXPECT_EQ(t.round_f64(), DBL_MAX);  // the intermediate overflow of fp64 does not happen here
  ExactSum z;
  z.add(std::ldexp(1.0, -1074));
  z.add(-std::ldexp(1.0, -1074));
  EXPECT_TRUE(z.is_zero());
  z.add_product(1.0 + 0x1p-30, 1.0 - 0x1p-30);  // 1 - 2^-60: needs the fma split
  EXPECT_EQ(z.round_f64(), 1.0);
  z.add(-1.0);
  EXPECT_EQ(z.round_f64(), -0x1p-60);
}

TEST(ExactGemm, TransposedVariantsAndDot) {
  std::mt19937_64 gen(4);
  const Matrix A = random_bf16(12, 40, gen), B = random_bf16(9, 40, gen);
  const Matrix C = gemm_nt_rn_f32(A, B);
  const Matrix Bt = B.transpose(), At = A.transpose();
  expect_bitwise_equal(gemm_nn_rn_f32(A, Bt), C);
  expect_bitwise_equal(gemm_tn_rn_f32(At, Bt), C);
  for (int i = 0; i < 12; ++i)
    for (int j = 0; j < 9; ++j) {
      EXPECT_EQ(bits(dot_rn_f32(A.data() + i * 40, B.data() + j * 40, 40)), bits(float(C(i, j))));
      EXPECT_EQ(bits(dot_rn_f32(At.data() + i, Bt.data() + j, 40, 12, 9)), bits(float(C(i, j))));
    }
  // bias = one extra exact term = an extra column of ones
  Vector bias(9);
  for (int j = 0; j < 9; ++j) bias(j) = moenum::round_bf16(0.37f * float(j));
  Matrix A1(12, 41), B1(9, 41);
  A1 << A, Matrix::Ones(12, 1);
  B1 << B, bias;
  expect_bitwise_equal(gemm_nt_rn_f32(A, B, &bias), gemm_nt_rn_f32(A1, B1));
  // empty reduction
  const Matrix E0 = gemm_nt_rn_f32(Matrix(3, 0), Matrix(4, 0));
  EXPECT_EQ(E0.rows(), 3);
  EXPECT_TRUE((E0.array() == 0).all());
}

TEST(ExactGemm, IndependentOfThreadCount) {
  std::mt19937_64 gen(5);
  const Matrix A = random_f32_wide(200, 300, gen), B = random_f32_wide(150, 300, gen);
  Eigen::setNbThreads(1);
  const Matrix C1 = gemm_nt_rn_f32(A, B);
  Eigen::setNbThreads(2);
  const Matrix C2 = gemm_nt_rn_f32(A, B);
  Eigen::setNbThreads(0);
  expect_bitwise_equal(C1, C2);
  // and of summation order: a permutation of K gives the same bits
  std::vector<int> perm(300);
  for (int i = 0; i < 300; ++i) perm[i] = (i * 7 + 3) % 300;
  Matrix Ap(200, 300), Bp(150, 300);
  for (int k = 0; k < 300; ++k) {
    Ap.col(k) = A.col(perm[k]);
    Bp.col(k) = B.col(perm[k]);
  }
  expect_bitwise_equal(gemm_nt_rn_f32(Ap, Bp), C1);
}

// Inside a parallel region (as the layer's segments call it) the rows run as tasks of the team; the
// outputs and the exact-path count are those of the call outside one, with the exact path forced
// so every task does the long work.
TEST(ExactGemm, TasksInsideAParallelRegionGiveTheSameResult) {
  std::mt19937_64 gen(7);
  const Matrix A = random_f32_wide(70, 129, gen), B = random_f32_wide(33, 129, gen);
  GemmStats outside, inside[2];
  const Matrix C = gemm_nt_rn_f32(A, B, nullptr, &outside, {.force_exact = true});
  Matrix Ci[2];
#pragma omp parallel for num_threads(2) schedule(static, 1)
  for (int t = 0; t < 2; ++t) Ci[t] = gemm_nt_rn_f32(A, B, nullptr, &inside[t], {.force_exact = true});
  for (int t = 0; t < 2; ++t) {
    expect_bitwise_equal(C, Ci[t]);
    EXPECT_EQ(inside[t].exact_path, 70 * 33);
    EXPECT_EQ(inside[t].outputs, 70 * 33);
  }
  EXPECT_EQ(outside.exact_path, 70 * 33);
}

TEST(ExactGemm, AbsProductAndGamma) {
  Matrix A(1, 3), B(2, 3);
  A << 1, -2, 3;
  B << -1, 1, 1, 2, 2, -2;
  const Matrix S = abs_product_nt(A, B);
  EXPECT_EQ(S(0, 0), 6.0);
  EXPECT_EQ(S(0, 1), 12.0);
  EXPECT_DOUBLE_EQ(moenum::verify::gamma(10, 0x1p-24), 10 * 0x1p-24 / (1 - 10 * 0x1p-24));
}

TEST(ExactGemm, ExactPathFractionOnRandomBf16) {
  std::mt19937_64 gen(6);
  GemmStats st;
  const Matrix A = random_bf16(256, 512, gen), B = random_bf16(256, 512, gen);
  gemm_nt_rn_f32(A, B, nullptr, &st);
  std::printf("exact path: %lld of %lld outputs (%.2e)\n", (long long)st.exact_path, (long long)st.outputs,
              st.exact_fraction());
  EXPECT_LT(st.exact_fraction(), 1e-3);
}

// bf16 GEMMs whose fp64 bound leaves many outputs open: each row of A has a pair of large terms that
// cancel against B (S grows to 2^12 while C stays near 1) and one tiny element that puts the grid far
// below S, as a few tiny activations do. The compensated certificate settles nearly all of the open
// outputs, bitwise as the exact accumulator.
TEST(ExactGemm, CompensatedPathSettlesWhatTheBoundLeavesOpenBitwise) {
  std::mt19937_64 gen(8);
  const int64_t K = 2048;
  Matrix A = random_bf16(48, K, gen), B = random_bf16(40, K, gen, 0.02);
  for (int64_t i = 0; i < A.rows(); ++i) A(i, 0) = 0x1p16, A(i, 1) = -0x1p16, A(i, 2) = 0x1p-40;
  for (int64_t j = 0; j < B.rows(); ++j) B(j, 1) = B(j, 0);
  GemmStats st, forced;
  const Matrix C = gemm_nt_rn_f32(A, B, nullptr, &st);
  expect_bitwise_equal(C, gemm_nt_rn_f32(A, B, nullptr, &forced, {.force_exact = true}));
  std::printf("compensated path: %lld, exact path: %lld of %lld outputs\n", (long long)st.compensated,
              (long long)st.exact_path, (long long)st.outputs);
  EXPECT_GT(st.compensated, 20);
  EXPECT_LE(st.exact_path * 20, st.compensated);
  EXPECT_EQ(forced.compensated, 0);
}

TEST(ExactGemm, CompensatedCertificateDeclinesTiesAndWideOperands) {
  float out = -1.0f;
  const std::vector<double> ones(4, 1.0);
  // The exact sum 1 + 2^-24 is an fp32 midpoint: only the exact accumulator can round it (to even).
  const std::vector<double> tie = {1.0, 0x1p-24, 0x1p-60, -0x1p-60};
  EXPECT_FALSE(certify_compensated_f32(tie.data(), ones.data(), 4, 1, 1, nullptr, 1.0, &out));
  GemmStats st;
  EXPECT_EQ(bits(gemm1(tie, ones, &st)), bits(1.0f));
  EXPECT_EQ(st.compensated, 0);
  EXPECT_EQ(st.exact_path, 1);
  // Cancellation the fp64 bound cannot see through (n u S = 2^-18 against an fp32 ulp of 2^-23), a
  // grid far below S: the compensated sum keeps every bit that matters.
  const std::vector<double> cancel = {0x1p30, -0x1p30, 1.0 + 0x1p-20, 0x1p-60};
  ASSERT_TRUE(certify_compensated_f32(cancel.data(), ones.data(), 4, 1, 1, nullptr, 0x1p31, &out));
  EXPECT_EQ(bits(out), bits(1.0f + 0x1p-20f));
  st = {};
  EXPECT_EQ(bits(gemm1(cancel, ones, &st)), bits(1.0f + 0x1p-20f));
  EXPECT_EQ(st.compensated, 1);
  EXPECT_EQ(st.exact_path, 0);
  // The extra term (a bias) joins the sum: the same cancellation with -2^30 as the bias.
  const std::vector<double> head = {0x1p30, 1.0 + 0x1p-20, 0x1p-60};
  const double bias = -0x1p30;
  out = -1.0f;
  ASSERT_TRUE(certify_compensated_f32(head.data(), ones.data(), 3, 1, 1, &bias, 0x1p31, &out));
  EXPECT_EQ(bits(out), bits(1.0f + 0x1p-20f));
  // Rounding errors that decide the rounding: 2^-24 and 2^-40 vanish into 2^30 + 1 (one lane: every
  // fourth term) and the exact sum 1 + 2^-24 + 2^-40 lies above the midpoint 1 + 2^-24, so it rounds
  // up; only the kept TwoSum errors say so.
  std::vector<double> lost(17, 0.0), ones17(17, 1.0);
  lost[0] = 0x1p30, lost[4] = 1.0, lost[8] = 0x1p-24, lost[12] = 0x1p-40, lost[16] = -0x1p30;
  out = -1.0f;
  ASSERT_TRUE(certify_compensated_f32(lost.data(), ones17.data(), 17, 1, 1, nullptr, 0x1p31, &out));
  EXPECT_EQ(bits(out), bits(1.0f + 0x1p-23f));
  st = {};
  EXPECT_EQ(bits(gemm1(lost, ones17, &st)), bits(1.0f + 0x1p-23f));
  EXPECT_EQ(st.compensated, 1);
  // An operand with more than 26 significant bits: its products may have been rounded.
  const std::vector<double> third = {1.0 / 3.0, 1.0}, three = {3.0, 1.0};
  EXPECT_FALSE(certify_compensated_f32(third.data(), three.data(), 2, 1, 1, nullptr, 2.0, &out));
  // Strided operands (a column of A, a column of B) read the same terms.
  const std::vector<double> cancel_strided = {0x1p30, 9.0, -0x1p30, 9.0, 1.0 + 0x1p-20, 9.0, 0x1p-60, 9.0};
  const std::vector<double> ones_strided = {1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.0};
  out = -1.0f;
  ASSERT_TRUE(certify_compensated_f32(cancel_strided.data(), ones_strided.data(), 4, 2, 3, nullptr, 0x1p31, &out));
  EXPECT_EQ(bits(out), bits(1.0f + 0x1p-20f));
}
