// Wgrad layout: A = rows[rows_e, m]^T (M contiguous: ColumnMajor M x K), B = rows[rows_e, n]
// (RowMajor K x N), D fp32 [m, n] per expert. The group's rows are the reduction: never split.
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {
std::unique_ptr<GroupedGemmPlan> make_wgrad_plan(const GroupedGemmDesc& g, const PlanOptions& o) {
  using K = GroupedKernel<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, float>;
  return std::make_unique<Plan<K>>(g, 1, o.chunk_rows);
}
}  // namespace moenum::gpu::sm90
