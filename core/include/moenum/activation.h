// SiLU and its derivative in fp32, shared by the CPU reference and the CUDA kernels (numerics.md §1):
// the same operations in the same order on both sides, no libm call, so the elementwise stages are
// bit-identical between CPU and GPU.
//
// Every fp32 operation goes through f32op:: so that its rounding is pinned down: on the device the
// _rn intrinsics (nvcc would otherwise contract a*b+c into an FMA, and --use_fast_math would change
// the division); on the host plain IEEE operators, which requires -ffp-contract=off (set for
// moenum_core) or a target without FMA. Fused operations are written as explicit fmaf.
// Device code must keep subnormals (nvcc's default -ftz=false; NOT --use_fast_math, whose -ftz=true
// flushes them even in the _rn intrinsics). Checked on the H200 (sm_90, nvcc 13.0, default flags):
// exp_f32, silu_f32 and dsilu_f32 bit-identical to the host on 60.7 million inputs, every 37th fp32
// bit pattern with |x| < 128, both signs, plus inf/NaN; with --use_fast_math, 0.1-1.5% differ.
#pragma once
#include <cmath>
#include <cstdint>

#include "moenum/bf16.h"  // MOENUM_HD, f32_bits, f32_from_bits

namespace moenum {
namespace f32op {

#if defined(__CUDA_ARCH__)
MOENUM_HD float add(float a, float b) { return __fadd_rn(a, b); }
MOENUM_HD float sub(float a, float b) { return __fsub_rn(a, b); }
MOENUM_HD float mul(float a, float b) { return __fmul_rn(a, b); }
MOENUM_HD float div(float a, float b) { return __fdiv_rn(a, b); }
MOENUM_HD float fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
#else
MOENUM_HD float add(float a, float b) { return a + b; }
MOENUM_HD float sub(float a, float b) { return a - b; }
MOENUM_HD float mul(float a, float b) { return a * b; }
MOENUM_HD float div(float a, float b) { return a / b; }
MOENUM_HD float fma(float a, float b, float c) { return std::fmaf(a, b, c); }
#endif

}  // namespace f32op

// e^x in fp32, max error about 1 ulp (tested against fp64 exp over a dense sweep).
// k = round(x / ln2) by the 1.5*2^23 trick; r = x - k*ln2 with a Cody-Waite split (ln2_hi has 15
// significant bits, so k*ln2_hi and x - k*ln2_hi are exact for |k| <= 150); e^r by a degree-7
// Taylor polynomial in Horner form with fmaf (|r| <= 0.35, truncation < 0.1 ulp); then 2^k by
// building the float's exponent field, in two steps where 2^k alone is not a normal float.
MOENUM_HD float exp_f32(float x) {
  if (!(x == x)) return x + x;  // NaN stays (quiet) NaN
  if (x > 89.0f) return f32_from_bits(0x7F800000u);   // +inf (also for x = +inf)
  if (x < -104.0f) return 0.0f;                       // below half the smallest subnormal
  const float kLog2e = 0x1.715476p+0f;
  const float kLn2Hi = 0x1.62e400p-1f;
  const float kLn2Lo = 0x1.7f7d1cp-20f;
  const float kShifter = 0x1.8p23f;
  const float kf = f32op::sub(f32op::add(f32op::mul(x, kLog2e), kShifter), kShifter);
  const int k = static_cast<int>(kf);
  float r = f32op::sub(x, f32op::mul(kf, kLn2Hi));
  r = f32op::fma(-kf, kLn2Lo, r);
  float p = 0x1.a01a02p-13f;  // 1/7!
  p = f32op::fma(p, r, 0x1.6c16c2p-10f);  // 1/6!
  p = f32op::fma(p, r, 0x1.111112p-7f);   // 1/5!
  p = f32op::fma(p, r, 0x1.555556p-5f);   // 1/4!
  p = f32op::fma(p, r, 0x1.555556p-3f);   // 1/3!
  p = f32op::fma(p, r, 0.5f);
  p = f32op::fma(p, r, 1.0f);
  p = f32op::fma(p, r, 1.0f);
  // p in [0.70, 1.42]; scale by 2^k, k in [-150, 128].
  if (k > 127) return f32op::mul(f32op::mul(p, 2.0f), f32_from_bits(254u << 23));  // may overflow to inf
  if (k < -126) {  // subnormal result: exact scaling into the normal range, then one rounding
    p = f32op::mul(p, f32_from_bits(static_cast<uint32_t>(k + 126 + 127) << 23));
    return f32op::mul(p, f32_from_bits(1u << 23));  // * 2^-126
  }
  return f32op::mul(p, f32_from_bits(static_cast<uint32_t>(k + 127) << 23));
}

// sigmoid(x) = 1 / (1 + e^-x)
MOENUM_HD float sigmoid_f32(float x) { return f32op::div(1.0f, f32op::add(1.0f, exp_f32(-x))); }

// silu(x) = x / (1 + e^-x)  (a quotient, not x * sigmoid(x): one rounding fewer)
MOENUM_HD float silu_f32(float x) { return f32op::div(x, f32op::add(1.0f, exp_f32(-x))); }

// silu'(x) = s * (1 + x * (1 - s)), s = sigmoid(x)
MOENUM_HD float dsilu_f32(float x) {
  const float s = sigmoid_f32(x);
  return f32op::mul(s, f32op::add(1.0f, f32op::mul(x, f32op::sub(1.0f, s))));
}

}  // namespace moenum
