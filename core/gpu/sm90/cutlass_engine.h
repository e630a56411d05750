// The device-initiated GEMM engine: one CUTLASS sm_90a grouped GEMM launch per layer GEMM, sizes
// built on the device from the counts (see grouped_sm90.h). Never synchronises with the host.
#pragma once
#include <memory>

#include "gemm/grouped_gemm.h"

namespace moenum::gpu {
std::unique_ptr<GemmEngine> make_cutlass_sm90_engine();
}
