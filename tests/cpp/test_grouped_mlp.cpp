// The CPU layer (golden and reference recipes) and the shared fp32 activation code.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdio>

#include "grouped_mlp.h"
#include "moenum/activation.h"
#include "moenum/backend.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "test_util.h"

using namespace moenum;
using namespace moenum::reference;

namespace {

// ---- test problems ------------------------------------------------------------------------------

Scenario make_scenario(int64_t T, int64_t E, int64_t H, int64_t F, int64_t k, bool bias = true) {
  Scenario sc;
  sc.name = "test";
  sc.seed = 7;
  sc.tokens = T;
  sc.model.experts = E;
  sc.model.hidden = H;
  sc.model.ffn = F;
  sc.model.topk = k;
  sc.model.bias = bias;
  return sc;
}

// Routing built by hand: k distinct experts per token from a small LCG, probs in (0.05, 0.95).
Routing hand_routing(int64_t T, int64_t E, int64_t k, uint64_t seed) {
  Routing r;
  r.T = T, r.E = E, r.k = k;
  uint64_t s = seed;
  auto next = [&s] { return (s = s * 6364136223846793005ull + 1442695040888963407ull) >> 33; };
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> chosen;
    while (int64_t(chosen.size()) < k) {
      const int32_t e = int32_t(next() % E);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int64_t j = 0; j < k; ++j) {
      r.topk_idx.push_back(chosen[j]);
      r.probs.push_back(0.05f + 0.9f * float(next() % 1000) / 1000.0f);
    }
  }
  r.tokens_per_expert.assign(E, 0);
  for (int32_t e : r.topk_idx) ++r.tokens_per_expert[e];
  return r;
}

// A plan built by hand: EP ranks with contiguous token ranges; in each segment, per source rank, its
// routed tokens merged with (router_align) the first tokens of that rank not routed to the expert,
// as prob-0 rows; then (zero_align) zero rows at the end.
DispatchPlan hand_plan(const Routing& r, int64_t ep, int64_t router_align, int64_t zero_align) {
  DispatchPlan plan;
  plan.ep = ep;
  plan.experts_per_rank = r.E / ep;
  const int64_t Tr = r.T / ep;
  plan.ranks.resize(ep);
  for (int64_t rank = 0; rank < ep; ++rank) {
    RankPlan& rp = plan.ranks[rank];
    rp.segment_offset.push_back(0);
    for (int64_t le = 0; le < plan.experts_per_rank; ++le) {
      const int32_t e = int32_t(rank * plan.experts_per_rank + le);
      int64_t n_rows = 0;
      for (int64_t src = 0; src < ep; ++src) {
        std::vector<int32_t> slot(Tr, -1);
        int64_t count = 0;
        for (int64_t t = src * Tr; t < (src + 1) * Tr; ++t)
          for (int64_t j = 0; j < r.k; ++j)
            if (r.topk_idx[t * r.k + j] == e) slot[t - src * Tr] = int32_t(j), ++count;
        int64_t pad = router_align ? (router_align - count % router_align) % router_align : 0;
        for (int64_t i = 0; i < Tr; ++i) {
          const int64_t t = src * Tr + i;
          if (slot[i] < 0 && pad == 0) continue;
          if (slot[i] < 0) --pad;
          rp.row_token.push_back(t);
          rp.row_expert.push_back(e);
          rp.row_slot.push_back(slot[i]);
          rp.row_prob.push_back(slot[i] >= 0 ? r.probs[t * r.k + slot[i]] : 0.0f);
          ++n_rows;
        }
      }
      const int64_t zeros = zero_align ? (zero_align - n_rows % zero_align) % zero_align : 0;
      for (int64_t z = 0; z < zeros; ++z) {
        rp.row_token.push_back(-1);
        rp.row_expert.push_back(e);
        rp.row_slot.push_back(-1);
        rp.row_prob.push_back(0.0f);
      }
      rp.tokens_per_expert.push_back(n_rows + zeros);
      rp.segment_offset.push_back(rp.segment_offset.back() + n_rows + zeros);
    }
  }
  return plan;
}

int64_t count_pad_rows(const DispatchPlan& plan, bool zero) {
  int64_t n = 0;
  for (const auto& rp : plan.ranks)
    for (size_t i = 0; i < rp.row_token.size(); ++i)
      n += rp.row_slot[i] < 0 && ((rp.row_token[i] < 0) == zero);
  return n;
}

using moenum::testing::as_fp64;
using moenum::testing::doubles;
using moenum::testing::Prepared;
using moenum::testing::prepare;
using moenum::testing::rel_fro;
using moenum::testing::run_backend;

void expect_same_bits(const LayerResult& a, const LayerResult& b, const std::string& what) {
  ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what;
  for (const auto& [name, ta] : a.outputs) {
    const Tensor& tb = b.outputs.at(name);
    ASSERT_EQ(ta.shape, tb.shape) << what << " " << name;
    int64_t bad = 0;
    for (int64_t i = 0; i < ta.size(); ++i)
      if (std::bit_cast<uint64_t>(ta.get(i)) != std::bit_cast<uint64_t>(tb.get(i)) && bad++ < 3)
        ADD_FAILURE() << what << ": " << name << "[" << i << "] " << ta.get(i) << " vs " << tb.get(i);
    EXPECT_EQ(bad, 0) << what << ": " << name;
  }
}

double loss(const Tensor& y, const Tensor& dy) {
  double l = 0;
  for (int64_t i = 0; i < y.size(); ++i) l += y.get(i) * dy.get(i);
  return l;
}

float ulp_f32(double v) {
  const float f = std::fabs(float(v));
  return std::max(std::nextafter(f, INFINITY) - f, 0x1p-149f);
}

}  // namespace

// ---- activation ---------------------------------------------------------------------------------

TEST(Activation, ExpMatchesStdExpDenseSweep) {
  double max_ulp = 0;
  float worst = 0;
  int64_t n = 0;
  // every 61st fp32 bit pattern with x in [-104, 88.72], subnormal results included
  for (uint32_t u = 0; u < 0x42D00000u; u += 61)  // |x| < 104
    for (float x : {std::bit_cast<float>(u), -std::bit_cast<float>(u)}) {
      if (x > 88.72f) continue;
      const double ref = std::exp(double(x));
      const double err = std::fabs(double(exp_f32(x)) - ref) / ulp_f32(ref);
      if (err > max_ulp) max_ulp = err, worst = x;
      ++n;
    }
  std::printf("exp_f32: max error %.3f ulp at x = %a over %lld points\n", max_ulp, worst, (long long)n);
  EXPECT_LE(max_ulp, 2.0);
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-INFINITY), 0.0f);
  EXPECT_EQ(exp_f32(INFINITY), INFINITY);
  EXPECT_EQ(exp_f32(89.0f), INFINITY);
  EXPECT_TRUE(std::isnan(exp_f32(NAN)));
  EXPECT_EQ(exp_f32(-103.9f), 0x1p-149f);  // subnormal results round once
  EXPECT_EQ(exp_f32(-120.0f), 0.0f);
}

TEST(Activation, SiluAndDerivativeMatchFp64) {
  double max_rel = 0, max_abs_d = 0;
  for (double xd = -40.0; xd <= 40.0; xd += 1.0 / 1024) {
    const float x = float(xd);
    const double X = x, s = 1.0 / (1.0 + std::exp(-X));
    const double silu = X * s, dsilu = s * (1.0 + X * (1.0 - s));
    if (silu != 0) max_rel = std::max(max_rel, std::fabs(silu_f32(x) - silu) / ulp_f32(silu));
    max_abs_d = std::max(max_abs_d, std::fabs(dsilu_f32(x) - dsilu));
  }
  std::printf("silu_f32: max %.3f ulp; dsilu_f32: max abs error %.3g\n", max_rel, max_abs_d);
  EXPECT_LE(max_rel, 4.0);
  EXPECT_LE(max_abs_d, 1e-6);
  EXPECT_EQ(silu_f32(0.0f), 0.0f);
  EXPECT_EQ(dsilu_f32(0.0f), 0.5f);
  EXPECT_EQ(silu_f32(-200.0f), 0.0f);
}

// ---- golden vs finite differences -----------------------------------------------------------------

TEST(GroupedMlp, GoldenMatchesFiniteDifferences) {
  const int64_t T = 8, E = 4, H = 8, F = 8, k = 2;
  const Scenario sc = make_scenario(T, E, H, F, k);
  Problem prob = generate_problem(sc);
  for (Tensor* t : {&prob.x, &prob.w1, &prob.b1, &prob.w2, &prob.b2, &prob.dy}) *t = as_fp64(*t);
  const Routing routing = hand_routing(T, E, k, 11);
  // EP 2, router pad rows (align 3) and zero pad rows (align 4): every kind of row takes part.
  DispatchPlan plan = hand_plan(routing, 2, 3, 4);
  ASSERT_GT(count_pad_rows(plan, false), 0);
  ASSERT_GT(count_pad_rows(plan, true), 0);

  LayerOptions opt;
  const LayerResult an = grouped_mlp(GoldenPolicy{}, prob, plan, opt);
  LayerOptions fwd = opt;
  fwd.backward = false;
  auto L = [&] { return loss(grouped_mlp(GoldenPolicy{}, prob, plan, fwd).outputs.at("y"), prob.dy); };

  auto check = [&](Tensor& param, const std::string& grad_name) {
    const Tensor& grad = an.outputs.at(grad_name);
    ASSERT_EQ(grad.shape, param.shape) << grad_name;
    const double h = 1e-5;
    double worst = 0;
    for (int64_t i = 0; i < param.size(); ++i) {
      const double v = param.get(i);
      param.set(i, v + h);
      const double lp = L();
      param.set(i, v - h);
      const double lm = L();
      param.set(i, v);
      const double fd = (lp - lm) / (2 * h);
      worst = std::max(worst, std::fabs(fd - grad.get(i)) / (1.0 + std::fabs(grad.get(i))));
    }
    EXPECT_LT(worst, 1e-7) << grad_name;
  };
  check(prob.x, "dx");
  check(prob.w1, "dw1");
  check(prob.w2, "dw2");
  check(prob.b1, "db1");
  check(prob.b2, "db2");

  // probs: perturb the row_prob of each routed row. y is linear in p, so any step is exact up to
  // rounding; a power-of-two step keeps p +- h representable in fp32.
  const Tensor& dprobs = an.outputs.at("dprobs");
  int64_t checked = 0;
  for (auto& rp : plan.ranks)
    for (size_t i = 0; i < rp.row_token.size(); ++i) {
      if (rp.row_slot[i] < 0) continue;
      const float p = rp.row_prob[i], h = 0x1p-10f;
      rp.row_prob[i] = p + h;
      const double lp = L();
      rp.row_prob[i] = p - h;
      const double lm = L();
      rp.row_prob[i] = p;
      const double fd = (lp - lm) / (double(p + h) - double(p - h));
      const double g = dprobs.get(rp.row_token[i] * k + rp.row_slot[i]);
      EXPECT_NEAR(fd, g, 1e-9 * (1 + std::fabs(g))) << "token " << rp.row_token[i] << " slot " << rp.row_slot[i];
      ++checked;
    }
  EXPECT_EQ(checked, T * k);

  // without bias: no db outputs, and the rest still matches
  LayerOptions nb;
  nb.bias = false;
  const LayerResult r = grouped_mlp(GoldenPolicy{}, prob, plan, nb);
  EXPECT_FALSE(r.outputs.count("db1"));
  EXPECT_FALSE(r.outputs.count("db2"));
  EXPECT_TRUE(r.outputs.count("dw1"));
}

// ---- pad rows --------------------------------------------------------------------------------------

TEST(GroupedMlp, PadRowsContributeNothingToGolden) {
  const int64_t T = 32, E = 4, H = 16, F = 8, k = 2;
  const Scenario sc = make_scenario(T, E, H, F, k);
  const Problem prob = generate_problem(sc);
  const Routing routing = hand_routing(T, E, k, 5);
  const LayerResult base = grouped_mlp(GoldenPolicy{}, prob, hand_plan(routing, 1, 0, 0), {});
  // golden sums every output in row order: inserted zero terms leave each one bit-identical
  const std::vector<std::tuple<int, int, int>> variants = {{1, 0, 8}, {2, 0, 8}, {1, 4, 0}, {2, 4, 0}, {2, 3, 5}, {4, 2, 3}};
  for (auto [ep, ra, za] : variants) {
    const DispatchPlan plan = hand_plan(routing, ep, ra, za);
    expect_same_bits(grouped_mlp(GoldenPolicy{}, prob, plan, {}), base,
                     "ep " + std::to_string(ep) + " router align " + std::to_string(ra) + " zero align " +
                         std::to_string(za));
  }
}

// ---- reference recipes -------------------------------------------------------------------------

TEST(GroupedMlp, ReferenceCloseToGolden) {
  Scenario sc = make_scenario(128, 8, 64, 64, 2);
  const Problem prob = generate_problem(sc);
  const Routing routing = route(sc);
  const DispatchPlan plan = plan_dispatch(sc, routing);
  const LayerResult gold = grouped_mlp(GoldenPolicy{}, prob, plan, {});
  for (const std::string mode : {"separate", "epilogue"}) {
    LayerOptions opt;
    opt.bias_mode = mode;
    const LayerResult bf = grouped_mlp(Bf16Policy{}, prob, plan, opt);
    const LayerResult f32 = grouped_mlp(Fp32Policy{}, prob, plan, opt);
    ASSERT_EQ(bf.outputs.size(), 7u);
    for (const auto& [name, g] : gold.outputs) {
      const double e_bf = rel_fro(bf.outputs.at(name), g), e_32 = rel_fro(f32.outputs.at(name), g);
      std::printf("%-8s %-6s rel_fro bf16 %.3e  fp32 %.3e\n", mode.c_str(), name.c_str(), e_bf, e_32);
      EXPECT_LT(e_bf, 1e-2) << name;
      EXPECT_LT(e_32, 1e-5) << name;
    }
    EXPECT_EQ(bf.outputs.at("y").dtype, "bf16");
    EXPECT_EQ(bf.outputs.at("dw1").dtype, "fp32");
    EXPECT_EQ(bf.outputs.at("dprobs").dtype, "fp32");
    EXPECT_EQ(f32.outputs.at("y").dtype, "fp32");
    EXPECT_EQ(gold.outputs.at("y").dtype, "fp64");
    // every bf16 output value is a bf16 value
    for (float v : bf.outputs.at("y").f32()) EXPECT_EQ(v, round_bf16(v));
  }
}

TEST(GroupedMlp, ReferenceInvariantToPaddingAndEp) {
  Scenario sc = make_scenario(64, 8, 32, 32, 2);
  const Problem prob = generate_problem(sc);
  const Routing routing = route(sc);
  const DispatchPlan base_plan = plan_dispatch(sc, routing);
  const LayerResult bf = grouped_mlp(Bf16Policy{}, prob, base_plan, {});
  const LayerResult f32 = grouped_mlp(Fp32Policy{}, prob, base_plan, {});
  const std::vector<std::tuple<int, std::string, int>> variants = {
      {2, "none", 0}, {1, "module", 8}, {2, "module", 16}, {2, "hybridep", 8},
      {2, "router", 4}, {4, "router", 4}, {2, "router_post", 8}};
  for (const auto& [ep, padding, align] : variants) {
    sc.dispatch.ep = ep;
    sc.dispatch.padding = padding;
    sc.dispatch.align = align;
    const DispatchPlan plan = plan_dispatch(sc, routing);
    const std::string what = padding + " ep " + std::to_string(ep) + " align " + std::to_string(align);
    if (align) ASSERT_GT(count_pad_rows(plan, false) + count_pad_rows(plan, true), 0) << what;
    // exact GEMMs and exact reductions: zero terms change nothing, whatever the row order
    expect_same_bits(grouped_mlp(Bf16Policy{}, prob, plan, {}), bf, "bf16 " + what);
    expect_same_bits(grouped_mlp(Fp32Policy{}, prob, plan, {}), f32, "fp32 " + what);
  }
}

TEST(GroupedMlp, ReferenceIndependentOfThreadCount) {
  Scenario sc = make_scenario(64, 8, 32, 48, 2);
  sc.dispatch = {2, "module", 8};
  const Problem prob = generate_problem(sc);
  const DispatchPlan plan = plan_dispatch(sc, route(sc));
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const LayerResult one = grouped_mlp(Bf16Policy{}, prob, plan, {});
  const LayerResult gold1 = grouped_mlp(GoldenPolicy{}, prob, plan, {});
  omp_set_num_threads(std::max(2, saved));
  const LayerResult many = grouped_mlp(Bf16Policy{}, prob, plan, {});
  const LayerResult gold2 = grouped_mlp(GoldenPolicy{}, prob, plan, {});
  omp_set_num_threads(saved);
  expect_same_bits(one, many, "bf16 threads");
  expect_same_bits(gold1, gold2, "golden threads");
}

// The stages obey the recipe's rounding rules, recomputed here from the stage inputs (teacher-forced).
TEST(GroupedMlp, Bf16StagesFollowTheRecipe) {
  Scenario sc = make_scenario(32, 4, 32, 16, 2);
  const Problem prob = generate_problem(sc);
  const DispatchPlan plan = plan_dispatch(sc, route(sc));
  const std::vector<double> x = doubles(prob.x), w1 = doubles(prob.w1), w2 = doubles(prob.w2);
  LayerOptions opt;
  opt.keep_stages = true;
  for (const std::string mode : {"separate", "epilogue"}) {
    opt.bias_mode = mode;
    const LayerResult r = grouped_mlp(Bf16Policy{}, prob, plan, opt);
    const auto& rp = plan.ranks[0];
    const int64_t H = 32, F = 16;
    const Tensor &h = r.stages.at("h"), &a = r.stages.at("a"), &o = r.stages.at("o"), &out = r.stages.at("out");
    const Tensor &da = r.stages.at("da"), &dh = r.stages.at("dh");
    const std::vector<double> av = doubles(a);
    for (size_t i = 0; i < rp.row_token.size(); ++i) {
      const int64_t t = rp.row_token[i], e = rp.row_expert[i];
      const float p = rp.row_prob[i];
      for (int64_t j = 0; j < 2 * F; ++j) {  // h
        const double* w = w1.data() + (e * 2 * F + j) * H;
        const float b = float(prob.b1.get(e * 2 * F + j));
        float want;
        if (mode == "separate") {
          want = round_bf16(round_bf16(dot_rn_f32(x.data() + t * H, w, H)) + b);
        } else {
          ExactSum s;
          for (int64_t c = 0; c < H; ++c) s.add_product(x[t * H + c], w[c]);
          s.add(b);
          want = round_bf16(s.round_f32());
        }
        ASSERT_EQ(h.get(i * 2 * F + j), want) << mode << " h row " << i << " col " << j;
      }
      for (int64_t j = 0; j < F; ++j) {  // a = bf16(silu(g) * l * p); dh from da
        const float g = float(h.get(i * 2 * F + j)), l = float(h.get(i * 2 * F + F + j));
        const float act = silu_f32(g) * l;
        ASSERT_EQ(a.get(i * F + j), round_bf16(act * p));
        const float dact = float(da.get(i * F + j)) * p;
        ASSERT_EQ(dh.get(i * 2 * F + j), round_bf16(dact * l * dsilu_f32(g)));
        ASSERT_EQ(dh.get(i * 2 * F + F + j), round_bf16(dact * silu_f32(g)));
      }
      for (int64_t j = 0; j < H; ++j) {  // o = bf16(exact a . w2^T); out = bf16(o + b2 * p)
        const double* w = w2.data() + (e * H + j) * F;
        const float ov = round_bf16(dot_rn_f32(av.data() + i * F, w, F));
        ASSERT_EQ(o.get(i * H + j), ov);
        ASSERT_EQ(out.get(i * H + j), round_bf16(ov + float(prob.b2.get(e * H + j)) * p));
      }
    }
  }
}

TEST(GroupedMlp, BackendsRegisteredAndReportGemmPaths) {
  Scenario sc = make_scenario(256, 8, 128, 128, 2);
  sc.dispatch = {2, "module", 32};
  Prepared p = prepare(sc);
  for (const std::string recipe : {"bf16", "fp32"}) {
    p.sc.recipe.name = recipe;
    auto ref = make_backend("reference");
    ASSERT_TRUE(ref->available(p.sc).ok);
    const BackendResult r = ref->run(p.context());
    EXPECT_EQ(r.outputs.size(), 7u);
    std::printf("reference %s: exact path %s of %s GEMM outputs (fraction %s); reductions %s; %.2f s\n",
                recipe.c_str(), r.attrs.at("exact_path_outputs").c_str(), r.attrs.at("gemm_outputs").c_str(),
                r.attrs.at("exact_path_fraction").c_str(), r.attrs.at("exact_path.reductions").c_str(), r.seconds);
    EXPECT_LT(std::stod(r.attrs.at("exact_path_fraction")), 1e-3);
  }
  const BackendResult g = run_backend("golden", p);
  EXPECT_EQ(g.outputs.at("dx").dtype, "fp64");
  // Only the reference certifies its rounding: the others carry no certificate statistics.
  EXPECT_EQ(g.attrs.count("exact_path_outputs"), 0u);
  p.sc.recipe.name = "bf16";
  const BackendResult eigen = run_backend("cpu.eigen", p);
  for (const auto& [key, value] : eigen.attrs)
    EXPECT_TRUE(key.rfind("exact_path", 0) != 0 && key.rfind("compensated_path", 0) != 0) << key;
  p.sc.recipe.name = "fp8_block";  // no CPU emulation (mxfp8 has one: test_mxfp8_recipe.cpp)
  const Availability av = make_backend("reference")->available(p.sc);
  EXPECT_FALSE(av.ok);
  EXPECT_EQ(av.disposition, Disposition::not_supported);
}

// The CPU reference and the GPU kernels share activation.h; stored results and the GPU's elementwise
// stage checks rely on it never changing silently. This pins its exact output bits over a sweep.
TEST(Activation, OutputBitsArePinned) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the output bits
  auto mix = [&h](float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xFF)) * 1099511628211ull;
  };
  for (uint32_t u = 0; u < 0x43000000u; u += 4099)  // |x| < 128
    for (float x : {std::bit_cast<float>(u), -std::bit_cast<float>(u)}) {
      mix(exp_f32(x));
      mix(silu_f32(x));
      mix(dsilu_f32(x));
    }
  std::printf("activation hash %016llx\n", (unsigned long long)h);
  EXPECT_EQ(h, 0xedaac59f50648c21ull) << "activation.h changed its results: update the pin only on purpose";
}
