// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// The tile configurations of Tile (grouped_sm90.h) and the automatic choice among them (fprop_tiles).
#include <cutlass/cluster_launch.hpp>

#include <string>
#include <type_traits>

#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {

namespace {

using LA = cutlass::layout::RowMajor;
using LB = cutlass::layout::ColumnMajor;
using D = cutlass::bfloat16_t;

using PingpongKernel = GroupedKernel<LA, LB, D, 128, 2, 1, Pingpong>;
using PingpongTransposedKernel = GroupedKernel<LA, LB, D, 128, 2, 1, Pingpong, cutlass::layout::ColumnMajor>;
using Pingpong192Kernel = GroupedKernel<LA, LB, D, 192, 2, 1, Pingpong>;
using PingpongTransposed192Kernel =
    GroupedKernel<LA, LB, D, 128, 2, 1, Pingpong, cutlass::layout::ColumnMajor, 192>;
using WideKernel = GroupedKernel<LA, LB, D, 256, 2>;
using WideM2Kernel = GroupedKernel<LA, LB, D, 256, 1, 2>;
using PingpongTransposedM2Kernel = GroupedKernel<LA, LB, D, 128, 1, 2, Pingpong, cutlass::layout::ColumnMajor>;

// The one map from a configuration of Tile to its kernel type: returns f(kernel{}) (Auto: the
// 128x128 cooperative kernel, the default plan's).
template <class F>
auto with_tile_kernel(Tile tile, F&& f) {
  switch (tile) {
    case Tile::Auto:
    case Tile::T128x128: return f(GroupedKernel<LA, LB, D>{});
    case Tile::T128x256: return f(WideKernel{});
    case Tile::T128x256M2: return f(WideM2Kernel{});
    case Tile::T128x192: return f(GroupedKernel<LA, LB, D, 192, 2>{});
    case Tile::T128x128Pingpong: return f(PingpongKernel{});
    case Tile::T128x128PingpongM2: return f(GroupedKernel<LA, LB, D, 128, 1, 2, Pingpong>{});
    case Tile::T128x128PingpongT: return f(PingpongTransposedKernel{});
    case Tile::T128x192Pingpong: return f(Pingpong192Kernel{});
    case Tile::T192x128PingpongT: return f(PingpongTransposed192Kernel{});
    case Tile::T128x128PingpongTM2: return f(PingpongTransposedM2Kernel{});
    case Tile::kCount: break;
  }
  throw InternalError("no tile configuration " + std::to_string(static_cast<int>(tile)));
}

}  // namespace

bool tile_transposed(Tile t) {
  return with_tile_kernel(t, [](auto kernel) { return decltype(kernel)::kTransposed; });
}

const char* tile_name(Tile t) {
  switch (t) {
    case Tile::Auto: return "auto";
    case Tile::T128x128: return "128x128 coop";
    case Tile::T128x256: return "128x256 coop 1x2";
    case Tile::T128x256M2: return "128x256 coop 2x1";
    case Tile::T128x192: return "128x192 coop 1x2";
    case Tile::T128x128Pingpong: return "128x128 pingpong 1x2";
    case Tile::T128x128PingpongM2: return "128x128 pingpong 2x1";
    case Tile::T128x128PingpongT: return "128x128 pingpong 1x2 transposed";
    case Tile::T128x192Pingpong: return "128x192 pingpong 1x2";
    case Tile::T192x128PingpongT: return "192x128 pingpong 1x2 transposed";
    case Tile::T128x128PingpongTM2: return "128x128 pingpong 2x1 transposed";
    case Tile::kCount: break;
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
//   K < 4096: 128x128 pingpong 1x2 (one warp group's epilogue under the other's mainloop, A shared
//              by multicast: 1.01-1.39x), except for small groups (balanced, at most four M tiles of
//              128 rows per group on average): there a group's B (N x K) outweighs its A, and the
//              same kernel on the transposed problem (D^T = B_e . A^T) shares B instead (Qwen3.5-35B
//              FC1 uniform 1.03-1.05x against 0.93-1.02x for the 2x1 cluster that shares B by
//              rounding each group's M tiles up to an even count, which costs skewed counts 5-30%;
//              Qwen3-30B uniform, 512 rows per group, transposed with runs (fprop_run): FC1
//              1.07-1.19x, FC2 1.19-1.20x against 1.06-1.16x and 1.09-1.10x untransposed);
//   K < 4096 and N a multiple of 192: the same pair with tiles 192 weight rows wide (128x192
//              pingpong; 192x128 on the transposed problem), which read 17% less through L2 per
//              product. Two runs against the 128-wide pair, one call / five: skewed Qwen3-30B FC1 and
//              gpt-oss FC1/FC2 1.20-1.35x against 1.17-1.28x; small groups Qwen3-30B FC1 1.18-1.20 /
//              1.11-1.12x against 1.16-1.17 / 1.09x, gpt-oss FC2 1.24 / 1.14-1.16x against 1.17-1.18
//              / 1.07-1.10x, gpt-oss FC1 1.16-1.17 / 1.10x against 1.13-1.14 / 1.10x;
//   K >= 4096: 128x128 pingpong, or for skewed counts the 128x256 tile (DeepSeek-V3 FC1 zipf: 1.01x
//              torch against pingpong's 0.88-0.94x; Mixtral FC1/FC2 zipf 1.03-1.09x).
// Each pair has one cluster shape (1x2) and thread count, so one kernel launch runs either
// (ChoicePlan). Not chosen: 2x2 clusters (slower than 1x2 on every shape); the 2x1 clusters of the
// pingpong tiles (no faster on even counts, 5-30% slower on skewed ones); 256x128 and 256x192
// cooperative tiles (0.93-1.16x: behind pingpong on every 128/256-expert shape).
// These figures are one call or five after an idle gap. Held at the H200's power limit for seconds
// (bench/gpu_gemm_sustained.py) every configuration lands within 0.94-1.08x torch on uniform counts,
// and torch's own 128x256 2x1 tile is the fastest on DeepSeek-V3 FC1, Qwen3.5-35B FC1 and Mixtral
// FC2 uniform (1.00-1.01x, the rule's 0.95-0.99x); skewed counts keep their lead (1.02-1.22x).
static constexpr int64_t kMidK = 2048, kLongK = 4096;

FpropTiles fprop_tiles(const GroupedGemmDesc& g) {
  if (g.kind != GemmKind::Fprop || g.n < 1024 || g.n % 64 != 0)
    return {Tile::T128x128, Tile::T128x128, Tile::T128x128};
  if (g.k < kLongK && g.n % 192 == 0)
    return {Tile::T128x192Pingpong, Tile::T192x128PingpongT, Tile::T128x192Pingpong};
  if (g.k < kMidK) return {Tile::T128x128Pingpong, Tile::T128x128PingpongT, Tile::T128x128Pingpong};
  if (g.k < kLongK) return {Tile::T128x256M2, Tile::T128x256M2, Tile::T128x128PingpongTM2};
  return {Tile::T128x256M2, Tile::T128x256M2, Tile::T128x256M2};
}

// Tiles per cluster run (run_scheduler.cuh), for the transposed pingpongs only: there each cluster
// column holds 2 x 128 rows of one group, which all of that group's weight tiles (consecutive in
// CUTLASS's order; counted as N / 128 for both tile widths) read, so a wave of C clusters in runs
// of r keeps C * r / (N / 128) such row blocks of 256 x K in flight. The rule: the longest run in
// {1, 2, 4, 8} whose row blocks take at most a quarter of L2 (12.5 MiB on the H200). H200 bench,
// two runs, forced runs of 1 / the rule's (bench/RESULTS.md): Qwen3.5-35B FC2 uniform (8)
// 1.07-1.13x / 1.20-1.26x torch, Qwen3-30B FC2 (8) 1.09-1.11x / 1.19-1.20x, gpt-oss FC1 (4)
// 1.05-1.07x / 1.10-1.12x, gpt-oss FC2 (2) 1.05-1.14x / 1.07-1.16x, Qwen3-30B FC1 (2) 1.05-1.17x /
// 1.07-1.19x; one step longer, over the quarter, loses 1-11% (Qwen3.5-35B FC1: runs of 2, 16.5 MiB,
// 0.98-1.10x against 1.03-1.15x for runs of 1).
// With the 192-row tile the same count of N / 128 (not N / 192, which halves every run here) measured
// best in four runs: Qwen3-30B FC1 runs of 2 1-2% ahead of runs of 1, gpt-oss FC2 (2) 0-2% ahead,
// gpt-oss FC1 (4) level with runs of 2.
// Other configurations: runs of 1 (no gain where the groups are large, losses on skewed counts).
int fprop_run(const GroupedGemmDesc& g, Tile t, int sm_count) {
  const bool shares_weights = with_tile_kernel(t, [](auto kernel) {
    using K = decltype(kernel);
    return K::kTransposed && cute::size<1>(typename K::ClusterShape{}) == 2;
  });
  if (!shares_weights) return 1;
  int dev = 0, l2 = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int64_t clusters = sm_count / 2, weight_tiles = (g.n + 127) / 128;
  const int64_t block_bytes = 256 * g.k * 2;
  int run = 1;
  while (run < 8 && clusters * (2 * run) * block_bytes <= weight_tiles * (l2 / 4)) run *= 2;
  return run;
}

// Skewed: the largest group holds more than twice the mean rows (max * groups > 2 * total, exact in
// integers). Uniform counts sit at 1; the bench's zipf s=1.2 counts at about 3.4 over 8 experts and
// 10 over 32 (more with more experts). Small groups: not skewed, and at most four M tiles' rows per
// group on average (total <= 4 * 128 * groups).
static constexpr int64_t kSkewedMaxOverMean = 2;
static constexpr int64_t kSmallGroupRows = 4 * 128;

__host__ __device__ constexpr CountsClass classify_counts(int64_t max_count, int64_t total, int groups) {
  if (max_count * groups > kSkewedMaxOverMean * total) return CountsClass::kSkewed;
  return total <= kSmallGroupRows * groups ? CountsClass::kSmallGroups : CountsClass::kEven;
}

// The class of the counts, computed by one whole block of kThreads threads (every thread gets it):
// the max and the sum of the counts, then classify_counts.
template <int kThreads>
__device__ CountsClass block_counts_class(const int64_t* counts, int groups) {
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
  return classify_counts(smax[0], ssum[0], groups);
}

__global__ void counts_class_kernel(const int64_t* counts, int groups, int* counts_class) {
  const CountsClass c = block_counts_class<256>(counts, groups);
  if (threadIdx.x == 0) *counts_class = static_cast<int>(c);
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

std::unique_ptr<GroupedGemmPlan> make_tile_plan(const GroupedGemmDesc& g, Tile tile, int chunks, int64_t chunk_rows,
                                                int run) {
  return with_tile_kernel(tile, [&](auto kernel) -> std::unique_ptr<GroupedGemmPlan> {
    return std::make_unique<Plan<decltype(kernel)>>(g, chunks, chunk_rows, run);
  });
}

// Fills the chosen plan's problem array: every block reduces the counts (max, sum) itself, so the
// class needs no launch of its own; block 0 records the choice for the GEMM kernel.
template <class ED>
__global__ void choose_and_fill(FillTarget<ED> first, FillTarget<ED> second, unsigned second_for, int groups,
                                const int64_t* counts, const int64_t* offsets, int* choice) {
  constexpr int kThreads = 128;
  const int t = threadIdx.x;
  const CountsClass counts_class = block_counts_class<kThreads>(counts, groups);
  const int which = second_for >> static_cast<int>(counts_class) & 1u;
  if (blockIdx.x == 0 && t == 0) *choice = which;
  const FillTarget<ED>& f = which ? second : first;
  const int i = blockIdx.x * kThreads + t;
  if (i < groups * f.chunks) fill_entry(f, groups, i, counts, offsets);
}

// Runs one of two CUTLASS kernels of the same cluster shape and thread count, as *choice says.
// Every CTA reads the same value, so each cluster runs one kernel whole.
template <class KA, class KB>
__global__ void __launch_bounds__(KA::MaxThreadsPerBlock, KA::MinBlocksPerMultiprocessor)
    either_gemm(CUTLASS_GRID_CONSTANT typename KA::Params const pa, CUTLASS_GRID_CONSTANT typename KB::Params const pb,
                const int* choice) {
  extern __shared__ char smem[];
  if (*choice == 0) {
    KA op;
    op(pa, smem);
  } else {
    KB op;
    op(pb, smem);
  }
}

// Two configurations picked on the device from the counts, in two launches (fill, GEMM) like one
// plan: no host read, graph-capturable, and nothing launched for the configuration not chosen.
template <class A, class B>
class ChoicePlan final : public GroupedGemmPlan {
  using KA = typename A::Kernel;
  using KB = typename B::Kernel;
  static_assert(std::is_same_v<typename A::ClusterShape, typename B::ClusterShape>, "one launch: one cluster shape");
  static_assert(KA::MaxThreadsPerBlock == KB::MaxThreadsPerBlock && KA::MinBlocksPerMultiprocessor == KB::MinBlocksPerMultiprocessor);
  static constexpr int kSmemBytes = std::max<int>(KA::SharedStorageSize, KB::SharedStorageSize);

 public:
  ChoicePlan(const GroupedGemmDesc& g, int chunks, int64_t chunk_rows, int first_run, int second_run, unsigned second_for)
      : first_(g, chunks, chunk_rows, first_run), second_(g, chunks, chunk_rows, second_run), second_for_(second_for),
        choice_(1) {
    grid_ = KA::get_grid_shape(first_.params());
    const dim3 other = KB::get_grid_shape(second_.params());
    if (grid_.x != other.x || grid_.y != other.y || grid_.z != other.z)
      throw InternalError("ChoicePlan: the two configurations want different persistent grids");
    MOENUM_CUDA_CHECK(cudaFuncSetAttribute(either_gemm<KA, KB>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    const int entries = std::max(first_.entries(), second_.entries());
    choose_and_fill<D><<<(entries + 127) / 128, 128, 0, s>>>(first_.fill_target(g), second_.fill_target(g), second_for_,
                                                            g.groups, g.counts, g.offsets, choice_.get());
    MOENUM_CUDA_LAUNCH_CHECK();
    using Cluster = typename A::ClusterShape;
    const cutlass::ClusterLaunchParams lp{grid_, KA::get_block_shape(),
                                          dim3(cute::size<0>(Cluster{}), cute::size<1>(Cluster{}), 1), kSmemBytes, s};
    const void* kernel = reinterpret_cast<const void*>(&either_gemm<KA, KB>);
    MOENUM_CUTLASS_CHECK(cutlass::launch_kernel_on_cluster(lp, kernel, first_.params(), second_.params(), choice_.get()));
  }

 private:
  Plan<A> first_;
  Plan<B> second_;
  unsigned second_for_;
  DeviceBuffer<int> choice_;
  dim3 grid_;
};

// The configuration other than tiles.even that some classes of counts pick, and those classes as
// a bit mask. A ChoicePlan runs two configurations, so a third is an error.
struct SecondTile {
  Tile tile;
  unsigned classes = 0;
};
SecondTile second_tile(const FpropTiles& tiles) {
  SecondTile second{tiles.even};
  for (CountsClass c : {CountsClass::kEven, CountsClass::kSmallGroups, CountsClass::kSkewed}) {
    const Tile t = tiles.for_class(c);
    if (t == tiles.even) continue;
    if (second.classes != 0 && t != second.tile)
      throw InternalError("the automatic Fprop choice picks among more than two configurations");
    second.tile = t;
    second.classes |= 1u << static_cast<int>(c);
  }
  return second;
}

}  // namespace

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  const int chunks = o.chunks < 0 ? default_chunks(g) : o.chunks;
  int dev = 0, sms = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  auto run = [&](Tile t) { return o.run > 0 ? o.run : fprop_run(g, t, sms); };
  if (o.tile != Tile::Auto) return make_tile_plan(g, o.tile, chunks, o.chunk_rows, run(o.tile));
  const FpropTiles tiles = fprop_tiles(g);
  if (!tiles.chosen_on_device()) return make_tile_plan(g, tiles.even, chunks, o.chunk_rows, run(tiles.even));
  const SecondTile second = second_tile(tiles);
  auto choice = [&](auto even_kernel, auto second_kernel) -> std::unique_ptr<GroupedGemmPlan> {
    return std::make_unique<ChoicePlan<decltype(even_kernel), decltype(second_kernel)>>(
        g, chunks, o.chunk_rows, run(tiles.even), run(second.tile), second.classes);
  };
  auto pair_is = [&](Tile even, Tile other) { return tiles.even == even && second.tile == other; };
  if (pair_is(Tile::T128x128Pingpong, Tile::T128x128PingpongT))
    return choice(PingpongKernel{}, PingpongTransposedKernel{});
  if (pair_is(Tile::T128x192Pingpong, Tile::T192x128PingpongT))
    return choice(Pingpong192Kernel{}, PingpongTransposed192Kernel{});
  if (pair_is(Tile::T128x256M2, Tile::T128x128PingpongTM2)) return choice(WideM2Kernel{}, PingpongTransposedM2Kernel{});
  throw InternalError(std::string("no ChoicePlan for ") + tile_name(tiles.even) + " / " + tile_name(second.tile));
}
}  // namespace moenum::gpu::sm90
