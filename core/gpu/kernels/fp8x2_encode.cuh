// Two fp32 values to FP8 codes on the GPU, in hardware where there is one (sm_89+: one
// cvt.rn.satfinite per pair), else with the software encoder. Bitwise what fp8_encode_t (fp8.h) gives:
// tests/gpu/test_gpu_mx.cpp compares the two over every fp32 bit pattern.
#pragma once
#include <cuda_fp8.h>

#include <cstdint>

#include "moenum/fp8.h"

namespace moenum::gpu {

// Two fp32 values to FP8 codes, x in the low byte: what fp8_encode_t gives (round to nearest even,
// satfinite, NaN -> kFp8NaN whatever its sign, a value that rounds to zero keeps its sign).
template <Fp8Format F>
__device__ uint16_t fp8x2_encode(float x, float y) {
#if __CUDA_ARCH__ >= 890
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  const uint16_t both = __nv_cvt_float2_to_fp8x2(make_float2(x, y), __NV_SATFINITE, kind);
  auto fix = [](uint32_t code, float v) -> uint32_t {
    if (v != v) return kFp8NaN;
    return (code & 0x7Fu) == 0 ? (f32_bits(v) >> 24 & 0x80u) : code;
  };
  return static_cast<uint16_t>(fix(both & 0xFFu, x) | fix(both >> 8, y) << 8);
#else
  return static_cast<uint16_t>(fp8_encode_t<F>(x) | fp8_encode_t<F>(y) << 8);
#endif
}

}  // namespace moenum::gpu
