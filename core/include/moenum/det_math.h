// Deterministic fp64 log, exp and cos(2*pi*u) for input generation and routing, made of IEEE basic
// operations only (no libm, no FMA contraction: the build passes -ffp-contract=off). libm results may
// differ in the last bit between glibc versions, which would make the "same" inputs differ between
// the CPU machine and the GPU machine; these give the same bits everywhere. Accuracy: a few ulp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "moenum/hd.h"

namespace moenum::det {

namespace detail {
MOENUM_HD uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
MOENUM_HD double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}
// Constants as bits: the same expressions on the host and the device.
MOENUM_HD double infinity() { return from_bits(0x7FF0000000000000ull); }
MOENUM_HD double quiet_nan() { return from_bits(0x7FF8000000000000ull); }
// c ? a : b by masks: compilers turn a plain ?: on doubles into a branch, which random lanes mispredict.
MOENUM_HD double select(bool c, double a, double b) {
  const uint64_t m = uint64_t{0} - uint64_t{c};
  return from_bits((bits(a) & m) | (bits(b) & ~m));
}
// 2^k for k in the normal exponent range, exactly.
MOENUM_HD double pow2(int k) { return from_bits(static_cast<uint64_t>(k + 1023) << 52); }
// ln 2 split so that k * kLn2Hi is exact for |k| < 2^11.
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kSqrt2 = 1.41421356237309514547e+00;
constexpr double kTwoPi = 6.28318530717958623200e+00;
}  // namespace detail

namespace detail {
// log of a finite x > 0 (subnormals included): x = m * 2^e with m in [sqrt(2)/2, sqrt(2)],
// log(m) = 2 atanh(s), s = (m-1)/(m+1), atanh(s) / s a polynomial in z = s^2.
struct LogArg {
  double s, z;
  int e;
};
// Written with selects, not branches: a batch's lanes take either side at random.
MOENUM_HD LogArg log_arg(double x) {
  const bool subnormal = x < 0x1p-1022;  // scale into the normal range first
  x = select(subnormal, x * 0x1p54, x);
  const uint64_t u = bits(x);
  int e = static_cast<int>((u >> 52) & 0x7FF) - 1023 - (subnormal ? 54 : 0);
  double m = from_bits((u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  const bool halve = m > kSqrt2;
  m = select(halve, m * 0.5, m);
  e += halve ? 1 : 0;
  const double s = (m - 1.0) / (m + 1.0);  // |s| <= 0.1716, z <= 0.0295
  return {s, s * s, e};
}
constexpr double kLogPolyTop = 1.0 / 25.0;
constexpr int kLogPolyTerms = 12;  // steps k = 11 .. 0
MOENUM_HD double log_poly_step(double poly, double z, int k) { return poly * z + 1.0 / (2 * k + 1); }
MOENUM_HD double log_combine(const LogArg& a, double poly) {
  const double log_m = 2.0 * a.s * poly;
  return a.e * kLn2Hi + (log_m + a.e * kLn2Lo);
}
MOENUM_HD bool log_is_plain(double x) { return x > 0 && x < detail::infinity(); }
MOENUM_HD double log_special(double x) {  // x not plain: NaN, negative, zero or +inf
  if (std::isnan(x) || x < 0) return detail::quiet_nan();
  if (x == 0) return -detail::infinity();
  return x;
}
}  // namespace detail

// Natural logarithm (detail::log_arg).
MOENUM_HD double log(double x) {
  if (!detail::log_is_plain(x)) return detail::log_special(x);
  const detail::LogArg a = detail::log_arg(x);
  double poly = detail::kLogPolyTop;
  for (int k = detail::kLogPolyTerms - 1; k >= 0; --k) poly = detail::log_poly_step(poly, a.z, k);
  return detail::log_combine(a, poly);
}

// e^x: x = k ln2 + r, |r| <= ln2/2, e^r by its Taylor series, then scaled by 2^k.
MOENUM_HD double exp(double x) {
  if (std::isnan(x)) return x;
  if (x > 709.782712893384) return detail::infinity();
  if (x < -745.1332191019412) return 0.0;
  const double k = std::floor(x * detail::kInvLn2 + 0.5);
  const double r = (x - k * detail::kLn2Hi) - k * detail::kLn2Lo;
  double p = 1.0;
  for (int n = 14; n >= 1; --n) p = 1.0 + p * r / n;
  int ki = static_cast<int>(k);
  if (ki < -1021) {  // subnormal result: scale in two exact steps
    p *= detail::pow2(-1000);
    ki += 1000;
  }
  return p * detail::pow2(ki);
}

// x^y for x > 0.
MOENUM_HD double pow(double x, double y) { return x == 1.0 || y == 0.0 ? 1.0 : det::exp(y * det::log(x)); }

namespace detail {
// cos(2 pi u) reduced: a in [0, 1/8] by the symmetries of cos, x = 2 pi a in [0, pi/4];
// cos(2 pi u) = scale * P(z) with P the Taylor series of cos (scale = sign) or of sin(x) / x
// (scale = sign * x, use_sin), in z = x^2.
struct Cos2PiArg {
  double z, scale;
  bool use_sin;
};
MOENUM_HD Cos2PiArg cos_2pi_arg(double u) {  // with selects, as log_arg
  double a = std::fabs(u - std::floor(u + 0.5));  // [0, 1/2]
  const bool flip = a > 0.25;                      // cos(2 pi a) = -cos(2 pi (1/2 - a))
  a = select(flip, 0.5 - a, a);
  const double sign = select(flip, -1.0, 1.0);
  const bool use_sin = a > 0.125;  // cos(2 pi a) = sin(2 pi (1/4 - a))
  const double x = select(use_sin, 0.25 - a, a) * kTwoPi;
  return {x * x, select(use_sin, sign * x, sign), use_sin};
}
// The series' highest term n, stepping down by 2 to 2 (cos) or 3 (sin): p = 1 - p z / (n (n-1)).
MOENUM_HD int cos_poly_top(bool use_sin) { return use_sin ? 19 : 20; }
MOENUM_HD int cos_poly_last(bool use_sin) { return use_sin ? 3 : 2; }
MOENUM_HD double cos_poly_step(double p, double z, int n) { return 1.0 - p * z / (n * (n - 1)); }
}  // namespace detail

// cos(2 pi u) (detail::cos_2pi_arg).
MOENUM_HD double cos_2pi(double u) {
  const detail::Cos2PiArg a = detail::cos_2pi_arg(u);
  double p = 1.0;
  for (int n = detail::cos_poly_top(a.use_sin); n >= detail::cos_poly_last(a.use_sin); n -= 2)
    p = detail::cos_poly_step(p, a.z, n);
  return a.scale * p;
}

// log and cos_2pi of up to kBatch values, bitwise those of each value: each polynomial step runs
// over all lanes at once (the lanes of one branch of cos_2pi gathered first), so the compiler
// vectorizes the divisions and their latency overlaps, where one value's steps form one long
// dependent chain.
inline constexpr int kBatch = 256;

inline void log_batch(const double* x, double* out, int n) {
  double s[kBatch], z[kBatch], poly[kBatch];
  int e[kBatch];
  for (int j = 0; j < n; ++j) {
    const detail::LogArg a = detail::log_is_plain(x[j]) ? detail::log_arg(x[j]) : detail::LogArg{0, 0, 0};
    s[j] = a.s, z[j] = a.z, e[j] = a.e;
    poly[j] = detail::kLogPolyTop;
  }
  for (int k = detail::kLogPolyTerms - 1; k >= 0; --k)
    for (int j = 0; j < n; ++j) poly[j] = detail::log_poly_step(poly[j], z[j], k);
  for (int j = 0; j < n; ++j)
    out[j] = detail::log_is_plain(x[j]) ? detail::log_combine({s[j], z[j], e[j]}, poly[j]) : detail::log_special(x[j]);
}

inline void cos_2pi_batch(const double* u, double* out, int n) {
  double z[2][kBatch], scale[2][kBatch], p[2][kBatch];
  int lane[2][kBatch], count[2] = {0, 0};
  for (int j = 0; j < n; ++j) {
    const detail::Cos2PiArg a = detail::cos_2pi_arg(u[j]);
    const int b = a.use_sin, i = count[b]++;
    z[b][i] = a.z, scale[b][i] = a.scale, p[b][i] = 1.0, lane[b][i] = j;
  }
  for (int b = 0; b < 2; ++b) {
    for (int m = detail::cos_poly_top(b); m >= detail::cos_poly_last(b); m -= 2)
      for (int i = 0; i < count[b]; ++i) p[b][i] = detail::cos_poly_step(p[b][i], z[b][i], m);
    for (int i = 0; i < count[b]; ++i) out[lane[b][i]] = scale[b][i] * p[b][i];
  }
}

}  // namespace moenum::det
