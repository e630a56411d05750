// gpu.grouped: device-initiated grouped MLP. Token counts stay on the device for the whole forward
// and backward; each GEMM is one CUTLASS grouped launch whose problem sizes are built on the device.
#include "backend_support.h"
#include "device.h"
#include "grouped_mlp.h"
#include "moenum/error.h"
#ifdef MOENUM_HAVE_CUTLASS
#include "sm90/cutlass_engine.h"
#endif

namespace moenum::gpu {
namespace {

class GpuGroupedBackend final : public Backend {
 public:
  Availability available(const Scenario& sc) const override {
#ifndef MOENUM_HAVE_CUTLASS
    Availability dev = cuda_availability();
    if (!dev.ok) return dev;
    return {false, "not_supported", "built without CUTLASS headers (pip install nvidia-cutlass) or without sm_90a"};
#else
    return gpu_support(sc, GpuCaps{true, false});
#endif
  }

  BackendResult run(const RunContext& ctx) override {
#ifndef MOENUM_HAVE_CUTLASS
    throw InternalError("gpu.grouped: built without CUTLASS");
#else
    Availability av = available(ctx.scenario);
    MOENUM_CHECK(av.ok, "gpu.grouped cannot run " + ctx.scenario.name + ": " + av.reason);
    return run_layer(ctx, make_cutlass_sm90_engine(), layer_options(ctx));
#endif
  }
};

}  // namespace
}  // namespace moenum::gpu

using moenum::gpu::GpuGroupedBackend;
MOENUM_REGISTER_BACKEND("gpu.grouped", GpuGroupedBackend);
