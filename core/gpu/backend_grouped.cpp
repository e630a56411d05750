// gpu.grouped: device-initiated grouped MLP. Token counts stay on the device for the whole forward
// and backward; each GEMM is one CUTLASS grouped launch whose problem sizes are built on the device.
// Its traits: core/src/gpu_backend_traits.cpp.
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
 protected:
  Availability can_run(const Scenario& sc) const override {
#ifndef MOENUM_HAVE_CUTLASS
    Availability dev = cuda_availability();
    if (!dev.ok) return dev;
    return Availability::not_supported("built without CUTLASS headers (pip install nvidia-cutlass) or without sm_90a");
#else
    return gpu_support(sc, GpuCaps{.needs_sm90 = true});
#endif
  }

  BackendResult compute(const RunContext& ctx) override {
#ifndef MOENUM_HAVE_CUTLASS
    throw InternalError("gpu.grouped: built without CUTLASS");
#else
    return run_layer(ctx, make_cutlass_sm90_engine(), layer_options(ctx));
#endif
  }
};

}  // namespace
}  // namespace moenum::gpu

using moenum::gpu::GpuGroupedBackend;
MOENUM_REGISTER_BACKEND_FACTORY("gpu.grouped", GpuGroupedBackend);
