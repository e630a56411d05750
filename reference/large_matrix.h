// Fresh fp64 matrices of production size, their storage advised for huge pages before anything
// touches it (moenum/huge_pages.h): the oracles allocate each expert's operands, their quantized and
// transposed forms and the GEMM outputs anew, gigabytes per expert at DeepSeek-V3 shapes.
#pragma once
#include "exact_gemm.h"
#include "moenum/huge_pages.h"

namespace moenum::reference {

// Uninitialised, as Matrix(rows, cols) is.
inline Matrix large_matrix(Eigen::Index rows, Eigen::Index cols) {
  Matrix m(rows, cols);
  advise_huge_pages(m.data(), size_t(m.size()) * sizeof(double));
  return m;  // moved: the storage stays where it was advised
}

// Resized in place to rows x cols, advised when that allocated anew (Eigen reallocates exactly when
// the number of elements changes; a new mapping may land where the old one was).
inline void resize_large(Matrix& m, Eigen::Index rows, Eigen::Index cols) {
  const bool fresh = m.size() != rows * cols;
  m.resize(rows, cols);
  if (fresh) advise_huge_pages(m.data(), size_t(m.size()) * sizeof(double));
}

inline Matrix transposed(const Matrix& m) {
  Matrix t = large_matrix(m.cols(), m.rows());
  t = m.transpose();
  return t;
}

}  // namespace moenum::reference
