// The mxfp8 recipe on the GPU backends (Hopper path: bf16 GEMMs on the exact dequantized MXFP8
// operands, grouped_mlp.h). Checks:
//   - every dequantized MXFP8 value quantized from a bf16 value is exact in bf16 (CPU, exhaustive);
//   - the GPU's operand codes and scales (stages <gemm>.<A|B>.{codes,scales}) are bitwise equal to
//     the CPU policy's (reference/mxfp8_policy.h quantize_codes via add_mx_operand_stages),
//     teacher-forced: a and dh are the GPU's own stage values;
//   - every stage passes the shared verifier (core/verify): each GEMM within the numerics.md §7
//     bound of the exact result on the dequantized operands the GPU saved, empty experts exact 0;
//   - single and discrete weights agree bitwise within each backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "gpu_test_util.h"
#include "gpu_verify.h"
#include "grouped_mlp.h"
#include "moenum/backend.h"
#include "moenum/bf16.h"
#include "moenum/dispatch_plan.h"
#include "moenum/mx.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "mxfp8_policy.h"

namespace moenum::gputest {
namespace {

// ---- exactness of dequantized MXFP8 values in bf16 (no GPU needed) ---------------------------------

TEST(MxDequantBf16, ExactForEveryBf16InputAndScaleCode) {
  for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    int64_t inexact_from_bf16 = 0, inexact_pairs = 0;
    int min_code_inexact = 256;
    // every (fp8 code, scale code): which dequantized values are not bf16 at all (the subnormal edge)
    for (int c = 0; c < 255; ++c)
      for (int q = 0; q < 256; ++q) {
        const float v = mx_dequantize_element(uint8_t(q), uint8_t(c), f);
        if (v == v && round_bf16(v) != v) ++inexact_pairs, min_code_inexact = std::min(min_code_inexact, c);
      }
    // every bf16 input x and every scale code: quantize then dequantize, as the GPU path does. The
    // spec rule over every pair; the te_kernel rule (inverse 1.0 at code 0, +0 at 0xFE) over the pairs
    // a block can hold, |x| <= its amax, i.e. code(|x|) <= c for rceil (for code 0: |x| <= max * 2^-127,
    // which the inverse 1.0 sends to +-0).
    int64_t te_pairs = 0;
    for (int c = 0; c < 255; ++c) {
      const float inv = mx_inv_scale(uint8_t(c), InvScaleRule::Spec);
      const float inv_te = mx_inv_scale(uint8_t(c), InvScaleRule::TeKernel);
      for (uint32_t b = 0; b < 65536; ++b) {
        const float x = bf16_to_f32(uint16_t(b));
        const float v = mx_dequantize_element(mx_quantize_element(x, inv, f), uint8_t(c), f);
        inexact_from_bf16 += (v == v) && round_bf16(v) != v;
        if (e8m0_from_amax(std::fabs(x), f, ScaleRounding::Rceil) > c) continue;
        const float vt = mx_dequantize_element(mx_quantize_element(x, inv_te, f), uint8_t(c), f);
        inexact_from_bf16 += (vt == vt) && round_bf16(vt) != vt;
        ++te_pairs;
      }
    }
    EXPECT_EQ(0, inexact_from_bf16) << "format " << int(f);
    EXPECT_GT(te_pairs, 255 * 1000);
    // The edge exists (fp8 subnormal grid x 2^(c-127) finer than bf16's 2^-133 for small codes) but
    // bf16 inputs never land there.
    EXPECT_GT(inexact_pairs, 0);
    EXPECT_LE(min_code_inexact, 0);
    RecordProperty(f == Fp8Format::E4M3 ? "e4m3_inexact_pairs" : "e5m2_inexact_pairs", std::to_string(inexact_pairs));
  }
}

// ---- layer runs -------------------------------------------------------------------------------------


struct MxCase {
  std::string name;
  ScenarioSpec spec;
  std::string grad = "e4m3", rounding = "rceil", inv_scale = "te_kernel";
};

Scenario mx_scenario(const MxCase& c) {
  Scenario sc = make_scenario(c.spec);
  sc.name = "gpu-mxfp8-" + c.name;
  sc.recipe.name = "mxfp8";
  sc.recipe.grad_format = c.grad;
  sc.recipe.scale_rounding = c.rounding;
  sc.recipe.inv_scale = c.inv_scale;
  return sc;
}

LayerRun run_mx(const std::string& backend, const MxCase& c) { return run_layer(backend, mx_scenario(c)); }

std::vector<MxCase> mx_cases() {
  std::vector<MxCase> v;
  MxCase c;
  c.name = "module_ep2_nobias";
  c.spec.padding = "module", c.spec.align = 32, c.spec.ep = 2, c.spec.bias = false;
  v.push_back(c);
  c = {};
  c.name = "router_e5m2_floor_spec_nobias";
  c.spec.padding = "router", c.spec.align = 32, c.spec.bias = false, c.spec.skew = "zipf", c.spec.zipf_s = 1.2;
  c.grad = "e5m2", c.rounding = "floor", c.inv_scale = "spec";
  v.push_back(c);
  c = {};
  c.name = "hybridep_ep4_bias";
  c.spec.padding = "hybridep", c.spec.align = 32, c.spec.ep = 4;
  v.push_back(c);
  c = {};
  c.name = "empty_and_single_nobias";  // empty experts, single-token experts (padded to 32)
  c.spec.T = 64, c.spec.counts = {40, 0, 1, 30, 0, 20, 1, 36}, c.spec.padding = "module", c.spec.align = 32;
  c.spec.bias = false;
  v.push_back(c);
  return v;
}

// The MX operand stages of the six GEMMs.
const char* kOperandStages[] = {"fc1_fprop.A", "fc1_fprop.B", "fc2_fprop.A", "fc2_fprop.B",
                                "fc2_dgrad.A", "fc2_dgrad.B", "fc1_dgrad.A", "fc1_dgrad.B",
                                "fc2_wgrad.A", "fc2_wgrad.B", "fc1_wgrad.A", "fc1_wgrad.B"};

void check_mx_layer(const LayerRun& r, bool gpu = true) {
  const auto& st = r.res.stages;
  if (gpu) {
    EXPECT_NE(r.res.attrs.at("recipe_path").find("dequantized MXFP8"), std::string::npos);
    EXPECT_EQ("0", r.res.attrs.at("mx_bf16_inexact"));
  }

  // 1. operand codes and scales bitwise equal to the CPU policy's, teacher-forced on a and dh
  const reference::Mxfp8Policy pol = reference::Mxfp8Policy::from_scenario(r.sc);
  std::map<std::string, Tensor> want{{"a", st.at("a")}, {"dh", st.at("dh")}};
  reference::add_mx_operand_stages(pol, r.prob, r.plan, want);
  for (const char* op : kOperandStages)
    for (const char* part : {".codes", ".scales"}) {
      const std::string name = std::string(op) + part;
      ASSERT_TRUE(st.count(name)) << "GPU lacks stage " << name;
      const Tensor &g = st.at(name), &w = want.at(name);
      EXPECT_EQ(w.shape, g.shape) << name;
      EXPECT_EQ(w.dtype, g.dtype) << name;
      int64_t bad = 0;
      for (int64_t i = 0; i < std::min(g.size(), w.size()); ++i) bad += g.u8()[i] != w.u8()[i];
      EXPECT_EQ(0, bad) << name << ": " << bad << " of " << w.size() << " differ from the CPU policy";
    }

  // 2. every stage through the shared verifier: each GEMM within the §7 bound of the exact result on
  // the dequantized operands the backend saved, the operands' codes and scales against their bf16
  // tensors, the elementwise stages bitwise
  std::vector<std::string> stages{"h", "a", "o", "y", "da", "dw2", "dh", "dprobs", "dx_row", "dx", "dw1"};
  for (const char* op : kOperandStages) stages.push_back(op);
  if (r.sc.model.bias) stages.insert(stages.end(), {"db1", "db2"});
  expect_stages_pass(r, stages);
  for (const auto& [name, ten] : r.res.outputs)
    for (const float v : ten.f32()) ASSERT_FALSE(std::isnan(v)) << name << " has an unwritten (NaN) element";
}

// The checker itself, on the CPU reference's mxfp8 run (no GPU needed): exact GEMMs, the policy's
// own operand stages, so it must find nothing.
class MxChecker : public ::testing::TestWithParam<MxCase> {};

TEST_P(MxChecker, AcceptsTheReference) {
  auto names = backend_names();
  if (std::find(names.begin(), names.end(), "reference") == names.end()) GTEST_SKIP() << "reference backend not linked";
  LayerRun r = run_mx("reference", GetParam());
  check_mx_layer(r, false);
}

INSTANTIATE_TEST_SUITE_P(Cases, MxChecker, ::testing::ValuesIn(mx_cases()),
                         [](const auto& info) { return info.param.name; });

class GpuMxfp8Layer : public ::testing::TestWithParam<std::tuple<std::string, MxCase>> {};

TEST_P(GpuMxfp8Layer, OperandsBitwiseGemmsWithinBound) {
  MOENUM_REQUIRE_GPU();
  const auto& [backend, c] = GetParam();
  LayerRun r = run_mx(backend, c);
  check_mx_layer(r);
}

INSTANTIATE_TEST_SUITE_P(Backends, GpuMxfp8Layer,
                         ::testing::Combine(::testing::Values("gpu.grouped", "gpu.multistream"),
                                            ::testing::ValuesIn(mx_cases())),
                         [](const auto& info) {
                           std::string b = std::get<0>(info.param);
                           for (auto& ch : b) ch = ch == '.' ? '_' : ch;
                           return b + "__" + std::get<1>(info.param).name;
                         });

TEST(GpuMxfp8Weights, SingleAndDiscreteAgreeBitwise) {
  MOENUM_REQUIRE_GPU();
  MxCase c;
  c.name = "weights";
  c.spec.ep = 2, c.spec.padding = "router", c.spec.align = 32;
  for (const char* backend : {"gpu.grouped", "gpu.multistream"}) {
    c.spec.weights = "single";
    LayerRun a = run_mx(backend, c);
    c.spec.weights = "discrete";
    LayerRun b = run_mx(backend, c);
    for (const auto& [name, t] : a.res.outputs) EXPECT_TRUE(moenum::testing::same_bits(t, b.res.outputs.at(name))) << backend << " " << name;
    for (const auto& [name, t] : a.res.stages) EXPECT_TRUE(moenum::testing::same_bits(t, b.res.stages.at(name))) << backend << " stage " << name;
  }
}

TEST(GpuMxfp8Config, UnalignedSegmentIsConfigError) {
  MOENUM_REQUIRE_GPU();
  MxCase c;
  c.name = "unaligned";
  c.spec.padding = "none";
  Scenario sc = mx_scenario(c);
  Problem prob = generate_problem(sc);
  Routing routing = route(sc);
  DispatchPlan plan = plan_dispatch(sc, routing);
  for (const char* backend : {"gpu.grouped", "gpu.multistream"}) {
    auto be = make_backend(backend);
    RunContext ctx{sc, prob, routing, plan};
    EXPECT_THROW(be->run(ctx), ConfigError) << backend;
  }
}

}  // namespace
}  // namespace moenum::gputest
