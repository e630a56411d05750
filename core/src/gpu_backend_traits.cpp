// The GPU backends' traits, compiled into every build: a build without CUDA still knows their names
// and what they do (they report not_run there), so one scenario file serves every machine. The CUDA
// build adds their factories (core/gpu/backend_*.cpp, MOENUM_REGISTER_BACKEND_FACTORY).
#include "moenum/backend.h"
#include "moenum/stage_names.h"

namespace moenum {
namespace {

// Both keep every layer stage but act and out, which the fused activation and combine kernels never
// write to memory (kernels/layer_kernels.h); under mxfp8 also the operand codes and scales.
std::vector<std::string> gpu_stages() {
  std::vector<std::string> s;
  for (auto& name : all_stages())
    if (name != "act" && name != "out") s.push_back(std::move(name));
  return s;
}

BackendTraits gpu_traits(std::string name, std::vector<std::string> bias_modes,
                         std::vector<std::string> modelled_accumulate) {
  return {.name = std::move(name),
          .role = BackendRole::under_test,
          .device = DeviceKind::gpu,
          .stages = gpu_stages(),
          .layout_sensitive = true,  // one grouped weight tensor vs one pointer per expert
          .recipes = {"bf16", "mxfp8"},
          .bias_modes = std::move(bias_modes),
          .modelled_accumulate = std::move(modelled_accumulate)};
}

// gpu.grouped adds FC1's bias separately (TE's grouped-tensor path); gpu.multistream can also fuse it
// into the cuBLASLt epilogue. gpu.grouped's CUTLASS kernels keep one fixed K order per output
// (core/gpu/sm90/grouped_sm90.h), which hopper_mma models bit for bit; gpu.multistream's cuBLASLt
// picks its algorithm (split-K, reduction order) by heuristics, so its GEMMs keep the bound.
const BackendRegistrar grouped(gpu_traits("gpu.grouped", {"separate"}, {"hopper_mma"}));
const BackendRegistrar multistream(gpu_traits("gpu.multistream", {"separate", "epilogue"}, {}));

}  // namespace
}  // namespace moenum
