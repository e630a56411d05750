// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// The tile configurations of Tile (grouped_sm90.h) and the automatic choice among them (fprop_tiles).
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

// The automatic choice, from the H200 bench (bench/gpu_gemm_bench.cu, every shape with uniform and
// zipf s=1.2 counts, against torch._grouped_mm): the 128x128 pingpong tile reaches torch (0.97x to
// 1.33x, the best or within noise of it on most) on uniform counts and on every shape with K < 4096,
// but with skewed counts and a long K loop it falls behind the 128x256 tile (DeepSeek-V3 FC1,
// K = 7168, zipf: 0.89x against 1.03x; Mixtral FC1/FC2, zipf: 0.99x/1.02x against 1.01x/1.02x). So
//   N < 1024 or not a multiple of 64: 128x128 cooperative (too few wide tiles to fill the machine);
//   K < 4096: 128x128 pingpong whatever the counts;
//   K >= 4096: 128x128 pingpong, or 128x256 cooperative 1x2 when the counts are skewed (on the
//              device, counts_skewed below).
// 128x192 is not chosen: it led on no shape beyond the noise (gpt-oss FC1, N = 5760, whose padding
// it was for: 1.02x/1.17x against pingpong's 1.02x/1.19x).
static constexpr int64_t kLongK = 4096;

FpropTiles fprop_tiles(const GroupedGemmDesc& g) {
  if (g.kind != GemmKind::Fprop || g.n < 1024 || g.n % 64 != 0) return {Tile::T128x128, Tile::T128x128};
  if (g.k < kLongK) return {Tile::T128x128Pingpong, Tile::T128x128Pingpong};
  return {Tile::T128x128Pingpong, Tile::T128x256};
}

// Skewed: the largest group holds more than twice the mean rows (max * groups > 2 * total, exact in
// integers). Uniform counts sit at 1; the bench's zipf s=1.2 counts at about 3.4 over 8 experts and
// 10 over 32 (more with more experts).
static constexpr int64_t kSkewedMaxOverMean = 2;

__host__ __device__ constexpr bool counts_skewed(int64_t max_count, int64_t total, int groups) {
  return max_count * groups > kSkewedMaxOverMean * total;
}

// One block: the max and the sum of the counts, then the flag.
__global__ void counts_skewed_kernel(const int64_t* counts, int groups, int* skewed) {
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
  if (t == 0) *skewed = counts_skewed(smax[0], ssum[0], groups) ? 1 : 0;
}

void launch_counts_skewed(const int64_t* counts, int groups, int* skewed, cudaStream_t s) {
  counts_skewed_kernel<<<1, 256, 0, s>>>(counts, groups, skewed);
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

// Two configurations, one run per launch, picked on the device from the counts (see grouped_sm90.h):
// the skew flag first, then both plans, each gated on it, so exactly one finds tiles.
class CountsChosenPlan final : public GroupedGemmPlan {
 public:
  CountsChosenPlan(const GroupedGemmDesc& g, FpropTiles tiles, int chunks, int64_t chunk_rows)
      : skewed_(1),
        even_(make_tile_plan(g, tiles.even, chunks, chunk_rows, {skewed_.get(), 0})),
        skew_(make_tile_plan(g, tiles.skewed, chunks, chunk_rows, {skewed_.get(), 1})) {}

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    launch_counts_skewed(g.counts, g.groups, skewed_.get(), s);
    even_->launch(g, s);
    skew_->launch(g, s);
  }

 private:
  DeviceBuffer<int> skewed_;  // before the plans: they hold its address
  std::unique_ptr<GroupedGemmPlan> even_, skew_;
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
