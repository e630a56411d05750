// Input generation. Each element is a pure function of (seed, tensor stream, flat index), so the
// same scenario gives the same inputs whatever the EP size, padding or thread count, and the
// elements are drawn in parallel.
#include "moenum/problem.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "moenum/bf16.h"
#include "moenum/det_math.h"
#include "moenum/rng.h"

namespace moenum {
namespace {

// double -> fp32 rounded to nearest; beyond the fp32 range +-inf (a plain cast would be undefined
// behaviour there), NaN stays NaN.
float to_f32(double v) {
  constexpr double kMax = std::numeric_limits<float>::max();
  // the largest double that still rounds to FLT_MAX: halfway to 2^128
  constexpr double kRoundsToMax = kMax + 0x1p103;
  constexpr float kInf = std::numeric_limits<float>::infinity();
  if (std::fabs(v) >= kRoundsToMax) return v > 0 ? kInf : -kInf;
  return static_cast<float>(v);
}

// Standard normals of elements [i0, i0 + n), n <= det::kBatch, into v: sqrt(-2 log u1) cos(2 pi u2),
// element i drawing u1, u2 at counters 2i, 2i + 1.
void normals_at(uint64_t seed, uint64_t stream, uint64_t i0, int n, double* v) {
  double u1[det::kBatch], u2[det::kBatch], log_u1[det::kBatch], cos_u2[det::kBatch];
  for (int j = 0; j < n; ++j) {
    u1[j] = rng::uniform(seed, stream, 2 * (i0 + j));
    u2[j] = rng::uniform(seed, stream, 2 * (i0 + j) + 1);
  }
  det::log_batch(u1, log_u1, n);
  det::cos_2pi_batch(u2, cos_u2, n);
  for (int j = 0; j < n; ++j) v[j] = std::sqrt(-2.0 * log_u1[j]) * cos_u2[j];
}

InputRegime regime_for(const Scenario& sc, const std::string& name) {
  auto it = sc.inputs.find(name);
  return it == sc.inputs.end() ? InputRegime{} : it->second;
}

// The std of a regime's draws: the banded regimes replace the tensor's default std by their band.
double regime_std(const InputRegime& reg, double default_std) {
  if (reg.regime == "subnormal") return 0x1p-130 * reg.scale;
  if (reg.regime == "near_overflow") return 0x1p124 * reg.scale;
  return default_std * reg.scale;
}

// Regime special: the element's replacement, or nullopt to keep the drawn value. One uniform draw
// picks the category (the fractions stacked in a fixed order), a second one its sign and magnitude.
std::optional<double> special_value(const SpecialValues& sp, uint64_t seed, uint64_t stream, uint64_t i) {
  double u = rng::uniform(seed, rng::kSpecial * 64 + stream, 2 * i);
  const double w = rng::uniform(seed, rng::kSpecial * 64 + stream, 2 * i + 1);
  const double sign = w < 0.5 ? -1.0 : 1.0;
  const double m = w < 0.5 ? 2.0 * w : 2.0 * w - 1.0;  // [0, 1), independent of the sign
  if ((u -= sp.nan) < 0) return std::numeric_limits<double>::quiet_NaN();
  if ((u -= sp.inf) < 0) return sign * std::numeric_limits<double>::infinity();
  if ((u -= sp.subnormal) < 0) return sign * std::ldexp(1.0 + std::floor(m * 127.0), -133);
  if ((u -= sp.huge) < 0) return sign * std::ldexp(1.0 + 0.99 * m, 127);  // rounds to bf16 below 2^128
  if ((u -= sp.value_fraction) < 0) return sp.value;
  return std::nullopt;
}

Tensor draw(const Scenario& sc, const std::string& name, uint64_t stream, std::vector<int64_t> shape,
            double default_std) {
  Tensor t(std::move(shape), "bf16");
  const std::span<float> out = t.f32();
  const InputRegime reg = regime_for(sc, name);
  const double std_dev = regime_std(reg, default_std);
  const bool uniform = reg.regime == "uniform" || reg.dist == "uniform";
  const bool special = reg.regime == "special";
  const int64_t n = t.size(), blocks = (n + det::kBatch - 1) / det::kBatch;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * det::kBatch;
    const int len = int(std::min<int64_t>(det::kBatch, n - i0));
    double v[det::kBatch];
    if (uniform) {  // same std as the normal: U(-sqrt(3), sqrt(3))
      for (int j = 0; j < len; ++j) v[j] = (2.0 * rng::uniform(sc.seed, stream, i0 + j) - 1.0) * std::sqrt(3.0);
    } else {
      normals_at(sc.seed, stream, uint64_t(i0), len, v);
    }
    for (int j = 0; j < len; ++j) {
      const int64_t i = i0 + j;
      v[j] *= std_dev;
      if (reg.outlier_fraction > 0.0 &&
          rng::uniform(sc.seed, rng::kOutliers * 64 + stream, i) < reg.outlier_fraction)
        v[j] *= reg.outlier_scale;
      if (special)
        if (const auto sv = special_value(reg.special, sc.seed, stream, uint64_t(i))) v[j] = *sv;
      // double -> float: the draws stay far inside the fp32 range, except stated values and scaled
      // bands, which round (overflow to +-inf) as IEEE says; then one rounding to bf16.
      out[i] = round_bf16(to_f32(v[j]));
    }
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
