// The inputs of one scenario, drawn once for the global problem from the counter-based RNG, then
// rounded to bf16. Identical across EP sizes and padding sources.
#pragma once
#include "moenum/scenario.h"
#include "moenum/tensor.h"

namespace moenum {

struct Problem {
  int64_t T = 0, H = 0, F = 0, E = 0, k = 0;
  Tensor x;       // T x H, bf16
  Tensor w1;      // E x 2F x H, bf16 (out x in)
  Tensor b1;      // E x 2F, bf16 (zeros when the model has no bias)
  Tensor w2;      // E x H x F, bf16
  Tensor b2;      // E x H, bf16
  Tensor dy;      // T x H, bf16
};

Problem generate_problem(const Scenario& sc);

}  // namespace moenum
