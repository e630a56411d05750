// The inputs of one scenario, drawn once for the global problem from the counter-based RNG, then
// rounded to bf16. Identical across EP sizes and padding sources.
#pragma once
#include <functional>
#include <span>

#include "moenum/input_draw.h"
#include "moenum/scenario.h"
#include "moenum/tensor.h"

namespace moenum {

struct Problem {
  int64_t T = 0, H = 0, F = 0, E = 0, k = 0;
  Tensor x;       // T x H, bf16
  Tensor w1;      // E x 2F x H, bf16 (out x in)
  Tensor b1;      // E x 2F, bf16 (zeros when the model has no bias)
  Tensor w2;      // E x H x F, bf16
  Tensor b2;      // E x H, bf16
  Tensor dy;      // T x H, bf16
};

// Draws on the device when the CUDA build registered a drawer, execution.device is not cpu and the
// drawer finds a usable device; on the CPU otherwise. The bits are the same either way.
Problem generate_problem(const Scenario& sc);

// One tensor's elements drawn on a device, bitwise draw::element of each; false when no device is
// usable here (the CPU draws them then).
using DeviceDrawer = std::function<bool(const draw::DrawSpec&, std::span<float>)>;
struct DeviceDrawerRegistrar {
  explicit DeviceDrawerRegistrar(DeviceDrawer d);
};

}  // namespace moenum
