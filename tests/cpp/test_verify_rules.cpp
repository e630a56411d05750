// The verifier's rules (core/verify/): ULPs, bitwise equality, the bound with its underflow term,
// and element classification.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "bitwise.h"
#include "bounds.h"
#include "classify.h"
#include "error_stats.h"
#include "exact_gemm.h"
#include "ulp.h"

namespace moenum::verify {
namespace {

TEST(Ulp, GridStepsWalkTheDtypeGrid) {
  EXPECT_EQ(grid_step(1.0, 1, Grid::kBf16), 1.0078125);
  EXPECT_EQ(grid_step(1.0, -1, Grid::kBf16), 1.0 - std::ldexp(1.0, -8));
  EXPECT_EQ(grid_step(0.0, 1, Grid::kF32), std::ldexp(1.0, -149));
  EXPECT_EQ(grid_step(-0.0, 1, Grid::kBf16), std::ldexp(1.0, -133));
  EXPECT_EQ(grid_step(1.0, 1, Grid::kF32), 1.0 + std::ldexp(1.0, -23));
  EXPECT_EQ(grid_step(1.0, 1, Grid::kF64), std::nextafter(1.0, 2.0));
}

TEST(Ulp, DistanceIsInSpacingsAtTheReference) {
  EXPECT_EQ(ulp_distance(1.0078125, 1.0, Grid::kBf16), 1.0);
  EXPECT_EQ(ulp_distance(1.0 + 0x1p-24, 1.0, Grid::kBf16), 0x1p-17);  // off the grid: fractional
  EXPECT_EQ(ulp_distance(-1.0, 1.0, Grid::kF32), std::ldexp(1.0, 24));
  EXPECT_EQ(ulp_distance(std::nan(""), std::nan(""), Grid::kF32), 0.0);
  EXPECT_TRUE(std::isinf(ulp_distance(std::nan(""), 1.0, Grid::kF32)));
  EXPECT_EQ(ulp_spacing(0.0, Grid::kF32), std::ldexp(1.0, -149));  // subnormal spacing
  // a step is one ulp in the binade of the value stepped from
  for (double v : {1.5, 3.0, 0x1.8p-10, -7.25})  // on both grids
    for (Grid g : {Grid::kBf16, Grid::kF32}) EXPECT_EQ(ulp_distance(grid_step(v, 1, g), v, g), 1.0) << v;
}

// The spacing read off the bits is the definition's 2^(max(floor(log2|ref|), emin) - p + 1), on
// every grid, from fp64 subnormals to the largest values.
TEST(Ulp, SpacingIsTheBinadeDefinition) {
  const auto by_definition = [](double ref, Grid g) {
    const GridFormat f = grid_format(g);
    int e = 0;
    std::frexp(std::fabs(ref), &e);
    return std::ldexp(1.0, (ref == 0.0 ? f.emin : std::max(e - 1, f.emin)) - (f.precision - 1));
  };
  std::mt19937_64 rng(7);
  std::vector<double> refs = {0.0, -0.0, 1.0, -1.0, 0x1p-1074, 0x1p-1022, 0x1.fffffffffffffp-1023, 0x1p-126,
                              0x1p-127, 0x1.fffffep+127, std::numeric_limits<double>::max(), 3.0e-300};
  for (int i = 0; i < 20000; ++i) {
    uint64_t bits = rng() & ~(uint64_t{0x7ff} << 52) | (uint64_t(rng() % 2047) << 52);  // finite
    double v;
    std::memcpy(&v, &bits, 8);
    refs.push_back(v);
  }
  for (double r : refs)
    for (Grid g : {Grid::kBf16, Grid::kF32, Grid::kF64}) {
      ASSERT_EQ(ulp_spacing(r, g), by_definition(r, g)) << r;
      // the distance is the difference over that spacing, near r and far from it
      for (double v : {std::nextafter(r, 0.0), r * 1.5, r * 0x1p-60 + 0x1p-1070, -r})
        if (std::isfinite(std::fabs(v - r)) && v != r)
          ASSERT_EQ(ulp_distance(v, r, g), std::fabs(v - r) / by_definition(r, g)) << v << " vs " << r;
    }
}

TEST(Bitwise, SignOfZeroCountsAndNaNsAreEqual) {
  EXPECT_TRUE(same_bits(1.5, 1.5, Grid::kBf16));
  EXPECT_FALSE(same_bits(0.0, -0.0, Grid::kF32));
  EXPECT_FALSE(same_bits(0.0, -0.0, Grid::kF64));
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_TRUE(same_bits(qnan, -qnan, Grid::kF32));
  EXPECT_FALSE(same_bits(qnan, 1.0, Grid::kF32));
  EXPECT_FALSE(same_bits(1.0, 1.0 + 0x1p-30, Grid::kF64));
}

TEST(Classify, TheClassesInOrder) {
  const Interval wide{0.99, 1.01};
  const double mid = 1.00390625;  // the bf16 midpoint of 1 and its upper neighbour 1 + 2^-7
  EXPECT_EQ(classify(1.0, {1.0, 1.0, wide}, Grid::kBf16), Class::kBitwiseEqual);
  EXPECT_EQ(classify(1.0078125, {1.0, mid, wide}, Grid::kBf16), Class::kTieFlip);
  EXPECT_EQ(classify(1.0078125, {1.0, 1.0, wide}, Grid::kBf16), Class::kWithinBound);
  EXPECT_EQ(classify(2.0, {1.0, 1.0, Interval{0.99, 1.5}}, Grid::kBf16), Class::kBoundViolation);
  EXPECT_EQ(classify(-0.0, {0.0, 0.0, Interval{0.0, 0.0}}, Grid::kBf16), Class::kWithinBound);
  // a bit-exact stage (no bound): a tie flip is named, anything else is a violation
  EXPECT_EQ(classify(1.0078125, {1.0, mid, std::nullopt}, Grid::kBf16), Class::kTieFlip);
  EXPECT_EQ(classify(1.0078125, {1.0, 1.0, std::nullopt}, Grid::kBf16), Class::kBoundViolation);
  EXPECT_EQ(classify(-0.0, {0.0, 0.0, std::nullopt}, Grid::kF32), Class::kBoundViolation);
  // a tie flip outside the bound is a violation
  EXPECT_EQ(classify(1.0078125, {1.0, mid, Interval{1.0, 1.0}}, Grid::kBf16), Class::kBoundViolation);
}

// Every fp32 summation order of the same products lies inside the bound, and the next fp32 value
// beyond it does not.
TEST(Bounds, HoldEveryFp32SummationOrder) {
  std::mt19937 gen(11);
  std::normal_distribution<double> nd;
  for (int K : {16, 256, 2048}) {
    std::vector<double> a(K), b(K);
    for (int k = 0; k < K; ++k) {
      a[k] = static_cast<float>(nd(gen));
      b[k] = static_cast<float>(nd(gen) * std::exp(3.0 * nd(gen) / 3.0));
    }
    const float c32 = reference::dot_rn_f32(a.data(), b.data(), K);
    double S = 0;
    for (int k = 0; k < K; ++k) S += std::fabs(a[k] * b[k]);
    const Interval iv = accumulator_interval(c32, S, K);
    std::vector<int> order(K);
    for (int k = 0; k < K; ++k) order[k] = k;
    for (int trial = 0; trial < 4; ++trial) {
      float acc = 0;
      for (int k : order) acc = acc + float(a[k]) * float(b[k]);
      EXPECT_GE(acc, iv.lo);
      EXPECT_LE(acc, iv.hi);
      std::shuffle(order.begin(), order.end(), gen);
    }
    const double beyond = std::nextafter(float(iv.hi), std::numeric_limits<float>::infinity());
    EXPECT_EQ(classify(beyond, {c32, c32, iv}, Grid::kF32), Class::kBoundViolation);
  }
}

// Products and sums of subnormal-range values lose up to half the smallest subnormal each: the
// underflow term covers that, the relative term alone would not.
TEST(Bounds, UnderflowTermCoversSubnormalProducts) {
  const int K = 64;
  std::vector<double> a(K), b(K);
  for (int k = 0; k < K; ++k) {
    a[k] = static_cast<float>(std::ldexp(1.0 + k / 64.0, -75) * (k % 3 ? 1 : -1));
    b[k] = static_cast<float>(std::ldexp(1.0 + k / 32.0, -72));
  }
  const float c32 = reference::dot_rn_f32(a.data(), b.data(), K);
  double S = 0;
  for (int k = 0; k < K; ++k) S += std::fabs(a[k] * b[k]);
  float acc = 0;  // every product rounds in the subnormal range
  for (int k = 0; k < K; ++k) acc = acc + float(a[k]) * float(b[k]);
  const Interval iv = accumulator_interval(c32, S, K);
  EXPECT_GE(acc, iv.lo);
  EXPECT_LE(acc, iv.hi);
  const double relative_only = gamma(K) * S + half_ulp_f32(c32);
  EXPECT_GT(std::fabs(double(acc) - c32), relative_only);  // the case the underflow term exists for
}

TEST(ErrorStats, FiguresOfATinyPair) {
  const std::vector<float> a{1.0f, 2.0f, 0.0f, -0.0f}, b{1.0f, 2.5f, 0.0f, 0.0f};
  View va{a.data(), Storage::kF32, {4}, "fp32"}, vb{b.data(), Storage::kF32, {4}, "fp32"};
  const ErrorStats s = error_stats(va, vb, Grid::kBf16);
  EXPECT_EQ(s.n, 4);
  EXPECT_EQ(s.max_abs, 0.5);
  EXPECT_EQ(s.max_rel, 0.2);
  EXPECT_EQ(s.mean_abs, 0.125);
  EXPECT_EQ(s.bitwise_equal, 2);  // -0 vs +0 is not bitwise equal
  EXPECT_EQ(s.ulps.le0, 3);
  EXPECT_EQ(s.ulps.gt2, 1);  // 0.5 at 2.5 is 32 bf16 ulps
  EXPECT_NEAR(s.rel_fro, 0.5 / std::sqrt(1.0 + 6.25), 1e-15);
}

// A pair longer than a block, of a length that leaves a remainder past the four lanes, whole and
// through an index: the counts and maxima exactly those of one plain pass, the sums to rounding.
TEST(ErrorStats, ALongPairAgreesWithOnePlainPass) {
  const int64_t n = 3 * (int64_t{1} << 14) + 7;
  std::vector<float> a(n), b(n);
  for (int64_t i = 0; i < n; ++i) {
    b[i] = float(std::sin(0.001 * double(i)) * 3.0);
    a[i] = i % 5 == 0 ? b[i] : std::nextafter(b[i], i % 3 ? 10.0f : -10.0f);
  }
  std::vector<int64_t> index;
  for (int64_t i = 1; i < n; i += 3) index.push_back(i);
  View va{a.data(), Storage::kF32, {n}, "fp32"}, vb{b.data(), Storage::kF32, {n}, "fp32"};
  const std::vector<int64_t>* whole = nullptr;
  const std::vector<int64_t>* every_third = &index;
  for (const std::vector<int64_t>* idx : {whole, every_third}) {
    const ErrorStats s = error_stats(va, vb, Grid::kF32, idx);
    int64_t m = 0, bitwise = 0, le0 = 0, le1 = 0;
    double max_abs = 0, max_rel = 0, sum_abs = 0, sum_d2 = 0, sum_b2 = 0;
    for (int64_t k = 0; k < (idx ? int64_t(idx->size()) : n); ++k) {
      const int64_t i = idx ? (*idx)[k] : k;
      const double d = std::fabs(double(a[i]) - double(b[i]));
      ++m, bitwise += a[i] == b[i], max_abs = std::max(max_abs, d), sum_abs += d;
      if (b[i] != 0.0f) max_rel = std::max(max_rel, d / std::fabs(double(b[i])));
      sum_d2 += d * d, sum_b2 += double(b[i]) * double(b[i]);
      const double u = ulp_distance(a[i], b[i], Grid::kF32);
      le0 += u == 0.0, le1 += u > 0.0 && u <= 1.0;
    }
    EXPECT_EQ(s.n, m);
    EXPECT_EQ(s.bitwise_equal, bitwise);
    EXPECT_EQ(s.ulps.le0, le0);
    EXPECT_EQ(s.ulps.le1, le1);
    EXPECT_EQ(s.ulps.le0 + s.ulps.le1, m);
    EXPECT_EQ(s.max_abs, max_abs);
    EXPECT_EQ(s.max_rel, max_rel);
    EXPECT_NEAR(s.mean_abs, sum_abs / double(m), 1e-12 * s.mean_abs);
    EXPECT_NEAR(s.rel_fro, std::sqrt(sum_d2) / std::sqrt(sum_b2), 1e-12 * s.rel_fro);
  }
}

// max_rel over magnitudes from subnormal to near overflow (quotients that overflow and underflow,
// zero references, equal pairs) is the largest rounded quotient, bit for bit, and a rise of about
// one ulp per element is not lost between the lanes.
TEST(ErrorStats, MaxRelIsTheLargestQuotientOverEveryMagnitude) {
  const int64_t n = 5 * (int64_t{1} << 14) + 3;
  std::vector<double> a(n), b(n);
  uint64_t state = 12345;
  auto next = [&] { return state = state * 6364136223846793005ull + 1442695040888963407ull; };
  for (int64_t i = 0; i < n; ++i) {
    const int eb = int(next() >> 33) % 2090 - 1070, ea = eb + int(next() >> 33) % 41 - 20;
    const double mb = 1.0 + double(next() >> 12) * 0x1p-52, ma = 1.0 + double(next() >> 12) * 0x1p-52;
    b[i] = i % 97 == 0 ? 0.0 : std::ldexp(mb, std::clamp(eb, -1074, 1022));
    a[i] = i % 13 == 0 ? b[i] : std::ldexp(ma, std::clamp(ea, -1074, 1022)) * (i % 2 ? 1.0 : -1.0);
  }
  View va{a.data(), Storage::kF64, {n}, "fp64"}, vb{b.data(), Storage::kF64, {n}, "fp64"};
  double max_rel = 0;
  for (int64_t i = 0; i < n; ++i)
    if (b[i] != 0.0) max_rel = std::max(max_rel, std::fabs(a[i] - b[i]) / std::fabs(b[i]));
  EXPECT_EQ(error_stats(va, vb, Grid::kF64, nullptr).max_rel, max_rel);
  // quotients rising by about one ulp per element
  for (int64_t i = 0; i < n; ++i) b[i] = 0.75 - double(i + 1) * 0x1p-53, a[i] = b[i] + 0x1p-20;
  EXPECT_EQ(error_stats(va, vb, Grid::kF64, nullptr).max_rel, 0x1p-20 / b[n - 1]);
}

// Finite terms whose magnitudes sum past the fp32 max can overflow in some order: any value, NaN
// and both infinities included, is within the bound. Non-finite terms (absprod inf) leave only the
// reference's own IEEE value, or NaN besides when the finite terms can overflow; a NaN where the
// reference is finite is a violation.
TEST(Bounds, OverflowingTermsAndNonFiniteValues) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  const double big = 0x1p127;
  const Interval whole = accumulator_interval(0.0, 3 * big, 3);  // 2^127 + 2^127 - 2^127, say
  EXPECT_TRUE(whole.nan_ok && whole.lo == -inf && whole.hi == inf);
  for (double v : {nan, inf, -inf, 0.0, big})
    EXPECT_EQ(classify(v, {0.0, nan, whole}, Grid::kF32), v == 0.0 ? Class::kBitwiseEqual : Class::kWithinBound) << v;
  const Interval finite = accumulator_interval(1.0, 4.0, 4);
  EXPECT_FALSE(finite.nan_ok);
  EXPECT_EQ(classify(nan, {1.0, nan, finite}, Grid::kF32), Class::kBoundViolation);
  EXPECT_EQ(classify(inf, {1.0, nan, finite}, Grid::kF32), Class::kBoundViolation);
  const Interval ieee = accumulator_interval(nan, inf, 4);  // an operand is inf: NaN interval
  EXPECT_FALSE(ieee.nan_ok);
  EXPECT_EQ(classify(nan, {nan, nan, ieee}, Grid::kF32), Class::kBitwiseEqual);
  EXPECT_EQ(classify(1.0, {nan, nan, ieee}, Grid::kF32), Class::kBoundViolation);
  const Interval pinf = accumulator_interval(inf, inf, 4, 10.0);  // -inf/NaN impossible: strict
  EXPECT_EQ(classify(inf, {inf, nan, pinf}, Grid::kF32), Class::kBitwiseEqual);
  EXPECT_EQ(classify(-inf, {inf, nan, pinf}, Grid::kF32), Class::kBoundViolation);
  EXPECT_EQ(classify(nan, {inf, nan, pinf}, Grid::kF32), Class::kBoundViolation);
  // -inf plus finite products that overflow fp32 (to +inf in some order): -inf or NaN
  const Interval mixed = accumulator_interval(-inf, inf, 4, 2 * big);
  EXPECT_TRUE(mixed.nan_ok);
  EXPECT_EQ(classify(-inf, {-inf, nan, mixed}, Grid::kF32), Class::kBitwiseEqual);
  EXPECT_EQ(classify(nan, {-inf, nan, mixed}, Grid::kF32), Class::kWithinBound);
  EXPECT_EQ(classify(inf, {-inf, nan, mixed}, Grid::kF32), Class::kBoundViolation);
  EXPECT_EQ(classify(1.0, {-inf, nan, mixed}, Grid::kF32), Class::kBoundViolation);
}

// NaN against NaN and an infinity against the same infinity agree: bitwise equal, counted as
// nonfinite, out of the sums (rel_fro describes the finite elements). A non-finite value against
// anything else is a mismatch: counted, and the maxima show it.
TEST(ErrorStats, NonFiniteElements) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const std::vector<float> a{1.0f, nan, -nan, inf, -inf, 2.0f}, b{1.0f, nan, nan, inf, -inf, 2.5f};
  View va{a.data(), Storage::kF32, {6}, "fp32"}, vb{b.data(), Storage::kF32, {6}, "fp32"};
  const ErrorStats s = error_stats(va, vb, Grid::kF32);
  EXPECT_EQ(s.n, 6);
  EXPECT_EQ(s.nonfinite, 4);
  EXPECT_EQ(s.nonfinite_mismatch, 0);
  EXPECT_EQ(s.bitwise_equal, 5);
  EXPECT_EQ(s.max_abs, 0.5);
  EXPECT_EQ(s.max_rel, 0.2);
  EXPECT_EQ(s.mean_abs, 0.25);  // over the two finite pairs
  EXPECT_NEAR(s.rel_fro, 0.5 / std::sqrt(1.0 + 6.25), 1e-15);
  EXPECT_EQ(s.ulps.le0, 5);
  // mismatches: NaN where b is finite, finite where b is NaN, inf against -inf, inf against a number
  const std::vector<float> c{nan, 3.0f, inf, inf, 2.0f, 1.0f}, d{1.0f, nan, -inf, 5.0f, 2.0f, 1.0f};
  View vc{c.data(), Storage::kF32, {6}, "fp32"}, vd{d.data(), Storage::kF32, {6}, "fp32"};
  const ErrorStats m = error_stats(vc, vd, Grid::kF32);
  EXPECT_EQ(m.nonfinite, 0);
  EXPECT_EQ(m.nonfinite_mismatch, 4);
  EXPECT_EQ(m.bitwise_equal, 2);
  EXPECT_TRUE(std::isnan(m.max_abs));
  EXPECT_EQ(m.ulps.gt2, 4);
  EXPECT_EQ(m.rel_fro, 0.0);  // the finite pairs agree
}

}  // namespace
}  // namespace moenum::verify
