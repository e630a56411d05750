// Host-side entry points of the CUTLASS sm_90a grouped GEMMs (one translation unit per operand
// layout, see grouped_sm90.cuh). Problem sizes and operand pointers are written on the device by a
// small kernel from the device-resident counts and offsets, so launching needs no host sync and the
// whole sequence can be captured in a CUDA graph.
#pragma once
#include <memory>

#include "gemm/grouped_gemm.h"

namespace moenum::gpu::sm90 {

// Holds the per-group device arrays and the CUTLASS operator for one GEMM of the layer. Created on
// the first run of a GroupedGemmDesc id (allocation happens there, never inside a graph capture).
class GroupedGemmPlan {
 public:
  virtual ~GroupedGemmPlan() = default;
  virtual void launch(const GroupedGemmDesc& g, cudaStream_t s) = 0;
};

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g);  // A row, B col, D bf16
std::unique_ptr<GroupedGemmPlan> make_dgrad_plan(const GroupedGemmDesc& g);  // A row, B row, D bf16
std::unique_ptr<GroupedGemmPlan> make_wgrad_plan(const GroupedGemmDesc& g);  // A col, B row, D fp32

}  // namespace moenum::gpu::sm90
