// Recipes of the `reference` backend, registered by name (fp32 and bf16 in reference_backend.cpp,
// mxfp8 with its own policy in mxfp8_recipe.cpp), so that no switch over recipe names grows here.
#pragma once
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "grouped_mlp.h"
#include "hopper_mma.h"
#include "moenum/backend.h"

namespace moenum::reference {

// Runs the layer with the recipe's policy, built from the scenario (scale rounding, grad format...).
using RecipeRunner =
    std::function<LayerResult(const Scenario&, const Problem&, const DispatchPlan&, const LayerOptions&)>;

std::map<std::string, RecipeRunner>& recipe_registry();

struct RecipeRegistrar {
  RecipeRegistrar(const std::string& name, RecipeRunner f) { recipe_registry()[name] = std::move(f); }
};

// MOENUM_REGISTER_REFERENCE_RECIPE("fp32", fp32, [](const Scenario&) { return Fp32Policy{}; });
// (mxfp8 registers through RecipeRegistrar directly: it checks the configuration before the layer and
// adds its operand stages after it; see mxfp8_recipe.cpp.)
// The last argument makes the policy from the scenario; ID is any identifier unique in the file. The
// GEMMs accumulate as recipe.accumulate says (hopper_mma.h).
#define MOENUM_REGISTER_REFERENCE_RECIPE(NAME, ID, ...)                                          \
  static ::moenum::reference::RecipeRegistrar moenum_recipe_registrar_##ID(                               \
      NAME, [](const ::moenum::Scenario& sc, const ::moenum::Problem& prob, const ::moenum::DispatchPlan& plan, \
               const ::moenum::reference::LayerOptions& opt) {                                            \
        auto pol = (__VA_ARGS__)(sc);                                                                     \
        pol.device = opt.gemm_device;                                                                     \
        return ::moenum::reference::with_accumulate(sc, pol, [&](const auto& p) {                         \
          return ::moenum::reference::grouped_mlp(p, prob, plan, opt);                                    \
        });                                                                                               \
      })

// Outputs and stages as a BackendResult, with the GEMM engine it names.
inline BackendResult to_backend_result(LayerResult&& r, const char* gemm_attr) {
  BackendResult out;
  out.outputs = std::move(r.outputs);
  out.stages = std::move(r.stages);
  out.attrs["gemm"] = gemm_attr;
  return out;
}

// The certificate's statistics as attributes (outputs settled by the compensated sum or recomputed
// exactly, per GEMM and in all): only the reference certifies its rounding, so only it records them.
inline std::map<std::string, std::string> certificate_attrs(const LayerResult& r) {
  std::map<std::string, std::string> attrs;
  GemmStats all;
  for (int g = 0; g < kNumGemms; ++g) {
    const GemmStats& s = r.gemm_stats[g];
    all += s;
    attrs[std::string("exact_path.") + gemm_name(static_cast<Gemm>(g))] =
        std::to_string(s.exact_path) + "/" + std::to_string(s.outputs);
  }
  attrs["gemm_outputs"] = std::to_string(all.outputs);
  attrs["exact_path_outputs"] = std::to_string(all.exact_path);
  attrs["compensated_path_outputs"] = std::to_string(all.compensated);
  char frac[32];
  std::snprintf(frac, sizeof frac, "%.3e", all.exact_fraction());
  attrs["exact_path_fraction"] = frac;
  attrs["exact_path.reductions"] =
      std::to_string(r.reduction_stats.exact_path) + "/" + std::to_string(r.reduction_stats.outputs);
  return attrs;
}

}  // namespace moenum::reference
