// The interval rule for the elementwise stages of code that does not share moenum's functions
// (external backends: PyTorch, Megatron-core, a user's kernel). Their silu, exp and sigmoid differ
// from moenum's shared implementation (activation.h) by ulps, so comparing them bitwise would fail a
// correct backend. Such a stage is checked against an interval instead: the exact (fp64) value of the
// stage's formula on the backend's OWN inputs to the stage, widened by what any fp32 evaluation may
// lose, then pushed through the stage's own output rounding (monotone, like bounds.h):
//
//   a function (silu, silu')  its stated fp32 accuracy: kFunctionUlps fp32 ulps relative to the
//                             magnitude of its terms (x*s for silu; s*(1 + |x|(1-s)) for silu', which
//                             cancels near its root), plus kFunctionAbs (an exp that underflows, FTZ)
//   an fp32 multiply or add   one rounding: u = 2^-24 relative, plus 2^-150 underflow
//
// A bf16 intermediate (a double rounding) moves an element by up to half a bf16 ulp, 2^-9 relative:
// four orders of magnitude outside an interval of about 2^-20, so it is found, at the stage that made
// it. GEMM and reduction stages keep the bound of bounds.h for every backend.
#pragma once
#include <cmath>

#include "bounds.h"
#include "moenum/bf16.h"
#include "ulp.h"

namespace moenum::verify {

// Which rule a backend's elementwise stages are checked by (a backend trait).
enum class ElementwiseRule { kBitwise, kInterval };

// CUDA's expf is accurate to 2 ulps, glibc's and Sleef's to 1; x / (1 + e) adds two roundings.
inline constexpr double kFunctionUlps = 4.0;
inline constexpr double kFunctionAbs = 0x1p-126;  // the smallest normal fp32: flush-to-zero, exp underflow

// A value with an absolute error bound: the exact result lies in [v - err, v + err].
struct Approx {
  double v = 0.0, err = 0.0;
};

inline Approx exact(double v) { return {v, 0.0}; }

// One fp32 rounding of a result whose exact value lies in [v - err, v + err].
inline Approx rounded(Approx a) { return {a.v, a.err + kU32 * (std::fabs(a.v) + a.err) + kUnderflow32}; }

inline Approx mul(Approx a, Approx b) {
  return rounded({a.v * b.v, std::fabs(a.v) * b.err + std::fabs(b.v) * a.err + a.err * b.err});
}
inline Approx add(Approx a, Approx b) { return rounded({a.v + b.v, a.err + b.err}); }

inline double sigmoid64(double x) { return 1.0 / (1.0 + std::exp(-x)); }

inline Approx silu_approx(double x) {
  const double s = sigmoid64(x), v = x * s;
  return {v, kFunctionUlps * 2.0 * kU32 * std::fabs(v) + kFunctionAbs};
}
inline Approx dsilu_approx(double x) {
  const double s = sigmoid64(x);
  const double magnitude = s * (1.0 + std::fabs(x) * (1.0 - s));
  return {s * (1.0 + x * (1.0 - s)), kFunctionUlps * 2.0 * kU32 * magnitude + kFunctionAbs};
}

// The stage values allowed for an fp32 result in [v - err, v + err] stored on grid g.
inline Interval stored_interval(Approx a, Grid g) {
  double lo = ceil_f32(a.v - a.err), hi = floor_f32(a.v + a.err);
  if (lo > hi) lo = hi = double(float(a.v));  // narrower than one fp32 spacing
  if (g == Grid::kBf16) return {round_bf16(float(lo)), round_bf16(float(hi))};
  return {lo, hi};
}

// The stages' formulas (numerics.md §1), fp32 evaluation in any order.
inline Approx act_interval(double g, double l) { return mul(silu_approx(g), exact(l)); }                 // act
inline Approx a_interval(double g, double l, double p) { return mul(act_interval(g, l), exact(p)); }     // a
inline Approx out_interval(double o, double b2, double p, bool bias) {                                    // out
  return bias ? add(exact(o), mul(exact(b2), exact(p))) : exact(o);
}
inline Approx dg_interval(double da, double g, double l, double p) {                                       // dh[:F]
  return mul(mul(mul(exact(da), exact(p)), exact(l)), dsilu_approx(g));
}
inline Approx dl_interval(double da, double g, double p) {                                                  // dh[F:]
  return mul(mul(exact(da), exact(p)), silu_approx(g));
}

}  // namespace moenum::verify
