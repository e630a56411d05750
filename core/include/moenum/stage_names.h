// The stage tensors a backend can save with output.intermediates, by the names BackendResult::stages
// and the stage checks use: derived from layer.h's stage table.
#pragma once
#include <string>
#include <vector>

#include "moenum/layer.h"

namespace moenum {

// The layer's intermediates kept under /stages: h, act, a, o, out, da, dh, dx_row.
inline std::vector<std::string> layer_stages() {
  std::vector<std::string> names;
  for (const layer::StageDesc& st : layer::kStages)
    if (st.kind != layer::StageKind::kMx && st.where == layer::StageWhere::kStages) names.push_back(st.name);
  return names;
}

// MXFP8 operand codes and E8M0 scales, "<gemm>.<A|B>.codes" and "<gemm>.<A|B>.scales" for each GEMM.
inline std::vector<std::string> mx_operand_stages() {
  std::vector<std::string> names;
  for (const layer::StageDesc& st : layer::kStages)
    if (st.kind == layer::StageKind::kMx)
      for (const char* part : {".codes", ".scales"}) names.push_back(std::string(st.name) + part);
  return names;
}

// Both: what a backend that emulates every recipe step can save.
inline std::vector<std::string> all_stages() {
  std::vector<std::string> names = layer_stages();
  for (auto& n : mx_operand_stages()) names.push_back(std::move(n));
  return names;
}

}  // namespace moenum
