#include "backend_support.h"

#include "device.h"

namespace moenum::gpu {

Availability gpu_support(const Scenario& sc, const GpuCaps& caps) {
  Availability dev = cuda_availability();
  if (!dev.ok) return dev;
  auto no = [](std::string why) { return Availability{false, "not_supported", std::move(why)}; };
  if (sc.recipe.name != "bf16")
    return no("recipe " + sc.recipe.name + " is not implemented on the GPU yet (bf16 only)");
  if (sc.model.activation != "swiglu") return no("activation " + sc.model.activation + " (swiglu only)");
  if (sc.model.hidden % 8 || sc.model.ffn % 8)
    return no("hidden and ffn must be multiples of 8 (16-byte aligned rows for TMA/cuBLASLt)");
  if (sc.recipe.bias_mode == "epilogue" && !caps.fc1_bias_epilogue_ok)
    return no("bias_mode epilogue: this backend adds the bias separately (TE grouped-tensor path)");
  if (caps.needs_sm90 && device_sm() != 90)
    return no("the CUTLASS grouped GEMM is built for sm_90a; this device is sm_" + std::to_string(device_sm()));
  return {};
}

}  // namespace moenum::gpu
