// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// Two tile configurations chosen per GEMM from static information, a third on request (grouped_sm90.h).
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {

// N >= 1024 and a multiple of 64: the wider tile halves operand traffic per FLOP. Measured on H200
// (bench/RESULTS.md, "GPU: second tile configuration" and "GPU ratio tables"): at or ahead of 128x128
// on every bench shape, well ahead on the skewed ones. That includes gpt-oss-120b's N = 5760 and
// 2880, where the last 1x2 cluster runs past N (by one whole tile, or by part of one), with outputs
// bitwise those of 128x128.
bool fprop_wide_tile(const GroupedGemmDesc& g) {
  return g.kind == GemmKind::Fprop && g.n >= 1024 && g.n % 64 == 0;
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
