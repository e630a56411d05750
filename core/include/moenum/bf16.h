// bf16 <-> fp32, round to nearest even, NaN kept quiet. Shared by the CPU reference and the CUDA
// kernels (__host__ __device__, no library calls), which is what keeps the two bit-identical.
#pragma once
#include <cstdint>
#include <cstring>

#include "moenum/hd.h"

namespace moenum {

MOENUM_HD uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
MOENUM_HD float f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// fp32 -> bf16 bits, round to nearest, ties to even; NaN -> quiet NaN of the same sign.
MOENUM_HD uint16_t bf16_bits_rn(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  return static_cast<uint16_t>(u >> 16);
}
MOENUM_HD float bf16_to_f32(uint16_t b) { return f32_from_bits(static_cast<uint32_t>(b) << 16); }
MOENUM_HD float round_bf16(float f) { return bf16_to_f32(bf16_bits_rn(f)); }

}  // namespace moenum
