// MXFP8 block quantization (numerics.md section 5): 32 consecutive elements share one E8M0 scale.
//   amax = max |x_i| (NaN elements skipped) -> code = e8m0_{rceil,floor}(amax)
//   q_i  = fp8_encode(fp32(x_i * 2^(127-code)))          x'_i = fp8_decode(q_i) * 2^(code-127)
// Consequences, pinned by tests/cpp/test_mx.cpp: a zero block gets code 0x00 and zero codes (-0 keeps
// its sign, 0x80); an all-NaN block gets code 0x00 and NaN codes 0x7F. A block holding +-inf gets code
// 0xFE; under the default te_kernel rule (inverse +0.0) +-inf -> NaN 0x7F and finite elements -> +-0,
// and a block with 0 < amax <= max normal * 2^-127 (code 0, inverse 1.0) quantizes to +-0; under the
// spec rule (inverse 2^-127) +-inf -> +-max normal and finite elements -> x*2^-127 rounded, i.e. +-0
// unless |x| is huge (> 2^117 for E4M3, > 2^110 for E5M2).
// Everything is MOENUM_HD and allocation-free, so a CUDA kernel can call the per-block functions.
// CUDA code must keep fp32 subnormals (no --use_fast_math / -ftz=true): subnormal inputs scaled by
// 2^127, amax*R at the rceil edge, the inverse scale of code 0xFE and the scale of code 0 all are.
#pragma once
#include <cstddef>
#include <cstdint>

#include "moenum/bf16.h"
#include "moenum/e8m0.h"
#include "moenum/fp8.h"

namespace moenum {

constexpr int kMxBlock = 32;

// Which 2^(127-code) the quantizer multiplies by (recipe.inv_scale; e8m0.h has both rules).
// TeKernel, TransformerEngine's kernel rule, is the default (numerics.md §5): what production runs.
enum class InvScaleRule : uint8_t { Spec = 0, TeKernel = 1 };
constexpr InvScaleRule kDefaultInvScale = InvScaleRule::TeKernel;

MOENUM_HD float mx_inv_scale(uint8_t code, InvScaleRule rule) {
  return rule == InvScaleRule::Spec ? e8m0_inv_scale(code) : e8m0_inv_scale_te_kernel(code);
}

// Running amax on magnitude bits: for non-NaN floats |a| < |b| iff (bits(a) & 0x7FFFFFFF) <
// (bits(b) & 0x7FFFFFFF), and NaNs (magnitude bits above 0x7F800000) are skipped as fmaxf skips them.
MOENUM_HD uint32_t mx_amax_bits_update(uint32_t acc, float x) {
  const uint32_t a = f32_bits(x) & 0x7FFFFFFFu;
  const uint32_t v = a <= 0x7F800000u ? a : 0u;
  return v > acc ? v : acc;
}

MOENUM_HD uint8_t mx_quantize_element(float x, float inv_scale, Fp8Format f) {
  return fp8_encode(x * inv_scale, f);
}

MOENUM_HD float mx_dequantize_element(uint8_t q, uint8_t scale, Fp8Format f) {
  return fp8_decode(q, f) * e8m0_to_f32(scale);
}

// One block: 32 elements x[0], x[xs], ..., codes to q[0], q[qs], ...; returns the scale code.
template <Fp8Format F>
MOENUM_HD uint8_t mx_quantize_block_t(const float* x, ptrdiff_t xs, uint8_t* q, ptrdiff_t qs, ScaleRounding r,
                                      InvScaleRule rule = kDefaultInvScale) {
  uint32_t amax = 0;
  for (int i = 0; i < kMxBlock; ++i) amax = mx_amax_bits_update(amax, x[i * xs]);
  const uint8_t code = e8m0_from_amax(f32_from_bits(amax), F, r);
  const float inv = mx_inv_scale(code, rule);
  for (int i = 0; i < kMxBlock; ++i) q[i * qs] = fp8_encode_t<F>(x[i * xs] * inv);
  return code;
}

MOENUM_HD uint8_t mx_quantize_block(const float* x, ptrdiff_t xs, uint8_t* q, ptrdiff_t qs, Fp8Format f,
                                    ScaleRounding r, InvScaleRule rule = kDefaultInvScale) {
  return f == Fp8Format::E4M3 ? mx_quantize_block_t<Fp8Format::E4M3>(x, xs, q, qs, r, rule)
                              : mx_quantize_block_t<Fp8Format::E5M2>(x, xs, q, qs, r, rule);
}

MOENUM_HD void mx_dequantize_block(const uint8_t* q, ptrdiff_t qs, uint8_t scale, float* y, ptrdiff_t ys,
                                   Fp8Format f) {
  const float s = e8m0_to_f32(scale);
  for (int i = 0; i < kMxBlock; ++i) y[i * ys] = fp8_decode(q[i * qs], f) * s;
}

// 2-D row-major x[rows][cols]. Rowwise: blocks of 32 along each row (cols % 32 == 0), scales
// [rows][cols/32]. Columnwise: blocks of 32 down each column (rows % 32 == 0), scales [rows/32][cols].
// The caller checks the divisibility. Blocks are independent: any split of the loops over threads
// gives the same bytes.
MOENUM_HD void mx_quantize_rowwise(const float* x, int64_t rows, int64_t cols, uint8_t* q, uint8_t* scales,
                                   Fp8Format f, ScaleRounding r, InvScaleRule rule = kDefaultInvScale) {
  const int64_t nb = cols / kMxBlock;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = i * cols + b * kMxBlock;
      scales[i * nb + b] = mx_quantize_block(x + off, 1, q + off, 1, f, r, rule);
    }
}

MOENUM_HD void mx_quantize_columnwise(const float* x, int64_t rows, int64_t cols, uint8_t* q,
                                      uint8_t* scales, Fp8Format f, ScaleRounding r,
                                      InvScaleRule rule = kDefaultInvScale) {
  // Column after column inside one 32-row strip, so neighbouring blocks share cache lines.
  for (int64_t rb = 0; rb < rows / kMxBlock; ++rb)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t off = rb * kMxBlock * cols + j;
      scales[rb * cols + j] = mx_quantize_block(x + off, cols, q + off, cols, f, r, rule);
    }
}

MOENUM_HD void mx_dequantize_rowwise(const uint8_t* q, const uint8_t* scales, int64_t rows, int64_t cols,
                                     float* y, Fp8Format f) {
  const int64_t nb = cols / kMxBlock;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t b = 0; b < nb; ++b) {
      const int64_t off = i * cols + b * kMxBlock;
      mx_dequantize_block(q + off, 1, scales[i * nb + b], y + off, 1, f);
    }
}

MOENUM_HD void mx_dequantize_columnwise(const uint8_t* q, const uint8_t* scales, int64_t rows, int64_t cols,
                                        float* y, Fp8Format f) {
  for (int64_t rb = 0; rb < rows / kMxBlock; ++rb)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t off = rb * kMxBlock * cols + j;
      mx_dequantize_block(q + off, cols, scales[rb * cols + j], y + off, cols, f);
    }
}

}  // namespace moenum
