// Helpers shared by the CPU GoogleTests.
#pragma once
#include <algorithm>
#include <cmath>

#include "moenum/tensor.h"

namespace moenum::testing {

// Relative Frobenius error ||a - b|| / ||b|| of two tensors of the same size.
inline double rel_fro(const Tensor& a, const Tensor& b) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    num += (a.data[i] - b.data[i]) * (a.data[i] - b.data[i]);
    den += b.data[i] * b.data[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace moenum::testing
