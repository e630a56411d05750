// det_math.h: deterministic fp64 log/exp/cos(2 pi u) for input generation and routing. Accurate to a
// few ulp against libm, and the output bits are pinned, so a compiler or platform that changed them
// (and with them every generated input) fails here first.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "moenum/det_math.h"
#include "moenum/rng.h"

namespace {

double ulps(double a, double b) {
  if (a == b) return 0.0;
  return std::fabs(a - b) / (std::nextafter(std::fabs(b), INFINITY) - std::fabs(b));
}

uint64_t mix(uint64_t h, double v) {
  uint64_t u;
  std::memcpy(&u, &v, 8);
  return moenum::rng::splitmix64(h ^ u);
}

TEST(DetMath, CloseToLibm) {
  double worst_log = 0, worst_exp = 0, worst_cos = 0;
  for (uint64_t i = 0; i < 400000; ++i) {
    const double u = moenum::rng::uniform(7, 1, i);
    const double x = std::ldexp(u + 0.5, int(i % 400) - 200);
    worst_log = std::max(worst_log, ulps(moenum::det::log(x), std::log(x)));
    const double y = (u - 0.5) * 1400.0;
    worst_exp = std::max(worst_exp, ulps(moenum::det::exp(y), std::exp(y)));
    worst_cos = std::max(worst_cos, std::fabs(moenum::det::cos_2pi(u) - std::cos(6.283185307179586 * u)));
  }
  EXPECT_LE(worst_log, 4.0);
  EXPECT_LE(worst_exp, 2.0);
  EXPECT_LE(worst_cos, 2e-15);
}

TEST(DetMath, SpecialValues) {
  EXPECT_EQ(moenum::det::log(1.0), 0.0);
  EXPECT_EQ(moenum::det::log(0.0), -INFINITY);
  EXPECT_TRUE(std::isnan(moenum::det::log(-1.0)));
  EXPECT_NEAR(moenum::det::log(0x1p-1074), std::log(0x1p-1074), 1e-12);
  EXPECT_EQ(moenum::det::exp(0.0), 1.0);
  EXPECT_EQ(moenum::det::exp(-INFINITY), 0.0);
  EXPECT_EQ(moenum::det::exp(710.0), INFINITY);
  EXPECT_GT(moenum::det::exp(-740.0), 0.0);  // subnormal results survive
  EXPECT_EQ(moenum::det::cos_2pi(0.0), 1.0);
  EXPECT_EQ(moenum::det::cos_2pi(0.5), -1.0);
  EXPECT_EQ(moenum::det::pow(3.0, 0.0), 1.0);
  EXPECT_NEAR(moenum::det::pow(2.0, 10.0), 1024.0, 1e-12);
}

TEST(DetMath, OutputBitsArePinned) {
  uint64_t h = 0;
  for (uint64_t i = 0; i < 100000; ++i) {
    const double u = moenum::rng::uniform(11, 2, i);
    h = mix(h, moenum::det::log(u));
    h = mix(h, moenum::det::exp((u - 0.5) * 100.0));
    h = mix(h, moenum::det::cos_2pi(u));
  }
  EXPECT_EQ(h, 0x27ba98070eaece51ull) << std::hex << h;
}

// The batches are bitwise the scalar functions, whatever the batch's length and its mix of
// branches, special inputs included.
TEST(DetMath, BatchesAreBitwiseTheScalarFunctions) {
  using moenum::det::kBatch;
  const double specials[] = {0.0, -0.0, -1.0, INFINITY, -INFINITY, NAN, 0x1p-1074, 0x1p-1030, 1.0, 0.125, 0.25, 0.5};
  for (int len : {1, 7, kBatch - 1, kBatch}) {
    for (uint64_t round = 0; round < 40; ++round) {
      double x[kBatch], u[kBatch], lg[kBatch], cs[kBatch];
      for (int j = 0; j < len; ++j) {
        const double r = moenum::rng::uniform(13, round, uint64_t(j));
        x[j] = (j % 17 == 3) ? specials[(j + round) % std::size(specials)] : std::ldexp(r + 0.5, int(j % 300) - 150);
        u[j] = (j % 13 == 5) ? specials[(j + round) % std::size(specials)] : (r - 0.5) * double(1 + round % 9);
      }
      moenum::det::log_batch(x, lg, len);
      moenum::det::cos_2pi_batch(u, cs, len);
      for (int j = 0; j < len; ++j) {
        const double l = moenum::det::log(x[j]), c = moenum::det::cos_2pi(u[j]);
        EXPECT_EQ(std::memcmp(&lg[j], &l, 8), 0) << "log(" << x[j] << "): " << lg[j] << " vs " << l;
        if (!std::isnan(u[j]) && !std::isinf(u[j]))
          EXPECT_EQ(std::memcmp(&cs[j], &c, 8), 0) << "cos_2pi(" << u[j] << "): " << cs[j] << " vs " << c;
      }
    }
  }
}

}  // namespace
