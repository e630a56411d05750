// golden's GEMM: C = A . B^T (+ bias) in plain fp64, each output summed sequentially in k order, then
// the bias. Inserting zero terms anywhere leaves every output bit-identical, so golden does not depend
// on padding rows; nor on thread count or blocking.
#pragma once
#include "exact_gemm.h"

namespace moenum::reference {

// kBest: the AVX2 tile where the CPU has it; kPortable: the scalar/SSE2 tile (same bits, tested).
enum class KOrderedKernel { kBest, kPortable };
Matrix gemm_nt_f64_seq(const Matrix& A, const Matrix& B, const Vector* bias = nullptr,
                       KOrderedKernel kernel = KOrderedKernel::kBest);

}  // namespace moenum::reference
