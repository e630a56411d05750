// Backend `golden`: the layer in fp64 from the same bf16 inputs, no quantization, no intermediate
// rounding (numerics.md §6): how far a recipe is from the ideal layer.
#include <chrono>

#include "moenum/backend.h"
#include "recipes.h"

namespace moenum::reference {
namespace {

class GoldenBackend final : public Backend {
 public:
  Availability available(const Scenario& sc) const override {
    if (sc.model.activation != "swiglu")
      return {false, "not_supported", "golden: activation '" + sc.model.activation + "' (only swiglu)"};
    return {};
  }
  BackendResult run(const RunContext& ctx) override {
    const auto t0 = std::chrono::steady_clock::now();
    LayerResult r = grouped_mlp(GoldenPolicy{}, ctx.problem, ctx.plan, layer_options(ctx.scenario));
    BackendResult out = to_backend_result(std::move(r), GoldenPolicy::gemm_attr);
    out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return out;
  }
};

MOENUM_REGISTER_BACKEND("golden", GoldenBackend);

}  // namespace
}  // namespace moenum::reference
