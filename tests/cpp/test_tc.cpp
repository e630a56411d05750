// moenum/tc.h: the GEMM driver is the dot-product chain per output, whatever the thread count; the
// rounding of a step follows the rules worked out by hand (bit-for-bit agreement with MMA-Sim is
// tests/python/test_tc_mmasim.py).
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "moenum/tc.h"

namespace {

using moenum::tc::Format;

float bf16(float v) { return std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xFFFF0000u); }

TEST(Tc, GemmIsOneChainPerOutputForAnyThreadCount) {
  const int64_t M = 7, N = 9, K = 45;  // K not a multiple of 16: a short last step
  std::mt19937 g(3);
  std::normal_distribution<float> d;
  std::vector<float> A(M * K), B(N * K);
  for (auto& x : A) x = bf16(d(g) * 8.0f);
  for (auto& x : B) x = bf16(d(g) / 8.0f);
  std::vector<float> C1(M * N), C2(M * N);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  moenum::tc::gemm_nt(A.data(), B.data(), C1.data(), M, N, K, Format::kBf16);
  omp_set_num_threads(std::max(threads, 2));
  moenum::tc::gemm_nt(A.data(), B.data(), C2.data(), M, N, K, Format::kBf16);
  omp_set_num_threads(threads);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      const float want = moenum::tc::dot(&A[i * K], &B[j * K], K, 0.0f, Format::kBf16);
      EXPECT_EQ(std::bit_cast<uint32_t>(C1[i * N + j]), std::bit_cast<uint32_t>(want)) << i << "," << j;
      EXPECT_EQ(std::bit_cast<uint32_t>(C2[i * N + j]), std::bit_cast<uint32_t>(want)) << i << "," << j;
    }
}

TEST(Tc, StepTruncatesBelowTheLargestExponentAndRoundsTowardZero) {
  std::vector<float> a(16, 0.0f), b(16, 0.0f);
  for (int i = 0; i < 4; ++i) a[i] = 0x1p-12f, b[i] = 0x1p-13f;  // four products of 2^-25
  EXPECT_EQ(moenum::tc::dot(a.data(), b.data(), 16, 1.0f, Format::kBf16), 1.0f + 0x1p-23f);
  for (int i = 0; i < 4; ++i) b[i] = -0x1p-13f;
  EXPECT_EQ(moenum::tc::dot(a.data(), b.data(), 16, -1.0f, Format::kBf16), -1.0f - 0x1p-23f);
  // 1 - 3 * 2^-25 lies in [1/2, 1), where the fp32 spacing is 2^-24: toward zero it is 1 - 2^-23
  EXPECT_EQ(moenum::tc::dot(a.data(), b.data(), 3, 1.0f, Format::kBf16), 1.0f - 0x1p-23f);
}

// What a kernel that splits one output's K loop over two CTAs may do and keep gpu.grouped's bits: the
// state between steps is the fp32 accumulator alone, so a chain stopped at a step boundary and
// carried on from its fp32 value by the next CTA is the whole chain. Adding two partial chains (a
// split-K or stream-K reduction) is not, nor is a split inside a step.
TEST(Tc, AChainCarriedOnFromItsAccumulatorAtAStepBoundaryIsTheWholeChain) {
  const int64_t L = moenum::tc::step_shape(moenum::tc::Arch::kSm90, Format::kBf16).products;
  const int64_t K = 64 * L, outputs = 256;
  std::mt19937 g(11);
  std::normal_distribution<float> d;
  std::vector<float> a(outputs * K), b(outputs * K);
  for (auto& x : a) x = bf16(d(g));
  for (auto& x : b) x = bf16(d(g) * 0.125f);
  int reduction_differs = 0, mid_step_differs = 0;
  for (int64_t o = 0; o < outputs; ++o) {
    const float* ao = &a[o * K];
    const float* bo = &b[o * K];
    const float whole = moenum::tc::dot(ao, bo, K, 0.0f, Format::kBf16);
    for (int64_t split : {L, 31 * L, 32 * L, 63 * L}) {
      const float head = moenum::tc::dot(ao, bo, split, 0.0f, Format::kBf16);
      const float carried = moenum::tc::dot(ao + split, bo + split, K - split, head, Format::kBf16);
      ASSERT_EQ(std::bit_cast<uint32_t>(carried), std::bit_cast<uint32_t>(whole)) << "output " << o << ", split " << split;
      const float tail = moenum::tc::dot(ao + split, bo + split, K - split, 0.0f, Format::kBf16);
      reduction_differs += std::bit_cast<uint32_t>(head + tail) != std::bit_cast<uint32_t>(whole);
    }
    const int64_t mid_step = 31 * L + L / 2;
    const float head = moenum::tc::dot(ao, bo, mid_step, 0.0f, Format::kBf16);
    const float carried = moenum::tc::dot(ao + mid_step, bo + mid_step, K - mid_step, head, Format::kBf16);
    mid_step_differs += std::bit_cast<uint32_t>(carried) != std::bit_cast<uint32_t>(whole);
  }
  EXPECT_GT(reduction_differs, 0);
  EXPECT_GT(mid_step_differs, 0);
}

TEST(Tc, ValuesOutsideTheFormatAreRefused) {
  EXPECT_TRUE(moenum::tc::representable(448.0f, Format::kE4M3));
  EXPECT_FALSE(moenum::tc::representable(480.0f, Format::kE4M3));
  EXPECT_FALSE(moenum::tc::representable(INFINITY, Format::kE4M3));
  EXPECT_TRUE(moenum::tc::representable(INFINITY, Format::kE5M2));
  EXPECT_TRUE(moenum::tc::representable(0x1p-9f, Format::kE4M3));   // smallest subnormal
  EXPECT_FALSE(moenum::tc::representable(0x1p-10f, Format::kE4M3));
  EXPECT_TRUE(moenum::tc::representable(0x1p-133f, Format::kBf16));  // smallest bf16 subnormal
  EXPECT_FALSE(moenum::tc::representable(1.0f + 0x1p-8f, Format::kBf16));
  std::vector<float> a(32, 1.0f), c(1, 0.0f), out(1);
  a[17] = 1.0f + 0x1p-5f;
  EXPECT_THROW(moenum::tc::dot_rows(a.data(), a.data(), c.data(), out.data(), 1, 32, Format::kE4M3), std::invalid_argument);
  EXPECT_EQ(moenum::tc::first_unrepresentable(a.data(), 32, Format::kE4M3), 17);
}

}  // namespace
