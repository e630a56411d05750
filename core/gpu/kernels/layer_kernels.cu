#include "kernels/layer_kernels.h"

#include "cuda_check.h"
#include "moenum/activation.h"
#include "moenum/bf16.h"
#include "moenum/layer.h"

namespace moenum::gpu {
namespace {

using f32op::add;
using f32op::mul;

__device__ __forceinline__ float ld(const uint16_t* p, int64_t i) { return bf16_to_f32(p[i]); }

__global__ void counts_to_offsets_kernel(const int64_t* counts, int64_t* offsets, int groups) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int64_t acc = 0;
  offsets[0] = 0;
  for (int e = 0; e < groups; ++e) offsets[e + 1] = (acc += counts[e]);
}

// One block per row; 16-byte copies when the row allows it (cols % 8 == 0, as the GEMMs need).
__global__ void gather_rows_kernel(const uint16_t* src, const int32_t* row_token, int64_t cols, uint16_t* out) {
  const int64_t r = blockIdx.x;
  const int64_t t = row_token[r];
  if (cols % 8 == 0) {
    const int64_t n = cols / 8;
    uint4* o = reinterpret_cast<uint4*>(out + r * cols);
    const uint4* x = reinterpret_cast<const uint4*>(src + t * cols);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) o[j] = t >= 0 ? x[j] : make_uint4(0, 0, 0, 0);
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) out[r * cols + j] = t >= 0 ? src[t * cols + j] : 0;
  }
}

__global__ void act_fwd_kernel(uint16_t* h, const uint16_t* b1, const int32_t* row_expert, const float* row_prob,
                               int64_t F, uint16_t* a) {
  const int64_t r = blockIdx.x;
  const int64_t e = row_expert[r];
  const float p = row_prob[r];
  uint16_t* hr = h + r * 2 * F;
  for (int64_t j = threadIdx.x; j < F; j += blockDim.x) {
    float g = bf16_to_f32(hr[j]), l = bf16_to_f32(hr[F + j]);
    if (b1) {
      g = round_bf16(layer::fc1_separate_bias(g, ld(b1, e * 2 * F + j)));
      l = round_bf16(layer::fc1_separate_bias(l, ld(b1, e * 2 * F + F + j)));
      hr[j] = bf16_bits_rn(g);
      hr[F + j] = bf16_bits_rn(l);
    }
    a[r * F + j] = bf16_bits_rn(layer::probs_scale(layer::swiglu_fwd(g, l), p));
  }
}

__global__ void combine_fwd_kernel(const uint16_t* o, const uint16_t* b2, const int32_t* row_expert,
                                   const float* row_prob, const int32_t* crow, int64_t k, int64_t H, uint16_t* y) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = crow[t * k + i];
      if (r < 0) continue;
      const float out = b2 ? round_bf16(layer::fc2_bias(ld(o, r * H + c), ld(b2, row_expert[r] * H + c), row_prob[r]))
                           : ld(o, r * H + c);
      acc = add(acc, out);
    }
    y[t * H + c] = bf16_bits_rn(acc);
  }
}

// One warp per row: the two dot products are reduced in a fixed order (each lane sequentially over
// its strided columns, then a fixed butterfly), so the result does not depend on timing.
__global__ void act_bwd_kernel(const uint16_t* da, const uint16_t* h, const uint16_t* dy_rows, const uint16_t* b2,
                               const int32_t* row_expert, const float* row_prob, int64_t rows, int64_t F, int64_t H,
                               uint16_t* dh, float* dp) {
  const int64_t r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  const int64_t e = row_expert[r];
  const float p = row_prob[r];
  const uint16_t* hr = h + r * 2 * F;
  float dp_act = 0.0f, dp_bias = 0.0f;
  for (int64_t j = lane; j < F; j += 32) {
    const float g = bf16_to_f32(hr[j]), l = bf16_to_f32(hr[F + j]);
    const float d = ld(da, r * F + j);
    const layer::SwigluGrad<float> grad = layer::swiglu_bwd(d, g, l, p);
    dh[r * 2 * F + j] = bf16_bits_rn(grad.dg);
    dh[r * 2 * F + F + j] = bf16_bits_rn(grad.dl);
    dp_act = add(dp_act, mul(d, layer::swiglu_fwd(g, l)));
  }
  if (b2)
    for (int64_t c = lane; c < H; c += 32) dp_bias = add(dp_bias, mul(ld(dy_rows, r * H + c), ld(b2, e * H + c)));
  for (int off = 16; off > 0; off /= 2) {
    dp_act = add(dp_act, __shfl_xor_sync(0xffffffffu, dp_act, off));
    dp_bias = add(dp_bias, __shfl_xor_sync(0xffffffffu, dp_bias, off));
  }
  if (lane == 0) dp[r] = b2 ? add(dp_bias, dp_act) : dp_act;
}

// grid (groups, column blocks); each thread owns one column of db1 or db2 of one expert.
__global__ void bias_grads_kernel(const uint16_t* dh, const uint16_t* dy_rows, const float* row_prob,
                                  const int64_t* offsets, int64_t F, int64_t H, float* db1, float* db2) {
  const int64_t e = blockIdx.x;
  const int64_t c = blockIdx.y * blockDim.x + threadIdx.x;
  const int64_t r0 = offsets[e], r1 = offsets[e + 1];
  if (c < 2 * F) {
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc = add(acc, ld(dh, r * 2 * F + c));
    db1[e * 2 * F + c] = acc;
  } else if (c < 2 * F + H) {
    const int64_t j = c - 2 * F;
    float acc = 0.0f;
    for (int64_t r = r0; r < r1; ++r) acc = add(acc, mul(row_prob[r], ld(dy_rows, r * H + j)));
    db2[e * H + j] = acc;
  }
}

__global__ void combine_bwd_kernel(const uint16_t* dx_rows, const float* dp, const int32_t* crow,
                                   const int32_t* cslot, int64_t k, int64_t H, uint16_t* dx, float* dprobs) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    float acc = 0.0f;
    for (int64_t i = 0; i < k; ++i) {
      const int32_t r = crow[t * k + i];
      if (r >= 0) acc = add(acc, ld(dx_rows, r * H + c));
    }
    dx[t * H + c] = bf16_bits_rn(acc);
  }
  if (threadIdx.x < k) {
    const int32_t r = crow[t * k + threadIdx.x];
    const int32_t slot = cslot[t * k + threadIdx.x];
    if (r >= 0 && slot >= 0) dprobs[t * k + slot] = dp[r];
  }
}

int threads_for(int64_t cols) { return cols >= 256 ? 256 : (cols >= 128 ? 128 : 64); }

}  // namespace

void launch_counts_to_offsets(const int64_t* counts, int64_t* offsets, int groups, cudaStream_t s) {
  counts_to_offsets_kernel<<<1, 32, 0, s>>>(counts, offsets, groups);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_gather_rows(const uint16_t* src, const int32_t* row_token, int64_t rows, int64_t cols, uint16_t* out,
                        cudaStream_t s) {
  if (rows == 0) return;
  gather_rows_kernel<<<rows, 128, 0, s>>>(src, row_token, cols, out);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_act_fwd(uint16_t* h, const uint16_t* b1, const int32_t* row_expert, const float* row_prob,
                    int64_t rows, int64_t F, uint16_t* a, cudaStream_t s) {
  if (rows == 0) return;
  act_fwd_kernel<<<rows, threads_for(F), 0, s>>>(h, b1, row_expert, row_prob, F, a);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_combine_fwd(const uint16_t* o, const uint16_t* b2, const int32_t* row_expert, const float* row_prob,
                        const int32_t* crow, int64_t T, int64_t k, int64_t H, uint16_t* y, cudaStream_t s) {
  if (T == 0) return;
  combine_fwd_kernel<<<T, threads_for(H), 0, s>>>(o, b2, row_expert, row_prob, crow, k, H, y);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_act_bwd(const uint16_t* da, const uint16_t* h, const uint16_t* dy_rows, const uint16_t* b2,
                    const int32_t* row_expert, const float* row_prob, int64_t rows, int64_t F, int64_t H,
                    uint16_t* dh, float* dp, cudaStream_t s) {
  if (rows == 0) return;
  const int warps = 8;
  act_bwd_kernel<<<(rows + warps - 1) / warps, warps * 32, 0, s>>>(da, h, dy_rows, b2, row_expert, row_prob, rows,
                                                                   F, H, dh, dp);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_bias_grads(const uint16_t* dh, const uint16_t* dy_rows, const float* row_prob, const int64_t* offsets,
                       int groups, int64_t F, int64_t H, float* db1, float* db2, cudaStream_t s) {
  if (groups == 0) return;
  const int threads = 128;
  dim3 grid(groups, static_cast<unsigned>((2 * F + H + threads - 1) / threads));
  bias_grads_kernel<<<grid, threads, 0, s>>>(dh, dy_rows, row_prob, offsets, F, H, db1, db2);
  MOENUM_CUDA_LAUNCH_CHECK();
}

void launch_combine_bwd(const uint16_t* dx_rows, const float* dp, const int32_t* crow, const int32_t* cslot,
                        int64_t T, int64_t k, int64_t H, uint16_t* dx, float* dprobs, cudaStream_t s) {
  if (T == 0) return;
  int threads = threads_for(H);
  while (threads < k) threads *= 2;
  combine_bwd_kernel<<<T, threads, 0, s>>>(dx_rows, dp, crow, cslot, k, H, dx, dprobs);
  MOENUM_CUDA_LAUNCH_CHECK();
}

}  // namespace moenum::gpu
