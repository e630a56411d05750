// Backend `golden`: the layer in fp64 from the same bf16 inputs, no quantization, no intermediate
// rounding (numerics.md §6): how far a recipe is from the ideal layer.
#include "device_gemm.h"
#include "moenum/backend.h"
#include "moenum/stage_names.h"
#include "recipes.h"

namespace moenum::reference {
namespace {

class GoldenBackend final : public Backend {
 protected:
  Availability can_run(const Scenario& sc) const override {
    if (sc.model.activation != "swiglu")
      return Availability::not_supported("golden: activation '" + sc.model.activation + "' (only swiglu)");
    return {};
  }
  BackendResult compute(const RunContext& ctx) override {
    const OracleDevice dev = oracle_device(ctx.scenario.execution.device);
    GoldenPolicy pol;
    pol.device = dev.engine.get();
    LayerResult r = grouped_mlp(pol, ctx.problem, ctx.plan, layer_options(ctx.scenario));
    BackendResult out = to_backend_result(std::move(r), dev.engine ? GoldenPolicy::device_gemm_attr : GoldenPolicy::gemm_attr);
    dev.describe(out);
    return out;
  }
};

// Every recipe's ideal: golden ignores the recipe's quantization, so it runs for all of them.
const BackendTraits kTraits{.name = "golden",
                            .role = BackendRole::oracle,
                            .device = DeviceKind::cpu,
                            .stages = layer_stages(),
                            .layout_sensitive = false,
                            .recipes = {"fp32", "bf16", "mxfp8"},
                            .bias_modes = {"separate", "epilogue"}};
MOENUM_REGISTER_BACKEND(kTraits, GoldenBackend);

}  // namespace
}  // namespace moenum::reference
