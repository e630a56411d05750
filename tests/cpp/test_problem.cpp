// Input generation (core/src/problem.cpp): the bits of every input tensor are pinned, so that a
// change of the generator (its loops, threads, storage) cannot silently change the inputs of every
// results file made before it.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <cstdint>
#include <string>
#include <tuple>

#include "moenum/bf16.h"
#include "moenum/error.h"
#include "moenum/problem.h"
#include "moenum/scenario.h"
#include "test_util.h"

using namespace moenum;

namespace {

// FNV-1a over the float32 bit patterns of the values, in flat order.
uint64_t fnv1a_f32(const Tensor& t) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const float v : t.f32()) {
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    for (int b = 0; b < 4; ++b) {
      h ^= (bits >> (8 * b)) & 0xFFu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

Scenario make_scenario(uint64_t seed, int64_t T, int64_t E, int64_t H, int64_t F, bool bias) {
  Scenario sc;
  sc.name = "problem-test";
  sc.seed = seed;
  sc.tokens = T;
  sc.model.experts = E;
  sc.model.hidden = H;
  sc.model.ffn = F;
  sc.model.bias = bias;
  return sc;
}

// The expected hashes must never change: results files made earlier hold these inputs.
struct Pinned {
  const char* name;
  Scenario sc;
  uint64_t x, w1, b1, w2, b2, dy;
};

std::vector<Pinned> pinned() {
  Scenario regimes = make_scenario(1234, 48, 4, 64, 32, true);
  regimes.inputs["x"] = {"uniform", 1.0, 0.05, 16.0};
  regimes.inputs["w1"] = {"uniform", 0.5, 0.0, 1.0};
  regimes.inputs["w2"] = {"normal", 1.0, 0.1, 8.0};
  regimes.inputs["dy"] = {"normal", 1e-3, 0.0, 1.0};
  return {
      {"bias", make_scenario(7, 64, 4, 64, 32, true),
       0x2a77562f80529657ull, 0xc04f4cc5202cdbcaull, 0xd3061e79a02b9583ull, 0xaac1401e0ce715cbull,
       0x272b31d12427eb28ull, 0x0a7ce3d0167f0475ull},
      {"no_bias", make_scenario(11, 32, 8, 32, 64, false),
       0xa94e3e6d3362c1f5ull, 0xa09c39eb8a3266b4ull, 0xb93a0c83ce3b6325ull, 0xb6010bfea0800f73ull,
       0x51d88627df287325ull, 0xac2ff677a4db4c53ull},
      {"uniform_outliers", regimes,
       0xa9c170329053ddbaull, 0x817117823f3eff41ull, 0x3b752891c14f1e61ull, 0x7d3e48ddfb88cc2dull,
       0x81f2d6b9b0d73d8full, 0x0f4f057e48d477b7ull},
  };
}

}  // namespace

TEST(Problem, InputBitsArePinned) {
  for (const Pinned& p : pinned()) {
    const Problem prob = generate_problem(p.sc);
    EXPECT_EQ(fnv1a_f32(prob.x), p.x) << p.name << " x";
    EXPECT_EQ(fnv1a_f32(prob.w1), p.w1) << p.name << " w1";
    EXPECT_EQ(fnv1a_f32(prob.b1), p.b1) << p.name << " b1";
    EXPECT_EQ(fnv1a_f32(prob.w2), p.w2) << p.name << " w2";
    EXPECT_EQ(fnv1a_f32(prob.b2), p.b2) << p.name << " b2";
    EXPECT_EQ(fnv1a_f32(prob.dy), p.dy) << p.name << " dy";
  }
}

TEST(Problem, ShapesAndBf16Values) {
  const Problem prob = generate_problem(make_scenario(3, 16, 4, 32, 16, false));
  EXPECT_EQ(prob.x.shape, (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(prob.w1.shape, (std::vector<int64_t>{4, 32, 32}));
  EXPECT_EQ(prob.w2.shape, (std::vector<int64_t>{4, 32, 16}));
  EXPECT_EQ(prob.b1.shape, (std::vector<int64_t>{4, 32}));
  EXPECT_EQ(prob.b2.shape, (std::vector<int64_t>{4, 32}));
  for (const Tensor* t : {&prob.x, &prob.w1, &prob.w2, &prob.dy}) {
    EXPECT_EQ(t->dtype, "bf16");
    EXPECT_EQ(t->storage(), Storage::kF32);
    for (const float v : t->f32()) ASSERT_EQ(v, round_bf16(v));
  }
  for (const Tensor* t : {&prob.b1, &prob.b2})
    for (const float v : t->f32()) ASSERT_EQ(v, 0.0f) << "no bias: zeros";
}

TEST(Problem, SameBitsWhateverTheThreadCount) {
  Scenario sc = make_scenario(99, 256, 8, 128, 64, true);
  sc.inputs["x"] = {"uniform", 2.0, 0.01, 32.0};
  sc.inputs["dy"].regime = "special";
  sc.inputs["dy"].special = {0.01, 0.01, 0.01, 0.01, 7.0, 0.01};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const Problem one = generate_problem(sc);
  omp_set_num_threads(std::max(4, saved));  // more threads than cores is fine: only the split changes
  const Problem many = generate_problem(sc);
  omp_set_num_threads(saved);
  for (auto [name, a, b] : {std::tuple{"x", &one.x, &many.x}, {"w1", &one.w1, &many.w1}, {"b1", &one.b1, &many.b1},
                            {"w2", &one.w2, &many.w2}, {"b2", &one.b2, &many.b2}, {"dy", &one.dy, &many.dy}})
    EXPECT_TRUE(moenum::testing::same_bits(*a, *b)) << name;
}

// The banded regimes: subnormal draws are bf16/fp32 subnormals (and not all zero), near_overflow
// draws finite values up to about 2^127; regime uniform is dist uniform.
TEST(Problem, RegimeBands) {
  Scenario sc = make_scenario(5, 256, 4, 64, 32, true);
  sc.inputs["x"].regime = "subnormal";
  sc.inputs["w1"].regime = "near_overflow";
  sc.inputs["dy"].regime = "uniform";
  const Problem p = generate_problem(sc);
  int64_t nonzero = 0;
  for (const float v : p.x.f32()) {
    ASSERT_LT(std::fabs(v), 0x1p-126f);
    nonzero += v != 0.0f;
  }
  EXPECT_GT(nonzero, p.x.size() * 9 / 10);
  float wmax = 0;
  for (const float v : p.w1.f32()) {
    ASSERT_TRUE(std::isfinite(v));
    wmax = std::max(wmax, std::fabs(v));
  }
  EXPECT_GT(wmax, 0x1p125f);
  Scenario u = make_scenario(5, 256, 4, 64, 32, true);
  u.inputs["dy"].dist = "uniform";
  EXPECT_TRUE(moenum::testing::same_bits(p.dy, generate_problem(u).dy));
  EXPECT_TRUE(moenum::testing::same_bits(p.w2, generate_problem(u).w2));  // other tensors: as before
}

// Regime special: each kind of special value at its stated fraction (within 5 binomial sigmas), the
// other elements exactly the normal regime's.
TEST(Problem, SpecialValuesAtStatedFractions) {
  Scenario sc = make_scenario(17, 1024, 4, 64, 32, true);
  InputRegime& r = sc.inputs["x"];
  r.regime = "special";
  r.special = {0.02, 0.03, 0.04, 0.05, -3.5, 0.06};
  const Problem sp = generate_problem(sc);
  const Problem plain = generate_problem(make_scenario(17, 1024, 4, 64, 32, true));
  const auto xs = sp.x.f32(), xp = plain.x.f32();
  int64_t nan = 0, pinf = 0, ninf = 0, sub = 0, huge = 0, value = 0, same = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const float v = xs[i];
    if (std::isnan(v)) ++nan;
    else if (std::isinf(v)) ++(v > 0 ? pinf : ninf);
    else if (v != 0.0f && std::fabs(v) < 0x1p-126f) ++sub;
    else if (std::fabs(v) >= 0x1p127f) ++huge;
    else if (v == -3.5f && xp[i] != -3.5f) ++value;
    else if (std::bit_cast<uint32_t>(v) == std::bit_cast<uint32_t>(xp[i])) ++same;
  }
  const double n = double(xs.size());
  auto near = [n](int64_t count, double f) { return std::fabs(count - f * n) <= 5 * std::sqrt(n * f * (1 - f)); };
  EXPECT_TRUE(near(nan, 0.02)) << nan;
  EXPECT_TRUE(near(pinf + ninf, 0.03)) << pinf + ninf;
  EXPECT_GT(pinf, 0);
  EXPECT_GT(ninf, 0);
  EXPECT_TRUE(near(sub, 0.04)) << sub;
  EXPECT_TRUE(near(huge, 0.05)) << huge;
  EXPECT_TRUE(near(value, 0.06)) << value;
  EXPECT_EQ(nan + pinf + ninf + sub + huge + value + same, int64_t(xs.size()));  // nothing else changed
  EXPECT_TRUE(moenum::testing::same_bits(sp.w1, plain.w1));
  // a stated non-finite or out-of-range value: NaN, and 1e39 -> +inf in bf16
  r.special = {0, 0, 0, 0, 1e39, 0.5};
  int64_t inf = 0;
  const Problem stated = generate_problem(sc);
  for (const float v : stated.x.f32()) inf += std::isinf(v) && v > 0;
  EXPECT_TRUE(near(inf, 0.5)) << inf;
}

TEST(Problem, RegimesAreValidated) {
  Scenario sc = make_scenario(1, 16, 4, 32, 16, true);
  sc.inputs["x"].regime = "lognormal";
  EXPECT_THROW(validate(sc), ConfigError);
  sc.inputs["x"] = {};
  sc.inputs["x"].scale = std::numeric_limits<double>::infinity();
  EXPECT_THROW(validate(sc), ConfigError);
  sc.inputs["x"] = {};
  sc.inputs["x"].regime = "special";
  sc.inputs["x"].special.nan = 0.7;
  sc.inputs["x"].special.inf = 0.4;
  EXPECT_THROW(validate(sc), ConfigError);
  sc.inputs["x"].special.inf = 0.2;
  EXPECT_NO_THROW(validate(sc));
}
