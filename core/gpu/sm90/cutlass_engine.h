// The device-initiated GEMM engine: one CUTLASS sm_90a grouped GEMM launch per layer GEMM, sizes
// built on the device from the counts (see grouped_sm90.h). Never synchronises with the host.
#pragma once
#include <memory>

#include "gemm/grouped_gemm.h"

namespace moenum::gpu {

// Overrides of the static per-GEMM choices (grouped_sm90.h); the defaults are what the backend uses.
struct CutlassSm90Options {
  int tile = 0;     // 0 auto, 1 = 128x128x64, 2 = 128x256x64 with a 1x2 cluster, 3 = with a 2x1 cluster
                    // (2 and 3: Fprop only)
  int chunks = -1;  // max sub-groups per group for Fprop/Dgrad (1 = no split), -1 auto
};

std::unique_ptr<GemmEngine> make_cutlass_sm90_engine(const CutlassSm90Options& o = {});
}  // namespace moenum::gpu
