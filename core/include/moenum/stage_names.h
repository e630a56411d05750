// The stage tensors a backend can save with output.intermediates, by the names BackendResult::stages
// and the Python stage registry (moenum.stages) use.
#pragma once
#include <string>
#include <vector>

namespace moenum {

// The layer's intermediates: FC1 output, activation, FC2 input and output, their gradients.
inline std::vector<std::string> layer_stages() { return {"h", "act", "a", "o", "out", "da", "dh", "dx_row"}; }

// MXFP8 operand codes and E8M0 scales, "<gemm>.<A|B>.codes" and "<gemm>.<A|B>.scales" for each GEMM.
inline std::vector<std::string> mx_operand_stages() {
  std::vector<std::string> names;
  for (const char* gemm : {"fc1_fprop", "fc1_dgrad", "fc1_wgrad", "fc2_fprop", "fc2_dgrad", "fc2_wgrad"})
    for (const char* op : {".A", ".B"})
      for (const char* part : {".codes", ".scales"}) names.push_back(std::string(gemm) + op + part);
  return names;
}

// Both: what a backend that emulates every recipe step can save.
inline std::vector<std::string> all_stages() {
  std::vector<std::string> names = layer_stages();
  for (auto& n : mx_operand_stages()) names.push_back(std::move(n));
  return names;
}

}  // namespace moenum
