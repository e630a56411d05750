// Dispatch plan (numerics.md §3): hand-worked examples with the rows written out, then invariances.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "moenum/dispatch_plan.h"
#include "moenum/error.h"

namespace moenum {
namespace {

// 8 tokens, 4 experts, top-2. Rank 0 holds tokens 0-3 and experts 0,1; rank 1 tokens 4-7, experts 2,3.
//   t0: 0 2   t1: 1 0   t2: 2 3   t3: 0 1   t4: 3 0   t5: 0 2   t6: 1 3   t7: 2 0
//   expert 0 <- 0 1 3 4 5 7 (6), expert 1 <- 1 3 6 (3), expert 2 <- 0 2 5 7 (4), expert 3 <- 2 4 6 (3)
Routing hand_routing() {
  Routing r;
  r.T = 8;
  r.E = 4;
  r.k = 2;
  r.topk_idx = {0, 2, 1, 0, 2, 3, 0, 1, 3, 0, 0, 2, 1, 3, 2, 0};
  r.probs = {.9f, .1f, .8f, .2f, .7f, .3f, .6f, .4f, .55f, .45f, .65f, .35f, .85f, .15f, .95f, .05f};
  r.tokens_per_expert = {6, 3, 4, 3};
  r.popularity = {.375, .1875, .25, .1875};
  return r;
}

// 8 tokens, 4 experts, top-1: t0 0, t1 2, t2 0, t3 1, t4 3, t5 2, t6 0, t7 1.
//   expert 0 <- 0 2 6, expert 1 <- 3 7, expert 2 <- 1 5, expert 3 <- 4
Routing top1_routing() {
  Routing r;
  r.T = 8;
  r.E = 4;
  r.k = 1;
  r.topk_idx = {0, 2, 0, 1, 3, 2, 0, 1};
  r.probs = {1, 1, 1, 1, 1, 1, 1, 1};
  r.tokens_per_expert = {3, 2, 2, 1};
  return r;
}

Scenario plan_scenario(const std::string& padding, int64_t align, int64_t ep = 2) {
  Scenario sc;
  sc.name = "plan-test";
  sc.tokens = 8;
  sc.model.experts = 4;
  sc.model.topk = 2;
  sc.dispatch.ep = ep;
  sc.dispatch.padding = padding;
  sc.dispatch.align = align;
  return sc;
}

struct Expected {
  std::vector<int64_t> token;
  std::vector<int32_t> expert;
  std::vector<int32_t> slot;
  std::vector<float> prob;
  std::vector<int64_t> tokens_per_expert;
  std::vector<int64_t> offset;
};

void expect_rank(const RankPlan& got, const Expected& want, const std::string& what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(got.row_token, want.token);
  EXPECT_EQ(got.row_expert, want.expert);
  EXPECT_EQ(got.row_slot, want.slot);
  EXPECT_EQ(got.row_prob, want.prob);
  EXPECT_EQ(got.tokens_per_expert, want.tokens_per_expert);
  EXPECT_EQ(got.segment_offset, want.offset);
}

// ---- the zero-padding family: none, module, hybridep ---------------------------------------------

TEST(DispatchPlan, NoPaddingEp2) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("none", 0), hand_routing());
  EXPECT_EQ(plan.ep, 2);
  EXPECT_EQ(plan.experts_per_rank, 2);
  EXPECT_EQ(plan.padding, "none");
  ASSERT_EQ(plan.ranks.size(), 2u);
  EXPECT_TRUE(plan.warnings.empty());
  expect_rank(plan.ranks[0],
              {{0, 1, 3, 4, 5, 7, 1, 3, 6},
               {0, 0, 0, 0, 0, 0, 1, 1, 1},
               {0, 1, 0, 1, 0, 1, 0, 1, 0},
               {.9f, .2f, .6f, .45f, .65f, .05f, .8f, .4f, .85f},
               {6, 3},
               {0, 6, 9}},
              "rank 0");
  expect_rank(plan.ranks[1],
              {{0, 2, 5, 7, 2, 4, 6},
               {2, 2, 2, 2, 3, 3, 3},
               {1, 0, 1, 0, 1, 0, 1},
               {.1f, .7f, .35f, .95f, .3f, .55f, .15f},
               {4, 3},
               {0, 4, 7}},
              "rank 1");
}

// padding none ignores align: natural lengths.
TEST(DispatchPlan, NoPaddingIgnoresAlign) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("none", 4), hand_routing());
  EXPECT_EQ(plan.ranks[0].tokens_per_expert, (std::vector<int64_t>{6, 3}));
  EXPECT_EQ(plan.ranks[1].tokens_per_expert, (std::vector<int64_t>{4, 3}));
}

TEST(DispatchPlan, NoPaddingEp1) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("none", 0, 1), hand_routing());
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.experts_per_rank, 4);
  EXPECT_EQ(plan.ranks[0].row_token, (std::vector<int64_t>{0, 1, 3, 4, 5, 7, 1, 3, 6, 0, 2, 5, 7, 2, 4, 6}));
  EXPECT_EQ(plan.ranks[0].segment_offset, (std::vector<int64_t>{0, 6, 9, 13, 16}));
}

const Expected kModuleRank0 = {{0, 1, 3, 4, 5, 7, -1, -1, 1, 3, 6, -1},
                               {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1},
                               {0, 1, 0, 1, 0, 1, -1, -1, 0, 1, 0, -1},
                               {.9f, .2f, .6f, .45f, .65f, .05f, 0, 0, .8f, .4f, .85f, 0},
                               {8, 4},
                               {0, 8, 12}};
const Expected kModuleRank1 = {{0, 2, 5, 7, 2, 4, 6, -1},
                               {2, 2, 2, 2, 3, 3, 3, 3},
                               {1, 0, 1, 0, 1, 0, 1, -1},
                               {.1f, .7f, .35f, .95f, .3f, .55f, .15f, 0},
                               {4, 4},
                               {0, 4, 8}};

TEST(DispatchPlan, ModulePaddingEp2Align4) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("module", 4), hand_routing());
  EXPECT_EQ(plan.align, 4);
  expect_rank(plan.ranks[0], kModuleRank0, "rank 0");
  expect_rank(plan.ranks[1], kModuleRank1, "rank 1");
  EXPECT_FALSE(plan.ranks[0].fell_back_to_module);
}

TEST(DispatchPlan, HybridEpPaddingEp2Align4) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("hybridep", 4), hand_routing());
  EXPECT_EQ(plan.padding, "hybridep");
  expect_rank(plan.ranks[0], kModuleRank0, "rank 0");
  expect_rank(plan.ranks[1], kModuleRank1, "rank 1");
}

// ---- router: pad_routing_map on each source rank ------------------------------------------------

// align 4 with 4 tokens per source rank: every non-empty (source, expert) chunk takes all 4 tokens.
TEST(DispatchPlan, RouterPaddingEp2Align4) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("router", 4), hand_routing());
  EXPECT_TRUE(plan.warnings.empty());
  expect_rank(plan.ranks[0],
              {{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7},
               {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1},
               {0, 1, -1, 0, 1, 0, -1, 1, -1, 0, -1, 1, -1, -1, 0, -1},
               {.9f, .2f, 0, .6f, .45f, .65f, 0, .05f, 0, .8f, 0, .4f, 0, 0, .85f, 0},
               {8, 8},
               {0, 8, 16}},
              "rank 0");
  expect_rank(plan.ranks[1],
              {{0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7},
               {2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
               {1, -1, 0, -1, -1, 1, -1, 0, -1, -1, 1, -1, 0, -1, 1, -1},
               {.1f, 0, .7f, 0, 0, .35f, 0, .95f, 0, 0, .3f, 0, .55f, 0, .15f, 0},
               {8, 8},
               {0, 8, 16}},
              "rank 1");
}

// align 2: padded tokens interleave in token order with the routed ones.
//   source 0: e0 3 -> +t2, e1 2, e2 2, e3 1 -> +t0;  source 1: e0 3 -> +t6, e1 1 -> +t4, e2 2, e3 2
TEST(DispatchPlan, RouterPaddingEp2Align2) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("router", 2), hand_routing());
  expect_rank(plan.ranks[0],
              {{0, 1, 2, 3, 4, 5, 6, 7, 1, 3, 4, 6},
               {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1},
               {0, 1, -1, 0, 1, 0, -1, 1, 0, 1, -1, 0},
               {.9f, .2f, 0, .6f, .45f, .65f, 0, .05f, .8f, .4f, 0, .85f},
               {8, 4},
               {0, 8, 12}},
              "rank 0");
  expect_rank(plan.ranks[1],
              {{0, 2, 5, 7, 0, 2, 4, 6},
               {2, 2, 2, 2, 3, 3, 3, 3},
               {1, 0, 1, 0, -1, 1, 0, 1},
               {.1f, .7f, .35f, .95f, 0, .3f, .55f, .15f},
               {4, 4},
               {0, 4, 8}},
              "rank 1");
}

// An empty (source, expert) chunk stays empty; a one-token chunk takes the first unrouted token of
// its own source rank.
//   source 0: e0 {0,2}, e1 {3} -> +t0, e2 {1} -> +t0, e3 {};  source 1: e0 {6} -> +t4, e1 {7} -> +t4,
//   e2 {5} -> +t4, e3 {4} -> +t5
TEST(DispatchPlan, RouterPaddingTop1Align2) {
  Scenario sc = plan_scenario("router", 2);
  sc.model.topk = 1;
  const DispatchPlan plan = plan_dispatch(sc, top1_routing());
  expect_rank(plan.ranks[0],
              {{0, 2, 4, 6, 0, 3, 4, 7},
               {0, 0, 0, 0, 1, 1, 1, 1},
               {0, 0, -1, 0, -1, 0, -1, 0},
               {1, 1, 0, 1, 0, 1, 0, 1},
               {4, 4},
               {0, 4, 8}},
              "rank 0");
  expect_rank(plan.ranks[1],
              {{0, 1, 4, 5, 4, 5},
               {2, 2, 2, 2, 3, 3},
               {-1, 0, -1, 0, 0, -1},
               {0, 1, 0, 1, 1, 0},
               {4, 2},
               {0, 4, 6}},
              "rank 1");
}

// align 8 needs up to 8 rows from a source rank that holds 4 tokens.
TEST(DispatchPlan, RouterPaddingTooFewTokensIsConfigError) {
  try {
    plan_dispatch(plan_scenario("router", 8), hand_routing());
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("dispatch.padding"), std::string::npos) << what;
    EXPECT_NE(what.find("plan-test"), std::string::npos) << what;
  }
}

// ---- router_post: pad_routing_map on each rank's received map --------------------------------------

// rank 0 received {0,1,3,4,5,6,7} (7): expert 0 needs 6 -> 8 > 7, the rank falls back to module.
// rank 1 received {0,2,4,5,6,7}: e2 4 (aligned), e3 3 -> +t0 (first received token not routed to e3).
TEST(DispatchPlan, RouterPostPaddingEp2Align4WithFallback) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("router_post", 4), hand_routing());
  EXPECT_TRUE(plan.ranks[0].fell_back_to_module);
  EXPECT_FALSE(plan.ranks[1].fell_back_to_module);
  ASSERT_EQ(plan.warnings.size(), 1u);
  EXPECT_NE(plan.warnings[0].find("rank 0"), std::string::npos) << plan.warnings[0];
  EXPECT_NE(plan.warnings[0].find("expert 0"), std::string::npos) << plan.warnings[0];
  expect_rank(plan.ranks[0], kModuleRank0, "rank 0 (fallback)");
  expect_rank(plan.ranks[1],
              {{0, 2, 5, 7, 0, 2, 4, 6},
               {2, 2, 2, 2, 3, 3, 3, 3},
               {1, 0, 1, 0, -1, 1, 0, 1},
               {.1f, .7f, .35f, .95f, 0, .3f, .55f, .15f},
               {4, 4},
               {0, 4, 8}},
              "rank 1");
}

TEST(DispatchPlan, RouterPostPaddingBothRanksFallBack) {
  const DispatchPlan plan = plan_dispatch(plan_scenario("router_post", 8), hand_routing());
  EXPECT_TRUE(plan.ranks[0].fell_back_to_module);
  EXPECT_TRUE(plan.ranks[1].fell_back_to_module);
  ASSERT_EQ(plan.warnings.size(), 2u);
  EXPECT_NE(plan.warnings[1].find("rank 1"), std::string::npos) << plan.warnings[1];
  EXPECT_NE(plan.warnings[1].find("expert 2"), std::string::npos) << plan.warnings[1];
  EXPECT_EQ(plan.ranks[1].row_token, (std::vector<int64_t>{0, 2, 5, 7, -1, -1, -1, -1, 2, 4, 6, -1, -1, -1, -1, -1}));
  EXPECT_EQ(plan.ranks[1].tokens_per_expert, (std::vector<int64_t>{8, 8}));
}

// Padding comes from the RECEIVED tokens: rank 1 received {1,4,5}, so e3 {4} takes t1 (not t0, which
// rank 1 never received, and not t5 as source-side router padding would). Rank 0 received
// {0,2,3,6,7}: e0 {0,2,6} takes t3.
TEST(DispatchPlan, RouterPostPaddingTop1Align2) {
  Scenario sc = plan_scenario("router_post", 2);
  sc.model.topk = 1;
  const DispatchPlan plan = plan_dispatch(sc, top1_routing());
  EXPECT_TRUE(plan.warnings.empty());
  expect_rank(plan.ranks[0],
              {{0, 2, 3, 6, 3, 7},
               {0, 0, 0, 0, 1, 1},
               {0, 0, -1, 0, 0, 0},
               {1, 1, 0, 1, 1, 1},
               {4, 2},
               {0, 4, 6}},
              "rank 0");
  expect_rank(plan.ranks[1],
              {{1, 5, 1, 4},
               {2, 2, 3, 3},
               {0, 0, -1, 0},
               {1, 1, 0, 1},
               {2, 2},
               {0, 2, 4}},
              "rank 1");
}

TEST(DispatchPlan, UnknownPaddingIsConfigError) {
  EXPECT_THROW(plan_dispatch(plan_scenario("sideways", 4), hand_routing()), ConfigError);
  EXPECT_THROW(plan_dispatch(plan_scenario("none", 0, 3), hand_routing()), ConfigError);
}

// ---- invariances on generated routings -------------------------------------------------------------

using RealRows = std::map<int32_t, std::vector<std::tuple<int64_t, int32_t, float>>>;

// Per expert, the sorted (token, slot, prob) of the rows that carry a routing prob (slot >= 0).
RealRows real_rows(const DispatchPlan& plan) {
  RealRows out;
  for (const RankPlan& r : plan.ranks)
    for (size_t i = 0; i < r.row_token.size(); ++i)
      if (r.row_slot[i] >= 0) out[r.row_expert[i]].emplace_back(r.row_token[i], r.row_slot[i], r.row_prob[i]);
  for (auto& [e, rows] : out) std::sort(rows.begin(), rows.end());
  return out;
}

// Structural checks every plan must pass, whatever its padding.
void check_plan(const DispatchPlan& plan, const Routing& routing, const std::string& what) {
  SCOPED_TRACE(what);
  const int64_t el = plan.experts_per_rank;
  for (size_t rank = 0; rank < plan.ranks.size(); ++rank) {
    const RankPlan& r = plan.ranks[rank];
    ASSERT_EQ(r.segment_offset.size(), size_t(el + 1));
    ASSERT_EQ(r.segment_offset.back(), int64_t(r.row_token.size()));
    for (int64_t le = 0; le < el; ++le) {
      const int32_t e = int32_t(rank * el + le);
      const int64_t lo = r.segment_offset[le], hi = r.segment_offset[le + 1];
      EXPECT_EQ(hi - lo, r.tokens_per_expert[le]);
      if (plan.padding != "none") EXPECT_EQ(r.tokens_per_expert[le] % plan.align, 0) << "expert " << e;
      bool zero_seen = false;
      int64_t last = -1;
      for (int64_t i = lo; i < hi; ++i) {
        EXPECT_EQ(r.row_expert[i], e);
        if (r.row_token[i] < 0) {  // zero rows only at the end
          zero_seen = true;
          EXPECT_EQ(r.row_slot[i], -1);
          EXPECT_EQ(r.row_prob[i], 0.0f);
          continue;
        }
        EXPECT_FALSE(zero_seen) << "real row after a zero row";
        EXPECT_GT(r.row_token[i], last) << "rows not in ascending token order";
        last = r.row_token[i];
        const int64_t t = r.row_token[i];
        if (r.row_slot[i] >= 0) {
          EXPECT_EQ(routing.topk_idx[t * routing.k + r.row_slot[i]], e);
        } else {  // router-padded real token: not routed to e, prob 0
          EXPECT_EQ(r.row_prob[i], 0.0f);
          for (int64_t s = 0; s < routing.k; ++s) EXPECT_NE(routing.topk_idx[t * routing.k + s], e);
        }
      }
    }
  }
}

Scenario generated(int64_t ep, const std::string& padding, int64_t align) {
  Scenario sc;
  sc.name = "plan-invariance";
  sc.seed = 99;
  sc.tokens = 64;
  sc.model.experts = 8;
  sc.model.topk = 2;
  sc.routing.skew.kind = "zipf";
  sc.routing.skew.s = 1.0;
  sc.dispatch.ep = ep;
  sc.dispatch.padding = padding;
  sc.dispatch.align = align;
  return sc;
}

TEST(DispatchPlan, RealRowsInvariantAcrossEpAndPadding) {
  const Routing routing = route(generated(1, "none", 0));
  const RealRows want = real_rows(plan_dispatch(generated(1, "none", 0), routing));
  int64_t total = 0;
  for (const auto& [e, rows] : want) {
    EXPECT_EQ(int64_t(rows.size()), routing.tokens_per_expert[e]);
    total += int64_t(rows.size());
  }
  EXPECT_EQ(total, 128);
  for (int64_t ep : {1, 2, 4})
    for (const char* padding : {"none", "router", "router_post", "module", "hybridep"}) {
      const Scenario sc = generated(ep, padding, 4);
      const DispatchPlan plan = plan_dispatch(sc, routing);
      const std::string what = "ep " + std::to_string(ep) + " padding " + padding;
      EXPECT_EQ(real_rows(plan), want) << what;
      check_plan(plan, routing, what);
    }
}

// With a wide align router_post falls back on some ranks; the real rows still do not change.
TEST(DispatchPlan, RealRowsInvariantUnderRouterPostFallback) {
  const Routing routing = route(generated(1, "none", 0));
  const RealRows want = real_rows(plan_dispatch(generated(1, "none", 0), routing));
  const DispatchPlan plan = plan_dispatch(generated(4, "router_post", 32), routing);
  EXPECT_FALSE(plan.warnings.empty());
  EXPECT_EQ(real_rows(plan), want);
  check_plan(plan, routing, "router_post align 32");
}

// dispatch.ranks: the simulated ranks' plans are the full run's, field by field; the others keep no rows.
TEST(DispatchPlan, RanksSubsetKeepsOnlyTheSimulatedRanksRows) {
  const Routing routing = route(generated(1, "none", 0));
  for (const auto& [padding, align] : std::vector<std::pair<std::string, int64_t>>{
           {"none", 0}, {"router", 4}, {"router_post", 4}, {"router_post", 32}, {"module", 4}, {"hybridep", 4}}) {
    Scenario sc = generated(4, padding, align);
    const DispatchPlan full = plan_dispatch(sc, routing);
    sc.dispatch.ranks = {3, 1};
    const DispatchPlan part = plan_dispatch(sc, routing);
    const std::string what = padding + " align " + std::to_string(align);
    SCOPED_TRACE(what);
    check_plan(part, routing, what);
    ASSERT_EQ(part.ranks.size(), 4u);
    for (int r = 0; r < 4; ++r) {
      const RankPlan &p = part.ranks[r], &f = full.ranks[r];
      EXPECT_TRUE(f.simulated);
      if (r == 1 || r == 3) {
        EXPECT_TRUE(p.simulated);
        EXPECT_EQ(p.row_token, f.row_token);
        EXPECT_EQ(p.row_expert, f.row_expert);
        EXPECT_EQ(p.row_slot, f.row_slot);
        EXPECT_EQ(p.row_prob, f.row_prob);
        EXPECT_EQ(p.tokens_per_expert, f.tokens_per_expert);
        EXPECT_EQ(p.segment_offset, f.segment_offset);
        EXPECT_EQ(p.fell_back_to_module, f.fell_back_to_module);
      } else {
        EXPECT_FALSE(p.simulated);
        EXPECT_TRUE(p.row_token.empty() && p.row_expert.empty() && p.row_slot.empty() && p.row_prob.empty());
        EXPECT_EQ(p.tokens_per_expert, std::vector<int64_t>(2, 0));
        EXPECT_EQ(p.segment_offset, std::vector<int64_t>(3, 0));
        EXPECT_FALSE(p.fell_back_to_module);
      }
    }
    // only the simulated ranks' warnings, as the full run words them
    std::vector<std::string> kept;
    for (const std::string& w : full.warnings)
      if (w.rfind("rank 1:", 0) == 0 || w.rfind("rank 3:", 0) == 0) kept.push_back(w);
    EXPECT_EQ(part.warnings, kept);
  }
}

TEST(DispatchPlan, BadRanksAreConfigErrors) {
  const Routing routing = route(generated(1, "none", 0));
  for (const std::vector<int64_t>& bad : {std::vector<int64_t>{4}, {-1}, {2, 2}}) {
    Scenario sc = generated(4, "none", 0);
    sc.dispatch.ranks = bad;
    EXPECT_THROW(plan_dispatch(sc, routing), ConfigError);
    EXPECT_THROW(validate(sc), ConfigError);
  }
}

}  // namespace
}  // namespace moenum
