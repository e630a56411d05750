// The test kit shared by the C++ GoogleTests (tests/cpp/ and tests/gpu/): one scenario prepared the
// way the harness prepares it, a backend run on it, and tensor comparisons.
#pragma once
#include <algorithm>
#include <cmath>
#include <string>

#include "moenum/backend.h"
#include "moenum/dispatch_plan.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "moenum/scenario.h"
#include "moenum/tensor.h"

namespace moenum::testing {

// Everything a backend runs on: inputs, routing and dispatch plan of one scenario.
struct Prepared {
  Scenario sc;
  Problem prob;
  Routing routing;
  DispatchPlan plan;

  RunContext context() const { return {sc, prob, routing, plan}; }
};

inline Prepared prepare(Scenario sc) {
  Prepared p;
  p.sc = std::move(sc);
  p.prob = generate_problem(p.sc);
  p.routing = route(p.sc);
  p.plan = plan_dispatch(p.sc, p.routing);
  return p;
}

inline BackendResult run_backend(const std::string& name, const Prepared& p) {
  return make_backend(name)->run(p.context());
}

// Relative Frobenius error ||a - b|| / ||b|| of two tensors of the same size.
inline double rel_fro(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    num += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    den += b.data[i] * b.data[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace moenum::testing
