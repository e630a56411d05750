// The class of one compared element (numerics.md §7; architecture.md style notes), tested in order:
//
//   bitwise_equal     same bits (bitwise.h).
//   scale_off_by_one  MXFP8 stages: the element's block scale is one E8M0 code away from the
//                     reference's; the scale and every code of its block take this class (scales are
//                     compared first: one wrong scale explains up to 32 wrong codes).
//   tie_flip          neighbours on the stage's grid and the reference before its last rounding lies
//                     exactly on their midpoint; in a bounded stage only inside the bound.
//   within_bound      GEMM and reduction stages: inside the bound interval [lo, hi] (bounds.h), or
//                     NaN where the interval allows it (terms that can overflow fp32).
//   bound_violation   anything else; for a bit-exact stage the bound is zero, so every difference
//                     that is not a tie flip.
//
// A bit-exact stage passes when every element is bitwise_equal; a bounded stage when none is a
// bound_violation.
#pragma once
#include <array>
#include <cmath>
#include <cstdint>
#include <optional>

#include "bitwise.h"
#include "bounds.h"
#include "ulp.h"

namespace moenum::verify {

enum class Class : int8_t { kBitwiseEqual = 0, kScaleOffByOne, kTieFlip, kWithinBound, kBoundViolation };
inline constexpr int kNumClasses = 5;
inline constexpr const char* kClassNames[kNumClasses] = {"bitwise_equal", "scale_off_by_one", "tie_flip",
                                                         "within_bound", "bound_violation"};

// What a correct backend holds at one element.
struct Expected {
  double ref;                           // the value
  double pre = std::nan("");            // before its last rounding (NaN: unknown, no tie test)
  std::optional<Interval> bound;        // bounded stages
};

inline bool is_tie_flip(double value, double ref, double pre, Grid g) {
  if (!grid_adjacent(value, ref, g)) return false;
  const double mid = (value + ref) * 0.5;
  return std::isfinite(mid) && pre == mid;
}

inline Class classify(double value, const Expected& x, Grid g) {
  if (same_bits(value, x.ref, g)) return Class::kBitwiseEqual;
  const bool nan_allowed = x.bound && x.bound->nan_ok && std::isnan(value);
  if (x.bound && !nan_allowed && !(value >= x.bound->lo && value <= x.bound->hi))
    return Class::kBoundViolation;  // NaN too, unless an overflow could make it
  if (is_tie_flip(value, x.ref, x.pre, g)) return Class::kTieFlip;
  return x.bound ? Class::kWithinBound : Class::kBoundViolation;
}

// A bit-exact stage fails on any difference, a bounded one on a bound violation.
inline bool is_failing(Class c, bool bit_exact) {
  return bit_exact ? c != Class::kBitwiseEqual : c == Class::kBoundViolation;
}

struct ClassCounts {
  std::array<int64_t, kNumClasses> n{};
  void add(Class c, int64_t count = 1) { n[static_cast<int>(c)] += count; }
  ClassCounts& operator+=(const ClassCounts& o) {
    for (int i = 0; i < kNumClasses; ++i) n[i] += o.n[i];
    return *this;
  }
  int64_t total() const {
    int64_t t = 0;
    for (auto v : n) t += v;
    return t;
  }
};

}  // namespace moenum::verify
