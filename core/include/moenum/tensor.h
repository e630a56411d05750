// A dense row-major tensor. Values are stored in fp64 whatever the logical dtype: bf16, fp32 and
// dequantized MXFP8 values are all exact in fp64, so one container serves golden and recipe runs.
#pragma once
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

namespace moenum {

struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;
  std::string dtype = "fp32";  // logical dtype: fp64 | fp32 | bf16 | e4m3 | e5m2 | e8m0 | int32 | int64

  Tensor() = default;
  Tensor(std::vector<int64_t> s, std::string dt) : shape(std::move(s)), data(count(shape), 0.0), dtype(std::move(dt)) {}

  static int64_t count(const std::vector<int64_t>& s) {
    return std::accumulate(s.begin(), s.end(), int64_t{1}, [](int64_t a, int64_t b) { return a * b; });
  }
  int64_t size() const { return static_cast<int64_t>(data.size()); }
  double* row(int64_t i) { return data.data() + i * (shape.size() > 1 ? size() / shape[0] : 1); }
  const double* row(int64_t i) const { return data.data() + i * (shape.size() > 1 ? size() / shape[0] : 1); }
};

}  // namespace moenum
