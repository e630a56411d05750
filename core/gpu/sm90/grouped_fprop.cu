// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// Two tile configurations chosen per GEMM from static information, a third on request (grouped_sm90.h).
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {

// N >= 1024 and a multiple of 512 (so the 1x2 cluster of 256-wide tiles never runs past N): the
// wider tile halves operand traffic per FLOP. Measured on H200 (bench/RESULTS.md, "GPU: second tile
// configuration"): at or ahead of 128x128 on every bench shape (DeepSeek-V3 EP8 FC1/FC2, Qwen3 FC1
// and FC2, Mixtral FC1), well ahead on the skewed ones.
bool fprop_wide_tile(const GroupedGemmDesc& g) {
  return g.kind == GemmKind::Fprop && g.n >= 1024 && g.n % 512 == 0;
}

int default_chunks(const GroupedGemmDesc& g) {
  if (g.kind == GemmKind::Wgrad) return 1;
  // Up to 8 sub-groups per group, at most ~512 in all (the scheduler walks empty ones 32 at a time).
  return std::clamp(512 / std::max(g.groups, 1), 1, 8);
}

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  using LA = cutlass::layout::RowMajor;
  using LB = cutlass::layout::ColumnMajor;
  const int chunks = o.chunks < 0 ? default_chunks(g) : o.chunks;
  const bool wide = o.tile == Tile::T128x256 || (o.tile == Tile::Auto && fprop_wide_tile(g));
  if (o.tile == Tile::T128x256M2)
    return std::make_unique<Plan<GroupedKernel<LA, LB, cutlass::bfloat16_t, 256, 1, 2>>>(g, chunks, o.chunk_rows);
  if (wide)
    return std::make_unique<Plan<GroupedKernel<LA, LB, cutlass::bfloat16_t, 256, 2>>>(g, chunks, o.chunk_rows);
  return std::make_unique<Plan<GroupedKernel<LA, LB, cutlass::bfloat16_t>>>(g, chunks, o.chunk_rows);
}
}  // namespace moenum::gpu::sm90
