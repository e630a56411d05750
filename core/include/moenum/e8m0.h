// E8M0 block scales (numerics.md section 5): a code c means 2^(c-127); 0xFF is NaN; there is no zero.
// The scale of a block comes from its amax, rounded up (`rceil`, TransformerEngine / cuBLAS / torchao
// RCEIL, the default) or down (`floor`, the OCP MX v1.0 suggestion). Bit manipulation only, shared
// by the CPU reference and the CUDA kernels.
#pragma once
#include <cstdint>

#include "moenum/bf16.h"
#include "moenum/fp8.h"

namespace moenum {

enum class ScaleRounding : uint8_t { Rceil = 0, Floor = 1 };

constexpr uint8_t kE8M0NaN = 0xFF;
constexpr uint8_t kE8M0Max = 0xFE;  // 2^127, also the code of a block holding +-inf

// fp32(1/max normal): the constant amax is multiplied by (not divided: that is what TE does, and
// the rounded product is what makes the result differ from an exact ceil at the subnormal edge).
MOENUM_HD constexpr uint32_t fp8_max_rcp_bits(Fp8Format f) {
  return f == Fp8Format::E4M3 ? 0x3B124925u : 0x37924925u;
}
// floor(log2(max normal)): 8 for E4M3 (448), 15 for E5M2 (57344).
MOENUM_HD constexpr int fp8_emax(Fp8Format f) { return f == Fp8Format::E4M3 ? 8 : 15; }

// fp32 -> E8M0 rounding up to a power of two, saturating at 0xFE: the bit recipe of section 5,
// which is what cvt.rp.satfinite.ue8m0x2.f32 / __nv_cvt_float_to_e8m0(.., cudaRoundPosInf) give.
// The sign is ignored (an amax is never negative). NaN -> 0xFF, +-inf -> 0xFE, +-0 -> 0x00.
MOENUM_HD uint8_t e8m0_from_f32_rceil(float s) {
  const uint32_t a = f32_bits(s) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE8M0NaN;
  if (a == 0x7F800000u) return kE8M0Max;
  uint32_t e = a >> 23;
  const uint32_t m = a & 0x7FFFFFu;
  // Round up unless already a power of two, saturating, and noting that code 0 (2^-127) is the
  // fp32 subnormal 0x00400000: subnormals up to it round to code 0, above it to code 1.
  if (m > 0 && e != 0xFEu && !(e == 0 && m <= 0x400000u)) ++e;
  return static_cast<uint8_t>(e);
}

// Scale code of a block whose largest magnitude is `amax` (NaN elements excluded by the caller).
MOENUM_HD uint8_t e8m0_rceil(float amax, Fp8Format f) {
  const float s = amax * f32_from_bits(fp8_max_rcp_bits(f));  // one fp32 rounding, no FMA possible
  return e8m0_from_f32_rceil(s);
}

// OCP floor: code = clamp(floor(log2(amax)) - emax + 127, 0, 254), read off amax's exponent field
// (a subnormal amax has field 0, which clamps to code 0 as the exact log would). The specials follow
// the rceil ones: 0 -> 0x00, +inf -> 0xFE, NaN -> 0xFF.
MOENUM_HD uint8_t e8m0_floor(float amax, Fp8Format f) {
  const uint32_t a = f32_bits(amax) & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return kE8M0NaN;
  if (a == 0x7F800000u) return kE8M0Max;
  if (a == 0) return 0;
  const int code = static_cast<int>(a >> 23) - fp8_emax(f);
  return static_cast<uint8_t>(code < 0 ? 0 : (code > 0xFE ? 0xFE : code));
}

MOENUM_HD uint8_t e8m0_from_amax(float amax, Fp8Format f, ScaleRounding r) {
  return r == ScaleRounding::Rceil ? e8m0_rceil(amax, f) : e8m0_floor(amax, f);
}

// Code -> 2^(c-127), exact: code 0 is the fp32 subnormal 2^-127; 0xFF is NaN.
MOENUM_HD float e8m0_to_f32(uint8_t c) {
  if (c == kE8M0NaN) return f32_from_bits(0x7FC00000u);
  if (c == 0) return f32_from_bits(0x00400000u);
  return f32_from_bits(static_cast<uint32_t>(c) << 23);
}

// Code -> 2^(127-c), the factor elements are multiplied by before the FP8 cast, by the `spec` rule
// (recipe.inv_scale: spec): exact, 0xFE gives the subnormal 2^-127 (0x00400000), code 0 gives 2^127,
// 0xFF NaN. This is the OCP reading and TransformerEngine's CPU test reference (tests/cpp/test_common.h
// exp2f_rcp).
MOENUM_HD float e8m0_inv_scale(uint8_t c) {
  if (c == kE8M0NaN) return f32_from_bits(0x7FC00000u);
  if (c == kE8M0Max) return f32_from_bits(0x00400000u);
  return f32_from_bits(static_cast<uint32_t>(254 - c) << 23);
}

// The `te_kernel` rule, the default (numerics.md §5): TransformerEngine's GPU kernels (common/util/
// ptx.cuh exp2f_rcp: `biased_exp == 0 ? 1 : __int_as_float((254 - biased_exp) << 23)`) differ at the
// edges: code 0 gives 1.0 (not 2^127), code 0xFE gives +0.0 (bits (254-254)<<23), code 0xFF gives
// -inf (bits of -1<<23). So a +-inf block quantizes +-inf to NaN (inf*0) and every finite element to
// +-0, and a block with 0 < amax <= fmt_max*2^-127 (code 0) quantizes to zeros.
MOENUM_HD float e8m0_inv_scale_te_kernel(uint8_t c) {
  if (c == 0) return 1.0f;
  if (c == kE8M0NaN) return f32_from_bits(0xFF800000u);
  return f32_from_bits(static_cast<uint32_t>(254 - c) << 23);
}

}  // namespace moenum
