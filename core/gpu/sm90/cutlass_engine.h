// The device-initiated GEMM engine: one CUTLASS sm_90a grouped GEMM launch per layer GEMM, sizes
// built on the device from the counts (see grouped_sm90.h). Never synchronises with the host.
#pragma once
#include <memory>
#include <optional>

#include "gemm/grouped_gemm.h"
#include "sm90/grouped_sm90.h"

namespace moenum::gpu {

// Overrides of the static per-GEMM choices (grouped_sm90.h); the defaults are what the backend uses.
struct CutlassSm90Options {
  sm90::Tile tile = sm90::Tile::Auto;  // forced tile configurations apply to Fprop only
  int chunks = -1;                     // max sub-groups per group for Fprop/Dgrad (1 = no split), -1 auto
  int run = -1;                        // Fprop pingpong tiles per cluster run (sm90::fprop_run), -1 auto
  int sm_count = -1;                   // Fprop persistent grid on at most this many SMs, -1 every SM
  bool strided_batch = false;          // a forced Fprop tile also runs equal small groups as a batch
  std::optional<sm90::BatchL2> batch_l2;  // the strided batch's L2 priorities, unset: the rule
  bool batch_every_cta = false;           // the strided batch's tiles on every CTA (bench)
};

std::unique_ptr<GemmEngine> make_cutlass_sm90_engine(const CutlassSm90Options& o = {});
}  // namespace moenum::gpu
