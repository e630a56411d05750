// The `cpu.eigen` numeric policy: a recipe policy (Fp32Policy, Bf16Policy, Mxfp8Policy, ...) whose GEMMs
// are plain Eigen fp32 GEMMs instead of the exact reference GEMM. Everything else is inherited: the
// operand quantization hook (so MXFP8 operands are the dequantized values the reference uses), the
// elementwise arithmetic and every rounding point of grouped_mlp.h. So cpu.eigen differs from
// `reference` only by the accumulation order and precision of its GEMMs and reductions, which is what
// the per-element bound of numerics.md §7 is about.
//
//   gemm: operands cast to fp32 (exact: they hold bf16, fp32 or dequantized MXFP8 values), C = A . B^T
//         by Eigen's float GEMM in its own blocking and order; an epilogue bias is added in fp32 after
//         the product (acc + bias, one rounding, as the cuBLASLt bias epilogue).
//   dot:  the dprobs dot products and the db reductions: fp32 products, fp32 sequential sum in k order.
#pragma once
#include <cstdint>

#include <Eigen/Dense>

#include "numeric_policy.h"

namespace moenum::reference {

using MatrixF = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// C = A . B^T in fp32 with Eigen (+ bias per column, added in fp32), returned as fp64 holding fp32.
inline Matrix eigen_gemm_nt_f32(const Matrix& A, const Matrix& B, const Vector* bias) {
  const MatrixF Af = A.cast<float>();
  const MatrixF Bf = B.cast<float>();
  MatrixF C = Af * Bf.transpose();
  if (bias) {
    const Eigen::RowVectorXf bf = bias->cast<float>().transpose();
    for (Eigen::Index i = 0; i < C.rows(); ++i)
      for (Eigen::Index j = 0; j < C.cols(); ++j) C(i, j) = C(i, j) + bf(j);
  }
  return C.cast<double>();
}

// sum_k fl(a[k*sa] * b[k*sb]) in fp32, sequentially in k order.
inline float dot_seq_f32(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb) {
  float acc = 0.0f;
  for (int64_t k = 0; k < K; ++k) acc = acc + float(a[k * sa]) * float(b[k * sb]);
  return acc;
}

template <class Base>
struct EigenGemmPolicy : Base {
  static constexpr const char* gemm_attr = "eigen: fp32 GEMM in Eigen's order; fp32 sequential reductions";
  EigenGemmPolicy() = default;
  explicit EigenGemmPolicy(const Base& b) : Base(b) {}

  Matrix gemm(const Matrix& A, const Matrix& B, Gemm, const Vector* bias, GemmStats& st) const {
    st.outputs += A.rows() * B.rows();
    return eigen_gemm_nt_f32(A, B, bias);
  }
  typename Base::Real dot(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb,
                          GemmStats& st) const {
    st.outputs += 1;
    return dot_seq_f32(a, b, K, sa, sb);
  }
};

}  // namespace moenum::reference
