// The grouped MoE MLP forward and backward on the GPU (numerics.md §1), shared by gpu.grouped and
// gpu.multistream: they differ only in the GemmEngine that runs the six GEMMs. forward() and
// backward() only enqueue work on the stream (the grouped engine never syncs), which is what lets
// the whole layer be captured in a CUDA graph and replayed after set_plan() with new routing.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "device_buffer.h"
#include "gemm/grouped_gemm.h"
#include "moenum/backend.h"
#include "moenum/layer.h"
#include "moenum/mx.h"

namespace moenum::gpu {

// The plan of all EP ranks concatenated (rank order = ascending global expert id), as flat arrays.
struct FlatPlan {
  int64_t rows = 0;
  std::vector<int32_t> row_token, row_expert, row_slot;
  std::vector<float> row_prob;
  std::vector<int64_t> counts;        // E, padded
  std::vector<int32_t> crow, cslot;   // T x k: each token's routed rows, ascending expert id
};
FlatPlan flatten_plan(const Routing& routing, const DispatchPlan& plan, int64_t T, int64_t E, int64_t k);

// The mxfp8 recipe on Hopper (numerics.md §4, §5): no native MXFP8 GEMM on sm_90, so every GEMM runs
// in bf16 on the EXACT dequantized MXFP8 values of its operands, each quantized on the GPU from its
// bf16 tensor by the shared per-block rules (mx.h through kernels/mx_quantize.cu), in TE's directions
// (reference/mxfp8_policy.h has the table): x, a, w1, w2 E4M3; dy and dh (operand A of the dgrad and
// wgrad GEMMs) `grad`; scales rounded by `rounding`, elements multiplied by the inverse scale of
// `inv_scale` (recipe.inv_scale).
//
// Why bf16 holds the dequantized values exactly (so the GEMM sees the same operands as the reference,
// which dequantizes to fp32): v = fp8(q) * 2^(c-127) has at most 4 significant bits (E4M3; 3 for
// E5M2), so v is a bf16 value unless it lies below the bf16 normal range (|v| < 2^-126) off the bf16
// subnormal grid (multiples of 2^-133). That needs a grid spacing finer than 2^-133 in v's binade;
// but the operand x itself is bf16 (a multiple of 2^-133), and in a binade whose spacing divides
// 2^-133 every multiple of 2^-133 is a grid point, so round-to-nearest returns v = x exactly; in a
// binade with coarser spacing, v is a multiple of that spacing, hence of 2^-133. Saturated values
// (floor scales) and the +-inf block (code 0xFE: +-448 * 2^127 overflows to +-inf in fp32 too) are
// no exception. So the "extreme subnormal edge" (codes 0..2 for E4M3, 0..9 for E5M2, where the
// fp8 x scale grid is finer than bf16's) is never reached from bf16 inputs: the dequantize kernel
// still counts inexact elements (attr mx_bf16_inexact) and tests/gpu/test_gpu_mxfp8.cpp checks the
// property exhaustively over every bf16 value, every scale code and both formats.
struct MxRecipe {
  bool on = false;
  Fp8Format grad = Fp8Format::E4M3;
  ScaleRounding rounding = ScaleRounding::Rceil;
  InvScaleRule inv_scale = kDefaultInvScale;
};

// One MXFP8-quantized source tensor, both directions from one pass, in the natural 2-D layout
// [rows, cols] (weights: all experts stacked, [E * rows_e, cols]): rowwise codes/scales
// [rows, cols] / [rows, cols/32], columnwise [rows, cols] / [rows/32, cols], plain layouts; and the
// dequantized bf16 values of each direction (weights: one buffer, or one per expert when discrete).
struct MxTensor {
  Fp8Format fmt = Fp8Format::E4M3;
  int64_t rows = 0, cols = 0;
  DeviceBuffer<uint8_t> q_row, s_row, q_col, s_col;
  std::vector<DeviceBuffer<uint16_t>> d_row, d_col;
};

struct MlpOptions {
  bool bias = true;                   // model.bias: b1/b2 used, db1/db2 produced
  bool fc1_bias_in_epilogue = false;  // bias_mode epilogue (engine must support it)
  bool discrete_weights = false;      // one allocation per expert instead of one grouped tensor
  MxRecipe mx;                        // recipe mxfp8 (Hopper path); off: bf16
};

class GroupedMlp {
 public:
  GroupedMlp(const RunContext& ctx, std::unique_ptr<GemmEngine> engine, MlpOptions opt);
  // Replace the routing/plan (same row count: buffers are reused, so a captured graph stays valid).
  void set_plan(const Routing& routing, const DispatchPlan& plan, cudaStream_t s);
  void forward(cudaStream_t s);
  void backward(cudaStream_t s);
  // Poison every output so a forgotten element shows up as NaN (wgrad outputs are zeroed instead:
  // an empty expert's weight gradient must be exactly 0).
  void poison_outputs(cudaStream_t s);
  BackendResult download(bool intermediates, cudaStream_t s) const;
  GemmEngine& engine() { return *engine_; }
  int64_t rows() const { return R_; }

 private:
  GroupedGemmDesc desc(layer::Gemm gemm) const;
  void mx_alloc(MxTensor& t, Fp8Format fmt, int64_t rows, int64_t cols, int nbuf);
  // Quantize src (nbuf buffers of rows/nbuf rows each) in both directions and dequantize to bf16.
  void mx_quantize(MxTensor& t, const std::vector<const uint16_t*>& src, cudaStream_t s);

  int64_t T_, H_, F_, E_, k_, R_ = 0;
  MlpOptions opt_;
  std::unique_ptr<GemmEngine> engine_;
  // inputs (bf16 bits)
  DeviceBuffer<uint16_t> x_, dy_, b1_, b2_;
  std::vector<DeviceBuffer<uint16_t>> w1_, w2_;  // one buffer (single) or E buffers (discrete)
  // plan
  DeviceBuffer<int32_t> row_token_, row_expert_, crow_, cslot_;
  DeviceBuffer<float> row_prob_;
  DeviceBuffer<int64_t> counts_, offsets_;
  // row buffers
  DeviceBuffer<uint16_t> xd_, h_, a_, o_, dyd_, da_, dh_, dxr_;
  DeviceBuffer<float> dp_;
  // outputs
  DeviceBuffer<uint16_t> y_, dx_;
  std::vector<DeviceBuffer<float>> dw1_, dw2_;
  DeviceBuffer<float> db1_, db2_, dprobs_;
  // mxfp8: the six quantized source tensors and the count of dequantized values inexact in bf16
  MxTensor mx_x_, mx_a_, mx_dy_, mx_dh_, mx_w1_, mx_w2_;
  DeviceBuffer<unsigned int> mx_inexact_;
};

}  // namespace moenum::gpu
