// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// The tile configurations of Tile (grouped_sm90.h) and the automatic choice among them (fprop_tiles).
#include <vector>

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
    case Tile::T128x128PingpongM2: return "128x128 pingpong 2x1";
  }
  return "?";
}

const char* counts_class_name(CountsClass c) {
  switch (c) {
    case CountsClass::kEven: return "counts even";
    case CountsClass::kSmallGroups: return "counts even, small groups";
    case CountsClass::kSkewed: return "counts skewed";
  }
  return "?";
}

// The automatic choice, from the H200 bench (torch._grouped_mm and every configuration timed round
// by round in one process, bench/gpu_gemm_ab_torch.py; every shape with uniform and zipf s=1.2
// counts; bench/RESULTS.md):
//   N < 1024 or not a multiple of 64: 128x128 cooperative (too few wide tiles to fill the machine);
//   skewed counts: 128x128 pingpong for K < 4096; for a longer K loop the 128x256 tile (DeepSeek-V3
//              FC1 zipf: 1.01x torch against pingpong's 0.88x; Mixtral FC1/FC2 zipf 1.03-1.09x);
//   small groups (balanced, at most two M tiles of 128 rows per group on average): 128x128
//              pingpong with a 2x1 cluster. Such a group's B (N x K) outweighs its A, and the
//              cluster's two CTAs, on the group's two M tiles, share each B tile by multicast
//              (Qwen3.5-35B FC1 uniform: 1.00-1.02x against 0.93-0.96x; gpt-oss-120b 1.02-1.05x
//              against 1.00). It rounds each group's M tiles up to an even count, which costs skewed
//              counts (many one-tile groups) 5-15%, hence the balance condition;
//   otherwise: 128x128 pingpong, one warp group's epilogue under the other's mainloop (1.01-1.16x).
// 128x192 is not chosen: it led on no shape beyond the noise (gpt-oss FC1, N = 5760, whose padding
// it was for).
static constexpr int64_t kLongK = 4096;

FpropTiles fprop_tiles(const GroupedGemmDesc& g) {
  if (g.kind != GemmKind::Fprop || g.n < 1024 || g.n % 64 != 0)
    return {Tile::T128x128, Tile::T128x128, Tile::T128x128};
  const Tile skewed = g.k < kLongK ? Tile::T128x128Pingpong : Tile::T128x256;
  return {Tile::T128x128Pingpong, Tile::T128x128PingpongM2, skewed};
}

// Skewed: the largest group holds more than twice the mean rows (max * groups > 2 * total, exact in
// integers). Uniform counts sit at 1; the bench's zipf s=1.2 counts at about 3.4 over 8 experts and
// 10 over 32 (more with more experts). Small groups: not skewed, and at most two M tiles' rows per
// group on average (total <= 2 * 128 * groups).
static constexpr int64_t kSkewedMaxOverMean = 2;
static constexpr int64_t kSmallGroupRows = 2 * 128;

__host__ __device__ constexpr CountsClass classify_counts(int64_t max_count, int64_t total, int groups) {
  if (max_count * groups > kSkewedMaxOverMean * total) return CountsClass::kSkewed;
  return total <= kSmallGroupRows * groups ? CountsClass::kSmallGroups : CountsClass::kEven;
}

// One block: the max and the sum of the counts, then the class.
__global__ void counts_class_kernel(const int64_t* counts, int groups, int* counts_class) {
  constexpr int kThreads = 256;
  __shared__ int64_t smax[kThreads], ssum[kThreads];
  const int t = threadIdx.x;
  int64_t mx = 0, sum = 0;
  for (int e = t; e < groups; e += kThreads) {
    const int64_t c = counts[e];
    mx = c > mx ? c : mx;
    sum += c;
  }
  smax[t] = mx;
  ssum[t] = sum;
  __syncthreads();
  for (int w = kThreads / 2; w > 0; w /= 2) {
    if (t < w) {
      smax[t] = smax[t + w] > smax[t] ? smax[t + w] : smax[t];
      ssum[t] += ssum[t + w];
    }
    __syncthreads();
  }
  if (t == 0) *counts_class = static_cast<int>(classify_counts(smax[0], ssum[0], groups));
}

void launch_counts_class(const int64_t* counts, int groups, int* counts_class, cudaStream_t s) {
  counts_class_kernel<<<1, 256, 0, s>>>(counts, groups, counts_class);
  MOENUM_CUDA_LAUNCH_CHECK();
}

int default_chunks(const GroupedGemmDesc& g) {
  if (g.kind == GemmKind::Wgrad) return 1;
  // Up to 8 sub-groups per group, at most ~512 in all (the scheduler walks empty ones 32 at a time).
  return std::clamp(512 / std::max(g.groups, 1), 1, 8);
}

namespace {

using LA = cutlass::layout::RowMajor;
using LB = cutlass::layout::ColumnMajor;
using D = cutlass::bfloat16_t;

std::unique_ptr<GroupedGemmPlan> make_tile_plan(const GroupedGemmDesc& g, Tile tile, int chunks, int64_t chunk_rows,
                                                Gate gate) {
  auto plan = [&](auto kernel) -> std::unique_ptr<GroupedGemmPlan> {
    return std::make_unique<Plan<decltype(kernel)>>(g, chunks, chunk_rows, gate);
  };
  switch (tile) {
    case Tile::T128x256: return plan(GroupedKernel<LA, LB, D, 256, 2>{});
    case Tile::T128x256M2: return plan(GroupedKernel<LA, LB, D, 256, 1, 2>{});
    case Tile::T128x192: return plan(GroupedKernel<LA, LB, D, 192, 2>{});
    case Tile::T128x128Pingpong: return plan(GroupedKernel<LA, LB, D, 128, 2, 1, Pingpong>{});
    case Tile::T128x128PingpongM2: return plan(GroupedKernel<LA, LB, D, 128, 1, 2, Pingpong>{});
    case Tile::Auto:
    case Tile::T128x128: break;
  }
  return plan(GroupedKernel<LA, LB, D>{});
}

// One plan per configuration the counts can pick, each open for the classes that pick it, one run
// per launch chosen on the device (see grouped_sm90.h): the class first, then every plan, so exactly
// one finds tiles.
class CountsChosenPlan final : public GroupedGemmPlan {
 public:
  CountsChosenPlan(const GroupedGemmDesc& g, FpropTiles tiles, int chunks, int64_t chunk_rows) : counts_class_(1) {
    const CountsClass classes[] = {CountsClass::kEven, CountsClass::kSmallGroups, CountsClass::kSkewed};
    std::vector<Tile> made;
    for (CountsClass c : classes) {
      const Tile tile = tiles.for_class(c);
      if (std::find(made.begin(), made.end(), tile) != made.end()) continue;
      made.push_back(tile);
      unsigned open_for = 0;
      for (CountsClass k : classes)
        if (tiles.for_class(k) == tile) open_for |= 1u << static_cast<int>(k);
      plans_.push_back(make_tile_plan(g, tile, chunks, chunk_rows, {counts_class_.get(), open_for}));
    }
  }

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    launch_counts_class(g.counts, g.groups, counts_class_.get(), s);
    for (auto& plan : plans_) plan->launch(g, s);
  }

 private:
  DeviceBuffer<int> counts_class_;  // before the plans: they hold its address
  std::vector<std::unique_ptr<GroupedGemmPlan>> plans_;
};

}  // namespace

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  const int chunks = o.chunks < 0 ? default_chunks(g) : o.chunks;
  if (o.tile != Tile::Auto) return make_tile_plan(g, o.tile, chunks, o.chunk_rows, {});
  const FpropTiles tiles = fprop_tiles(g);
  if (!tiles.chosen_on_device()) return make_tile_plan(g, tiles.even, chunks, o.chunk_rows, {});
  return std::make_unique<CountsChosenPlan>(g, tiles, chunks, o.chunk_rows);
}
}  // namespace moenum::gpu::sm90
