// The names of the MX rules in scenario files and moenum.mx (recipe.grad_format, recipe.scale_rounding,
// recipe.inv_scale), parsed in one place for the reference, the verifier, the GPU backends and the
// Python bindings. Host only.
#pragma once
#include <optional>
#include <string_view>

#include "moenum/mx.h"

namespace moenum {

inline std::optional<Fp8Format> fp8_format_from_name(std::string_view s) {
  if (s == "e4m3") return Fp8Format::E4M3;
  if (s == "e5m2") return Fp8Format::E5M2;
  return std::nullopt;
}

inline std::optional<ScaleRounding> scale_rounding_from_name(std::string_view s) {
  if (s == "rceil") return ScaleRounding::Rceil;
  if (s == "floor") return ScaleRounding::Floor;
  return std::nullopt;
}

inline std::optional<InvScaleRule> inv_scale_rule_from_name(std::string_view s) {
  if (s == "te_kernel") return InvScaleRule::TeKernel;
  if (s == "spec") return InvScaleRule::Spec;
  return std::nullopt;
}

inline const char* inv_scale_rule_name(InvScaleRule r) { return r == InvScaleRule::TeKernel ? "te_kernel" : "spec"; }

}  // namespace moenum
