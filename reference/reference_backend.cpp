// Backend `reference`: the recipe emulated bit for bit on the CPU (numerics.md §6): operands as the
// recipe stores or quantizes them, every GEMM output the correctly rounded fp32 value of the exact
// sum, elementwise stages in fp32 with the shared activation code.
#include <chrono>

#include "moenum/backend.h"
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
 public:
  Availability available(const Scenario& sc) const override {
    if (sc.model.activation != "swiglu")
      return {false, "not_supported", "reference: activation '" + sc.model.activation + "' (only swiglu)"};
    if (!recipe_registry().count(sc.recipe.name))
      return {false, "not_supported", "reference: recipe '" + sc.recipe.name + "' has no CPU emulation yet"};
    return {};
  }
  BackendResult run(const RunContext& ctx) override {
    const Availability av = available(ctx.scenario);
    if (!av.ok) throw ConfigError("", av.reason, ctx.scenario.name);
    const auto t0 = std::chrono::steady_clock::now();
    LayerResult r = recipe_registry().at(ctx.scenario.recipe.name)(ctx.scenario, ctx.problem, ctx.plan,
                                                                   layer_options(ctx.scenario));
    BackendResult out = to_backend_result(std::move(r), Bf16Policy::gemm_attr);
    out.attrs["recipe"] = ctx.scenario.recipe.name;
    out.attrs["bias_mode"] = ctx.scenario.recipe.bias_mode;
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
};

MOENUM_REGISTER_BACKEND("reference", ReferenceBackend);

}  // namespace
}  // namespace moenum::reference
