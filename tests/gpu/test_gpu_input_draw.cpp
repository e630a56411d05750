// Inputs drawn on the GPU (core/gpu/input_draw.cu) are bitwise the CPU's, in every regime, across
// the drawer's chunk boundary, NaN payloads included.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "device.h"
#include "gpu_test_util.h"
#include "moenum/problem.h"
#include "moenum/scenario.h"

namespace moenum::gputest {
namespace {

Scenario scenario(uint64_t seed, int64_t T, int64_t E, int64_t H, int64_t F) {
  Scenario sc;
  sc.name = "gpu-draw";
  sc.seed = seed;
  sc.tokens = T;
  sc.model.experts = E;
  sc.model.hidden = H;
  sc.model.ffn = F;
  sc.model.bias = true;
  return sc;
}

void expect_same_draws(Scenario sc, const std::string& what) {
  sc.execution.device = "cpu";
  const Problem cpu = generate_problem(sc);
  sc.execution.device = "gpu";
  const Problem gpu = generate_problem(sc);
  const std::pair<const char*, const Tensor*> tensors[] = {
      {"x", &cpu.x}, {"w1", &cpu.w1}, {"b1", &cpu.b1}, {"w2", &cpu.w2}, {"b2", &cpu.b2}, {"dy", &cpu.dy}};
  const Tensor* on_gpu[] = {&gpu.x, &gpu.w1, &gpu.b1, &gpu.w2, &gpu.b2, &gpu.dy};
  for (int t = 0; t < 6; ++t) {
    const auto a = tensors[t].second->f32(), b = on_gpu[t]->f32();
    ASSERT_EQ(a.size(), b.size()) << what << " " << tensors[t].first;
    int64_t differ = 0, first = -1;
    for (size_t i = 0; i < a.size(); ++i)
      if (std::memcmp(&a[i], &b[i], 4) != 0 && differ++ == 0) first = int64_t(i);
    EXPECT_EQ(differ, 0) << what << " " << tensors[t].first << ": first at " << first << ": "
                         << (first >= 0 ? a[first] : 0.f) << " vs " << (first >= 0 ? b[first] : 0.f);
  }
}

TEST(GpuInputDraw, BitwiseTheCpuInEveryRegime) {
  MOENUM_REQUIRE_GPU();
  expect_same_draws(scenario(7, 64, 4, 256, 128), "normal");
  Scenario r = scenario(1234, 96, 4, 256, 64);
  r.inputs["x"] = {"uniform", 1.0, 0.05, 16.0};
  r.inputs["w1"].regime = "subnormal";
  r.inputs["w2"].regime = "near_overflow";
  r.inputs["b1"] = {"normal", 1.0, 0.1, 8.0};
  r.inputs["dy"].regime = "special";
  r.inputs["dy"].special = {0.01, 0.01, 0.01, 0.01, 7.0, 0.01};
  r.inputs["b2"].regime = "uniform";
  expect_same_draws(r, "regimes");
}

TEST(GpuInputDraw, BitwiseTheCpuAcrossChunks) {
  MOENUM_REQUIRE_GPU();
  expect_same_draws(scenario(2028, 64, 4, 4096, 2048), "w1 of 64M+ elements");  // two chunks of w1
}

}  // namespace
}  // namespace moenum::gputest
