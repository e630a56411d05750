// A read-only view of a tensor as a backend stored it: float (bf16 and fp32 values), double (fp64)
// or bytes (FP8 and E8M0 codes). The verifier reads backends' tensors through views, so it never
// copies a whole output or stage, and does not care where the storage came from (C++ or numpy).
#pragma once
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "moenum/error.h"
#include "moenum/tensor.h"  // Storage

namespace moenum::verify {

using moenum::Storage;

struct View {
  const void* data = nullptr;
  Storage storage = Storage::kF64;
  std::vector<int64_t> shape;
  std::string dtype;  // logical dtype: fp64 | fp32 | bf16 | e4m3 | e5m2 | e8m0

  bool empty() const { return data == nullptr; }
  int64_t size() const {
    return std::accumulate(shape.begin(), shape.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
  }
  int64_t dim(size_t i) const { return i < shape.size() ? shape[i] : 1; }
  double at(int64_t i) const {
    switch (storage) {
      case Storage::kF32: return static_cast<const float*>(data)[i];
      case Storage::kU8: return static_cast<const uint8_t*>(data)[i];
      default: return static_cast<const double*>(data)[i];
    }
  }
  // An FP8 or E8M0 code (stored as a byte, or as the code's integer value in a wider type).
  uint8_t code(int64_t i) const {
    return storage == Storage::kU8 ? static_cast<const uint8_t*>(data)[i] : static_cast<uint8_t>(at(i));
  }
};

}  // namespace moenum::verify
