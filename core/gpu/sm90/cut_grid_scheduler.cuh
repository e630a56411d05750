// CUTLASS's sm90 persistent tile scheduler dealing the tiles to the first `ctas` CTAs of the launched
// grid only; the others get no tile and leave at once.
//
// Why: the strided batch (grouped_fprop.cu, StridedBatch) runs in the same launch as the grouped
// configurations, which the device may choose instead, so its grid is theirs. Where the batch's tiles
// fill a last wave only partly, it deals them on the fewest clusters that need as many waves
// (batch_clusters) while the grouped configurations keep every SM.
//
// Only the assignment of tiles to CTAs changes (CUTLASS's order, stepped by `ctas` instead of the
// grid): every tile is computed whole by one CTA with the same k loop, so the bits are the same.
// `ctas` is a multiple of the cluster size, and a cluster's CTAs have consecutive indices in the
// grid's order, so a cluster is idle or working as a whole.
#pragma once
#include <cstdint>

#include <cutlass/gemm/kernel/sm90_tile_scheduler.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

namespace moenum::gpu::sm90 {

// The tag a GemmUniversal takes to get CutGridTileScheduler (TileSchedulerSelector below).
struct CutGridScheduler {};

class CutGridTileScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90 {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90;

 public:
  using Arguments = Base::Arguments;
  struct Params : Base::Params {
    uint32_t ctas = 0;  // the CTAs that take tiles; 0: every CTA of the launch
  };

  // The cluster tiles the base deals for p (its problem_tiles_ count clusters, each mode rounded up).
  static int64_t cluster_tiles(Params const& p) {
    return int64_t(p.problem_tiles_m_) * p.problem_tiles_n_ * p.problem_tiles_l_;
  }

  template <class ProblemShape, class TileShape, class ClusterShape, class... Rest>
  static Params to_underlying_arguments(ProblemShape problem, TileShape tile, ClusterShape cluster,
                                        cutlass::KernelHardwareInfo const& hw, Arguments const& args, Rest... rest) {
    Params p;
    static_cast<Base::Params&>(p) = Base::to_underlying_arguments(problem, tile, cluster, hw, args, rest...);
    return p;
  }

  CutGridTileScheduler() = default;

  CUTLASS_DEVICE explicit CutGridTileScheduler(Params const& params) : Base(params) {
#if defined(__CUDA_ARCH__)
    // The base's first index for this CTA and its grid (its constructor's rule).
    linear_ = params.raster_order_ == RasterOrder::AlongN ? uint64_t(blockIdx.x) + uint64_t(blockIdx.y) * gridDim.x
                                                          : uint64_t(blockIdx.x) * gridDim.y + uint64_t(blockIdx.y);
    const uint64_t grid = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
    step_ = params.ctas > 0 && params.ctas < grid ? params.ctas : grid;
    idle_ = linear_ >= step_;
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return get_current_work();
  }

  CUTLASS_DEVICE WorkTileInfo get_current_work() const { return work_at(linear_); }

  CUTLASS_DEVICE void advance_to_next_work(uint32_t advance_count = 1) { linear_ += step_ * advance_count; }

  CUTLASS_DEVICE bool is_last_tile(WorkTileInfo& work, uint32_t advance_count = 1) const {
    if (continue_current_work(work)) return false;
    return !work_at(linear_ + step_ * advance_count).is_valid();
  }

  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work) {
    if (continue_current_work(work)) return cute::make_tuple(work, true);
    advance_to_next_work();
    return cute::make_tuple(get_current_work(), true);
  }

  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto fetch_next_work(WorkTileInfo work, Pipeline&, PipelineState) {
    return fetch_next_work(work);
  }

 private:
  CUTLASS_DEVICE WorkTileInfo work_at(uint64_t linear) const {
    return idle_ ? WorkTileInfo::invalid_work_tile() : get_current_work_for_linear_idx(linear);
  }

  uint64_t linear_ = 0;
  uint64_t step_ = 1;
  bool idle_ = false;
};

}  // namespace moenum::gpu::sm90

namespace cutlass::gemm::kernel::detail {

template <class ArchTag, class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<moenum::gpu::sm90::CutGridScheduler, ArchTag, TileShape, ClusterShape, Stages> {
  using Scheduler = moenum::gpu::sm90::CutGridTileScheduler;
};

}  // namespace cutlass::gemm::kernel::detail
