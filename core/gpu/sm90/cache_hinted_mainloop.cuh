// CUTLASS's sm90 TMA warp-specialized mainloop with an L2 eviction priority for each operand's loads
// (CUTLASS issues every TMA load at EVICT_NORMAL).
//
// Why: a strided batch over equal small groups reads each weight tile once per cluster that holds
// its group's rows, and each block of a group's rows once per weight tile of the group. At
// EVICT_NORMAL the streamed weights can push the rows out of L2 between their readers, and the rows
// then come from DRAM again. Which operand gets which priority is batch_l2_rule's choice
// (grouped_fprop.cu). The priority changes which lines L2 keeps, never what is loaded: the results are
// bitwise the same.
#pragma once
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>

namespace moenum::gpu::sm90 {

// Base: the CollectiveMma CUTLASS's builder gives for MainloopSm90TmaGmmaWarpSpecialized.
template <class Base>
struct CacheHintedMainloop : Base {
  using Hint = cute::TMA::CacheHintSm90;

  struct Arguments : Base::Arguments {
    Hint hint_a = Hint::EVICT_NORMAL;
    Hint hint_b = Hint::EVICT_NORMAL;
  };
  struct Params : Base::Params {
    Hint hint_a = Hint::EVICT_NORMAL;
    Hint hint_b = Hint::EVICT_NORMAL;
  };

  template <class ProblemShape>
  static constexpr Params to_underlying_arguments(ProblemShape const& problem, Arguments const& args, void* workspace) {
    return {Base::to_underlying_arguments(problem, args, workspace), args.hint_a, args.hint_b};
  }

  // The producer warp's loads: the base's, k tile by k tile, with the hints.
  template <class TensorA, class TensorB, class KTileIterator, class BlockCoord>
  CUTLASS_DEVICE void load(Params const& params, typename Base::MainloopPipeline pipeline,
                           typename Base::PipelineState write_state, cute::tuple<TensorA, TensorB> const& load_inputs,
                           BlockCoord const& blk_coord, KTileIterator k_tile, int k_tile_count, int /*thread_idx*/,
                           uint32_t block_rank_in_cluster, typename Base::TensorStorage& smem) {
    using namespace cute;
    using Cluster = typename Base::DispatchPolicy::ClusterShape;
    if (!elect_one_sync()) return;
    Tensor sA = make_tensor(make_smem_ptr(smem.smem_A.data()), typename Base::SmemLayoutA{});  // (M,K,PIPE)
    Tensor sB = make_tensor(make_smem_ptr(smem.smem_B.data()), typename Base::SmemLayoutB{});  // (N,K,PIPE)
    // This CTA's place in its cluster: x along M (it shares B with the CTAs of its column), y along N.
    const uint32_t x = block_rank_in_cluster % size<0>(Cluster{}), y = block_rank_in_cluster / size<0>(Cluster{});
    auto tma_a = params.tma_load_a.get_slice(y);
    auto tma_b = params.tma_load_b.get_slice(x);
    auto [m, n, k, l] = blk_coord;
    Tensor src_a = tma_a.partition_S(get<0>(load_inputs)(_, _, m, _, l));  // (TMA,TMA_M,TMA_K,k)
    Tensor dst_a = tma_a.partition_D(sA);                                  // (TMA,TMA_M,TMA_K,PIPE)
    Tensor src_b = tma_b.partition_S(get<1>(load_inputs)(_, _, n, _, l));
    Tensor dst_b = tma_b.partition_D(sB);
    // Multicast: A to the CTAs of this row of the cluster, B to those of this column.
    auto cta = Layout<Cluster>{};  // (m, n) -> CTA
    uint16_t mask_a = 0, mask_b = 0;
    if constexpr (is_same_v<typename Base::GmemTiledCopyA, SM90_TMA_LOAD_MULTICAST>)
      for (int j = 0; j < size<1>(cta); ++j) mask_a |= uint16_t(1) << cta(x, j, Int<0>{});
    if constexpr (is_same_v<typename Base::GmemTiledCopyB, SM90_TMA_LOAD_MULTICAST>)
      for (int i = 0; i < size<0>(cta); ++i) mask_b |= uint16_t(1) << cta(i, y, Int<0>{});
    CUTLASS_PRAGMA_NO_UNROLL
    for (; k_tile_count > 0; --k_tile_count, ++k_tile, ++write_state) {
      pipeline.producer_acquire(write_state);
      auto* barrier = pipeline.producer_get_barrier(write_state);
      const int stage = write_state.index();
      copy(params.tma_load_a.with(*barrier, mask_a, params.hint_a), src_a(_, _, _, *k_tile), dst_a(_, _, _, stage));
      copy(params.tma_load_b.with(*barrier, mask_b, params.hint_b), src_b(_, _, _, *k_tile), dst_b(_, _, _, stage));
    }
  }
};

}  // namespace moenum::gpu::sm90
