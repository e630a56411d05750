// FP8 E4M3 / E5M2 <-> fp32, as numerics.md section 5 specifies: encode rounds to nearest, ties to
// even, with satfinite (|v| above max normal and +-inf -> +-max normal; NaN -> 0x7F whatever its
// sign, as PTX cvt.rn.satfinite.{e4m3,e5m2}x2.f32 does). Bit manipulation only, no library calls,
// so the CPU reference and the CUDA kernels share these exact rules.
#pragma once
#include <cstdint>

#include "moenum/bf16.h"  // MOENUM_HD, f32_bits, f32_from_bits

namespace moenum {

enum class Fp8Format : uint8_t { E4M3 = 0, E5M2 = 1 };

// The canonical NaN code written by the encoder for both formats (E4M3 NaN is S.1111.111; for E5M2
// 0x7F is S.11111.11, also a NaN, and is what the hardware cvt produces).
constexpr uint8_t kFp8NaN = 0x7F;

MOENUM_HD constexpr int fp8_mantissa_bits(Fp8Format f) { return f == Fp8Format::E4M3 ? 3 : 2; }
MOENUM_HD constexpr int fp8_bias(Fp8Format f) { return f == Fp8Format::E4M3 ? 7 : 15; }
// Largest finite code: 0x7E = 448 (E4M3), 0x7B = 57344 (E5M2).
MOENUM_HD constexpr uint8_t fp8_max_code(Fp8Format f) { return f == Fp8Format::E4M3 ? 0x7E : 0x7B; }
// The max normal as fp32 bits: 448 = 0x43E00000, 57344 = 0x47600000.
MOENUM_HD constexpr uint32_t fp8_max_f32_bits(Fp8Format f) {
  return f == Fp8Format::E4M3 ? 0x43E00000u : 0x47600000u;
}
MOENUM_HD float fp8_max_normal(Fp8Format f) { return f32_from_bits(fp8_max_f32_bits(f)); }

// v >> s rounded to nearest, ties to even (1 <= s <= 31, v + 2^s < 2^32): adding half-1 plus the
// kept lsb carries exactly when the remainder is above half, or equal to it with an odd lsb. A carry
// out of the mantissa field lands in the exponent field, which is exactly the right next value.
MOENUM_HD uint32_t rne_shift_right(uint32_t v, int s) {
  return (v + ((1u << (s - 1)) - 1u) + ((v >> s) & 1u)) >> s;
}

// fp32 -> FP8 code, round to nearest even, satfinite. Branch-free (selects only), so it vectorizes on
// the CPU and does not diverge on the GPU; the format is a compile-time constant.
template <Fp8Format F>
MOENUM_HD uint8_t fp8_encode_t(float x) {
  constexpr int m = fp8_mantissa_bits(F);
  constexpr int bias = fp8_bias(F);
  constexpr uint32_t min_normal_bits = static_cast<uint32_t>(127 + 1 - bias) << 23;
  // 2^(1-bias-m+23): an fp32 whose ulp is the FP8 subnormal unit 2^(1-bias-m).
  constexpr uint32_t sub_magic_bits = static_cast<uint32_t>(127 + 1 - bias - m + 23) << 23;
  const uint32_t u = f32_bits(x);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t a = u & 0x7FFFFFFFu;
  // FP8 normal range: re-bias the exponent field in place, then round the mantissa away. (Below the
  // range this wraps around harmlessly: the select below discards it.)
  const uint32_t normal = rne_shift_right(a - (static_cast<uint32_t>(127 - bias) << 23), 23 - m);
  // FP8 subnormal range (fp32 subnormals included): |x| + magic rounds |x| to a multiple of the unit,
  // ties to even, in one IEEE addition; the low bits of the sum count the units (8 or 4 units is the
  // smallest normal, whose code is the same count). Exact with or without flush-to-zero.
  const uint32_t sub = f32_bits(f32_from_bits(a) + f32_from_bits(sub_magic_bits)) - sub_magic_bits;
  uint32_t code = a >= min_normal_bits ? normal : sub;
  // At or above max normal (inf included) saturate; below it rounding never passes max normal.
  code = a >= fp8_max_f32_bits(F) ? fp8_max_code(F) : code;
  return a > 0x7F800000u ? kFp8NaN : static_cast<uint8_t>(sign | code);
}

MOENUM_HD uint8_t fp8_encode(float x, Fp8Format f) {
  return f == Fp8Format::E4M3 ? fp8_encode_t<Fp8Format::E4M3>(x) : fp8_encode_t<Fp8Format::E5M2>(x);
}

// FP8 code -> fp32, exact. E4M3 0x7F/0xFF and E5M2 exponent-31 NaNs decode to a quiet NaN with
// the code's sign; E5M2 +-inf to +-inf.
MOENUM_HD float fp8_decode(uint8_t c, Fp8Format f) {
  const uint32_t sign = static_cast<uint32_t>(c & 0x80u) << 24;
  const uint32_t mag = c & 0x7Fu;
  const int m = fp8_mantissa_bits(f);
  const int bias = fp8_bias(f);
  const uint32_t e = mag >> m;
  const uint32_t man = mag & ((1u << m) - 1u);
  if (f == Fp8Format::E4M3 && mag == 0x7Fu) return f32_from_bits(sign | 0x7FC00000u);
  if (f == Fp8Format::E5M2 && e == 31u) return f32_from_bits(sign | (man ? 0x7FC00000u : 0x7F800000u));
  if (e == 0) {
    // Subnormal: man * 2^(1-bias-m); a small integer times a power of two, exact in fp32.
    const float unit = f32_from_bits(static_cast<uint32_t>(127 + 1 - bias - m) << 23);
    return f32_from_bits(sign | f32_bits(static_cast<float>(man) * unit));
  }
  return f32_from_bits(sign | ((e + 127u - static_cast<uint32_t>(bias)) << 23) | (man << (23 - m)));
}

}  // namespace moenum
