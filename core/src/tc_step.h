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

// Decodes v (a value of F) into m * 2^(e - frac); false if it is not one. Branch-free bit arithmetic
// on the fp32 pattern, so that a loop of it vectorises (every value of these formats is an fp32
// value: fp8 subnormals are fp32 normals).
template <Format F>
[[gnu::always_inline]] inline bool decode_lane(float v, int16_t& m, int16_t& e) {
  constexpr FormatBits fb = F == Format::kBf16 ? FormatBits{7, -126, 127, true}
                          : F == Format::kE4M3 ? FormatBits{3, -6, 8, false}
                                               : FormatBits{2, -14, 15, true};
  const uint32_t u = std::bit_cast<uint32_t>(v);
  const int32_t neg = int32_t(u >> 31);
  const int32_t field = int32_t((u >> 23) & 0xFF);
  const uint32_t mant = u & 0x7FFFFF;
  const bool special = field == 0xFF, nan = special && mant != 0, zero = (u & 0x7FFFFFFF) == 0;
  // v = full * 2^(ex - 23): full = 1.mant (normal) or 0.mant with ex = -126 (fp32 subnormal)
  const uint32_t full = field ? (mant | (1u << 23)) : mant;
  const int32_t ex = field ? field - 127 : -126;
  const int32_t below = (23 - fb.frac) + std::max(fb.e_min - ex, 0);  // bits under the format's grid
  const uint32_t shift = uint32_t(std::min(below, 31));
  const int32_t mi = int32_t(full >> shift);
  const bool on_grid = below < 32 && (full & ((1u << shift) - 1)) == 0;
  const bool nan_code = F == Format::kE4M3 && ex == fb.e_max && mi == 15;  // 480 would be e4m3's NaN code
  const bool finite_ok = !special && ex <= fb.e_max && on_grid && !nan_code;
  const int32_t ms = special ? (nan ? 0 : 1 - 2 * neg) : (mi ^ -neg) + neg;
  m = int16_t(ms);
  e = int16_t(special ? kSpecial : std::max(ex, fb.e_min));
  return zero || nan || (special && fb.inf) || finite_ok;
}

inline bool decode(float v, Format fmt, int16_t& m, int16_t& e) {
  switch (fmt) {
    case Format::kBf16: return decode_lane<Format::kBf16>(v, m, e);
    case Format::kE4M3: return decode_lane<Format::kE4M3>(v, m, e);
    default: return decode_lane<Format::kE5M2>(v, m, e);
  }
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
  const uint32_t sign = sum < 0 ? 0x80000000u : 0u;
  uint64_t u = sum < 0 ? uint64_t(-sum) : uint64_t(sum);
  const int msb = 63 - std::countl_zero(u);
  const int scale = emax - P.F;  // exponent of bit 0 of u
  const int lead = msb + scale;  // exponent of the leading bit
  const int drop = lead >= -126 ? msb + 1 - P.p : (-126 - (P.p - 1)) - scale;
  if (drop >= 64) return 0.0f;
  if (drop > 0) u = (u >> drop) << drop;
  if (u == 0) return 0.0f;
  uint32_t bits;
  if (lead > 127) {
    bits = 0x7F800000u;  // at or above 2^128: infinite
  } else if (lead >= -126) {  // normal: u has at most p <= 24 significant bits, all kept exactly
    const uint64_t frac = msb <= 23 ? u << (23 - msb) : u >> (msb - 23);
    bits = uint32_t(lead + 127) << 23 | (uint32_t(frac) & 0x7FFFFFu);
  } else {  // subnormal: u is on the 2^-149 grid (fp32) or a coarser one (E8M13)
    const int at = scale + 149;
    bits = uint32_t(at >= 0 ? u << at : u >> -at);
  }
  return std::bit_cast<float>(sign | bits);
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
  for (int l = 0; l < L; ++l) {  // branch-free, so that it vectorises (variable shifts under AVX2)
    const int32_t sh = ex[l] - emax + P.k_prod;  // <= k_prod
    const int32_t sign = prod[l] >> 31;          // 0 or -1
    const uint32_t mag = uint32_t((prod[l] ^ sign) - sign);
    const uint32_t left = uint32_t(std::max(sh, 0)), right = uint32_t(std::min(std::max(-sh, 0), 31));
    const int32_t t = int32_t((mag << left) >> right);  // truncation toward zero of the magnitude
    acc += (t ^ sign) - sign;
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
