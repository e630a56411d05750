// "Bitwise equal", defined once: the same bit pattern in the value's logical dtype (float bits for
// bf16 and fp32, double bits for fp64, the byte for FP8 and E8M0 codes). +0 and -0 differ (a sign
// is a bit a kernel can get wrong). Every NaN equals every NaN, whatever its sign and payload: IEEE
// leaves NaN payloads to the implementation (CUDA's canonical NaN is 0x7FFFFFFF, x86's 0xFFC00000).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

#include "ulp.h"

namespace moenum::verify {

inline bool same_bits(double a, double b, Grid g) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  if (g == Grid::kF64) {
    uint64_t x, y;
    std::memcpy(&x, &a, 8);
    std::memcpy(&y, &b, 8);
    return x == y;
  }
  const float fa = static_cast<float>(a), fb = static_cast<float>(b);
  uint32_t x, y;
  std::memcpy(&x, &fa, 4);
  std::memcpy(&y, &fb, 4);
  return x == y;
}

}  // namespace moenum::verify
