// The two GPU backends on small scenarios: every stage checked by the shared verifier (GEMMs within
// the per-element bound, teacher-forced on the GPU's own stage inputs; elementwise stages bitwise;
// empty experts' gradients exactly zero), single and discrete weights agree bitwise.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>

#include "gpu_test_util.h"
#include "gpu_verify.h"
#include "grouped_mlp.h"
#include "moenum/activation.h"
#include "moenum/backend.h"
#include "moenum/bf16.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"

namespace moenum::gputest {
namespace {


LayerRun run_backend(const std::string& backend, const ScenarioSpec& spec) { return run_layer(backend, make_scenario(spec)); }

// Every stage the GPU saves, through the shared verifier (core/verify, as `moenum run` checks it),
// and every output fully written (poisoned buffers would leave NaNs).
void check_layer(const LayerRun& r) {
  std::vector<std::string> stages{"h", "a", "o", "y", "da", "dw2", "dh", "dprobs", "dx_row", "dx", "dw1"};
  if (r.sc.model.bias) stages.insert(stages.end(), {"db1", "db2"});
  expect_stages_pass(r, stages);
  for (const auto& [name, ten] : r.res.outputs)
    for (const float v : ten.f32()) ASSERT_FALSE(std::isnan(v)) << name << " has an unwritten (NaN) element";
}

struct Case {
  std::string name;
  ScenarioSpec spec;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  v.push_back({"uniform", {}});
  ScenarioSpec s;
  s.bias = false, s.skew = "zipf", s.zipf_s = 1.2;
  v.push_back({"zipf_nobias", s});
  s = {};
  s.padding = "module", s.align = 32, s.ep = 2;
  v.push_back({"module_ep2", s});
  s = {};
  s.padding = "router", s.align = 16, s.ep = 4;
  v.push_back({"router_ep4", s});
  s = {};
  s.T = 64, s.counts = {40, 0, 1, 30, 0, 20, 1, 36};  // empty experts and single-token experts
  v.push_back({"empty_and_single", s});
  s = {};
  s.T = 64, s.counts = {40, 0, 1, 30, 0, 20, 1, 36}, s.bias = false;
  v.push_back({"empty_nobias", s});
  return v;
}

class GpuLayer : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(GpuLayer, StagesBitwiseGemmsWithinBound) {
  MOENUM_REQUIRE_GPU();
  const auto& [backend, c] = GetParam();
  LayerRun r = run_backend(backend, c.spec);
  check_layer(r);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuLayer,
                         ::testing::Combine(::testing::Values("gpu.grouped", "gpu.multistream"),
                                            ::testing::ValuesIn(cases())),
                         [](const auto& info) {
                           std::string b = std::get<0>(info.param);
                           for (auto& ch : b) ch = ch == '.' ? '_' : ch;
                           return b + "__" + std::get<1>(info.param).name;
                         });

TEST(GpuLayerWeights, SingleAndDiscreteAgreeBitwise) {
  MOENUM_REQUIRE_GPU();
  ScenarioSpec s;
  s.ep = 2, s.padding = "module", s.align = 32;
  for (const char* backend : {"gpu.grouped", "gpu.multistream"}) {
    s.weights = "single";
    LayerRun a = run_backend(backend, s);
    s.weights = "discrete";
    LayerRun b = run_backend(backend, s);
    for (const auto& [name, t] : a.res.outputs) EXPECT_TRUE(moenum::testing::same_bits(t, b.res.outputs.at(name))) << backend << " " << name;
  }
}

TEST(GpuLayerEpilogue, MultistreamBiasInEpilogueWithinBound) {
  MOENUM_REQUIRE_GPU();
  ScenarioSpec s;
  s.bias_mode = "epilogue";
  LayerRun r = run_backend("gpu.multistream", s);
  // h = bf16(x . w1^T + b1), one rounding: the bias is one more term of the sum.
  expect_stages_pass(r, {"h", "a", "o", "y", "dx_row", "dw1", "db1"});
  EXPECT_FALSE(make_backend("gpu.grouped")->available(r.sc).ok);
}

// Against the CPU reference backend, when it is linked in: same recipe, so only GEMM accumulation
// order separates them; a loose relative Frobenius check catches layout/indexing mistakes.
TEST(GpuVsReference, RelativeFrobeniusSmall) {
  MOENUM_REQUIRE_GPU();
  auto names = backend_names();
  if (std::find(names.begin(), names.end(), "reference") == names.end()) GTEST_SKIP() << "reference backend not linked";
  ScenarioSpec s;
  s.ep = 2, s.padding = "router", s.align = 16;
  for (const char* backend : {"gpu.grouped", "gpu.multistream"}) {
    LayerRun g = run_backend(backend, s);
    const BackendResult rr = moenum::testing::run_backend("reference", g);
    for (const auto& [name, t] : rr.outputs) {
      ASSERT_TRUE(g.res.outputs.count(name)) << backend << " lacks " << name;
      const Tensor& u = g.res.outputs.at(name);
      ASSERT_EQ(u.size(), t.size()) << name;
      EXPECT_LE(moenum::testing::rel_fro(u, t), 1e-2) << backend << " " << name;
    }
  }
}

}  // namespace
}  // namespace moenum::gputest
