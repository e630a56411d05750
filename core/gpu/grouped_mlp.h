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

struct MlpOptions {
  bool bias = true;                   // model.bias: b1/b2 used, db1/db2 produced
  bool fc1_bias_in_epilogue = false;  // bias_mode epilogue (engine must support it)
  bool discrete_weights = false;      // one allocation per expert instead of one grouped tensor
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
  GroupedGemmDesc desc(int id) const;

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
};

}  // namespace moenum::gpu
