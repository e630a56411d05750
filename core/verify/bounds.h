// The per-element bound of numerics.md §7, defined once. For a GEMM or reduction output of K terms,
// c32 = the correctly rounded fp32 value of the exact sum e, S = sum_k |a_k b_k| (+ |bias|):
//
//   any fp32 accumulation, in any order, with or without FMA, lands within
//       slack = gamma(K) * S  +  half an fp32 ulp at c32  +  K * 2^-150
//   of c32 (Higham, Thm 3.1 for the first term; e lies within half an ulp of c32; the last term is
//   the underflow allowance: each of the K additions and products near zero can lose up to half the
//   smallest fp32 subnormal, 2^-150, which the relative term cannot cover). The interval [lo, hi] is
//   the fp32 grid points inside c32 +- slack.
//
// A stage's stored value is post(acc) for its monotone output rounding `post` (bf16, or fp32 with a
// separate bias), so the allowed stored values are [post(lo), post(hi)]: the bound is applied to the
// fp32 accumulator and then pushed through the output rounding (two correct accumulators either side
// of a bf16 midpoint round a full bf16 ulp apart).
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

#include "moenum/error.h"
#include "ulp.h"

namespace moenum::verify {

inline constexpr double kU32 = 0x1p-24;       // unit roundoff of the fp32 accumulator
inline constexpr double kUnderflow32 = 0x1p-150;  // half the smallest fp32 subnormal

// gamma(n) = n*u / (1 - n*u).
inline double gamma(int64_t n, double u = kU32) {
  const double nu = static_cast<double>(n) * u;
  MOENUM_CHECK(nu < 1.0, "gamma(n, u) needs n*u < 1");
  return nu / (1.0 - nu);
}

// Half the fp32 spacing at |c| (ulp.h: the spacing of |c|'s binade, subnormal spacing below 2^-126).
inline double half_ulp_f32(double c) { return 0.5 * ulp_spacing(c, Grid::kF32); }

// Smallest fp32 value >= x and largest <= x (as double).
inline double ceil_f32(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) < x) f = std::nextafter(f, std::numeric_limits<float>::infinity());
  return f;
}
inline double floor_f32(double x) {
  float f = static_cast<float>(x);
  if (static_cast<double>(f) > x) f = std::nextafter(f, -std::numeric_limits<float>::infinity());
  return f;
}

// The fp32 values an accumulator may hold; nan_ok: NaN too (an overflow can meet an infinity of the
// other sign in some summation order).
struct Interval {
  double lo, hi;
  bool nan_ok = false;
};

// Where an fp32 accumulator of K terms may land. The slack is widened by 1e-12 relative for the
// fp64 arithmetic that evaluates it. Overflow: when the finite terms' magnitudes sum to the fp32 max
// or more (finite_absprod; absprod when every term is finite), some order overflows, so
//   - finite terms only (absprod finite): anywhere, +-inf and NaN included;
//   - with non-finite terms (absprod inf): the IEEE result c32 (an infinity never vanishes), or NaN.
// Without overflow, non-finite terms follow IEEE whatever the order: the interval is then NaN and
// only the reference's own value passes.
inline Interval accumulator_interval(double c32, double absprod, int64_t K, double finite_absprod) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  const bool can_overflow = finite_absprod >= std::numeric_limits<float>::max();
  if (can_overflow && absprod < kInf) return {-kInf, kInf, true};
  if (can_overflow && std::isinf(c32)) return {c32, c32, true};
  const double slack =
      (gamma(K) * absprod + half_ulp_f32(c32) + static_cast<double>(K) * kUnderflow32) * (1.0 + 1e-12);
  return {ceil_f32(c32 - slack), floor_f32(c32 + slack)};
}
inline Interval accumulator_interval(double c32, double absprod, int64_t K) {
  return accumulator_interval(c32, absprod, K, absprod);
}

}  // namespace moenum::verify
