// Dgrad layout: A [rows, k] row-major, B_e [k, n] (N contiguous: RowMajor K x N), D bf16.
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {
std::unique_ptr<GroupedGemmPlan> make_dgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  using K = GroupedKernel<cutlass::layout::RowMajor, cutlass::layout::RowMajor, cutlass::bfloat16_t>;
  return std::make_unique<Plan<K>>(g, o.chunks < 0 ? default_chunks(g) : o.chunks, o.chunk_rows);
}
}  // namespace moenum::gpu::sm90
