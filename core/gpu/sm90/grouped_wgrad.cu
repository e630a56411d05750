// Wgrad layout: A = rows[rows_e, m]^T (M contiguous: ColumnMajor M x K), B = rows[rows_e, n]
// (RowMajor K x N), D fp32 [m, n] per expert.
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {
std::unique_ptr<GroupedGemmPlan> make_wgrad_plan(const GroupedGemmDesc& g) {
  return std::make_unique<Plan<cutlass::layout::ColumnMajor, cutlass::layout::RowMajor, float>>(g);
}
}  // namespace moenum::gpu::sm90
