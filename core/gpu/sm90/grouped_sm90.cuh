// The CUTLASS 3.x sm_90a grouped GEMM (TMA + wgmma, warp-specialized, ptr-array), bf16 operands,
// fp32 accumulate, void C (beta = 0, no source read), D row-major bf16 or fp32.
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

#include "cuda_check.h"
#include "sm90/grouped_sm90.h"
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
struct Cooperative {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperative;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct Pingpong {
  using Kernel = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpong;
  using Epilogue = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

template <class LayoutA, class LayoutB, class ElementD_, int TileN = 128, int ClusterN = 1, int ClusterM = 1,
          class Schedule = Cooperative>
struct GroupedKernel {
  using ElementA = cutlass::bfloat16_t;
  using ElementB = cutlass::bfloat16_t;
  using ElementD = ElementD_;
  using Acc = float;
  static constexpr int kAlignAB = 8;  // 16 bytes of bf16: TMA needs 16-byte aligned strides
  static constexpr int kAlignD = 128 / cutlass::sizeof_bits<ElementD>::value;
  static constexpr int kTileM = 128;
  // 128x128x64 cooperative, no cluster: the default for every layout, a middle ground between the
  // large DeepSeek/Mixtral groups and the many small Qwen groups. The Fprop variants (a cluster along
  // N shares the A tile through TMA multicast and never rounds a group's M tiles up; along M it
  // shares B) are chosen in grouped_fprop.cu (fprop_tiles).
  using TileShape = cute::Shape<cute::_128, cute::Int<TileN>, cute::_64>;
  using ClusterShape = cute::Shape<cute::Int<ClusterM>, cute::Int<ClusterN>, cute::_1>;
  using KernelSchedule = typename Schedule::Kernel;
  using EpilogueSchedule = typename Schedule::Epilogue;

  using Epilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, Acc, Acc,
      void, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD,
      EpilogueSchedule, cutlass::epilogue::fusion::LinearCombination<ElementD, Acc>>::CollectiveOp;

  using Mainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp,
      ElementA, LayoutA*, kAlignAB, ElementB, LayoutB*, kAlignAB, Acc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(sizeof(typename Epilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using Kernel = cutlass::gemm::kernel::GemmUniversal<ProblemShape, Mainloop, Epilogue>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;
  using StrideA = typename Gemm::GemmKernel::InternalStrideA;
  using StrideB = typename Gemm::GemmKernel::InternalStrideB;
  using StrideC = typename Gemm::GemmKernel::InternalStrideC;
  using StrideD = typename Gemm::GemmKernel::InternalStrideD;
};

// A device flag that opens or closes a plan per launch: closed, its sizes are all M = 0, so its
// grouped kernel finds no tiles and exits at once. How the automatic Fprop choice (fprop_tiles)
// runs one of two configurations without a host read. No flag: always open.
struct Gate {
  const int* flag = nullptr;
  int open_when = 0;
};

// Per-group sizes and pointers from the device counts/offsets (one thread per sub-group).
//   rows_major: Fprop/Dgrad, the group's M is its row count, A and D advance by rows. Group e's rows
//               are split into up to `chunks` sub-groups of `chunk` rows each (chunk >= min_rows, a
//               multiple of tile_m, computed here from the count); sub-group j of group e sits at
//               j * groups + e, so with no group above min_rows the first `groups` entries are the
//               groups themselves and the rest are empty (M = 0: no tiles).
//   otherwise : Wgrad (chunks = 1), the group's K is its row count; an empty group gets M = 0 (no
//               tiles, no K = 0 GEMM: its D keeps the zeros the layer wrote).
//   gate closed: every group is treated as empty.
template <class EA, class EB, class ED>
__global__ void fill_groups(int groups, int chunks, int64_t min_rows, int64_t tile_m, bool rows_major, int64_t m,
                            int64_t n, int64_t k, const int64_t* counts, const int64_t* offsets, const EA* a,
                            const EB* b_rows, const EB* const* b_expert, ED* d_rows, ED* const* d_expert,
                            Shape3* shapes, const EA** pa, const EB** pb, ED** pd, Gate gate) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= groups * chunks) return;
  const int e = i % groups, j = i / groups;
  const bool closed = gate.flag != nullptr && *gate.flag != gate.open_when;
  int64_t cnt = closed ? 0 : counts[e], off = offsets[e];
  if (rows_major) {
    int64_t chunk = (cnt + chunks - 1) / chunks;
    chunk = (chunk + tile_m - 1) / tile_m * tile_m;
    if (chunk < min_rows) chunk = min_rows;
    const int64_t start = std::min<int64_t>(static_cast<int64_t>(j) * chunk, cnt);
    const int64_t rows = std::min<int64_t>(cnt - start, chunk);
    shapes[i] = Shape3(static_cast<int>(rows), static_cast<int>(n), static_cast<int>(k));
    pa[i] = a + (off + start) * k;
    pb[i] = b_expert[e];
    pd[i] = d_rows + (off + start) * n;
  } else {
    shapes[i] = Shape3(cnt > 0 ? static_cast<int>(m) : 0, static_cast<int>(n), static_cast<int>(cnt));
    pa[i] = a + off * m;
    pb[i] = b_rows + off * n;
    pd[i] = d_expert[e];
  }
}

template <class K>
class Plan final : public GroupedGemmPlan {
  using EA = typename K::ElementA;
  using EB = typename K::ElementB;
  using ElementD = typename K::ElementD;

 public:
  Plan(const GroupedGemmDesc& g, int chunks, int64_t chunk_rows, Gate gate = {})
      : groups_(g.groups),
        chunks_(g.kind == GemmKind::Wgrad ? 1 : std::max(chunks, 1)),
        chunk_rows_(chunk_rows),
        gate_(gate) {
    const bool rows_major = g.kind != GemmKind::Wgrad;
    const int total = groups_ * chunks_;
    shapes_.reset(total);
    pa_.reset(total);
    pb_.reset(total);
    pd_.reset(total);
    // Strides do not depend on the counts: the variable extent is never a stride.
    using cute::make_shape;
    int M = rows_major ? 1 : static_cast<int>(g.m), N = static_cast<int>(g.n);
    int Kd = rows_major ? static_cast<int>(g.k) : 1;
    std::vector<typename K::StrideA> sa(total, cutlass::make_cute_packed_stride(typename K::StrideA{}, {M, Kd, 1}));
    std::vector<typename K::StrideB> sb(total, cutlass::make_cute_packed_stride(typename K::StrideB{}, {N, Kd, 1}));
    std::vector<typename K::StrideD> sd(total, cutlass::make_cute_packed_stride(typename K::StrideD{}, {M, N, 1}));
    sa_.upload(sa);
    sb_.upload(sb);
    sd_.upload(sd);
    if (rows_major) {
      std::vector<const EB*> bw(groups_);
      for (int e = 0; e < groups_; ++e) bw[e] = reinterpret_cast<const EB*>(g.b_expert.at(e));
      b_expert_.upload(bw);
    } else {
      std::vector<ElementD*> dw(groups_);
      for (int e = 0; e < groups_; ++e) dw[e] = reinterpret_cast<ElementD*>(g.d_expert.at(e));
      d_expert_.upload(dw);
    }
    MOENUM_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // uploads done before the host vectors go

    int dev = 0;
    MOENUM_CUDA_CHECK(cudaGetDevice(&dev));
    auto hw = cutlass::KernelHardwareInfo::make_kernel_hardware_info<typename K::Kernel>(dev);
    typename K::Gemm::Arguments args{
        cutlass::gemm::GemmUniversalMode::kGrouped,
        {total, shapes_.get(), nullptr},  // no host sizes: the kernel reads them on the device
        {const_cast<const EA**>(pa_.get()), sa_.get(), const_cast<const EB**>(pb_.get()), sb_.get()},
        {{}, nullptr, nullptr, pd_.get(), sd_.get()},
        hw};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    MOENUM_CUTLASS_CHECK(gemm_.can_implement(args));
    workspace_.reset(std::max<size_t>(K::Gemm::get_workspace_size(args), 1));
    MOENUM_CUTLASS_CHECK(gemm_.initialize(args, workspace_.get()));
  }

  void launch(const GroupedGemmDesc& g, cudaStream_t s) override {
    const bool rows_major = g.kind != GemmKind::Wgrad;
    fill_groups<EA, EB, ElementD><<<(groups_ * chunks_ + 127) / 128, 128, 0, s>>>(
        groups_, chunks_, chunk_rows_, K::kTileM, rows_major, g.m, g.n, g.k, g.counts, g.offsets, reinterpret_cast<const EA*>(g.a),
        reinterpret_cast<const EB*>(g.b_rows), b_expert_.get(), reinterpret_cast<ElementD*>(g.d_rows),
        d_expert_.get(), shapes_.get(), const_cast<const EA**>(pa_.get()), const_cast<const EB**>(pb_.get()),
        pd_.get(), gate_);
    MOENUM_CUDA_LAUNCH_CHECK();
    MOENUM_CUTLASS_CHECK(gemm_.run(s));
  }

 private:
  int groups_;
  int chunks_;
  int64_t chunk_rows_;
  Gate gate_;
  typename K::Gemm gemm_;
  DeviceBuffer<Shape3> shapes_;
  DeviceBuffer<EA*> pa_;
  DeviceBuffer<EB*> pb_;
  DeviceBuffer<ElementD*> pd_;
  DeviceBuffer<typename K::StrideA> sa_;
  DeviceBuffer<typename K::StrideB> sb_;
  DeviceBuffer<typename K::StrideD> sd_;
  DeviceBuffer<const EB*> b_expert_;
  DeviceBuffer<ElementD*> d_expert_;
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace moenum::gpu::sm90
