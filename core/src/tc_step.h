// The fused step of moenum/tc.h on decoded operands, shared by the scalar and the AVX2 builds of the
// drivers (tc_model.cpp). Operands are decoded once into signed integer significands and exponents
// (value = m * 2^(e - frac)), so a step is integer arithmetic on L lanes that the compiler vectorises.
#pragma once
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "moenum/tc.h"

namespace moenum::tc::detail {

// e of a NaN or infinite element; its m is then +1 (+inf), -1 (-inf) or 0 (NaN).
inline constexpr int16_t kSpecial = std::numeric_limits<int16_t>::max();

struct FormatBits {
  int frac;   // fraction bits of the significand
  int e_min;  // exponent of the smallest normal (subnormals keep it)
  int e_max;  // exponent of the largest finite binade
  bool inf;   // has infinities
};
inline FormatBits format_bits(Format f) {
  switch (f) {
    case Format::kBf16: return {7, -126, 127, true};
    case Format::kE4M3: return {3, -6, 8, false};
    default: return {2, -14, 15, true};
  }
}

// Everything one step needs besides the operands.
struct StepParams {
  int L;       // products per step
  int F;       // fraction bits kept below 2^e_max
  int p;       // result significand bits
  int k_prod;  // F - frac_a - frac_b: left shift of a product at e_max
  int k_c;     // F - 23: left shift of c at e_max
};
inline StepParams step_params(Arch arch, Format fmt) {
  const StepShape s = step_shape(arch, fmt);
  const int frac = format_bits(fmt).frac;
  return {s.products, s.frac_bits, s.result_bits, s.frac_bits - 2 * frac, s.frac_bits - 23};
}

// Decodes v (a value of fmt) into m * 2^(e - frac); false if it is not one.
inline bool decode(float v, Format fmt, int16_t& m, int16_t& e) {
  const FormatBits fb = format_bits(fmt);
  if (std::isnan(v)) return m = 0, e = kSpecial, true;
  if (std::isinf(v)) return fb.inf ? (m = v > 0 ? 1 : -1, e = kSpecial, true) : false;
  if (v == 0.0f) return m = 0, e = int16_t(fb.e_min), true;
  int x = 0;
  const double s = std::frexp(double(v), &x);  // |s| in [0.5, 1)
  int ex = x - 1;                              // v = 2s * 2^ex
  if (ex > fb.e_max) return false;
  if (ex < fb.e_min) ex = fb.e_min;
  const double mi = std::ldexp(double(v), fb.frac - ex);
  if (mi != std::trunc(mi) || std::fabs(mi) >= double(1 << (fb.frac + 1))) return false;
  if (fmt == Format::kE4M3 && std::fabs(mi) == 15 && ex == fb.e_max) return false;  // 480: the NaN code
  m = int16_t(mi);
  e = int16_t(ex);
  return true;
}

inline float nan_result() { return std::bit_cast<float>(0x7FFFFFFFu); }

// c as Mc * 2^(ec - 23), zero with kZeroExponent.
inline void decode_c(float c, int32_t& mc, int32_t& ec) {
  const uint32_t u = std::bit_cast<uint32_t>(c);
  const int32_t field = int32_t((u >> 23) & 0xFF);
  int32_t mag = int32_t(u & 0x7FFFFF);
  if (field == 0 && mag == 0) {
    mc = 0, ec = kZeroExponent;
    return;
  }
  if (field) mag |= 1 << 23;
  ec = field ? field - 127 : -126;
  mc = (u >> 31) ? -mag : mag;
}

// sum * 2^(emax - F), rounded toward zero to p significand bits, exponent >= -126 (subnormals on the
// grid 2^(-126 - (p - 1))); zero is +0, a value >= 2^128 infinite.
inline float round_rz(int64_t sum, int32_t emax, const StepParams& P) {
  if (sum == 0) return 0.0f;
  const bool neg = sum < 0;
  uint64_t u = neg ? uint64_t(-sum) : uint64_t(sum);
  const int msb = 63 - std::countl_zero(u);
  const int scale = emax - P.F;  // exponent of bit 0 of u
  const int drop = msb + scale >= -126 ? msb + 1 - P.p : (-126 - (P.p - 1)) - scale;
  if (drop >= 64) return 0.0f;
  if (drop > 0) u = (u >> drop) << drop;
  if (u == 0) return 0.0f;
  const float r = float(std::ldexp(double(u), scale));
  return neg ? -r : r;
}

// The result of a step holding a NaN or an infinity (in an operand or in c).
inline float special_step(const int16_t* ma, const int16_t* ea, const int16_t* mb, const int16_t* eb, int n, float c) {
  bool nan = std::isnan(c), pos = c == INFINITY, neg = c == -INFINITY;
  for (int l = 0; l < n; ++l) {
    const bool sa = ea[l] == kSpecial, sb = eb[l] == kSpecial;
    if (!sa && !sb) continue;
    if ((sa && ma[l] == 0) || (sb && mb[l] == 0)) { nan = true; continue; }          // a NaN operand
    if ((!sa && ma[l] == 0) || (!sb && mb[l] == 0)) { nan = true; continue; }        // inf * 0
    const bool negative = (ma[l] < 0) != (mb[l] < 0);
    (negative ? neg : pos) = true;
  }
  if (nan || (pos && neg)) return nan_result();
  return pos ? INFINITY : -INFINITY;
}

// One fused step over L products (a shorter last step is padded with zeros, which change nothing:
// see tc.h).
template <int L>
[[gnu::always_inline]] inline float fused_step(const int16_t* ma, const int16_t* ea, const int16_t* mb,
                                               const int16_t* eb, float c, const StepParams& P) {
  int32_t prod[L], ex[L];
  int special = !std::isfinite(c);
  for (int l = 0; l < L; ++l) {
    const int32_t xa = ea[l], xb = eb[l];
    special |= (xa == kSpecial) | (xb == kSpecial);
    prod[l] = int32_t(ma[l]) * int32_t(mb[l]);
    ex[l] = prod[l] == 0 ? kZeroExponent : xa + xb;
  }
  if (special) return special_step(ma, ea, mb, eb, L, c);
  int32_t mc, ec;
  decode_c(c, mc, ec);
  int32_t emax = ec;
  for (int l = 0; l < L; ++l) emax = std::max(emax, ex[l]);
  int32_t acc = 0;  // |term| < 2^(16 + 11) for bf16, 16 of them: fits
  for (int l = 0; l < L; ++l) {
    const int32_t sh = ex[l] - emax + P.k_prod;  // <= k_prod
    const int32_t mag = prod[l] < 0 ? -prod[l] : prod[l];
    const int32_t t = sh >= 0 ? mag << sh : mag >> std::min(-sh, 31);
    acc += prod[l] < 0 ? -t : t;
  }
  const int32_t shc = ec - emax + P.k_c;
  const int64_t magc = mc < 0 ? -int64_t(mc) : int64_t(mc);
  const int64_t tc = shc >= 0 ? magc << shc : magc >> std::min(-shc, 63);
  return round_rz(int64_t(acc) + (mc < 0 ? -tc : tc), emax, P);
}

// c chained through the steps over one row pair of decoded operands, K elements each, in k order.
template <int L>
[[gnu::always_inline]] inline float chain(const int16_t* ma, const int16_t* ea, const int16_t* mb, const int16_t* eb,
                                          int64_t K, float c, const StepParams& P) {
  int64_t k = 0;
  for (; k + L <= K; k += L) c = fused_step<L>(ma + k, ea + k, mb + k, eb + k, c, P);
  if (k < K) {
    int16_t pa[L] = {}, qa[L] = {}, pb[L] = {}, qb[L] = {};
    std::copy(ma + k, ma + K, pa), std::copy(ea + k, ea + K, qa);
    std::copy(mb + k, mb + K, pb), std::copy(eb + k, eb + K, qb);
    c = fused_step<L>(pa, qa, pb, qb, c, P);
  }
  return c;
}

}  // namespace moenum::tc::detail
