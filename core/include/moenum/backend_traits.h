// What the registry knows about a backend without running it: the facts the runner, the verifier and
// the CLI act on, instead of lists of backend names.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "moenum/availability.h"
#include "moenum/scenario.h"

namespace moenum {

// oracle: golden and reference, the yardsticks the others are measured against; they pass by running
// to completion and their stages are not checked by default. under_test: everything else.
enum class BackendRole { oracle, under_test };
enum class DeviceKind { cpu, gpu };

constexpr std::string_view to_string(BackendRole r) { return r == BackendRole::oracle ? "oracle" : "under_test"; }
constexpr std::string_view to_string(DeviceKind d) { return d == DeviceKind::cpu ? "cpu" : "gpu"; }

struct BackendTraits {
  std::string name;
  BackendRole role = BackendRole::under_test;
  DeviceKind device = DeviceKind::cpu;
  std::vector<std::string> stages;      // the stage tensors it can save (stage_names.h)
  bool layout_sensitive = false;        // single vs discrete weights can change its result
  std::vector<std::string> recipes;     // the recipe.name values it implements
  std::vector<std::string> bias_modes;  // the recipe.bias_mode values it implements
  // The recipe.accumulate modes whose model its GEMMs follow bit for bit (hopper_mma: gpu.grouped's
  // CUTLASS sm90 kernels, reference/hopper_mma.h); under such a mode its GEMM stages are checked
  // bitwise instead of against the bound.
  std::vector<std::string> modelled_accumulate;

  // not_supported, with the reason, when the scenario's recipe or bias mode is not implemented.
  Availability supports(const Scenario& sc) const;
};

}  // namespace moenum
