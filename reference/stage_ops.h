// The layer's stages one at a time, for the teacher-forced stage checks (numerics.md §7): each
// function recomputes one stage from given inputs (a backend's own inputs to that stage) with the
// reference's rules, returning the value before the stage's last rounding as well, so that the
// verifier can tell a rounding-tie flip from a real difference. The elementwise expressions are those
// of grouped_mlp.h and of the GPU layer kernels, operation for operation, through the same policy
// (silu/dsilu/round_act of Bf16Policy or Fp32Policy).
#pragma once
#include <cstdint>
#include <string>

#include "device_gemm.h"
#include "exact_gemm.h"

namespace moenum::reference::stage_ops {

using IndexMatrix = Eigen::Matrix<int64_t, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// The rounding of the activation stages: "bf16" (bf16, mxfp8 recipes) or "fp32".
enum class Round { kF32, kBf16 };
Round parse_round(const std::string& dtype);  // throws ConfigError for anything else
float round_to(float v, Round r);
Matrix round_matrix(const Matrix& m, Round r);

// The reference GEMM of one expert with what a bound needs: c32 = correctly rounded fp32 value of
// the exact sum (+ bias), absprod = sum_k |a_k b_k| (+ |bias|), and c64 = the exact sum where the
// fp64 product certifies it exact (no partial sum of any order can round), NaN where not certified.
// c32: the correctly rounded fp32 value of the exact sum (IEEE when an operand is non-finite);
// absprod: sum |a_k b_k| (+ |bias|) in fp64; finite_absprod: the same over the finite terms only
// (equal to absprod unless an operand is inf or NaN), for the overflow rule of bounds.h.
struct GemmRef {
  Matrix c32, absprod, c64, finite_absprod;
};
// device: where the two fp64 products run (device_gemm.h; null: Eigen on the CPU). The certified
// values are the same either way: a correctly rounded sum is unique.
GemmRef exact_gemm_ref(const Matrix& A, const Matrix& B, const Vector* bias, DeviceGemm* device = nullptr);

// A value and the value before its last rounding.
struct Rounded {
  Matrix pre, out;
};

// FC1 epilogue from the fp32 GEMM accumulator acc [M, 2F]: with a separate bias b1 (length 2F),
// h = round(round(acc) + b1) (pre = round(acc) + b1 in fp32); without (no bias, or bias in the GEMM
// epilogue), h = round(acc).
Rounded fc1_post(const Matrix& acc, const Vector* b1_separate, Round r);

// act = silu(g) * l (fp32), a = round(act * p); h [R, 2F] (g = first F columns), p [R].
struct ActForward {
  Matrix act, a_pre, a;
};
ActForward act_forward(const Matrix& h, const Vector& p, Round r);

// dact = da * p; dh = round([dact * l * silu'(g), dact * silu(g)]).
Rounded act_backward(const Matrix& da, const Matrix& h, const Vector& p, Round r);

// out = round(o + b2 * p) with b2_rows [R, H] the bias of each row's expert; without bias out = o.
Rounded fc2_bias(const Matrix& o, const Matrix* b2_rows, const Vector& p, Round r);

// y_t = round(sum over i of rows[index(t, i)]) in fp32, i in order, index -1 = nothing (the combine;
// index lists each token's routed rows in ascending expert id).
Rounded combine(const Matrix& rows, const IndexMatrix& index, Round r);

// Per row i: the correctly rounded fp32 value of sum_k A(i,k) B(i,k) and sum_k |A(i,k) B(i,k)|.
void rowwise_dot_rn(const Matrix& A, const Matrix& B, Vector& dot, Vector& absdot);

}  // namespace moenum::reference::stage_ops
