// Numeric policies of the CPU layer (grouped_mlp.h): what the elementwise arithmetic runs in, where
// values are rounded, how each GEMM accumulates, and how its operands are quantized. Small value
// types, in the spirit of CUTLASS's host reference GEMM (accumulator type and convert op as policies).
#pragma once
#include <cmath>
#include <cstdint>

#include "device_gemm.h"
#include "exact_gemm.h"
#include "k_ordered_gemm.h"
#include "moenum/bf16.h"
#include "moenum/layer.h"

namespace moenum::reference {

// The six GEMMs (moenum/layer.h). Each is computed here in "NT form", C = A . B^T, with both
// operands laid out [rows x K], the reduction dim K contiguous along a row: fprop hands over (x, w1)
// or (a, w2); dgrad (dy, w2^T) or (dh, w1^T); wgrad (dy^T, a^T) or (dh^T, x^T). So an MX block of 32
// along the reduction dim is always 32 consecutive elements of one row of the operand as handed over.
using layer::Gemm;
using layer::Operand;
using layer::gemm_name;
using layer::is_columnwise;
using layer::kNumGemms;

// ---- rounding ops: where a value is stored, what it is rounded to -------------------------------
struct RoundNone {
  static constexpr const char* dtype = "fp64";
  double operator()(double v) const { return v; }
};
struct RoundF32 {
  static constexpr const char* dtype = "fp32";
  float operator()(float v) const { return v; }
};
struct RoundBf16 {
  static constexpr const char* dtype = "bf16";
  float operator()(float v) const { return round_bf16(v); }
};

// ---- golden: fp64 everywhere, no quantization, no intermediate rounding --------------------------
struct GoldenPolicy {
  using Real = double;                                // elementwise arithmetic
  static constexpr const char* act_dtype = "fp64";    // y, dx and the activation stages
  static constexpr const char* grad_dtype = "fp64";   // dw1, dw2, db1, db2, dprobs
  static constexpr const char* gemm_attr = "fp64, products summed in k order";
  static constexpr const char* device_gemm_attr = "fp64 on the device (cuBLAS DGEMM order), then the bias";
  DeviceGemm* device = nullptr;  // execution.device gpu: the GEMMs there (device_gemm.h); null: the CPU

  Real round_act(Real v) const { return v; }
  // No quantization: the operand itself, not a copy (a weight operand is hundreds of MB).
  const Matrix& quantize_operand(const Matrix& m, Gemm, Operand) const { return m; }
  Matrix gemm(const Matrix& A, const Matrix& B, Gemm, const Vector* bias, GemmStats& st) const {
    st.outputs += A.rows() * B.rows();
    if (!device) return gemm_nt_f64_seq(A, B, bias);
    Matrix C;
    device->gemm_nt(A, B, C, nullptr);
    if (bias) C.rowwise() += bias->transpose();  // the bias last, as gemm_nt_f64_seq adds it
    return C;
  }
  // sum_k a[k*sa] * b[k*sb]: the dprobs dot products and the bias-gradient reductions.
  Real dot(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb, GemmStats& st) const {
    double c = 0.0;
    for (int64_t k = 0; k < K; ++k) c += a[k * sa] * b[k * sb];
    st.outputs += 1;
    return c;
  }
};

// ---- reference recipes (fp32, bf16): exact GEMMs, fp32 elementwise, ActRound storage -------------
// GEMM operands are exactly what is stored (bf16 or fp32 values); each GEMM output is the correctly
// rounded fp32 value of the exact sum (the "ideal" accumulator), then rounded by ActRound, except
// the wgrads, which stay fp32 (main_grad). The dprobs dot products and the db reductions are exact
// sums rounded once to fp32, so they are order-independent too.
template <class ActRound>
struct ExactRecipePolicy {
  using Real = float;
  static constexpr const char* act_dtype = ActRound::dtype;
  static constexpr const char* grad_dtype = "fp32";
  static constexpr const char* gemm_attr = "ideal: exact sum of products, rounded once to fp32";
  ActRound round;
  // execution.device gpu: the fp64 products (C and |A|.|B|^T) there, certified here (device_gemm.h)
  DeviceGemm* device = nullptr;

  Real round_act(Real v) const { return round(v); }

  // THE QUANTIZATION HOOK. Every one of the six GEMMs fetches both operands through here, in NT form
  // (NT form: [rows x K], blocks along K = along a row). Identity for fp32 and bf16.
  // An MXFP8 policy derives from Bf16Policy and overrides this (rowwise vs columnwise per
  // is_columnwise(g, op); E4M3 or E5M2 for the gradient operands dy/dh), returning the dequantized
  // values, which are exact in fp32 and so in the exact GEMM. Identity here: the operand, not a copy.
  const Matrix& quantize_operand(const Matrix& m, Gemm, Operand) const { return m; }

  Matrix gemm(const Matrix& A, const Matrix& B, Gemm, const Vector* bias, GemmStats& st) const {
    Matrix C, S;
    products_nt(device, A, B, C, S);
    return certify_gemm_nt(A, B, bias, std::move(C), std::move(S), &st);
  }
  Real dot(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb, GemmStats& st) const {
    return dot_rn_f32(a, b, K, sa, sb, &st);
  }
};

using Fp32Policy = ExactRecipePolicy<RoundF32>;
using Bf16Policy = ExactRecipePolicy<RoundBf16>;

}  // namespace moenum::reference
