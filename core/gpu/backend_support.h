// What the GPU backends can run beyond their traits' recipes and bias modes, as an Availability: no
// device -> not_run; an activation, shape or device they do not handle -> not_supported with the
// reason. Shared by both GPU backends.
#pragma once
#include "grouped_mlp.h"
#include "moenum/backend.h"

namespace moenum::gpu {

struct GpuCaps {
  bool needs_sm90 = false;  // CUTLASS sm_90a kernels
};

Availability gpu_support(const Scenario& sc, const GpuCaps& caps);

// The recipe's MXFP8 settings (off for bf16), with the reference's configuration errors
// (reference/mxfp8_policy.h check_config): recipe.grad_format / recipe.scale_rounding unknown,
// hidden or ffn not a multiple of 32, an expert segment not a multiple of 32 rows.
MxRecipe mx_recipe(const Scenario& sc, const DispatchPlan& plan);

// attrs["recipe_path"] for the recipe that ran.
std::string recipe_path(const MxRecipe& mx);

// The layer options both GPU backends derive from the scenario (weights layout, bias, MXFP8).
MlpOptions layer_options(const RunContext& ctx);

// One whole layer on `engine`: poisoned outputs, forward, backward, download, and the attrs that
// say which GEMM and recipe path ran on which device.
BackendResult run_layer(const RunContext& ctx, std::unique_ptr<GemmEngine> engine, const MlpOptions& opt);

}  // namespace moenum::gpu
