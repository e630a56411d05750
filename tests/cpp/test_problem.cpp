// Input generation (core/src/problem.cpp): the bits of every input tensor are pinned, so that a
// change of the generator (its loops, threads, storage) cannot silently change the inputs of every
// results file made before it.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <string>
#include <tuple>

#include "moenum/bf16.h"
#include "moenum/problem.h"
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
