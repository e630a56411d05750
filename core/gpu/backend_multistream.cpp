// gpu.multistream: TE's multi-stream fallback. One device-to-host copy of the counts, then one
// cuBLASLt GEMM per non-empty expert over several streams; FC1's bias in the cuBLASLt epilogue when
// the scenario asks for bias_mode epilogue. Its traits: core/src/gpu_backend_traits.cpp.
#include "backend_support.h"
#include "device.h"
#include "gemm/cublaslt_engine.h"
#include "grouped_mlp.h"
#include "moenum/error.h"

namespace moenum::gpu {
namespace {

class GpuMultistreamBackend final : public Backend {
 protected:
  Availability can_run(const Scenario& sc) const override { return gpu_support(sc, GpuCaps{.needs_sm90 = false}); }

  BackendResult compute(const RunContext& ctx) override {
    MlpOptions opt = layer_options(ctx);
    opt.fc1_bias_in_epilogue = ctx.scenario.recipe.bias_mode == "epilogue";
    return run_layer(ctx, std::make_unique<CublasLtEngine>(), opt);
  }
};

}  // namespace
}  // namespace moenum::gpu

using moenum::gpu::GpuMultistreamBackend;
MOENUM_REGISTER_BACKEND_FACTORY("gpu.multistream", GpuMultistreamBackend);
