#include "hopper_mma.h"

#include <stdexcept>
#include <vector>

#include "moenum/tc.h"

namespace moenum::reference {

Matrix hopper_mma_gemm_nt(const Matrix& A, const Matrix& B) {
  const int64_t M = A.rows(), N = B.rows(), K = A.cols();
  MOENUM_CHECK(B.cols() == K, "hopper_mma_gemm_nt: A and B disagree on K");
  std::vector<float> a(A.data(), A.data() + M * K), b(B.data(), B.data() + N * K), c(size_t(M * N));
  try {
    tc::gemm_nt(a.data(), b.data(), c.data(), M, N, K, tc::Format::kBf16);
  } catch (const std::invalid_argument& e) {
    throw InternalError(std::string("hopper_mma: GEMM operand ") + e.what());
  }
  Matrix C(M, N);
  std::copy(c.begin(), c.end(), C.data());
  return C;
}

}  // namespace moenum::reference
