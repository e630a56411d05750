// Backend `reference`: the recipe emulated bit for bit on the CPU (numerics.md §6): operands as the
// recipe stores or quantizes them, every GEMM output the correctly rounded fp32 value of the exact
// sum, elementwise stages in fp32 with the shared activation code.
#include "device_gemm.h"
#include "moenum/backend.h"
#include "moenum/stage_names.h"
#include "recipes.h"

namespace moenum::reference {

std::map<std::string, RecipeRunner>& recipe_registry() {
  static std::map<std::string, RecipeRunner> registry;  // function-local: safe from init order
  return registry;
}

namespace {

MOENUM_REGISTER_REFERENCE_RECIPE("fp32", fp32, [](const Scenario&) { return Fp32Policy{}; });
MOENUM_REGISTER_REFERENCE_RECIPE("bf16", bf16, [](const Scenario&) { return Bf16Policy{}; });

class ReferenceBackend final : public Backend {
 protected:
  Availability can_run(const Scenario& sc) const override {
    if (sc.model.activation != "swiglu")
      return Availability::not_supported("reference: activation '" + sc.model.activation + "' (only swiglu)");
    return {};
  }
  BackendResult compute(const RunContext& ctx) override {
    const OracleDevice dev = oracle_device(ctx.scenario.execution.device);
    LayerOptions opt = layer_options(ctx.scenario);
    opt.gemm_device = dev.engine.get();  // hopper_mma computes its GEMMs with the model, on the CPU
    LayerResult r = recipe_registry().at(ctx.scenario.recipe.name)(ctx.scenario, ctx.problem, ctx.plan, opt);
    std::map<std::string, std::string> certificate = certificate_attrs(r);
    BackendResult out = to_backend_result(std::move(r), hopper_mma(ctx.scenario) ? kHopperMmaAttr : Bf16Policy::gemm_attr);
    out.attrs.merge(certificate);
    dev.describe(out);
    out.attrs["recipe"] = ctx.scenario.recipe.name;
    out.attrs["bias_mode"] = ctx.scenario.recipe.bias_mode;
    out.attrs["accumulate"] = ctx.scenario.recipe.accumulate;
    return out;
  }
};

// The recipes of recipe_registry() (fp32 and bf16 above, mxfp8 in mxfp8_recipe.cpp).
const BackendTraits kTraits{.name = "reference",
                            .role = BackendRole::oracle,
                            .device = DeviceKind::cpu,
                            .stages = all_stages(),
                            .layout_sensitive = false,
                            .recipes = {"fp32", "bf16", "mxfp8"},
                            .bias_modes = {"separate", "epilogue"},
                            .modelled_accumulate = {"hopper_mma"}};
MOENUM_REGISTER_BACKEND(kTraits, ReferenceBackend);

}  // namespace
}  // namespace moenum::reference
