// Helpers for the GPU gtests, on top of the shared kit (tests/cpp/test_util.h): skip (never pass)
// without a device, small scenarios, one backend run; the checks are the shared verifier's
// (gpu_verify.h).
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "device.h"
#include "grouped_mlp.h"
#include "moenum/backend.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"
#include "test_util.h"

#define MOENUM_REQUIRE_GPU()                                                   \
  do {                                                                         \
    auto av_ = ::moenum::gpu::cuda_availability();                             \
    if (!av_.ok) GTEST_SKIP() << "GPU test skipped: " << av_.reason;           \
  } while (0)

namespace moenum::gputest {

struct ScenarioSpec {
  int64_t E = 8, H = 128, F = 64, k = 2, T = 256, ep = 1, align = 0;
  std::string padding = "none", skew = "uniform", weights = "single", bias_mode = "separate";
  bool bias = true;
  double zipf_s = 0.0;
  std::vector<int64_t> counts;
  uint64_t seed = 7;
};

inline Scenario make_scenario(const ScenarioSpec& s) {
  Scenario sc;
  sc.name = "gpu-test";
  sc.seed = s.seed;
  sc.model.experts = s.E;
  sc.model.hidden = s.H;
  sc.model.ffn = s.F;
  sc.model.topk = s.k;
  sc.model.bias = s.bias;
  sc.tokens = s.T;
  sc.dispatch.ep = s.ep;
  sc.dispatch.padding = s.padding;
  sc.dispatch.align = s.align;
  sc.routing.skew.kind = s.counts.empty() ? s.skew : "counts";
  sc.routing.skew.s = s.zipf_s;
  sc.routing.skew.counts = s.counts;
  sc.weights = s.weights;
  sc.recipe.bias_mode = s.bias_mode;
  sc.output.intermediates = true;
  return sc;
}

// One backend run on a scenario, with everything the checks need to recompute its stages.
struct LayerRun : moenum::testing::Prepared {
  gpu::FlatPlan flat;
  BackendResult res;
};

inline LayerRun run_layer(const std::string& backend, Scenario sc) {
  LayerRun r{moenum::testing::prepare(std::move(sc))};
  r.flat = gpu::flatten_plan(r.routing, r.plan, r.prob.T, r.prob.E, r.prob.k);
  auto be = make_backend(backend);
  Availability av = be->available(r.sc);
  EXPECT_TRUE(av.ok) << av.reason;
  r.res = be->run(r.context());
  return r;
}

}  // namespace moenum::gputest
