// Accumulate mode `hopper_mma` of the reference (numerics.md §6; recipe.accumulate): every GEMM of
// the layer computed the way gpu.grouped's CUTLASS sm90 kernels compute it (core/gpu/sm90/
// grouped_sm90.h says which configurations those are and why they all reduce to this), on the
// tensor-core model of moenum/tc.h:
//
//   C_ij = one wgmma accumulator chain over k = 0, 16, 32, ... (bf16 m64nNk16: 16 products per
//          fused step) in ascending k, starting from +0 (the first k-block's ScaleOut::Zero is read
//          as an accumulator of +0), the last step holding the K % 16 products left (the kernel's
//          zero-filled tail: the same bits); then the epilogue: alpha = 1 (exact), beta = 0, no
//          source, fp32 -> bf16 round-to-nearest-even (the layer's own output rounding, done by the
//          policy's round_act) or the fp32 accumulator itself for the wgrads.
//
// The operands are bf16 values: the bf16 recipe's stored tensors, and for mxfp8 the dequantized
// MXFP8 values, which are exact bf16 values (core/gpu/grouped_mlp.h, MxRecipe: on Hopper gpu.grouped
// runs the mxfp8 recipe as bf16 GEMMs on exactly those), so the bf16 model covers both. The dprobs
// dot products and the bias-gradient reductions are not GEMMs (CUDA-core kernels): they stay ideal.
#pragma once
#include <string>

#include "exact_gemm.h"
#include "numeric_policy.h"
#include "moenum/error.h"
#include "moenum/scenario.h"

namespace moenum::reference {

inline constexpr const char* kHopperMmaAttr =
    "hopper_mma: sm90 wgmma bf16 chain per output (16 products per step, 25 fraction bits, RZ to fp32), "
    "k ascending from +0, as gpu.grouped's CUTLASS kernels";

// C = A . B^T (A: M x K, B: N x K, bf16 values held in fp64), each output one Hopper accumulator
// chain (moenum/tc.h), fp32 values in fp64. InternalError if an operand is not a bf16 value.
Matrix hopper_mma_gemm_nt(const Matrix& A, const Matrix& B);

// A reference policy (numeric_policy.h, mxfp8_policy.h) whose GEMMs accumulate as above; its
// operand quantization, elementwise rules and reductions are the base policy's.
template <class Base>
struct HopperMmaPolicy : Base {
  static constexpr const char* gemm_attr = kHopperMmaAttr;
  explicit HopperMmaPolicy(Base b) : Base(std::move(b)) {}
  Matrix gemm(const Matrix& A, const Matrix& B, Gemm g, const Vector* bias, GemmStats& st) const {
    MOENUM_CHECK(!bias, std::string("hopper_mma: ") + gemm_name(g) + " with a bias in the epilogue is not modelled");
    st.outputs += A.rows() * B.rows();
    return hopper_mma_gemm_nt(A, B);
  }
};

inline bool hopper_mma(const Scenario& sc) { return sc.recipe.accumulate == "hopper_mma"; }

// Runs layer(policy) with the base policy or its hopper_mma form, as recipe.accumulate says.
template <class Base, class Layer>
auto with_accumulate(const Scenario& sc, const Base& pol, Layer&& layer) {
  if (hopper_mma(sc)) return layer(HopperMmaPolicy<Base>(pol));
  return layer(pol);
}

}  // namespace moenum::reference
