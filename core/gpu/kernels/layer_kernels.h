// The elementwise and data-movement kernels of the grouped MLP (numerics.md §1), launched on a
// stream with no host synchronisation. bf16 tensors are passed as their 16-bit patterns. Every
// rounding goes through the shared headers (bf16.h, activation.h), so fed the same inputs these
// stages are bit-identical to the CPU reference.
//
// Row buffers hold the dispatched rows of all EP ranks concatenated (rank 0's segments first), so
// expert segments appear in ascending global expert id; segment e is [offsets[e], offsets[e+1]).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace moenum::gpu {

// offsets[0] = 0, offsets[e+1] = offsets[e] + counts[e] (on the device: counts never leave it).
void launch_counts_to_offsets(const int64_t* counts, int64_t* offsets, int groups, cudaStream_t s);

// out[r, :] = src[row_token[r], :], or zeros where row_token[r] < 0 (zero pad rows). Used for x
// (dispatch) and for dy (every row of token t receives dy_t: the combine has no probs).
void launch_gather_rows(const uint16_t* src, const int32_t* row_token, int64_t rows, int64_t cols, uint16_t* out,
                        cudaStream_t s);

// FC1 output -> FC2 input, per row r of expert e with prob p:
//   h = bf16(float(h) + float(b1[e]))   only when b1 != nullptr (bias_mode separate), in place
//   a = bf16( silu(g) * l * p ),  g = h[:, :F], l = h[:, F:]
void launch_act_fwd(uint16_t* h, const uint16_t* b1, const int32_t* row_expert, const float* row_prob,
                    int64_t rows, int64_t F, uint16_t* a, cudaStream_t s);

// FC2 output + bias (scaled by p, fp32) and the combine, per token t over its routed rows in
// ascending expert id (crow[t*k + i], -1 = none): y_t = bf16( sum_i float(bf16(o + b2*p)) ).
// b2 == nullptr (model without bias): out = o.
void launch_combine_fwd(const uint16_t* o, const uint16_t* b2, const int32_t* row_expert, const float* row_prob,
                        const int32_t* crow, int64_t T, int64_t k, int64_t H, uint16_t* y, cudaStream_t s);

// Activation backward, per row:
//   dact = float(da) * p;  dg = dact * l * silu'(g);  dl = dact * silu(g);  dh = bf16([dg, dl])
//   dp   = dot(dy_row, b2[e]) + dot(float(da), silu(g) * l)    (fp32; b2 == nullptr: the second alone)
void launch_act_bwd(const uint16_t* da, const uint16_t* h, const uint16_t* dy_rows, const uint16_t* b2,
                    const int32_t* row_expert, const float* row_prob, int64_t rows, int64_t F, int64_t H,
                    uint16_t* dh, float* dp, cudaStream_t s);

// Bias gradients per expert segment, fp32, summed over the segment's rows in row order:
//   db1[e, j] = sum float(dh[r, j]);   db2[e, c] = sum p_r * float(dy_rows[r, c])
void launch_bias_grads(const uint16_t* dh, const uint16_t* dy_rows, const float* row_prob, const int64_t* offsets,
                       int groups, int64_t F, int64_t H, float* db1, float* db2, cudaStream_t s);

// dx_t = bf16( sum over routed rows in ascending expert id of float(dx_rows) );
// dprobs[t, cslot[t*k+i]] = dp[crow[t*k+i]].
void launch_combine_bwd(const uint16_t* dx_rows, const float* dp, const int32_t* crow, const int32_t* cslot,
                        int64_t T, int64_t k, int64_t H, uint16_t* dx, float* dprobs, cudaStream_t s);

}  // namespace moenum::gpu
