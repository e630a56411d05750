// CUTLASS's sm90 grouped tile scheduler with the output tiles dealt out in runs: each cluster takes
// `run` consecutive tiles of CUTLASS's order (so mostly of one group) instead of one tile per wave.
//
// Why: the persistent grouped kernel hands cluster c the tiles c, c + C, c + 2C, ... (C clusters).
// With small groups (a few tiles each) consecutive tiles of one cluster then lie in different
// groups, and at every group change the producer rewrites the A and B tensor maps and fences them
// before its next load, and the epilogue does the same for D. A run of `run` tiles per cluster keeps
// a cluster in one group for up to `run` tiles; one wave then covers `run` times as many groups, so
// `run` must stay small enough for the groups in flight to share L2 (the rule is in grouped_fprop.cu).
//
// Only the assignment of output tiles to clusters and their order changes; every tile is still
// computed whole by one CTA with the same k loop, so the results are bitwise those of CUTLASS's
// order. The remap is a bijection on each block of `run` waves (C * run tiles); a block that is not
// full (the last one) keeps CUTLASS's order, so the tail is dealt out as before. Each CTA's indices
// stay increasing, as the group walk of the base scheduler requires.
#pragma once
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/sm90_tile_scheduler_group.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>

namespace moenum::gpu::sm90 {

// The grouped problem shape that selects RunScheduler (see TileSchedulerSelector below), with the
// run length: the kernel's parameters carry it to every CTA's scheduler.
struct RunProblemShape : cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>> {
  int run = 1;  // 1: CUTLASS's order
};

template <class GroupProblemShape, int Stages>
class RunScheduler : public cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<GroupProblemShape, Stages> {
  using Base = cutlass::gemm::kernel::detail::PersistentTileSchedulerSm90Group<GroupProblemShape, Stages>;

 public:
  using typename Base::Params;
  using typename Base::SchedulerResponse;
  using typename Base::WorkTileInfo;

  RunScheduler() = default;

  CUTLASS_DEVICE RunScheduler(Params const& params, SchedulerResponse* response) : Base(params, response) {
#if defined(__CUDA_ARCH__)
    // The base's first index for this CTA (its constructor's rule) and its step.
    linear_ = params.raster_order_ == Base::RasterOrder::AlongN
                  ? uint64_t(blockIdx.x) + uint64_t(blockIdx.y) * gridDim.x
                  : uint64_t(blockIdx.x) * gridDim.y + uint64_t(blockIdx.y);
    grid_ = uint64_t(gridDim.x) * gridDim.y * gridDim.z;
    run_ = params.problem_shapes_.run > 1 ? uint64_t(params.problem_shapes_.run) : 1;
#endif
  }

  template <class ClusterShape>
  CUTLASS_DEVICE WorkTileInfo initial_work_tile_info(ClusterShape) {
    return this->get_current_work_for_linear_idx(run_order());
  }

  template <class Pipeline, class PipelineState>
  CUTLASS_DEVICE auto advance_to_next_work(Pipeline& pipeline, PipelineState state, uint32_t advance_count = 1) {
    linear_ += grid_ * advance_count;
    WorkTileInfo work = this->get_current_work_for_linear_idx(run_order());
    pipeline.producer_acquire(state);
    if (cute::elect_one_sync()) {
      this->response_ptr_[state.index()] = work;
      cutlass::arch::fence_view_async_shared();
      pipeline.producer_commit(state);
    }
    return cute::make_tuple(work, true);
  }

 private:
  // The base's index of this CTA's current tile in run order. The grid is C clusters of `cs`
  // consecutive indices; wave w's cluster c gets, within its block of `run` waves, the tile
  // run * c + w % run of the block instead of tile c of wave w.
  CUTLASS_DEVICE uint64_t run_order() {
    if (run_ == 1) return linear_;
    // 32-bit division: tile indices stay far below 2^32, and the 64-bit helpers spill the
    // producer warp group's 40 registers when two kernels share one __global__ (ChoicePlan).
    const uint32_t cs = uint32_t(this->scheduler_params.cluster_shape_.m()) * this->scheduler_params.cluster_shape_.n();
    const uint32_t clusters = uint32_t(grid_) / cs, run = uint32_t(run_), linear = uint32_t(linear_);
    const uint32_t unit = linear / cs, within = linear % cs;
    const uint32_t wave = unit / clusters, slot = unit % clusters;
    const uint64_t block = wave / run, block_start = uint64_t(block) * clusters * run;
    if (block != probed_block_) {
      // Is the block's last tile a tile? The probe walks a copy of the group state forward.
      Base probe = *this;
      block_full_ = probe.get_current_work_for_linear_idx((block_start + clusters * run_) * cs - 1).is_valid();
      probed_block_ = block;
    }
    if (!block_full_) return linear_;
    return (block_start + slot * run + wave % run) * cs + within;
  }

  uint64_t linear_ = 0;
  uint64_t grid_ = 1;
  uint64_t run_ = 1;
  uint64_t probed_block_ = ~uint64_t(0);
  bool block_full_ = false;
};

}  // namespace moenum::gpu::sm90

namespace cutlass::gemm::kernel::detail {

// A grouped kernel whose problem shape is RunProblemShape gets RunScheduler.
template <class TileShape, class ClusterShape, uint32_t Stages>
struct TileSchedulerSelector<GroupScheduler, arch::Sm90, TileShape, ClusterShape, Stages,
                             moenum::gpu::sm90::RunProblemShape> {
  using Scheduler = moenum::gpu::sm90::RunScheduler<moenum::gpu::sm90::RunProblemShape, Stages>;
};

}  // namespace cutlass::gemm::kernel::detail
