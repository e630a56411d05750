// What the GPU backends can run, as an Availability: no device -> not_run; a recipe, bias mode or
// shape they do not implement -> not_supported with the reason. Shared by both GPU backends.
#pragma once
#include "moenum/backend.h"

namespace moenum::gpu {

struct GpuCaps {
  bool needs_sm90 = false;             // CUTLASS sm_90a kernels
  bool fc1_bias_epilogue_ok = false;   // bias_mode epilogue supported
};

Availability gpu_support(const Scenario& sc, const GpuCaps& caps);

}  // namespace moenum::gpu
