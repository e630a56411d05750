// Fprop layout: A [rows, k] row-major, B_e [n, k] (K contiguous: ColumnMajor K x N), D bf16.
// The tile configurations of Tile (grouped_sm90.h) and the automatic choice among them (fprop_tiles).
#include <cutlass/cluster_launch.hpp>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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
using PingpongM2Kernel = GroupedKernel<LA, LB, D, 128, 1, 2, Pingpong>;
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
    case Tile::T128x128PingpongM2: return f(PingpongM2Kernel{});
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

const char* l2_priority_name(L2Priority p) {
  switch (p) {
    case L2Priority::Normal: return "normal";
    case L2Priority::EvictFirst: return "first";
    case L2Priority::EvictLast: return "last";
  }
  return "?";
}

const char* counts_class_name(CountsClass c) {
  switch (c) {
    case CountsClass::kEven: return "counts even";
    case CountsClass::kSmallGroups: return "counts even, small groups";
    case CountsClass::kSkewed: return "counts skewed";
    case CountsClass::kEqualSmallGroups: return "counts equal, small groups: strided batch";
  }
  return "?";
}

// The automatic choice, tuned where training runs: the H200 held at its power limit
// (bench/gpu_gemm_sustained.py: every configuration back to back for seconds beside
// torch._grouped_mm in one process; every shape with uniform and zipf s=1.2 counts; bench/RESULTS.md).
// There the clock, not the tile, bounds the large uniform GEMMs: torch's own configuration (128x256
// cooperative, 2x1 cluster) forced through moenum lands at 0.99-1.01x torch on every uniform cell.
//   N < 1024 or not a multiple of 64: 128x128 cooperative (too few wide tiles to fill the machine);
//   K >= 4096: torch's 128x256 2x1 tile for every class of counts (DeepSeek-V3 FC1, Mixtral FC1/FC2:
//              1.00-1.03x, where the 1x2 pingpong and 128x256 1x2 tiles gave 0.95-0.98x on
//              DeepSeek-V3 FC1 and Mixtral FC2 uniform);
//   K < 4096 and N a multiple of 192: 128x192 pingpong 1x2 (one warp group's epilogue under the
//              other's mainloop, A shared by multicast, 17% less L2 traffic per product than
//              128x128), and for small groups (balanced, at most four M tiles of 128 rows per group
//              on average: a group's B outweighs its A) the same kernel on the transposed problem
//              D^T = B_e . A^T, 192x128, which shares B instead (Qwen3-30B FC1, gpt-oss FC1/FC2:
//              0.99-1.03x uniform, 1.14-1.22x skewed);
//   K < 2048, or K < 4096 with N >= 4096 on a device with DRAM bandwidth to spare (many weight
//              tiles share each row block, which the 1x2 cluster multicasts): the 128x128 pingpong
//              1x2 pair, transposed for small groups (Qwen3-30B FC2, Qwen3.5-35B FC2: 1.05-1.19x;
//              DeepSeek-V3 FC2 on the H200 1.02-1.06x, where every 2x1 configuration gave
//              0.96-1.03x). On the H100 (a third less DRAM bandwidth per SM, the same clocks and
//              power limit) the pair loses on DeepSeek-V3 FC2 (0.87 / 0.91x uniform / zipf, the 2x1
//              pingpongs 0.95 / 0.85x): there K < 4096 with N >= 4096 runs torch's tile;
//   2048 <= K < 4096, other N: three 2x1 configurations (Qwen3.5-35B FC1, where the 1x2 pingpong
//              gave 0.935x uniform): even counts the 128x128 pingpong; small groups torch's tile
//              (1.00x, the transposed 1x2 pingpong 0.96x); skewed counts the pingpong on the
//              transposed problem, which shares A without rounding a group's row tiles up to an even
//              count (1.20x; the untransposed 2x1 pingpong 0.92x).
//   Equal small groups (every count the same, at most four M tiles, back to back, as a
//              capacity-padded dispatcher gives; the rows known on the host, one weight tensor): the
//              plans that choose on the device run their small-groups configuration as one strided
//              batched GEMM (GroupedKernel::Batch, StridedBatch). The grouped kernels rewrite and fence
//              the tensor maps at every group change, which with groups of a few tiles is most tiles
//              (bench/RESULTS.md, "Where the uniform small-group GEMMs lose"); a batch rewrites none.
//              Its loads' L2 priorities: batch_l2_rule below.
// A choice among configurations of one cluster shape and thread count is one kernel launch
// (ChoicePlan). Not chosen: 2x2 clusters (slower than 1x2 on every shape); 256x128 and 256x192
// cooperative tiles (behind pingpong on every 128/256-expert shape), also on the transposed problem
// as the equal-groups batch, cuBLAS's tile there (H100 held at the power limit: 1.02-1.07x torch
// with a 1x2 cluster, 0.71-1.03x with 2x1, against 1.05-1.12x for the pingpong batches and 1.047x
// for 128x256 2x1 on Qwen3.5-35B FC1; bench/RESULTS.md, run 20). One call or five after an idle
// gap (bench/gpu_gemm_ab_torch.py) runs above the power limit's clock and favours other tiles by a
// few percent; those figures are in bench/RESULTS.md.
static constexpr int64_t kMidK = 2048, kLongK = 4096, kWideN = 4096;
static constexpr double kRichMemoryGBPerSM = 32;

FpropDevice FpropDevice::current() {
  int dev = 0, sms = 0, memory_khz = 0, bus_bits = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&bus_bits, cudaDevAttrGlobalMemoryBusWidth, dev));
  return {sms, 2.0 * memory_khz * 1e3 * (bus_bits / 8) / 1e9};
}

bool FpropDevice::memory_rich() const { return sm_count > 0 && memory_gb_per_s / sm_count >= kRichMemoryGBPerSM; }

FpropTiles fprop_tiles(const GroupedGemmDesc& g, const FpropDevice& device) {
  if (g.kind != GemmKind::Fprop || g.n < 1024 || g.n % 64 != 0)
    return {Tile::T128x128, Tile::T128x128, Tile::T128x128};
  if (g.k < kLongK && g.n % 192 == 0)
    return {Tile::T128x192Pingpong, Tile::T192x128PingpongT, Tile::T128x192Pingpong, true};
  const bool wide_mid_k = g.k >= kMidK && g.k < kLongK && g.n >= kWideN;
  if (g.k < kMidK || (wide_mid_k && device.memory_rich()))
    return {Tile::T128x128Pingpong, Tile::T128x128PingpongT, Tile::T128x128Pingpong, true};
  if (g.k < kLongK && !wide_mid_k)
    return {Tile::T128x128PingpongM2, Tile::T128x256M2, Tile::T128x128PingpongTM2, true};
  return {Tile::T128x256M2, Tile::T128x256M2, Tile::T128x256M2};
}

// Tiles per cluster run (run_scheduler.cuh), for the transposed 1x2 pingpongs only: there each
// cluster column holds 2 x 128 rows of one group, which all of that group's weight tiles (consecutive
// in CUTLASS's order; counted as N / 128 for both tile widths) read, so a wave of C clusters in runs
// of r keeps C * r / (N / 128) such row blocks of 256 x K in flight. The rule: the longest run in
// {1, 2, 4, 8} whose row blocks take at most an eighth of L2 (6.25 MiB on the H200). Held at the
// power limit (bench/RESULTS.md, two sweeps): Qwen3-30B FC1 runs of 1 1.019-1.025x torch against
// 1.007-1.016x for 2 (a quarter of L2); gpt-oss FC1 2, 1.011-1.014x against 0.996-0.998x for 4;
// Qwen3-30B FC2 and Qwen3.5-35B FC2 4, within 0.7-0.9% of 8. One call after an idle gap favours
// longer runs (a quarter of L2: Qwen3.5-35B FC2 uniform runs of 8 1.20-1.26x against 1.07-1.13x for 1).
// Other configurations: runs of 1 (no gain where the groups are large, losses on skewed counts).
int fprop_run(const GroupedGemmDesc& g, Tile t, int sm_count) {
  // The rows a cluster column holds where it shares the weights, 0 elsewhere.
  const int64_t cluster_rows = with_tile_kernel(t, [](auto kernel) -> int64_t {
    using K = decltype(kernel);
    return K::kTransposed && cute::size<1>(typename K::ClusterShape{}) == 2 ? K::kClusterRows : 0;
  });
  if (cluster_rows == 0) return 1;
  int dev = 0, l2 = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  MOENUM_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  const int64_t clusters = sm_count / 2, weight_tiles = (g.n + 127) / 128;
  const int64_t block_bytes = cluster_rows * g.k * 2;
  int run = 1;
  while (run < 8 && clusters * (2 * run) * block_bytes <= weight_tiles * (l2 / 8)) run *= 2;
  return run;
}

// The strided batch's L2 priorities. Each weight tile of a group is read by the clusters that hold the
// group's rows, each block of rows by every weight tile of the group. Where one cluster holds a
// group's rows whole and the k loop is long, the weights, read once, are loaded evict-first, so they
// no longer push out the rows between their readers (ncu, H100: Qwen3.5-35B FC1 read 5.3% more DRAM
// bytes than its operands, 0.35% so). Held at the power limit on an H100 (bench/RESULTS.md, run 21),
// over torch, weights normal / evict-first: Qwen3.5-35B FC1 1.052 / 1.071, gpt-oss FC1 1.070 / 1.081,
// FC2 1.093 / 1.112. Elsewhere evict-first lost: two clusters per group (512 rows: Qwen3-30B FC1
// 1.083 / 1.073, FC2 1.137 / 1.053), where the second reader of a weight tile then finds it evicted
// (ncu: Qwen3-30B FC1 read 46% more than its operands), and the short k loop of Qwen3.5-35B FC2
// (K 512: 1.106 / 0.968, not understood; both losing FC2 cells run the 128x128 transposed batch, so
// K and that tile are confounded here). Rows evict-last: within 1.2% of normal on every cell.
BatchL2 batch_l2_rule(int64_t k, int64_t rows, int64_t cluster_rows) {
  BatchL2 l2;
  if (rows <= cluster_rows && k >= kMidK) l2.weights = L2Priority::EvictFirst;
  return l2;
}

// The clusters the strided batch deals its tiles to (cut_grid_scheduler.cuh). Its tiles are all
// alike, so on the launch's C clusters the last wave may hold only a few (Qwen3.5-35B FC1: 1024
// cluster tiles on 66 clusters, 15.5 waves), which finish it alone while the others idle. On the
// fewest clusters that need as many waves every cluster deals the same tiles and the rest of the card
// draws no power, which at the power limit the working SMs' clock takes up. On an H100 held at the
// power limit, 64 clusters instead of 66 gained 1.8-3.0% on the three uniform cells with such a tail
// (bench/RESULTS.md, run 22).
int64_t batch_clusters(int64_t cluster_tiles, int64_t clusters) {
  if (cluster_tiles <= 0 || clusters <= 0) return clusters;
  const int64_t waves = (cluster_tiles + clusters - 1) / clusters;
  return (cluster_tiles + waves - 1) / waves;
}

// Skewed: the largest group holds more than twice the mean rows (max * groups > 2 * total, exact in
// integers). Uniform counts sit at 1; the bench's zipf s=1.2 counts at about 3.4 over 8 experts and
// 10 over 32 (more with more experts). Small groups: not skewed, and at most four M tiles' rows per
// group on average (total <= 4 * 128 * groups).
static constexpr int64_t kSkewedMaxOverMean = 2;
static constexpr int64_t kSmallGroupRows = 4 * 128;

// Equal small groups: every count the plan's equal_rows (at most kSmallGroupRows, equal_groups_rows)
// at offset e x equal_rows, which the strided batch computes.
__host__ __device__ constexpr CountsClass classify_counts(int64_t max_count, int64_t total, int groups,
                                                          bool equal_groups) {
  if (equal_groups) return CountsClass::kEqualSmallGroups;
  if (max_count * groups > kSkewedMaxOverMean * total) return CountsClass::kSkewed;
  return total <= kSmallGroupRows * groups ? CountsClass::kSmallGroups : CountsClass::kEven;
}

// The class of the counts, computed by one whole block of kThreads threads (every thread gets it):
// the max and the sum of the counts by warp shuffles, one shared-memory step across the warps (its
// barrier also ANDs whether each group sits where a strided batch of equal_rows rows puts it), then
// classify_counts.
template <int kThreads>
__device__ CountsClass block_counts_class(const int64_t* counts, const int64_t* offsets, int groups,
                                          int64_t equal_rows) {
  static_assert(kThreads % 32 == 0, "whole warps");
  constexpr int kWarps = kThreads / 32;
  __shared__ int64_t warp_max[kWarps], warp_sum[kWarps];
  const int t = threadIdx.x;
  int64_t mx = 0, sum = 0;
  bool batch_layout = equal_rows > 0;
  for (int e = t; e < groups; e += kThreads) {
    const int64_t c = counts[e];
    mx = c > mx ? c : mx;
    sum += c;
    if (equal_rows > 0) batch_layout = batch_layout && c == equal_rows && offsets[e] == e * equal_rows;
  }
  for (int lane_mask = 16; lane_mask > 0; lane_mask /= 2) {
    const int64_t other_max = __shfl_xor_sync(0xffffffffu, mx, lane_mask);
    mx = other_max > mx ? other_max : mx;
    sum += __shfl_xor_sync(0xffffffffu, sum, lane_mask);
  }
  if (t % 32 == 0) warp_max[t / 32] = mx, warp_sum[t / 32] = sum;
  const bool equal_groups = __syncthreads_and(batch_layout);
  mx = warp_max[0], sum = warp_sum[0];
  for (int w = 1; w < kWarps; ++w) mx = warp_max[w] > mx ? warp_max[w] : mx, sum += warp_sum[w];
  return classify_counts(mx, sum, groups, equal_groups);
}

__global__ void counts_class_kernel(const int64_t* counts, const int64_t* offsets, int groups, int64_t equal_rows,
                                    int* counts_class) {
  const CountsClass c = block_counts_class<256>(counts, offsets, groups, equal_rows);
  if (threadIdx.x == 0) *counts_class = static_cast<int>(c);
}

void launch_counts_class(const int64_t* counts, const int64_t* offsets, int groups, int64_t equal_rows,
                         int* counts_class, cudaStream_t s) {
  counts_class_kernel<<<1, 256, 0, s>>>(counts, offsets, groups, equal_rows, counts_class);
  MOENUM_CUDA_LAUNCH_CHECK();
}

// Elements from one expert's weights to the next's, if the weights are one strided tensor.
static int64_t expert_weight_stride(const GroupedGemmDesc& g) {
  return g.groups > 1 ? g.b_expert[1] - g.b_expert[0] : g.n * g.k;
}

int64_t equal_groups_rows(const GroupedGemmDesc& g) {
  if (g.kind != GemmKind::Fprop || g.groups < 1 || g.rows <= 0 || g.rows % g.groups != 0) return 0;
  const int64_t rows = g.rows / g.groups;
  if (rows > kSmallGroupRows || static_cast<int64_t>(g.b_expert.size()) != g.groups) return 0;
  // One weight tensor: a fixed stride of whole 16-byte units (TMA), no expert overlapping the next.
  const int64_t stride = expert_weight_stride(g);
  if (stride < g.n * g.k || stride % 8 != 0) return 0;
  for (int e = 2; e < g.groups; ++e)
    if (g.b_expert[e] - g.b_expert[e - 1] != stride) return 0;
  return rows;
}

int default_chunks(const GroupedGemmDesc& g) {
  if (g.kind == GemmKind::Wgrad) return 1;
  // Up to 8 sub-groups per group, at most ~512 in all (the scheduler walks empty ones 32 at a time).
  return std::clamp(512 / std::max(g.groups, 1), 1, 8);
}

namespace {

std::unique_ptr<GroupedGemmPlan> make_tile_plan(const GroupedGemmDesc& g, Tile tile, int chunks, int64_t chunk_rows,
                                                int run, int sm_count) {
  return with_tile_kernel(tile, [&](auto kernel) -> std::unique_ptr<GroupedGemmPlan> {
    return std::make_unique<Plan<decltype(kernel)>>(g, chunks, chunk_rows, run, sm_count);
  });
}

// What choose_and_fill needs: every configuration's fill target, which one each class of counts runs
// (indexed by CountsClass; kConfigs: the strided batch, which needs no fill), and the rows per group
// of the strided batch (0: not offered this launch, so never chosen).
template <class ED, int kConfigs>
struct ChoiceFill {
  FillTarget<ED> target[kConfigs];
  int config_of_class[4];
  int64_t equal_rows;
};

// Fills the chosen configuration's problem array: every block reduces the counts (max, sum) itself,
// so the class needs no launch of its own; block 0 records the choice for the GEMM kernel. The
// entry's own count and offset are read before the reduction, so their latency overlaps it. The
// GEMM is launched programmatically dependent on this kernel (ChoicePlan::launch): released here at
// once, it sets up while this grid runs and waits for its writes in cudaGridDependencySynchronize.
template <class ED, int kConfigs>
__global__ void choose_and_fill(const ChoiceFill<ED, kConfigs> f, int groups, const int64_t* counts,
                                const int64_t* offsets, int* choice) {
  constexpr int kThreads = 128;
  cudaTriggerProgrammaticLaunchCompletion();
  const int t = threadIdx.x;
  const int i = blockIdx.x * kThreads + t;
  const int64_t cnt = counts[i % groups], off = offsets[i % groups];
  int which = 0;
  if (kConfigs > 1 || f.equal_rows > 0) {
    const CountsClass counts_class = block_counts_class<kThreads>(counts, offsets, groups, f.equal_rows);
    which = f.config_of_class[static_cast<int>(counts_class)];
  }
  if (blockIdx.x == 0 && t == 0) *choice = which;
  if (which >= kConfigs) return;
  const FillTarget<ED>& target = f.target[which];
  if (i < groups * target.chunks) fill_entry(target, groups, i, cnt, off);
}

template <class... Ks>
using FirstOf = std::tuple_element_t<0, std::tuple<Ks...>>;

// The CUTLASS parameters of kernels Ks as one struct: one grid-constant kernel parameter.
template <class... Ks>
struct ParamsOf {};
template <class K, class... Rest>
struct ParamsOf<K, Rest...> {
  typename K::Params head;
  ParamsOf<Rest...> rest;
};

template <class K, class... Rest>
ParamsOf<K, Rest...> params_of(const typename K::Params& head, const typename Rest::Params&... rest) {
  ParamsOf<K, Rest...> p;
  p.head = head;
  if constexpr (sizeof...(Rest) > 0) p.rest = params_of<Rest...>(rest...);
  return p;
}

// Runs the kernel of K and Rest that `which` counts to (0: K). Inlined: as a call it spills the
// producer warp group, which setmaxnreg leaves 40 registers (ptxas -v: 208-240 bytes, 0 inlined
// for two configurations, 144 for three).
template <class K, class... Rest>
__device__ __forceinline__ void run_chosen(int which, char* smem, const ParamsOf<K, Rest...>& params) {
  if (which == 0) {
    K op;
    op(params.head, smem);
  } else if constexpr (sizeof...(Rest) > 0) {
    run_chosen<Rest...>(which - 1, smem, params.rest);
  }
}

// Runs one of the CUTLASS kernels Ks (one cluster shape and thread count), as *choice says. Every
// CTA reads the same value, so each cluster runs one kernel whole. Launched programmatically
// dependent on choose_and_fill: nothing is read before that grid's writes are visible.
template <class... Ks>
__global__ void __launch_bounds__(FirstOf<Ks...>::MaxThreadsPerBlock, FirstOf<Ks...>::MinBlocksPerMultiprocessor)
    chosen_gemm(CUTLASS_GRID_CONSTANT ParamsOf<Ks...> const params, const int* choice) {
  extern __shared__ char smem[];
  cudaGridDependencySynchronize();
  run_chosen<Ks...>(sizeof...(Ks) == 1 ? 0 : *choice, smem, params);
}

// Configuration B (a GroupedKernel's Batch) over equal groups as one strided batched GEMM: group e's
// rows at a + e x rows x k, its weights at b_expert[0] + e x stride, its output rows at
// d_rows + e x rows x n. The parameters are made on the host at launch from that launch's pointers
// (three tensor maps, no device work; remade only when a pointer or the rows change) and are only run
// if the device finds the counts in that layout.
template <class B>
class StridedBatch {
  using Kernel = typename B::Kernel;
  using Mainloop = typename Kernel::CollectiveMainloop;

 public:
  // hw: the hardware info the launch's grouped configurations were made with; l2: the loads'
  // priorities (unset: batch_l2_rule's for each problem); every_cta: the tiles on all of the launch's
  // CTAs (unset: on batch_clusters' clusters).
  StridedBatch(const cutlass::KernelHardwareInfo& hw, std::optional<BatchL2> l2, bool every_cta)
      : hw_(hw), forced_l2_(l2), every_cta_(every_cta) {}

  // The parameters for g, with `rows` rows per group (equal_groups_rows(g) > 0), their tiles dealt
  // to batch_clusters' clusters of `grid`. False if CUTLASS cannot run them in `grid` (the grid of
  // the launch that carries them) or without a workspace.
  bool prepare(const GroupedGemmDesc& g, int64_t rows, dim3 grid) {
    const int64_t stride = expert_weight_stride(g);
    const Key key{g.a, g.d_rows, g.b_expert[0], stride, rows};
    if (key == key_) return ready_;
    key_ = key;
    ready_ = false;
    const int n = static_cast<int>(g.n), k = static_cast<int>(g.k), r = static_cast<int>(rows);
    const auto* a = reinterpret_cast<const Bf16*>(g.a);
    const auto* b = reinterpret_cast<const Bf16*>(g.b_expert[0]);
    // Transposed: D^T = B_e . A^T, the weights first (n x k row-major), the rows second (K x rows
    // column-major), D^T n x rows column-major: the same strides as D rows x n row-major.
    const int m_extent = B::kTransposed ? n : r, n_extent = B::kTransposed ? r : n;
    auto sa = cutlass::make_cute_packed_stride(typename Kernel::StrideA{}, {m_extent, k, g.groups});
    auto sb = cutlass::make_cute_packed_stride(typename Kernel::StrideB{}, {n_extent, k, g.groups});
    auto sd = cutlass::make_cute_packed_stride(typename Kernel::StrideD{}, {m_extent, n_extent, g.groups});
    if constexpr (B::kTransposed) cute::get<2>(sa) = stride;
    else cute::get<2>(sb) = stride;
    typename Mainloop::Arguments mainloop{};
    mainloop.ptr_A = B::kTransposed ? b : a;
    mainloop.dA = sa;
    mainloop.ptr_B = B::kTransposed ? a : b;
    mainloop.dB = sb;
    const BatchL2 l2 = forced_l2_ ? *forced_l2_ : batch_l2_rule(k, rows, B::kClusterRows);
    (B::kTransposed ? mainloop.hint_a : mainloop.hint_b) = hint(l2.weights);
    (B::kTransposed ? mainloop.hint_b : mainloop.hint_a) = hint(l2.rows);
    typename Kernel::Arguments args{cutlass::gemm::GemmUniversalMode::kBatched,
                                    {m_extent, n_extent, k, g.groups},
                                    mainloop,
                                    {{}, nullptr, sd, reinterpret_cast<Bf16*>(g.d_rows), sd},
                                    hw_};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    // The grouped scheduler rasterises along M (its default), which sets its grid's layout.
    args.scheduler.raster_order = cutlass::gemm::kernel::detail::RasterOrderOptions::AlongM;
    if (Kernel::can_implement(args) && Kernel::get_workspace_size(args) == 0) {
      params_ = Kernel::to_underlying_arguments(args, nullptr);
      auto& deal = params_.scheduler;
      const uint32_t cluster = deal.cluster_shape_m_ * deal.cluster_shape_n_;
      const int64_t clusters = int64_t(grid.x) * grid.y * grid.z / cluster;
      deal.ctas = every_cta_ ? 0 : static_cast<uint32_t>(batch_clusters(CutGridTileScheduler::cluster_tiles(deal), clusters) * cluster);
      const dim3 want = Kernel::get_grid_shape(params_);
      ready_ = want.x == grid.x && want.y == grid.y && want.z == grid.z;
    }
    return ready_;
  }
  const typename Kernel::Params& params() const { return params_; }

 private:
  static typename Mainloop::Hint hint(L2Priority p) {
    using H = typename Mainloop::Hint;
    return p == L2Priority::EvictFirst ? H::EVICT_FIRST : p == L2Priority::EvictLast ? H::EVICT_LAST : H::EVICT_NORMAL;
  }
  using Key = std::tuple<const void*, const void*, const void*, int64_t, int64_t>;
  cutlass::KernelHardwareInfo hw_;
  std::optional<BatchL2> forced_l2_;
  bool every_cta_;
  Key key_{nullptr, nullptr, nullptr, 0, 0};
  bool ready_ = false;
  typename Kernel::Params params_{};
};

// The kernels of one ChoicePlan launch (Ks, then the strided batch's if any): the kernel, its
// parameters and its shared memory.
template <class... Ks>
struct Kernels {
  static constexpr int kSmemBytes = std::max({static_cast<int>(Ks::SharedStorageSize)...});
  static constexpr auto kKernel = chosen_gemm<Ks...>;
  using Params = ParamsOf<Ks...>;
};
template <class Batch, class... Ks>
struct LaunchedKernels {
  using type = Kernels<Ks..., typename Batch::Kernel>;
};
template <class... Ks>
struct LaunchedKernels<void, Ks...> {
  using type = Kernels<Ks...>;
};
// A ChoicePlan's strided batch, or nothing.
template <class Batch>
struct BatchHolder {
  std::unique_ptr<StridedBatch<Batch>> batch;
};
template <>
struct BatchHolder<void> {};

// The automatic plan: one configuration, or several picked on the device from the counts, in two
// launches (fill, GEMM) like one plan: no host read, graph-capturable, and nothing launched for the
// configurations not chosen. The GEMM is a programmatic dependent launch of the fill, so its launch
// and setup overlap the fill (torch._grouped_mm launches its two without that). Batch: void, or a
// GroupedKernel::Batch of the same cluster shape that equal small groups run (StridedBatch).
template <class Batch, class... Cs>
class ChoicePlan final : public GroupedGemmPlan {
  static constexpr int kConfigs = sizeof...(Cs);
  static constexpr bool kBatch = !std::is_void_v<Batch>;
  using First = FirstOf<Cs...>;
  using FirstKernel = typename First::Kernel;
  static_assert((std::is_same_v<typename Cs::ClusterShape, typename First::ClusterShape> && ...),
                "one launch: one cluster shape");
  static_assert(((Cs::Kernel::MaxThreadsPerBlock == FirstKernel::MaxThreadsPerBlock &&
                  Cs::Kernel::MinBlocksPerMultiprocessor == FirstKernel::MinBlocksPerMultiprocessor) && ...));
  using Launched = typename LaunchedKernels<Batch, typename Cs::Kernel...>::type;
  static constexpr int kSmemBytes = Launched::kSmemBytes;
  static constexpr auto kKernel = Launched::kKernel;

 public:
  ChoicePlan(const GroupedGemmDesc& g, int chunks, int64_t chunk_rows, const std::array<int, kConfigs>& runs,
             const std::array<int, 4>& config_of_class, bool offer_batch, std::optional<BatchL2> batch_l2,
             bool batch_every_cta, int sm_count)
      : plans_(make_plans(g, chunks, chunk_rows, runs, sm_count, std::index_sequence_for<Cs...>{})),
        config_of_class_(config_of_class),
        offer_batch_(offer_batch),
        choice_(1) {
    grid_ = FirstKernel::get_grid_shape(std::get<0>(plans_)->params());
    const bool same_grid = (same_dims(Cs::Kernel::get_grid_shape(std::get<std::unique_ptr<Plan<Cs>>>(plans_)->params())) && ...);
    if (!same_grid) throw InternalError("ChoicePlan: the configurations want different persistent grids");
    if constexpr (kBatch) {
      static_assert(std::is_same_v<typename Batch::ClusterShape, typename First::ClusterShape>, "one cluster shape");
      static_assert(Batch::Kernel::MaxThreadsPerBlock == FirstKernel::MaxThreadsPerBlock &&
                    Batch::Kernel::MinBlocksPerMultiprocessor == FirstKernel::MinBlocksPerMultiprocessor);
      batch_.batch = std::make_unique<StridedBatch<Batch>>(hardware_info<FirstKernel>(sm_count), batch_l2, batch_every_cta);
    }
    MOENUM_CUDA_CHECK(cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
  }

  bool offered_strided_batch() const override { return offered_batch_; }

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    ChoiceFill<D, kConfigs> f{};
    int entries = 0;
    std::apply(
        [&](const auto&... plan) {
          int i = 0;
          ((f.target[i++] = plan->fill_target(g), entries = std::max(entries, plan->entries())), ...);
        },
        plans_);
    std::copy(config_of_class_.begin(), config_of_class_.end(), f.config_of_class);
    if constexpr (kBatch) {
      const int64_t rows = offer_batch_ ? equal_groups_rows(g) : 0;
      f.equal_rows = rows > 0 && batch_.batch->prepare(g, rows, grid_) ? rows : 0;
    }
    offered_batch_ = f.equal_rows > 0;
    choose_and_fill<D, kConfigs><<<(entries + 127) / 128, 128, 0, s>>>(f, g.groups, g.counts, g.offsets, choice_.get());
    MOENUM_CUDA_LAUNCH_CHECK();
    using Cluster = typename First::ClusterShape;
    const dim3 cluster(cute::size<0>(Cluster{}), cute::size<1>(Cluster{}), 1);
    std::apply(
        [&](const auto&... plan) {
          typename Launched::Params params;
          if constexpr (kBatch)
            params = params_of<typename Cs::Kernel..., typename Batch::Kernel>(plan->params()..., batch_.batch->params());
          else
            params = params_of<typename Cs::Kernel...>(plan->params()...);
          const int* choice = choice_.get();
          void* args[] = {&params, &choice};
          MOENUM_CUTLASS_CHECK(cutlass::ClusterLauncher::launch(grid_, cluster, FirstKernel::get_block_shape(),
                                                                kSmemBytes, s, reinterpret_cast<const void*>(kKernel),
                                                                args, /*launch_with_pdl=*/true));
        },
        plans_);
  }

 private:
  template <size_t... I>
  static std::tuple<std::unique_ptr<Plan<Cs>>...> make_plans(const GroupedGemmDesc& g, int chunks, int64_t chunk_rows,
                                                             const std::array<int, kConfigs>& runs, int sm_count,
                                                             std::index_sequence<I...>) {
    return {std::make_unique<Plan<Cs>>(g, chunks, chunk_rows, runs[I], sm_count)...};
  }
  bool same_dims(dim3 d) const { return d.x == grid_.x && d.y == grid_.y && d.z == grid_.z; }

  std::tuple<std::unique_ptr<Plan<Cs>>...> plans_;
  BatchHolder<Batch> batch_;
  std::array<int, 4> config_of_class_;
  bool offer_batch_;
  bool offered_batch_ = false;
  DeviceBuffer<int> choice_;
  dim3 grid_;
};

// The distinct configurations of tiles (even first) and, for each CountsClass, its index among them.
// Equal small groups: one past the tiles, the strided batch (only ever chosen where it is offered).
struct DistinctTiles {
  std::vector<Tile> tiles;
  std::array<int, 4> config_of_class{};
};
DistinctTiles distinct_tiles(const FpropTiles& tiles) {
  DistinctTiles d;
  for (CountsClass c : {CountsClass::kEven, CountsClass::kSmallGroups, CountsClass::kSkewed}) {
    const Tile t = tiles.for_class(c);
    auto it = std::find(d.tiles.begin(), d.tiles.end(), t);
    if (it == d.tiles.end()) it = d.tiles.insert(d.tiles.end(), t);
    d.config_of_class[static_cast<int>(c)] = static_cast<int>(it - d.tiles.begin());
  }
  d.config_of_class[static_cast<int>(CountsClass::kEqualSmallGroups)] = static_cast<int>(d.tiles.size());
  return d;
}

}  // namespace

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  const int chunks = o.chunks < 0 ? default_chunks(g) : o.chunks;
  const FpropDevice device = FpropDevice::current();
  auto run = [&](Tile t) { return o.run > 0 ? o.run : fprop_run(g, t, device.sm_count); };
  const int sm_count = std::max(o.sm_count, 0);
  if (o.tile != Tile::Auto && !o.strided_batch)
    return make_tile_plan(g, o.tile, chunks, o.chunk_rows, run(o.tile), sm_count);
  // A forced tile with its strided batch: that tile for every class of counts, the batch offered.
  const FpropTiles tiles = o.tile == Tile::Auto ? fprop_tiles(g, device) : FpropTiles{o.tile, o.tile, o.tile, true};
  const DistinctTiles d = distinct_tiles(tiles);
  // batch: std::type_identity of the strided batch's configuration (void: none); the plans that
  // choose on the device carry their small-groups configuration's, offered where the rule says.
  auto choice = [&](auto batch, auto... kernels) -> std::unique_ptr<GroupedGemmPlan> {
    using Batch = typename decltype(batch)::type;
    std::array<int, sizeof...(kernels)> runs{};
    for (size_t i = 0; i < runs.size(); ++i) runs[i] = run(d.tiles[i]);
    return std::make_unique<ChoicePlan<Batch, decltype(kernels)...>>(g, chunks, o.chunk_rows, runs, d.config_of_class,
                                                                     tiles.batch_equal_groups, o.batch_l2, o.batch_every_cta, sm_count);
  };
  if (o.tile != Tile::Auto)
    return with_tile_kernel(o.tile, [&](auto kernel) {
      return choice(std::type_identity<typename decltype(kernel)::Batch>{}, kernel);
    });
  constexpr std::type_identity<void> no_batch;
  auto tiles_are = [&](std::initializer_list<Tile> want) { return std::equal(want.begin(), want.end(), d.tiles.begin(), d.tiles.end()); };
  if (tiles_are({Tile::T128x128})) return choice(no_batch, GroupedKernel<LA, LB, D>{});
  if (tiles_are({Tile::T128x256M2})) return choice(no_batch, WideM2Kernel{});
  if (tiles_are({Tile::T128x128Pingpong, Tile::T128x128PingpongT}))
    return choice(std::type_identity<PingpongTransposedKernel::Batch>{}, PingpongKernel{}, PingpongTransposedKernel{});
  if (tiles_are({Tile::T128x192Pingpong, Tile::T192x128PingpongT}))
    return choice(std::type_identity<PingpongTransposed192Kernel::Batch>{}, Pingpong192Kernel{},
                  PingpongTransposed192Kernel{});
  if (tiles_are({Tile::T128x128PingpongM2, Tile::T128x256M2, Tile::T128x128PingpongTM2}))
    return choice(std::type_identity<WideM2Kernel::Batch>{}, PingpongM2Kernel{}, WideM2Kernel{},
                  PingpongTransposedM2Kernel{});
  std::string names;
  for (Tile t : d.tiles) names += std::string(names.empty() ? "" : " / ") + tile_name(t);
  throw InternalError("no ChoicePlan for " + names);
}
}  // namespace moenum::gpu::sm90
