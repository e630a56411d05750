// Dgrad layout: A [rows, k] row-major, B_e [k, n] (N contiguous: RowMajor K x N), D bf16.
#include "sm90/grouped_sm90.cuh"

namespace moenum::gpu::sm90 {
std::unique_ptr<GroupedGemmPlan> make_dgrad_plan(const GroupedGemmDesc& g) {
  return std::make_unique<Plan<cutlass::layout::RowMajor, cutlass::layout::RowMajor, cutlass::bfloat16_t>>(g);
}
}  // namespace moenum::gpu::sm90
