// Input generation. Each element is a pure function of (seed, tensor stream, flat index), so the
// same scenario gives the same inputs whatever the EP size, padding or thread count, and the
// elements are drawn in parallel.
#include "moenum/problem.h"

#include <cmath>

#include "moenum/bf16.h"
#include "moenum/det_math.h"
#include "moenum/rng.h"

namespace moenum {
namespace {

// Standard normal from two counter-based uniforms (Box-Muller, cosine branch), with the deterministic
// log/cos of det_math.h so that every machine draws the same bits.
double normal_at(uint64_t seed, uint64_t stream, uint64_t i) {
  double u1 = rng::uniform(seed, stream, 2 * i);
  double u2 = rng::uniform(seed, stream, 2 * i + 1);
  return std::sqrt(-2.0 * det::log(u1)) * det::cos_2pi(u2);
}

InputRegime regime_for(const Scenario& sc, const std::string& name) {
  auto it = sc.inputs.find(name);
  return it == sc.inputs.end() ? InputRegime{} : it->second;
}

Tensor draw(const Scenario& sc, const std::string& name, uint64_t stream, std::vector<int64_t> shape,
            double default_std) {
  Tensor t(std::move(shape), "bf16");
  const std::span<float> out = t.f32();
  const InputRegime reg = regime_for(sc, name);
  const double std_dev = default_std * reg.scale;
  const int64_t n = t.size();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    double v;
    if (reg.dist == "uniform") {  // same std as the normal: U(-sqrt(3), sqrt(3))
      v = (2.0 * rng::uniform(sc.seed, stream, i) - 1.0) * std::sqrt(3.0);
    } else {
      v = normal_at(sc.seed, stream, i);
    }
    v *= std_dev;
    if (reg.outlier_fraction > 0.0 &&
        rng::uniform(sc.seed, rng::kOutliers * 64 + stream, i) < reg.outlier_fraction)
      v *= reg.outlier_scale;
    out[i] = round_bf16(static_cast<float>(v));
  }
  return t;
}

}  // namespace

Problem generate_problem(const Scenario& sc) {
  Problem p;
  p.T = sc.tokens;
  p.H = sc.model.hidden;
  p.F = sc.model.ffn;
  p.E = sc.model.experts;
  p.k = sc.model.topk;
  p.x = draw(sc, "x", rng::kX, {p.T, p.H}, 1.0);
  p.w1 = draw(sc, "w1", rng::kW1, {p.E, 2 * p.F, p.H}, 1.0 / std::sqrt(double(p.H)));
  p.w2 = draw(sc, "w2", rng::kW2, {p.E, p.H, p.F}, 1.0 / std::sqrt(double(p.F)));
  p.dy = draw(sc, "dy", rng::kDy, {p.T, p.H}, 1.0);
  if (sc.model.bias) {
    p.b1 = draw(sc, "b1", rng::kB1, {p.E, 2 * p.F}, 0.1);
    p.b2 = draw(sc, "b2", rng::kB2, {p.E, p.H}, 0.1);
  } else {
    p.b1 = Tensor({p.E, 2 * p.F}, "bf16");
    p.b2 = Tensor({p.E, p.H}, "bf16");
  }
  return p;
}

}  // namespace moenum
