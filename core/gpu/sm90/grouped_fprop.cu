// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// The tile configurations of Tile (grouped_sm90.h), one chosen per GEMM from static information.
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {

const char* tile_name(Tile t) {
  switch (t) {
    case Tile::Auto: return "auto";
    case Tile::T128x128: return "128x128 coop";
    case Tile::T128x256: return "128x256 coop 1x2";
    case Tile::T128x256M2: return "128x256 coop 2x1";
    case Tile::T128x192: return "128x192 coop 1x2";
    case Tile::T128x128Pingpong: return "128x128 pingpong 1x2";
  }
  return "?";
}

// Columns of D that a tile of width tile_n in a cluster of two along N computes: N rounded up to
// the cluster's 2 * tile_n (the grouped scheduler rounds each group's N tiles up to the cluster).
static int64_t padded_columns(int64_t n, int64_t tile_n) { return (n + 2 * tile_n - 1) / (2 * tile_n) * (2 * tile_n); }

// N < 1024 or not a multiple of 64: 128x128 (too few wide tiles to fill the machine).
// K <= 1024: 128x128 pingpong, whose alternating consumer warp groups hide one tile's epilogue
// behind the other's mainloop; with 16 or fewer k-tiles per output tile the epilogue is a large
// share of each tile's time (the Qwen3/Qwen3.5 FC2 shapes, K = 768 and 512).
// Otherwise the wide tile halves operand traffic per FLOP (bench/RESULTS.md: 128x256 at or ahead
// of 128x128 on every bench shape): 128x256, unless 128x192 pads fewer columns (gpt-oss-120b FC1,
// N = 5760: 6144 columns computed with 256, 5760 with 192); ties keep the wider tile.
Tile fprop_tile(const GroupedGemmDesc& g) {
  if (g.kind != GemmKind::Fprop || g.n < 1024 || g.n % 64 != 0) return Tile::T128x128;
  if (g.k <= 1024) return Tile::T128x128Pingpong;
  return padded_columns(g.n, 192) < padded_columns(g.n, 256) ? Tile::T128x192 : Tile::T128x256;
}

int default_chunks(const GroupedGemmDesc& g) {
  if (g.kind == GemmKind::Wgrad) return 1;
  // Up to 8 sub-groups per group, at most ~512 in all (the scheduler walks empty ones 32 at a time).
  return std::clamp(512 / std::max(g.groups, 1), 1, 8);
}

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  using LA = cutlass::layout::RowMajor;
  using LB = cutlass::layout::ColumnMajor;
  using D = cutlass::bfloat16_t;
  const int chunks = o.chunks < 0 ? default_chunks(g) : o.chunks;
  const Tile tile = o.tile == Tile::Auto ? fprop_tile(g) : o.tile;
  auto plan = [&](auto kernel) -> std::unique_ptr<GroupedGemmPlan> {
    return std::make_unique<Plan<decltype(kernel)>>(g, chunks, o.chunk_rows);
  };
  switch (tile) {
    case Tile::T128x256: return plan(GroupedKernel<LA, LB, D, 256, 2>{});
    case Tile::T128x256M2: return plan(GroupedKernel<LA, LB, D, 256, 1, 2>{});
    case Tile::T128x192: return plan(GroupedKernel<LA, LB, D, 192, 2>{});
    case Tile::T128x128Pingpong: return plan(GroupedKernel<LA, LB, D, 128, 2, 1, Pingpong>{});
    case Tile::Auto:
    case Tile::T128x128: break;
  }
  return plan(GroupedKernel<LA, LB, D>{});
}
}  // namespace moenum::gpu::sm90
