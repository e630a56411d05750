// ULPs, defined once. A value's grid is its logical dtype: bf16, fp32 (bf16 and fp32 values are
// exact in float, fp64 values in double).
//
//   ulp_spacing(ref, grid)    the distance between adjacent grid values at |ref|: 2^(e - p + 1) for
//                             |ref| in [2^e, 2^(e+1)), the subnormal spacing below the normal range.
//   ulp_distance(v, ref, g)   |v - ref| / ulp_spacing(ref, g): the error in units of the grid's
//                             spacing at the reference (fractional when ref is off the grid, e.g.
//                             golden's fp64 values measured on the bf16 grid); 0 when both are NaN,
//                             +inf when only one is.
//   grid_step(v, n, grid)     the value n grid points above v (n < 0: below), +0 and -0 one point;
//                             what `--inject Nulp` plants. For v and its neighbour in one binade,
//                             ulp_distance(grid_step(v, n), v) == |n|.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "moenum/error.h"

namespace moenum::verify {

enum class Grid : int { kBf16, kF32, kF64 };

inline Grid parse_grid(const std::string& dtype) {
  if (dtype == "bf16") return Grid::kBf16;
  if (dtype == "fp32") return Grid::kF32;
  if (dtype == "fp64") return Grid::kF64;
  throw InternalError("no ULP grid for dtype '" + dtype + "' (bf16, fp32 or fp64)");
}
inline const char* grid_name(Grid g) { return g == Grid::kBf16 ? "bf16" : g == Grid::kF32 ? "fp32" : "fp64"; }

// The coarser of two grids: the error table measures ULPs there, so "1 ulp of bf16" means the same
// whichever backend is the baseline.
inline Grid coarser(Grid a, Grid b) { return static_cast<int>(a) < static_cast<int>(b) ? a : b; }

struct GridFormat {
  int precision;  // significand bits, the implicit one included
  int emin;       // exponent of the smallest normal
};
inline GridFormat grid_format(Grid g) {
  switch (g) {
    case Grid::kBf16: return {8, -126};
    case Grid::kF32: return {24, -126};
    default: return {53, -1022};
  }
}

// Read off the bits (frexp and ldexp cost most of the error table's time at production sizes):
// floor(log2 |ref|) is the biased exponent less 1023 for a normal fp64 value; zero and fp64 subnormals
// lie below every grid's emin, so they get the subnormal spacing. The spacing is 2^result.
inline int ulp_spacing_exponent(double ref, Grid g) {
  const GridFormat f = grid_format(g);
  uint64_t bits;
  std::memcpy(&bits, &ref, 8);
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  const int exponent = biased == 0 ? f.emin : std::max(biased - 1023, f.emin);
  return exponent - (f.precision - 1);  // >= -1074: fp64's smallest subnormal
}

// 2^p for p in [-1074, 1023], exactly.
inline double pow2_exact(int p) {
  const uint64_t bits = p >= -1022 ? static_cast<uint64_t>(p + 1023) << 52 : uint64_t{1} << (p + 1074);
  double out;
  std::memcpy(&out, &bits, 8);
  return out;
}

inline double ulp_spacing(double ref, Grid g) { return pow2_exact(ulp_spacing_exponent(ref, g)); }

// ulp_distance of two finite values (the error table's hot loop): no early return is needed, since
// v == ref gives a zero difference and an overflowing difference +inf, either way the product below.
inline double ulp_distance_finite(double v, double ref, Grid g) {
  const double d = std::fabs(v - ref);
  // dividing by a power of two is multiplying by its reciprocal (one rounding of the same value),
  // and a multiply is several times cheaper; the reciprocal exists unless the spacing is below 2^-1023
  const int p = ulp_spacing_exponent(ref, g);
  return p >= -1023 ? d * pow2_exact(-p) : d / pow2_exact(p);
}

inline double ulp_distance(double v, double ref, Grid g) {
  const bool nv = std::isnan(v), nr = std::isnan(ref);
  if (nv || nr) return nv && nr ? 0.0 : std::numeric_limits<double>::infinity();
  if (v == ref) return 0.0;  // the same infinity (inf - inf would be NaN)
  return ulp_distance_finite(v, ref, g);  // an infinity against anything else: +inf
}

// Integer position on the grid, monotone in the value, +0 and -0 both 0.
inline int64_t grid_ordinal(double v, Grid g) {
  if (g == Grid::kF64) {
    int64_t i;
    std::memcpy(&i, &v, 8);
    const int64_t mag = i & INT64_MAX;
    return i < 0 ? -mag : mag;
  }
  const float f = static_cast<float>(v);
  int32_t i;
  std::memcpy(&i, &f, 4);
  const int64_t mag = i & INT32_MAX;
  const int64_t o = i < 0 ? -mag : mag;
  return g == Grid::kBf16 ? o / 65536 : o;  // bf16 values have 16 zero low bits
}

inline double from_grid_ordinal(int64_t o, Grid g) {
  const bool neg = o < 0;
  const uint64_t mag = static_cast<uint64_t>(neg ? -o : o);
  if (g == Grid::kF64) {
    const uint64_t bits = mag | (neg ? (uint64_t{1} << 63) : 0);
    double v;
    std::memcpy(&v, &bits, 8);
    return v;
  }
  const uint32_t bits = static_cast<uint32_t>(g == Grid::kBf16 ? mag * 65536 : mag) | (neg ? 0x80000000u : 0u);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline double grid_step(double v, int64_t n, Grid g) { return from_grid_ordinal(grid_ordinal(v, g) + n, g); }

// Neighbours on the grid (one step apart).
inline bool grid_adjacent(double a, double b, Grid g) {
  const int64_t d = grid_ordinal(a, g) - grid_ordinal(b, g);
  return d == 1 || d == -1;
}

}  // namespace moenum::verify
