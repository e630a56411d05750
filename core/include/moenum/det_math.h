// Deterministic fp64 log, exp and cos(2*pi*u) for input generation and routing, made of IEEE basic
// operations only (no libm, no FMA contraction: the build passes -ffp-contract=off). libm results may
// differ in the last bit between glibc versions, which would make the "same" inputs differ between
// the CPU machine and the GPU machine; these give the same bits everywhere. Accuracy: a few ulp.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace moenum::det {

namespace detail {
inline uint64_t bits(double x) {
  uint64_t u;
  std::memcpy(&u, &x, 8);
  return u;
}
inline double from_bits(uint64_t u) {
  double x;
  std::memcpy(&x, &u, 8);
  return x;
}
// 2^k for k in the normal exponent range, exactly.
inline double pow2(int k) { return from_bits(static_cast<uint64_t>(k + 1023) << 52); }
// ln 2 split so that k * kLn2Hi is exact for |k| < 2^11.
constexpr double kLn2Hi = 6.93147180369123816490e-01;
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kInvLn2 = 1.44269504088896338700e+00;
constexpr double kSqrt2 = 1.41421356237309514547e+00;
constexpr double kTwoPi = 6.28318530717958623200e+00;
}  // namespace detail

// Natural logarithm: x = m * 2^e with m in [sqrt(2)/2, sqrt(2)], log(m) = 2 atanh(s), s = (m-1)/(m+1).
inline double log(double x) {
  if (std::isnan(x) || x < 0) return std::numeric_limits<double>::quiet_NaN();
  if (x == 0) return -std::numeric_limits<double>::infinity();
  if (std::isinf(x)) return x;
  int e = 0;
  if (x < 0x1p-1022) {  // subnormal: scale into the normal range first
    x *= 0x1p54;
    e -= 54;
  }
  const uint64_t u = detail::bits(x);
  e += static_cast<int>((u >> 52) & 0x7FF) - 1023;
  double m = detail::from_bits((u & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull);  // [1, 2)
  if (m > detail::kSqrt2) {
    m *= 0.5;
    e += 1;
  }
  const double s = (m - 1.0) / (m + 1.0), z = s * s;  // |s| <= 0.1716, z <= 0.0295
  double poly = 1.0 / 25.0;
  for (int k = 11; k >= 0; --k) poly = poly * z + 1.0 / (2 * k + 1);
  const double log_m = 2.0 * s * poly;
  return e * detail::kLn2Hi + (log_m + e * detail::kLn2Lo);
}

// e^x: x = k ln2 + r, |r| <= ln2/2, e^r by its Taylor series, then scaled by 2^k.
inline double exp(double x) {
  if (std::isnan(x)) return x;
  if (x > 709.782712893384) return std::numeric_limits<double>::infinity();
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
inline double pow(double x, double y) { return x == 1.0 || y == 0.0 ? 1.0 : det::exp(y * det::log(x)); }

// cos(2 pi u): reduce u to a in [0, 1/8] by the symmetries of cos, then a Taylor series of cos or sin
// on [0, pi/4].
inline double cos_2pi(double u) {
  double a = std::fabs(u - std::floor(u + 0.5));  // [0, 1/2]
  double sign = 1.0;
  if (a > 0.25) {  // cos(2 pi a) = -cos(2 pi (1/2 - a))
    a = 0.5 - a;
    sign = -1.0;
  }
  const bool use_sin = a > 0.125;  // cos(2 pi a) = sin(2 pi (1/4 - a))
  const double x = (use_sin ? 0.25 - a : a) * detail::kTwoPi, z = x * x;  // x in [0, pi/4]
  double p = 1.0;
  if (use_sin) {
    for (int n = 19; n >= 3; n -= 2) p = 1.0 - p * z / (n * (n - 1));
    return sign * x * p;
  }
  for (int n = 20; n >= 2; n -= 2) p = 1.0 - p * z / (n * (n - 1));
  return sign * p;
}

}  // namespace moenum::det
