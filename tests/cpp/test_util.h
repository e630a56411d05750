// The test kit shared by the C++ GoogleTests (tests/cpp/ and tests/gpu/): one scenario prepared the
// way the harness prepares it, a backend run on it, and tensor comparisons.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

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

// The values as doubles (exact for every dtype), for recomputations written in fp64.
inline std::vector<double> doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.size()));
  t.read(0, t.size(), v.data());
  return v;
}

// A copy with fp64 storage: the golden layer reads inputs of any storage, and fp64 ones can be
// perturbed by steps finer than their dtype (finite differences).
inline Tensor as_fp64(const Tensor& t) {
  Tensor out(t.shape, "fp64");
  t.read(0, t.size(), out.f64().data());
  return out;
}

// Same dtype, shape and bit patterns; with begin/end, of the flat elements [begin, end) only.
inline bool same_bits(const Tensor& a, const Tensor& b, int64_t begin = 0, int64_t end = -1) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  if (end < 0) end = a.size();
  const size_t w = a.itemsize();
  return std::memcmp(static_cast<const char*>(a.bytes()) + begin * w, static_cast<const char*>(b.bytes()) + begin * w,
                     size_t(end - begin) * w) == 0;
}

// Same values under the project's bitwise rule: bit patterns, except that every NaN equals every
// NaN (payloads and signs may differ between implementations).
inline bool same_values(const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  if (a.itemsize() == 1) return same_bits(a, b);
  for (int64_t i = 0; i < a.size(); ++i) {
    const double x = a.get(i), y = b.get(i);
    if (std::isnan(x) || std::isnan(y)) {
      if (!(std::isnan(x) && std::isnan(y))) return false;
    } else if (std::memcmp(&x, &y, sizeof x) != 0) {
      return false;
    }
  }
  return true;
}

// Relative Frobenius error ||a - b|| / ||b|| of two tensors of the same size.
inline double rel_fro(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    num += (a.get(i) - b.get(i)) * (a.get(i) - b.get(i));
    den += b.get(i) * b.get(i);
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace moenum::testing
