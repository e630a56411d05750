// How one element of an input tensor is drawn (numerics.md §2): a pure function of (seed, tensor
// stream, flat index), compiled for the CPU (problem.cpp) and for the GPU (core/gpu/input_draw.cu),
// which therefore draw the same bits: only IEEE basic operations, no FMA contraction on either side.
#pragma once
#include <cmath>
#include <cstdint>

#include "moenum/bf16.h"
#include "moenum/det_math.h"
#include "moenum/hd.h"
#include "moenum/rng.h"
#include "moenum/scenario.h"

namespace moenum::draw {

// One tensor's draw, resolved from its InputRegime (problem.cpp, draw_spec).
struct DrawSpec {
  uint64_t seed = 0, stream = 0;
  double std_dev = 1.0;
  bool uniform = false;  // U(-sqrt(3), sqrt(3)) instead of the standard normal
  double outlier_fraction = 0.0, outlier_scale = 1.0;
  bool special = false;
  SpecialValues special_values;
};

// Standard normal of element i: Box-Muller (cosine branch) of the uniforms at counters 2i, 2i + 1.
MOENUM_HD double normal_at(uint64_t seed, uint64_t stream, uint64_t i) {
  const double u1 = rng::uniform(seed, stream, 2 * i), u2 = rng::uniform(seed, stream, 2 * i + 1);
  return std::sqrt(-2.0 * det::log(u1)) * det::cos_2pi(u2);
}

// The unscaled draw of element i when the spec is uniform: same std as the normal.
MOENUM_HD double uniform_at(uint64_t seed, uint64_t stream, uint64_t i) {
  return (2.0 * rng::uniform(seed, stream, i) - 1.0) * std::sqrt(3.0);
}

// double -> fp32 rounded to nearest; beyond the fp32 range +-inf (a plain cast would be undefined
// behaviour there), NaN stays NaN.
MOENUM_HD float to_f32(double v) {
  constexpr double kRoundsToMax = 0x1.fffffep127 + 0x1p103;  // the largest double that rounds to FLT_MAX
  if (std::fabs(v) >= kRoundsToMax) return float(v > 0 ? det::detail::infinity() : -det::detail::infinity());
  return static_cast<float>(v);
}

// Regime special: whether element i is replaced, and by what. One uniform draw picks the category
// (the fractions stacked in a fixed order), a second one its sign and magnitude.
MOENUM_HD bool special_value(const SpecialValues& sp, uint64_t seed, uint64_t stream, uint64_t i, double& out) {
  double u = rng::uniform(seed, rng::kSpecial * 64 + stream, 2 * i);
  const double w = rng::uniform(seed, rng::kSpecial * 64 + stream, 2 * i + 1);
  const double sign = w < 0.5 ? -1.0 : 1.0;
  const double m = w < 0.5 ? 2.0 * w : 2.0 * w - 1.0;  // [0, 1), independent of the sign
  if ((u -= sp.nan) < 0) return out = det::detail::quiet_nan(), true;
  if ((u -= sp.inf) < 0) return out = sign * det::detail::infinity(), true;
  if ((u -= sp.subnormal) < 0) return out = sign * std::ldexp(1.0 + std::floor(m * 127.0), -133), true;
  if ((u -= sp.huge) < 0) return out = sign * std::ldexp(1.0 + 0.99 * m, 127), true;  // rounds to bf16 below 2^128
  if ((u -= sp.value_fraction) < 0) return out = sp.value, true;
  return false;
}

// Element i from its unscaled draw v (normal_at or uniform_at): the std, outliers, special values,
// then double -> fp32 (the draws stay far inside its range, except stated values and scaled bands,
// which round, overflowing to +-inf, as IEEE says) and one rounding to bf16.
MOENUM_HD float finish(const DrawSpec& d, uint64_t i, double v) {
  v *= d.std_dev;
  if (d.outlier_fraction > 0.0 && rng::uniform(d.seed, rng::kOutliers * 64 + d.stream, i) < d.outlier_fraction)
    v *= d.outlier_scale;
  double sv;
  if (d.special && special_value(d.special_values, d.seed, d.stream, i, sv)) v = sv;
  return round_bf16(to_f32(v));
}

// Element i, scalar (the GPU's path; the CPU draws the normals in batches, bitwise these).
MOENUM_HD float element(const DrawSpec& d, uint64_t i) {
  return finish(d, i, d.uniform ? uniform_at(d.seed, d.stream, i) : normal_at(d.seed, d.stream, i));
}

}  // namespace moenum::draw
