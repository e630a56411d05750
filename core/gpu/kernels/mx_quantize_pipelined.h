// The pipelined MXFP8 quantizer, the default behind launch_mx_quantize_bf16 (mx_quantize.h has the
// contract: same arguments, same bytes). Kept apart from the simpler kernels because of its size.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "moenum/mx.h"

namespace moenum::gpu {

// Whether the pipelined kernel can take these buffers: it moves x and q_col in 16-byte and q_row in
// 8-byte pieces (nullptr outputs do not count).
bool mx_quantize_pipelined_supports(const uint16_t* x, const uint8_t* q_row, const uint8_t* q_col);

// Preconditions as launch_mx_quantize_bf16's, plus mx_quantize_pipelined_supports and rows, cols > 0.
void launch_mx_quantize_pipelined(const uint16_t* x, int64_t rows, int64_t cols, Fp8Format fmt,
                                  ScaleRounding rounding, InvScaleRule inv_scale, uint8_t* q_row, uint8_t* s_row,
                                  uint8_t* q_col, uint8_t* s_col, cudaStream_t s);

}  // namespace moenum::gpu
