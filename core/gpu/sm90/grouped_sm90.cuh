// The CUTLASS 3.x sm_90a grouped GEMM (TMA + wgmma, warp-specialized, ptr-array), bf16 operands,
// fp32 accumulate, void C (beta = 0, no source read), D row-major bf16 or fp32 (or, for a transposed
// Fprop configuration, D^T column-major).
// Only included by the three grouped_*.cu files: one kernel per layout (128x128x64 cooperative), and
// for Fprop the wider and pingpong configurations listed in grouped_sm90.h (Tile).
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/util/packed_stride.hpp>

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda_check.h"
#include "sm90/cache_hinted_mainloop.cuh"
#include "sm90/cut_grid_scheduler.cuh"
#include "sm90/grouped_sm90.h"
#include "sm90/run_scheduler.cuh"
#include "device_buffer.h"

namespace moenum::gpu::sm90 {

#define MOENUM_CUTLASS_CHECK(expr)                                                                 \
  do {                                                                                             \
    cutlass::Status st_ = (expr);                                                                  \
    if (st_ != cutlass::Status::kSuccess)                                                          \
      throw InternalError(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": CUTLASS " + \
                          cutlassGetStatusString(st_) + " in " #expr);                             \
  } while (0)

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using Shape3 = ProblemShape::UnderlyingProblemShape;

// The two warp-specialized schedules. Cooperative: both consumer warp groups share one output tile
// (each takes half of its rows). Pingpong: each consumer warp group owns a whole tile, and the two
// alternate, so one group's epilogue overlaps the other's mainloop (short K loops gain most).
// Batch*: the same schedule over a strided batch (fixed strides, no per-group pointers).
struct Cooperative {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
  using BatchKernel = cutlass::gemm::KernelTmaWarpSpecializedCooperative;
  using BatchEpilogue = cutlass::epilogue::TmaWarpSpecializedCooperative;
};
struct Pingpong {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
  using BatchKernel = cutlass::gemm::KernelTmaWarpSpecializedPingpong;
  using BatchEpilogue = cutlass::epilogue::TmaWarpSpecialized;
};

template <class LayoutA, class LayoutB, class ElementD_, int TileN = 128, int ClusterN = 1, int ClusterM = 1,
          class Schedule = Cooperative, class LayoutD = cutlass::layout::RowMajor, int TileM = 128>
struct GroupedKernel {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = ElementD_;
  using Acc = float;
  static constexpr int kAlignAB = 8;  // 16 bytes of bf16: TMA needs 16-byte aligned strides
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  // Column-major D: the kernel computes D^T = B_e . A^T of a row-major Fprop output (see Plan).
  static constexpr bool kTransposed = std::is_same_v<LayoutD, cutlass::layout::ColumnMajor>;
  // The tile's extent along the layer's rows (sub-groups are multiples of it): N when transposed.
  static constexpr int kRowTile = kTransposed ? TileN : TileM;
  // The layer's rows one cluster holds: its CTAs along them share the weight tile.
  static constexpr int kClusterRows = kRowTile * (kTransposed ? ClusterN : ClusterM);
  // 128x128x64 cooperative, no cluster: the default for every layout, a middle ground between the
  // large DeepSeek/Mixtral groups and the many small Qwen groups. The Fprop variants (a cluster along
  // N shares the A tile through TMA multicast and never rounds a group's M tiles up; along M it
  // shares B) are chosen in grouped_fprop.cu (fprop_tiles).
  using TileShape = cute::Shape<cute::Int<TileM>, cute::Int<TileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using KernelSchedule = typename Schedule::Kernel;
  using EpilogueSchedule = typename Schedule::Epilogue;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Acc, Acc,
      void, LayoutD*, kAlignD,
      ElementD, LayoutD*, kAlignD,
      EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, Acc>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementA, LayoutA*, kAlignAB, ElementB, LayoutB*, kAlignAB, Acc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  // Pingpong kernels take their tiles in runs per cluster (run_scheduler.cuh; run 1 is CUTLASS's order).
  static constexpr bool kRuns = std::is_same_v<Schedule, Pingpong>;
  using Problem = std::conditional_t<kRuns, RunProblemShape, ProblemShape>;
  using Kernel = cutlass::gemm::kernel::GemmUniversal<Problem, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Gemm::GemmKernel::InternalStrideA;
  using StrideB = typename Gemm::GemmKernel::InternalStrideB;
  using StrideC = typename Gemm::GemmKernel::InternalStrideC;
  using StrideD = typename Gemm::GemmKernel::InternalStrideD;

  // The same configuration as one strided batched GEMM over the groups (L = groups), for equal groups
  // laid out back to back (grouped_fprop.cu, StridedBatch): no tensor map changes from group to group.
  // Same tile, cluster, schedule, k loop and epilogue, so the same bits; its loads carry L2 priorities
  // (the weights are A when transposed, B otherwise), and its tiles may go to fewer CTAs than the
  // launch has (cut_grid_scheduler.cuh).
  struct Batch {
    static constexpr bool kTransposed = GroupedKernel::kTransposed;
    using ClusterShape = GroupedKernel::ClusterShape;
    static constexpr int kClusterRows = GroupedKernel::kClusterRows;
    using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
        cutlass::epilogue::collective::EpilogueTileAuto, Acc, Acc,
        void, LayoutD, kAlignD,
        ElementD, LayoutD, kAlignD,
        typename Schedule::BatchEpilogue, cutlass::epilogue::fusion::LinearCombination<ElementD, Acc>>::CollectiveOp;
    using Mainloop = CacheHintedMainloop<typename cutlass::gemm::collective::CollectiveBuilder<
        cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
        ElementA, LayoutA, kAlignAB, ElementB, LayoutB, kAlignAB, Acc, TileShape, ClusterShape,
        cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
        typename Schedule::BatchKernel>::CollectiveOp>;
    using Kernel =
        cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, Mainloop, Epilogue, CutGridScheduler>;
  };
};

using Bf16 = cutlass::bfloat16_t;

// The hardware info CUTLASS sizes Kernel's persistent grid from: this device's SMs (at most sm_count
// where it is > 0) and the clusters of Kernel that fit at once.
template <class Kernel>
cutlass::KernelHardwareInfo hardware_info(int sm_count) {
  int dev = 0;
  MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
  auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<Kernel>(dev);
  if (sm_count > 0) hw.sm_count = std::min(hw.sm_count, sm_count);
  return hw;
}

// What fill_groups writes for one plan: its per-sub-group problem array, from the device counts.
//   rows_major: Fprop/Dgrad, the group's M is its row count, A and D advance by rows. Group e's rows
//               are split into up to `chunks` sub-groups of `chunk` rows each (chunk >= min_rows, a
//               multiple of tile_m, computed here from the count); sub-group j of group e sits at
//               j * groups + e, so with no group above min_rows the first `groups` entries are the
//               groups themselves and the rest are empty (M = 0: no tiles).
//   transposed: Fprop computed as D^T = B_e . A^T (column-major D): the sizes are (n, rows, k) and
//               the weights are the first operand.
//   otherwise : Wgrad (chunks = 1), the group's K is its row count; an empty group gets M = 0 (no
//               tiles, no K = 0 GEMM: its D keeps the zeros the layer wrote).
template <class ED>
struct FillTarget {
  int chunks = 1;
  int64_t min_rows = 0, tile_m = 128;
  bool rows_major = true, transposed = false;
  int64_t m = 0, n = 0, k = 0;
  const Bf16* a = nullptr;
  const Bf16* b_rows = nullptr;
  const Bf16* const* b_expert = nullptr;
  ED* d_rows = nullptr;
  ED* const* d_expert = nullptr;
  Shape3* shapes = nullptr;
  const Bf16** pa = nullptr;
  const Bf16** pb = nullptr;
  ED** pd = nullptr;
};

// Entry i of the problem array: sub-group i / groups of group e = i % groups, whose count and
// offset the caller has read (cnt = counts[e], off = offsets[e]).
template <class ED>
__device__ void fill_entry(const FillTarget<ED>& f, int groups, int i, int64_t cnt, int64_t off) {
  const int e = i % groups, j = i / groups;
  if (!f.rows_major) {
    f.shapes[i] = Shape3(cnt > 0 ? static_cast<int>(f.m) : 0, static_cast<int>(f.n), static_cast<int>(cnt));
    f.pa[i] = f.a + off * f.m;
    f.pb[i] = f.b_rows + off * f.n;
    f.pd[i] = f.d_expert[e];
    return;
  }
  int64_t chunk = (cnt + f.chunks - 1) / f.chunks;
  chunk = (chunk + f.tile_m - 1) / f.tile_m * f.tile_m;
  if (chunk < f.min_rows) chunk = f.min_rows;
  const int64_t start = std::min<int64_t>(static_cast<int64_t>(j) * chunk, cnt);
  const int rows = static_cast<int>(std::min<int64_t>(cnt - start, chunk));
  const Bf16* a = f.a + (off + start) * f.k;
  f.shapes[i] = f.transposed ? Shape3(static_cast<int>(f.n), rows, static_cast<int>(f.k))
                             : Shape3(rows, static_cast<int>(f.n), static_cast<int>(f.k));
  f.pa[i] = f.transposed ? f.b_expert[e] : a;
  f.pb[i] = f.transposed ? a : f.b_expert[e];
  f.pd[i] = f.d_rows + (off + start) * f.n;
}

// Per-group sizes and pointers of one plan (one thread per sub-group).
template <class ED>
__global__ void fill_groups(FillTarget<ED> f, int groups, const int64_t* counts, const int64_t* offsets) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < groups * f.chunks) fill_entry(f, groups, i, counts[i % groups], offsets[i % groups]);
}

// The per-sub-group device arrays and the CUTLASS operator of one configuration K. launch() fills
// and runs it; a ChoicePlan (grouped_fprop.cu) instead fills it through fill_target() and runs its
// kernel through params().
template <class K>
class Plan final : public GroupedGemmPlan {
  using ElementD = typename K::ElementD;

 public:
  // run: tiles per cluster run, for a K with kRuns (see run_scheduler.cuh); ignored otherwise.
  // sm_count: the persistent grid's SMs (0: every SM of the device).
  Plan(const GroupedGemmDesc& g, int chunks, int64_t chunk_rows, int run = 1, int sm_count = 0)
      : groups_(g.groups), chunks_(g.kind == GemmKind::Wgrad ? 1 : std::max(chunks, 1)), chunk_rows_(chunk_rows) {
    const bool rows_major = g.kind != GemmKind::Wgrad;
    if (K::kTransposed && g.kind != GemmKind::Fprop) throw InternalError("a transposed plan is for Fprop only");
    const int total = groups_ * chunks_;
    shapes_.reset(total);
    pa_.reset(total);
    pb_.reset(total);
    pd_.reset(total);
    // Strides do not depend on the counts: the variable extent is never a stride. Transposed: A is
    // B_e [n, k] row-major, B the rows [rows, k] (K x rows column-major), D^T [n, rows] column-major.
    using cute::make_shape;
    int M = rows_major ? 1 : static_cast<int>(g.m), N = static_cast<int>(g.n);
    int Kd = rows_major ? static_cast<int>(g.k) : 1;
    const int a_rows = K::kTransposed ? N : M, b_cols = K::kTransposed ? 1 : N;
    const int d_rows = K::kTransposed ? N : M, d_cols = K::kTransposed ? 1 : N;
    std::vector<typename K::StrideA> sa(total, cutlass::make_cute_packed_stride(typename K::StrideA{}, {a_rows, Kd, 1}));
    std::vector<typename K::StrideB> sb(total, cutlass::make_cute_packed_stride(typename K::StrideB{}, {b_cols, Kd, 1}));
    std::vector<typename K::StrideD> sd(total, cutlass::make_cute_packed_stride(typename K::StrideD{}, {d_rows, d_cols, 1}));
    sa_.upload(sa);
    sb_.upload(sb);
    sd_.upload(sd);
    if (rows_major) {
      std::vector<const Bf16*> bw(groups_);
      for (int e = 0; e < groups_; ++e) bw[e] = reinterpret_cast<const Bf16*>(g.b_expert.at(e));
      b_expert_.upload(bw);
    } else {
      std::vector<ElementD*> dw(groups_);
      for (int e = 0; e < groups_; ++e) dw[e] = reinterpret_cast<ElementD*>(g.d_expert.at(e));
      d_expert_.upload(dw);
    }
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // uploads done before the host vectors go

    const auto hw = hardware_info<typename K::Kernel>(sm_count);
    typename K::Problem problem;
    problem.num_groups = total;
    problem.problem_shapes = shapes_.get();
    problem.host_problem_shapes = nullptr;  // no host sizes: the kernel reads them on the device
    if constexpr (K::kRuns) problem.run = run;
    typename K::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        problem,
        {const_cast<const Bf16**>(pa_.get()), sa_.get(), const_cast<const Bf16**>(pb_.get()), sb_.get()},
        {{}, nullptr, nullptr, pd_.get(), sd_.get()},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    MOENUM_CUTLASS_CHECK(gemm_.can_implement(args));
    workspace_.reset(std::max<size_t>(K::Gemm::get_workspace_size(args), 1));
    MOENUM_CUTLASS_CHECK(gemm_.initialize(args, workspace_.get()));
  }

  FillTarget<ElementD> fill_target(const GroupedGemmDesc& g) const {
    FillTarget<ElementD> f;
    f.chunks = chunks_, f.min_rows = chunk_rows_, f.tile_m = K::kRowTile;
    f.rows_major = g.kind != GemmKind::Wgrad, f.transposed = K::kTransposed;
    f.m = g.m, f.n = g.n, f.k = g.k;
    f.a = reinterpret_cast<const Bf16*>(g.a);
    f.b_rows = reinterpret_cast<const Bf16*>(g.b_rows);
    f.b_expert = b_expert_.get();
    f.d_rows = reinterpret_cast<ElementD*>(g.d_rows);
    f.d_expert = d_expert_.get();
    f.shapes = shapes_.get();
    f.pa = const_cast<const Bf16**>(pa_.get());
    f.pb = const_cast<const Bf16**>(pb_.get());
    f.pd = pd_.get();
    return f;
  }
  int entries() const { return groups_ * chunks_; }
  const typename K::Gemm::Params& params() const { return gemm_.params(); }

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    fill_groups<ElementD><<<(entries() + 127) / 128, 128, 0, s>>>(fill_target(g), groups_, g.counts, g.offsets);
    MOENUM_CUDA_LAUNCH_CHECK();
    MOENUM_CUTLASS_CHECK(gemm_.run(s));
  }

 private:
  int groups_;
  int chunks_;
  int64_t chunk_rows_;
  typename K::Gemm gemm_;
  DeviceBuffer<Shape3> shapes_;
  DeviceBuffer<Bf16*> pa_;
  DeviceBuffer<Bf16*> pb_;
  DeviceBuffer<ElementD*> pd_;
  DeviceBuffer<typename K::StrideA> sa_;
  DeviceBuffer<typename K::StrideB> sb_;
  DeviceBuffer<typename K::StrideD> sd_;
  DeviceBuffer<const Bf16*> b_expert_;
  DeviceBuffer<ElementD*> d_expert_;
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace moenum::gpu::sm90
