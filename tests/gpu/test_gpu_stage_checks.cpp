// The GPU backends checked by the project's one verifier (core/verify/, as `moenum run` checks them):
// every stage they save, teacher-forced, for bf16 with the FC1 bias added separately or in the
// epilogue, and mxfp8 with both gradient formats, every padding source. The same scenarios run on
// cpu.eigen too, so the checks are exercised without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "gpu_verify.h"

namespace moenum::gputest {
namespace {

struct Case {
  std::string recipe, padding, grad = "e4m3", bias_mode = "separate";
  bool bias = true;
};

std::string case_name(const Case& c) {
  return c.recipe + "_" + c.padding + "_" + c.grad + "_" + c.bias_mode + (c.bias ? "_bias" : "_nobias");
}

Scenario scenario_of(const Case& c) {
  ScenarioSpec s;
  s.E = 8, s.H = 128, s.F = 64, s.T = 256, s.ep = 2, s.skew = "zipf", s.zipf_s = 1.0;
  s.padding = c.padding, s.bias = c.bias, s.bias_mode = c.bias_mode;
  s.align = c.recipe == "mxfp8" ? 32 : (c.padding == "none" ? 0 : 16);
  Scenario sc = make_scenario(s);
  sc.recipe.name = c.recipe;
  sc.recipe.grad_format = c.grad;
  return sc;
}

std::vector<std::string> stages_saved_by_gpu(const Case& c) {
  std::vector<std::string> names{"h", "a", "o", "y", "da", "dw2", "dh", "dprobs", "dx_row", "dx", "dw1"};
  if (c.bias) names.insert(names.end(), {"db1", "db2"});
  if (c.recipe == "mxfp8")
    for (const char* g : {"fc1_fprop", "fc2_fprop", "fc2_dgrad", "fc2_wgrad", "fc1_dgrad", "fc1_wgrad"})
      for (const char* op : {".A", ".B"}) names.push_back(std::string(g) + op);
  return names;
}

class StageChecks : public ::testing::TestWithParam<std::tuple<std::string, Case>> {};

TEST_P(StageChecks, EverySavedStagePasses) {
  const auto& [backend, c] = GetParam();
  if (backend.rfind("gpu.", 0) == 0) MOENUM_REQUIRE_GPU();
  Scenario sc = scenario_of(c);
  auto be = make_backend(backend);
  const Availability av = be->available(sc);
  if (!av.ok) GTEST_SKIP() << backend << ": " << av.reason;
  expect_stages_pass(run_layer(backend, sc), stages_saved_by_gpu(c));
}

std::vector<Case> cases() {
  std::vector<Case> out;
  for (const char* pad : {"none", "router", "module", "hybridep"}) {
    out.push_back({"bf16", pad});
    out.push_back({"bf16", pad, "e4m3", "epilogue"});
  }
  out.push_back({"bf16", "module", "e4m3", "separate", false});
  for (const char* pad : {"router", "router_post", "module", "hybridep"})
    for (const char* grad : {"e4m3", "e5m2"}) out.push_back({"mxfp8", pad, grad});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Backends, StageChecks,
                         ::testing::Combine(::testing::Values("gpu.grouped", "gpu.multistream", "cpu.eigen"),
                                            ::testing::ValuesIn(cases())),
                         [](const auto& info) {
                           std::string n = std::get<0>(info.param) + "_" + case_name(std::get<1>(info.param));
                           for (char& ch : n)
                             if (ch == '.') ch = '_';
                           return n;
                         });

}  // namespace
}  // namespace moenum::gputest
