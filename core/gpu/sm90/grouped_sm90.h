// Host-side entry points of the CUTLASS sm_90a grouped GEMMs (one translation unit per operand
// layout, see grouped_sm90.cuh). Problem sizes and operand pointers are written on the device by a
// small kernel from the device-resident counts and offsets, so launching needs no host sync and the
// whole sequence can be captured in a CUDA graph.
//
// The choices below are made once per plan from host-known static information (groups, N, K, the
// GEMM kind); only the automatic Fprop tile may also depend on the counts, and then it is picked on
// the device at every launch:
//   tile  : 128x128x64 cooperative (every kind), or for Fprop one of the wider or pingpong
//           configurations of Tile (fprop_tiles: from N and K, and from the class of the counts;
//           the others on request, for the bench). A choice on the device builds every candidate
//           configuration's arrays and CUTLASS parameters (two or three, and where the rows are
//           known on the host the strided batch for equal small groups: equal_groups_rows); one
//           small kernel classifies the counts and fills the chosen configuration's problem array
//           (the batch needs none), and one
//           kernel launch runs the chosen CUTLASS kernel (all have the same cluster and threads),
//           a programmatic dependent launch of the fill, so its setup overlaps the fill. No host
//           read, so it stays graph-capturable, and it launches no more than a single
//           configuration does. The automatic plan with one configuration launches the same way.
//   chunks: Fprop/Dgrad split each group's rows, on the device, into up to `chunks` sub-groups of at
//           least `chunk_rows` rows (multiples of the tile's M). CUTLASS's grouped tile scheduler
//           walks a group's tiles along M (no swizzle without host problem sizes), so one wave of a
//           large group covers every M tile of one or two N columns and streams that group's whole
//           A through L2 per wave; a sub-group of 16 M tiles makes each wave a compact block
//           instead. Only the order of the output tiles changes: every element is computed exactly
//           as before (same K order, same fp32 accumulate), so results are bitwise unchanged.
//
// Numerics: the model recipe.accumulate: hopper_mma implements (reference/hopper_mma.h on the
// tensor-core model moenum/tc.h), the same for every configuration gpu.grouped can pick:
//   every Tile below (128x128x64 cooperative for Fprop, Dgrad and Wgrad; the others Fprop only):
//     an output element lives in one CTA's register accumulator for the whole K loop; the mainloop
//     walks the k-tiles of 64 in ascending order and issues four wgmma m64nNk16 bf16 instructions
//     per k-tile in ascending k, the first with ScaleOut::Zero (accumulator +0). So each output is
//     one chain of 16-product fused steps over k = 0, 16, 32, ... from +0, whatever the tile's M or N
//     (they only decide which CTA holds the element), whatever the cluster (TMA multicast of A or B
//     changes no value), whether the problem is transposed (T128x128PingpongT computes D^T = B_e .
//     A^T: the same exact products a * b in the same k order) and whatever the schedule (pingpong
//     gives a whole tile to one consumer warp group instead of half of it to each of two; both run
//     the same CUTLASS mainloop, the same k loop and instructions), whatever cluster takes which
//     tile in which order (the pingpong's runs, run_scheduler.cuh) and whether equal groups run as
//     one strided batched GEMM (GroupedKernel::Batch: CUTLASS's non-grouped mainloop and epilogue of
//     the same schedule, the same k loop and instructions, with fixed strides for pointers, whatever
//     L2 priority its loads carry). A K that is not a multiple of 64 is zero-filled by TMA: zero
//     products, which leave the chain's bits unchanged (moenum/tc.h).
//   chunks (Fprop/Dgrad): sub-groups split M only, never K.
//   Wgrad: K is the group's rows in plan order, one group per expert (chunks = 1), never split.
//   No split-K, no stream-K: both schedules, with the grouped data-parallel tile scheduler,
//     partition output tiles, not K.
//   Epilogue LinearCombination, alpha = 1 (exact), beta = 0 with void C: D = bf16_rn(acc) (Fprop,
//     Dgrad) or D = acc (Wgrad, fp32).
// A new tile configuration, a split-K or stream-K schedule, or a different instruction must come
// with its model in reference/hopper_mma.h (and the tc stage of scripts/gpu-check.sh), or lose
// modelled_accumulate in core/src/gpu_backend_traits.cpp.
#pragma once
#include <memory>
#include <optional>

#include "gemm/grouped_gemm.h"

namespace moenum::gpu::sm90 {

// Holds the per-group device arrays and the CUTLASS operator for one GEMM of the layer. Created on
// the first run of a GroupedGemmDesc id (allocation happens there, never inside a graph capture).
class GroupedGemmPlan {
 public:
  virtual ~GroupedGemmPlan() = default;
  virtual void launch(const GroupedGemmDesc& g, cudaStream_t s) = 0;
  // Whether the last launch let the device run equal groups as one strided batch (equal_groups_rows).
  virtual bool offered_strided_batch() const { return false; }
};

// The tile configurations (tile M x N x K, cluster M x N, schedule). All are data-parallel: each
// output tile is computed whole by one CTA, never split along K.
enum class Tile {
  Auto,
  T128x128,           // 128x128x64 cooperative, no cluster: every kind
  T128x256,           // 128x256x64 cooperative, 1x2 cluster (A multicast)
  T128x256M2,         // 128x256x64 cooperative, 2x1 cluster (B multicast): torch._grouped_mm's sm90 kernel
  T128x192,           // 128x192x64 cooperative, 1x2 cluster: for N that 128x256 pads more
  T128x128Pingpong,   // 128x128x64 pingpong, 1x2 cluster: short K loops
  T128x128PingpongM2, // 128x128x64 pingpong, 2x1 cluster (B multicast): for the bench
  T128x128PingpongT,  // 128x128x64 pingpong, 1x2 cluster, on D^T = B_e . A^T (B multicast): small groups
  T128x192Pingpong,   // 128x192x64 pingpong, 1x2 cluster: 17% less L2 traffic per product than 128x128
  T192x128PingpongT,  // 192x128x64 pingpong, 1x2 cluster, on D^T = B_e . A^T (B multicast): small groups
  T128x128PingpongTM2,  // 128x128x64 pingpong, 2x1 cluster, on D^T = B_e . A^T (A multicast): skewed counts
  kCount,             // not a configuration: one past the last, to walk them all
};
const char* tile_name(Tile t);
// Whether the configuration computes the transposed problem D^T = B_e . A^T (its kernel says).
bool tile_transposed(Tile t);

// The L2 eviction priority a strided batch's TMA loads give each operand (cache_hinted_mainloop.cuh).
// It decides which lines L2 keeps, never what is loaded or computed.
enum class L2Priority : int { Normal = 0, EvictFirst = 1, EvictLast = 2 };
const char* l2_priority_name(L2Priority p);
struct BatchL2 {
  L2Priority weights = L2Priority::Normal;
  L2Priority rows = L2Priority::Normal;
};
// The rule (grouped_fprop.cu), for a batch of groups of `rows` rows whose clusters hold `cluster_rows`
// rows each, over a k loop of `k`.
BatchL2 batch_l2_rule(int64_t k, int64_t rows, int64_t cluster_rows);
// The clusters a strided batch of `cluster_tiles` output tiles (one per cluster each) runs on, of the
// launch's `clusters`: the fewest that deal them in as many waves (the rule is in grouped_fprop.cu).
int64_t batch_clusters(int64_t cluster_tiles, int64_t clusters);

struct PlanOptions {
  Tile tile = Tile::Auto;  // honoured for Fprop only (Dgrad and Wgrad: always T128x128)
  int chunks = -1;         // max sub-groups per group (1 = no split); -1 = choose from the groups
  int chunk_rows = 2048;   // minimum rows of a sub-group
  int run = -1;            // Fprop pingpong tiles per cluster run (run_scheduler.cuh); -1 = fprop_run's rule
  int sm_count = -1;       // Fprop: the persistent grid on at most this many SMs; -1 = every SM
  // A forced Fprop tile also runs equal small groups as its strided batch, where equal_groups_rows
  // offers one (for the bench: the automatic plans carry their small-groups configuration's).
  bool strided_batch = false;
  std::optional<BatchL2> batch_l2;  // the strided batch's L2 priorities; unset: batch_l2_rule
  bool batch_every_cta = false;     // the strided batch's tiles on every CTA, not batch_clusters' (bench)
};

std::unique_ptr<GroupedGemmPlan> make_fprop_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A row, B col, D bf16
std::unique_ptr<GroupedGemmPlan> make_dgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A row, B row, D bf16
std::unique_ptr<GroupedGemmPlan> make_wgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o);  // A col, B row, D fp32

// The classes of counts the automatic Fprop choice tells apart (thresholds in grouped_fprop.cu):
// skewed (the largest group well above the mean), small groups (balanced, at most four M tiles per
// group on average), and the other balanced counts. Equal small groups: small groups that all hold
// the same rows, back to back from row 0 (offsets e x rows), as a capacity-padded dispatcher gives;
// only told apart when the plan offers a strided batch for them (equal_groups_rows).
enum class CountsClass : int { kEven = 0, kSmallGroups = 1, kSkewed = 2, kEqualSmallGroups = 3 };
const char* counts_class_name(CountsClass c);

// The automatic Fprop configuration for each class of counts (the rule is in grouped_fprop.cu).
// All equal when the counts do not matter. batch_equal_groups: equal small groups run the
// small-groups configuration as one strided batched GEMM (same tile and k loop, same bits).
struct FpropTiles {
  Tile even;
  Tile small_groups;
  Tile skewed;
  bool batch_equal_groups = false;
  Tile for_class(CountsClass c) const {
    return c == CountsClass::kSkewed ? skewed : c == CountsClass::kEven ? even : small_groups;
  }
  bool chosen_on_device() const { return even != skewed || even != small_groups; }
};

// What of the device the automatic Fprop choice depends on besides the problem.
struct FpropDevice {
  int sm_count = 0;
  double memory_gb_per_s = 0;  // peak DRAM bandwidth: memory clock x bus width, double data rate
  static FpropDevice current();  // the current CUDA device's
  // At least 32 GB/s of DRAM bandwidth per SM: the H200 (37), not the H100 SXM (25).
  bool memory_rich() const;
};

// The choices (see above); exposed so the bench can report them.
FpropTiles fprop_tiles(const GroupedGemmDesc& g, const FpropDevice& device);
// Tiles per cluster run of a pingpong Fprop configuration (1 for every other one).
int fprop_run(const GroupedGemmDesc& g, Tile t, int sm_count);
int default_chunks(const GroupedGemmDesc& g);

// The rows of each group if g's groups can run as one strided batch, should the device find them
// equal: the rows of g's buffers known on the host and a whole number of at most four M tiles per
// group, and the weights one tensor with a fixed stride between experts. 0 otherwise.
int64_t equal_groups_rows(const GroupedGemmDesc& g);

// Sets *counts_class (device) to the CountsClass of the device counts[0, groups) and offsets (for
// kEqualSmallGroups: every count equal_rows, at offset e x equal_rows; never with equal_rows 0): one
// small kernel on s, no host read. Exposed for the tests and the bench.
void launch_counts_class(const int64_t* counts, const int64_t* offsets, int groups, int64_t equal_rows,
                         int* counts_class, cudaStream_t s);

}  // namespace moenum::gpu::sm90
