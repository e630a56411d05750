// MXFP8 quantization on the GPU (numerics.md §5), using the shared per-block rules of mx.h so that
// codes and scales are bit-identical to the CPU reference's.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "moenum/mx.h"

namespace moenum::gpu {

// Three implementations of the same bytes. Pipelined (the default, mx_quantize_pipelined.cu): a
// persistent grid streaming 32 x 256 tiles through a cp.async shared-memory ring, both directions'
// codes written as whole 256-byte row segments; it needs 16-byte aligned x and q_col and 8-byte
// aligned q_row (cudaMalloc'd buffers) and falls back to Tiled otherwise. Vectorized: 16-byte loads
// and stores, one 32 x 256 tile per block, no prefetch; same alignment needs and fallback.
// Both convert to FP8 in hardware on sm_89+ (cvt.rn.satfinite) with the sign and NaN fixes of the
// software rule. Tiled: a 32 x 128 fp32 tile in shared memory, one thread per block of 32 and the
// software FP8 encoder. bench/RESULTS.md has their bandwidth; tests/gpu/test_gpu_mx.cpp holds all
// three to the CPU rules, bit for bit.
enum class MxQuantizeKernel { Tiled, Vectorized, Pipelined };

// One pass over a bf16 [rows, cols] tensor (row-major) producing both quantizations:
//   rowwise:    q_row [rows, cols], s_row [rows, cols/32]    (blocks of 32 along a row)
//   columnwise: q_col [rows, cols], s_col [rows/32, cols]    (blocks of 32 down a column)
// Scales rounded by `rounding`, elements multiplied by the inverse scale of `inv_scale` (mx.h).
// Plain (unswizzled) scale layouts. cols % 32 == 0 is required; the columnwise outputs are written
// only when rows % 32 == 0 (pass nullptr for them otherwise). Either pair may be nullptr.
void launch_mx_quantize_bf16(const uint16_t* x, int64_t rows, int64_t cols, Fp8Format fmt, ScaleRounding rounding,
                             InvScaleRule inv_scale, uint8_t* q_row, uint8_t* s_row, uint8_t* q_col, uint8_t* s_col,
                             cudaStream_t s, MxQuantizeKernel kernel = MxQuantizeKernel::Pipelined);

// Dequantize MXFP8 codes to bf16 for the Hopper path of the mxfp8 recipe (no native MXFP8 GEMM on
// sm_90: each GEMM runs bf16 on the dequantized operand values). out[i, j] = bf16(fp8(q[i, j]) *
// 2^(scale - 127)) with the scale of element (i, j) at s[i, j/32] (columnwise = false) or
// s[i/32, j] (columnwise = true). When the operands were quantized from bf16 tensors every such
// value is exact in bf16 (see mx_dequant_exact_in_bf16 in grouped_mlp.h for the argument); the
// kernel still checks it per element and adds the number of inexact elements (NaN never counts) to
// *inexact when inexact != nullptr.
void launch_mx_dequantize_bf16(const uint8_t* q, const uint8_t* s, int64_t rows, int64_t cols, Fp8Format fmt,
                               bool columnwise, uint16_t* out, unsigned int* inexact, cudaStream_t st);

// Index of scale (i, j) of a plain [rows, scale_cols] scale matrix in the cuBLAS sm_100 128x4
// swizzled layout, padded to [roundup(rows,128), roundup(scale_cols,4)] (numerics.md §5): i runs
// along the non-reduced dimension, j along the blocks of 32 of the reduced one.
__host__ __device__ inline int64_t mx_swizzle_index(int64_t i, int64_t j, int64_t scale_cols) {
  const int64_t col_tiles = (scale_cols + 3) / 4;
  return (i / 128 * col_tiles + j / 4) * 512 + (i % 128 % 32) * 16 + (i % 128 / 32) * 4 + j % 4;
}
inline int64_t mx_swizzled_size(int64_t rows, int64_t scale_cols) {
  return (rows + 127) / 128 * 128 * ((scale_cols + 3) / 4 * 4);
}

// Plain scales [rows, scale_cols] -> swizzled buffer of mx_swizzled_size(rows, scale_cols) bytes,
// padding zero. transposed = true reads the plain matrix as [scale_cols, rows] (columnwise scales
// [rows/32, cols]: there i runs over the columns and j over the row blocks).
void launch_mx_swizzle_scales(const uint8_t* plain, int64_t rows, int64_t scale_cols, bool transposed,
                              uint8_t* swizzled, cudaStream_t s);

}  // namespace moenum::gpu
