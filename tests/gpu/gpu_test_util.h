// Helpers for the GPU gtests, on top of the shared kit (tests/cpp/test_util.h): skip (never pass)
// without a device, small scenarios, the per-element
// GEMM bound of numerics.md §7, and CPU restatements of the elementwise stages built from the same
// shared headers the kernels use.
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

// |c - exact| <= gamma(K) * sum|a_i b_i| + half an ulp of the output type (bf16: 8 bits, fp32: 24)
// at the larger of |c|, |exact|; plus the fp64 summation error of `exact` itself.
inline bool within_gemm_bound(double c, double exact, double abs_sum, int64_t K, int mant_bits) {
  const double u = std::ldexp(1.0, -24);
  const double gamma = K * u / (1.0 - K * u);
  const double mag = std::max(std::fabs(c), std::fabs(exact));
  const double half_ulp = mag > 0 ? std::ldexp(1.0, std::ilogb(mag) - mant_bits) : 0.0;
  const double slack = K * std::ldexp(1.0, -52) * abs_sum + 1e-300;
  return std::fabs(c - exact) <= gamma * abs_sum + half_ulp + slack;
}

// Checks every element of D (rows x cols) against sum_i A(r,i) * B(i,c) over K terms.
inline int64_t count_bound_violations(const std::function<double(int64_t, int64_t)>& D, int64_t rows, int64_t cols, int64_t K,
                               const std::function<double(int64_t, int64_t, int64_t)>& prod, int mant_bits,
                               std::string* first) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < K; ++i) {
        const double p = prod(r, c, i);
        s += p;
        a += std::fabs(p);
      }
      const double d = D(r, c);
      if (!within_gemm_bound(d, s, a, K, mant_bits)) {
        if (!bad && first)
          *first = "(" + std::to_string(r) + "," + std::to_string(c) + "): got " + std::to_string(d) + " exact " +
                   std::to_string(s);
        ++bad;
      }
    }
  return bad;
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
