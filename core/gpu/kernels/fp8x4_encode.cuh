// Four fp32 values to four FP8 codes in one 32-bit word (value k in byte k), bitwise what fp8_encode_t
// (fp8.h) gives, for the pipelined MXFP8 quantizer. Two hardware cvt.rn.satfinite pairs, then the two
// corrections of fp8x2_encode done on all four bytes at once with integer ops instead of per-value
// compares: a NaN becomes kFp8NaN whatever its sign, and a value that rounds to zero keeps its sign.
// tests/gpu/test_gpu_fp8_encode.cu compares it with fp8_encode_t over every fp32 bit pattern.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "moenum/fp8.h"

namespace moenum::gpu {

// `signs` carries the sign of value k in bit 8k+7 (the other bits are ignored), so a caller holding
// bf16 inputs can pass their high bytes with one byte permute instead of re-reading the fp32 values.
// It is only read for values that are not NaN; for those it must be the value's own sign.
template <Fp8Format F>
__device__ __forceinline__ uint32_t fp8x4_encode(float a, float b, float c, float d, uint32_t signs) {
#if __CUDA_ARCH__ >= 890
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, kind);
  const uint32_t mag = (lo | hi << 16) & 0x7F7F7F7Fu;
  // Under satfinite the only magnitudes above max normal are NaN codes: 0x7F for E4M3, 0x7D..0x7F for
  // E5M2 (0x7C, inf, is never produced). Adding the distance to 0x80 sets bit 7 of exactly those bytes;
  // no byte carries into the next since every magnitude is at most 0x7F.
  constexpr uint32_t to_nan = F == Fp8Format::E4M3 ? 0x01010101u : 0x03030303u;
  const uint32_t probe = mag + to_nan;
  const uint32_t nan = probe & 0x80808080u;
  // Every non-NaN byte takes the value's sign: the hardware's own for nonzero codes, and the one a
  // rounded-to-zero value must keep. NaN bytes become 0x7F (E4M3's magnitude already is).
  uint32_t out = mag | (signs & ~probe & 0x80808080u);
  if constexpr (F == Fp8Format::E5M2) out |= nan - (nan >> 7);
  else (void)nan;
  return out;
#else
  return uint32_t{fp8_encode_t<F>(a)} | uint32_t{fp8_encode_t<F>(b)} << 8 | uint32_t{fp8_encode_t<F>(c)} << 16 |
         uint32_t{fp8_encode_t<F>(d)} << 24;
#endif
}

}  // namespace moenum::gpu
