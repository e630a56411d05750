// Backend `cpu.eigen` (a backend under test): the scenario's recipe computed the straightforward way,
// Eigen fp32 GEMMs on the recipe's (dequantized) operands, with the reference's elementwise rules and
// rounding points (grouped_mlp.h on EigenGemmPolicy<recipe policy>, see eigen_gemm_policy.h). It
// saves the same stage tensors as the reference when output.intermediates is set (the runner sets it
// for the teacher-forced stage checks). Recipes are registered by name below, as for `reference`.
#include <functional>
#include <map>

#include "eigen_gemm_policy.h"
#include "moenum/backend.h"
#include "moenum/stage_names.h"
#include "mxfp8_policy.h"
#include "recipes.h"

namespace moenum::reference {

std::map<std::string, RecipeRunner>& eigen_recipe_registry() {
  static std::map<std::string, RecipeRunner> registry;
  return registry;
}

namespace {

struct EigenRecipeRegistrar {
  EigenRecipeRegistrar(const std::string& name, RecipeRunner f) { eigen_recipe_registry()[name] = std::move(f); }
};

EigenRecipeRegistrar fp32_recipe("fp32", [](const Scenario&, const Problem& prob, const DispatchPlan& plan,
                                            const LayerOptions& opt) {
  return grouped_mlp(EigenGemmPolicy<Fp32Policy>{}, prob, plan, opt);
});
EigenRecipeRegistrar bf16_recipe("bf16", [](const Scenario&, const Problem& prob, const DispatchPlan& plan,
                                            const LayerOptions& opt) {
  return grouped_mlp(EigenGemmPolicy<Bf16Policy>{}, prob, plan, opt);
});

// mxfp8: the reference's operand quantization (Mxfp8Policy::quantize_operand), Eigen GEMMs on the
// dequantized values; the operand codes/scales stages are the reference's, which is what an
// implementation that shares the quantizer saves (the stage checks then confirm it bit for bit).
EigenRecipeRegistrar mxfp8_recipe("mxfp8", [](const Scenario& sc, const Problem& prob, const DispatchPlan& plan,
                                              const LayerOptions& opt) {
  const Mxfp8Policy pol = Mxfp8Policy::from_scenario(sc);
  pol.check_config(prob, plan);
  LayerResult r = grouped_mlp(EigenGemmPolicy<Mxfp8Policy>(pol), prob, plan, opt);
  if (opt.keep_stages) add_mx_operand_stages(pol, prob, plan, r.stages);
  return r;
});

class CpuEigenBackend final : public Backend {
 protected:
  Availability can_run(const Scenario& sc) const override {
    if (sc.model.activation != "swiglu")
      return Availability::not_supported("cpu.eigen: activation '" + sc.model.activation + "' (only swiglu)");
    return {};
  }
  BackendResult compute(const RunContext& ctx) override {
    LayerResult r = eigen_recipe_registry().at(ctx.scenario.recipe.name)(ctx.scenario, ctx.problem, ctx.plan,
                                                                         layer_options(ctx.scenario));
    BackendResult out = to_backend_result(std::move(r), EigenGemmPolicy<Bf16Policy>::gemm_attr);
    out.attrs["recipe"] = ctx.scenario.recipe.name;
    out.attrs["bias_mode"] = ctx.scenario.recipe.bias_mode;
    return out;
  }
};

// The recipes of eigen_recipe_registry() above; the same stages as the reference.
const BackendTraits kTraits{.name = "cpu.eigen",
                            .role = BackendRole::under_test,
                            .device = DeviceKind::cpu,
                            .stages = all_stages(),
                            .layout_sensitive = false,
                            .recipes = {"fp32", "bf16", "mxfp8"},
                            .bias_modes = {"separate", "epilogue"}};
MOENUM_REGISTER_BACKEND(kTraits, CpuEigenBackend);

}  // namespace
}  // namespace moenum::reference
