// Routing: skew models, Gumbel-top-k, score functions, counts kind (numerics.md §2).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <string>

#include "moenum/error.h"
#include "moenum/routing.h"

namespace moenum {
namespace {

Scenario make_scenario(int64_t T, int64_t E, int64_t k, uint64_t seed = 7) {
  Scenario sc;
  sc.name = "routing-test";
  sc.seed = seed;
  sc.tokens = T;
  sc.model.experts = E;
  sc.model.topk = k;
  return sc;
}

double sum_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

void expect_config_error(const Scenario& sc, const std::string& needle) {
  try {
    route(sc);
    FAIL() << "expected ConfigError mentioning " << needle;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Routing, SameSeedSameRouting) {
  Scenario sc = make_scenario(256, 16, 4);
  sc.routing.skew.kind = "zipf";
  sc.routing.skew.s = 1.0;
  const Routing a = route(sc), b = route(sc);
  EXPECT_EQ(a.topk_idx, b.topk_idx);
  EXPECT_EQ(a.probs, b.probs);
  EXPECT_EQ(a.tokens_per_expert, b.tokens_per_expert);
  EXPECT_EQ(a.popularity, b.popularity);

  sc.seed = 8;
  EXPECT_NE(route(sc).topk_idx, a.topk_idx);
}

// Nothing outside the routing, model sizes and seed changes the routing.
TEST(Routing, IndependentOfDispatchRecipeAndShapes) {
  Scenario sc = make_scenario(128, 8, 2);
  const Routing a = route(sc);
  sc.dispatch.ep = 4;
  sc.dispatch.padding = "router";
  sc.dispatch.align = 32;
  sc.recipe.name = "mxfp8";
  sc.model.hidden = 512;
  sc.model.ffn = 128;
  sc.name = "other";
  const Routing b = route(sc);
  EXPECT_EQ(a.topk_idx, b.topk_idx);
  EXPECT_EQ(a.probs, b.probs);
}

// Token t's routing depends on t only, not on how many tokens follow it.
TEST(Routing, TokenPrefixStable) {
  const Routing a = route(make_scenario(64, 8, 2)), b = route(make_scenario(128, 8, 2));
  EXPECT_TRUE(std::equal(a.topk_idx.begin(), a.topk_idx.end(), b.topk_idx.begin()));
  EXPECT_TRUE(std::equal(a.probs.begin(), a.probs.end(), b.probs.begin()));
}

TEST(Routing, ShapesAndDistinctExperts) {
  const Routing r = route(make_scenario(100, 12, 3));
  ASSERT_EQ(r.topk_idx.size(), 300u);
  ASSERT_EQ(r.probs.size(), 300u);
  ASSERT_EQ(r.tokens_per_expert.size(), 12u);
  EXPECT_EQ(std::accumulate(r.tokens_per_expert.begin(), r.tokens_per_expert.end(), int64_t(0)), 300);
  for (int64_t t = 0; t < r.T; ++t) {
    std::set<int32_t> s(r.topk_idx.begin() + t * 3, r.topk_idx.begin() + t * 3 + 3);
    EXPECT_EQ(s.size(), 3u) << "token " << t;
    for (int32_t e : s) EXPECT_TRUE(e >= 0 && e < 12);
    EXPECT_GE(r.probs[t * 3], r.probs[t * 3 + 1]);  // slots in descending score order
    EXPECT_GE(r.probs[t * 3 + 1], r.probs[t * 3 + 2]);
  }
}

TEST(Routing, UniformZipfHotPopularityValues) {
  Scenario sc = make_scenario(8, 4, 1);
  for (double p : skew_popularity(sc)) EXPECT_DOUBLE_EQ(p, 0.25);

  sc.routing.skew.kind = "zipf";
  sc.routing.skew.s = 1.0;  // 1, 1/2, 1/3, 1/4 over 25/12
  const auto z = skew_popularity(sc);
  const double expect[] = {12.0 / 25, 6.0 / 25, 4.0 / 25, 3.0 / 25};
  for (int e = 0; e < 4; ++e) EXPECT_NEAR(z[e], expect[e], 1e-15);

  sc.routing.skew.kind = "hot";
  sc.routing.skew.hot_experts = 1;
  sc.routing.skew.hot_share = 0.7;
  const auto h = skew_popularity(sc);
  EXPECT_NEAR(h[0], 0.7, 1e-15);
  for (int e = 1; e < 4; ++e) EXPECT_NEAR(h[e], 0.1, 1e-15);
}

TEST(Routing, ZipfCountsDecreaseForLargeT) {
  Scenario sc = make_scenario(20000, 8, 2);
  sc.routing.skew.kind = "zipf";
  sc.routing.skew.s = 1.2;
  const Routing r = route(sc);
  for (int e = 0; e + 1 < 8; ++e)
    EXPECT_GT(r.tokens_per_expert[e], r.tokens_per_expert[e + 1]) << "expert " << e;
}

// With k = 1 Gumbel-top-1 samples exactly in proportion to the popularity.
TEST(Routing, HotExpertsGetTheirShare) {
  Scenario sc = make_scenario(20000, 8, 1);
  sc.routing.skew.kind = "hot";
  sc.routing.skew.hot_experts = 2;
  sc.routing.skew.hot_share = 0.7;
  const Routing r = route(sc);
  const double hot = double(r.tokens_per_expert[0] + r.tokens_per_expert[1]) / 20000.0;
  EXPECT_NEAR(hot, 0.7, 0.02);
  EXPECT_NEAR(double(r.tokens_per_expert[0]) / 20000.0, 0.35, 0.02);
}

TEST(Routing, DirichletIsDeterministicAndNormalised) {
  Scenario sc = make_scenario(16, 32, 2);
  sc.routing.skew.kind = "dirichlet";
  for (double alpha : {0.05, 0.5, 1.0, 3.0}) {
    sc.routing.skew.alpha = alpha;
    const auto a = skew_popularity(sc), b = skew_popularity(sc);
    EXPECT_EQ(a, b);
    EXPECT_NEAR(sum_of(a), 1.0, 1e-12) << "alpha " << alpha;
    for (double p : a) EXPECT_TRUE(std::isfinite(p) && p >= 0.0);
    sc.seed += 1;
    EXPECT_NE(skew_popularity(sc), a) << "alpha " << alpha;
    sc.seed -= 1;
  }
  // Smaller alpha concentrates the mass.
  sc.routing.skew.alpha = 0.05;
  const auto sparse = skew_popularity(sc);
  sc.routing.skew.alpha = 100.0;
  const auto flat = skew_popularity(sc);
  EXPECT_GT(*std::max_element(sparse.begin(), sparse.end()), *std::max_element(flat.begin(), flat.end()));
  EXPECT_LT(*std::max_element(flat.begin(), flat.end()), 2.0 / 32);
}

// Each expert's popularity depends on (seed, expert) only: more experts keep the earlier draws'
// ratios.
TEST(Routing, DirichletDrawsDependOnExpertOnly) {
  Scenario a = make_scenario(16, 8, 2), b = make_scenario(16, 16, 2);
  a.routing.skew.kind = b.routing.skew.kind = "dirichlet";
  a.routing.skew.alpha = b.routing.skew.alpha = 0.7;
  const auto pa = skew_popularity(a), pb = skew_popularity(b);
  for (int e = 1; e < 8; ++e) EXPECT_NEAR(pa[e] / pa[0], pb[e] / pb[0], 1e-9 * pa[e] / pa[0]);
}

TEST(Routing, SoftmaxProbsSumToTopkScaling) {
  for (double scaling : {1.0, 2.5}) {
    Scenario sc = make_scenario(200, 16, 4);
    sc.routing.topk_scaling = scaling;
    const Routing r = route(sc);
    for (int64_t t = 0; t < r.T; ++t) {
      float s = 0.0f;
      for (int j = 0; j < 4; ++j) s += r.probs[t * 4 + j];
      EXPECT_NEAR(s, scaling, 1e-6 * scaling) << "token " << t;
    }
  }
}

TEST(Routing, SigmoidNormalisedOverK) {
  Scenario sc = make_scenario(200, 16, 4);
  sc.routing.score = "sigmoid";
  const Routing r = route(sc);
  for (int64_t t = 0; t < r.T; ++t) {
    float s = 0.0f;
    for (int j = 0; j < 4; ++j) s += r.probs[t * 4 + j];
    EXPECT_NEAR(s, 1.0f, 1e-6) << "token " << t;
  }
  // k = 1: the plain sigmoid, not normalised to 1.
  sc.model.topk = 1;
  const Routing r1 = route(sc);
  for (float p : r1.probs) EXPECT_TRUE(p > 0.0f && p < 1.0f);
}

// softmax_pre: the same experts as softmax (monotone), probs of the softmax over all E.
TEST(Routing, SoftmaxPreIsNotRenormalised) {
  Scenario sc = make_scenario(200, 16, 2);
  const Routing soft = route(sc);
  sc.routing.score = "softmax_pre";
  const Routing pre = route(sc);
  EXPECT_EQ(soft.topk_idx, pre.topk_idx);
  for (int64_t t = 0; t < pre.T; ++t) {
    const float s = pre.probs[t * 2] + pre.probs[t * 2 + 1];
    EXPECT_LT(s, 1.0f);
    EXPECT_GT(pre.probs[t * 2 + 1], 0.0f);
    // ratio of two softmax entries is exp of the logit gap, the same under both functions
    EXPECT_NEAR(pre.probs[t * 2] / pre.probs[t * 2 + 1], soft.probs[t * 2] / soft.probs[t * 2 + 1],
                1e-4 * soft.probs[t * 2] / soft.probs[t * 2 + 1]);
  }
}

TEST(Routing, TopkTiesBreakToLowerId) {
  EXPECT_EQ(topk_lower_id({1.f, 3.f, 3.f, 2.f, 3.f}, 3), (std::vector<int32_t>{1, 2, 4}));
  EXPECT_EQ(topk_lower_id({1.f, 3.f, 3.f, 2.f, 3.f}, 4), (std::vector<int32_t>{1, 2, 4, 3}));
  EXPECT_EQ(topk_lower_id({5.f, 5.f, 5.f}, 2), (std::vector<int32_t>{0, 1}));
  const float ninf = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(topk_lower_id({ninf, ninf, 0.f, ninf}, 3), (std::vector<int32_t>{2, 0, 1}));
}

// End to end: experts with zero popularity have logit -inf and tie; the lowest ids win.
TEST(Routing, ZeroPopularityTiesBreakToLowerId) {
  Scenario sc = make_scenario(50, 8, 3);
  sc.routing.skew.kind = "hot";
  sc.routing.skew.hot_experts = 1;
  sc.routing.skew.hot_share = 1.0;
  const Routing r = route(sc);
  for (int64_t t = 0; t < r.T; ++t) {
    EXPECT_EQ(r.topk_idx[t * 3], 0);
    EXPECT_EQ(r.topk_idx[t * 3 + 1], 1);
    EXPECT_EQ(r.topk_idx[t * 3 + 2], 2);
    EXPECT_EQ(r.probs[t * 3], 1.0f);
    EXPECT_EQ(r.probs[t * 3 + 1], 0.0f);
    EXPECT_EQ(r.probs[t * 3 + 2], 0.0f);
  }
}

TEST(Routing, PermuteExpertsShufflesPopularity) {
  Scenario sc = make_scenario(64, 16, 2);
  sc.routing.skew.kind = "zipf";
  sc.routing.skew.s = 1.0;
  const Routing plain = route(sc);
  EXPECT_EQ(plain.popularity, skew_popularity(sc));
  sc.routing.permute_experts = true;
  const Routing perm = route(sc);
  EXPECT_NE(perm.popularity, plain.popularity);
  auto a = plain.popularity, b = perm.popularity;
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(route(sc).topk_idx, perm.topk_idx);  // still deterministic
}

TEST(Routing, CountsKindReproducesExactCounts) {
  Scenario sc = make_scenario(10, 6, 3);
  sc.routing.skew.kind = "counts";
  sc.routing.skew.counts = {10, 0, 1, 9, 4, 6};  // a full, an empty and a one-token expert
  for (const char* score : {"softmax", "softmax_pre", "sigmoid"}) {
    sc.routing.score = score;
    const Routing r = route(sc);
    EXPECT_EQ(r.tokens_per_expert, sc.routing.skew.counts) << score;
    for (int64_t t = 0; t < r.T; ++t) {
      std::set<int32_t> s(r.topk_idx.begin() + t * 3, r.topk_idx.begin() + t * 3 + 3);
      EXPECT_EQ(s.size(), 3u) << score << " token " << t;
      EXPECT_TRUE(s.count(0)) << "the full expert takes every token";
      EXPECT_GE(r.probs[t * 3], r.probs[t * 3 + 1]);
      EXPECT_GE(r.probs[t * 3 + 1], r.probs[t * 3 + 2]);
    }
    EXPECT_NEAR(sum_of(r.popularity), 1.0, 1e-15);
    EXPECT_DOUBLE_EQ(r.popularity[0], 10.0 / 30.0);
  }
}

// The one-token expert lands on a token chosen by the shuffle, which depends on the seed.
TEST(Routing, CountsKindShuffleDependsOnSeed) {
  Scenario sc = make_scenario(32, 4, 2);
  sc.routing.skew.kind = "counts";
  sc.routing.skew.counts = {32, 1, 15, 16};
  const Routing a = route(sc);
  sc.seed += 1;
  const Routing b = route(sc);
  EXPECT_EQ(a.tokens_per_expert, b.tokens_per_expert);
  EXPECT_NE(a.topk_idx, b.topk_idx);
}

TEST(Routing, CountsKindWithPermutationMovesCounts) {
  Scenario sc = make_scenario(16, 8, 2);
  sc.routing.skew.kind = "counts";
  sc.routing.skew.counts = {16, 8, 4, 2, 1, 1, 0, 0};
  sc.routing.permute_experts = true;
  const Routing r = route(sc);
  for (int e = 0; e < 8; ++e) EXPECT_DOUBLE_EQ(r.popularity[e], double(r.tokens_per_expert[e]) / 32.0);
  auto sorted = r.tokens_per_expert;
  std::sort(sorted.rbegin(), sorted.rend());
  EXPECT_EQ(sorted, sc.routing.skew.counts);
}

TEST(Routing, CountsKindRejectsInvalidCounts) {
  Scenario sc = make_scenario(4, 3, 2);
  sc.routing.skew.kind = "counts";
  sc.routing.skew.counts = {4, 4};
  expect_config_error(sc, "routing.skew.counts");
  sc.routing.skew.counts = {4, 3, 0};  // sum 7 != 8
  expect_config_error(sc, "routing.skew.counts");
  sc.routing.skew.counts = {5, 3, 0};  // 5 > tokens
  expect_config_error(sc, "routing.skew.counts");
  sc.routing.skew.counts = {6, 3, -1};
  expect_config_error(sc, "routing.skew.counts");
}

TEST(Routing, UnknownNamesAreConfigErrors) {
  Scenario sc = make_scenario(4, 4, 1);
  sc.routing.skew.kind = "pareto";
  expect_config_error(sc, "routing.skew.kind");
  sc.routing.skew.kind = "uniform";
  sc.routing.score = "relu";
  expect_config_error(sc, "routing.score");
  sc.routing.score = "softmax";
  sc.routing.skew.kind = "dirichlet";
  sc.routing.skew.alpha = 0.0;
  expect_config_error(sc, "routing.skew.alpha");
}

}  // namespace
}  // namespace moenum
