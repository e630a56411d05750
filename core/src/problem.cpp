// Input generation. Each element is a pure function of (seed, tensor stream, flat index), so the
// same scenario gives the same inputs whatever the EP size, padding or thread count, and the
// elements are drawn in parallel.
#include "moenum/problem.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "moenum/det_math.h"
#include "moenum/input_draw.h"
#include "moenum/rng.h"

namespace moenum {
namespace {

// Standard normals of elements [i0, i0 + n), n <= det::kBatch, into v: draw::normal_at of each,
// bitwise, with the log and cos of a batch's lanes at once.
void normals_at(uint64_t seed, uint64_t stream, uint64_t i0, int n, double* v) {
  double u1[det::kBatch], u2[det::kBatch], log_u1[det::kBatch], cos_u2[det::kBatch];
  for (int j = 0; j < n; ++j) {
    u1[j] = rng::uniform(seed, stream, 2 * (i0 + j));
    u2[j] = rng::uniform(seed, stream, 2 * (i0 + j) + 1);
  }
  det::log_batch(u1, log_u1, n);
  det::cos_2pi_batch(u2, cos_u2, n);
  for (int j = 0; j < n; ++j) v[j] = std::sqrt(-2.0 * log_u1[j]) * cos_u2[j];
}

// The std of a regime's draws: the banded regimes replace the tensor's default std by their band.
double regime_std(const InputRegime& reg, double default_std) {
  if (reg.regime == "subnormal") return 0x1p-130 * reg.scale;
  if (reg.regime == "near_overflow") return 0x1p124 * reg.scale;
  return default_std * reg.scale;
}

draw::DrawSpec draw_spec(const Scenario& sc, const std::string& name, uint64_t stream, double default_std) {
  auto it = sc.inputs.find(name);
  const InputRegime reg = it == sc.inputs.end() ? InputRegime{} : it->second;
  draw::DrawSpec d;
  d.seed = sc.seed;
  d.stream = stream;
  d.std_dev = regime_std(reg, default_std);
  d.uniform = reg.regime == "uniform" || reg.dist == "uniform";
  d.outlier_fraction = reg.outlier_fraction;
  d.outlier_scale = reg.outlier_scale;
  d.special = reg.regime == "special";
  d.special_values = reg.special;
  return d;
}

std::optional<DeviceDrawer>& device_drawer() {
  static std::optional<DeviceDrawer> d;  // function-local: safe from static init order
  return d;
}

Tensor draw_tensor(const Scenario& sc, const std::string& name, uint64_t stream, std::vector<int64_t> shape,
                   double default_std, bool on_device) {
  Tensor t(std::move(shape), "bf16");
  const std::span<float> out = t.f32();
  const draw::DrawSpec d = draw_spec(sc, name, stream, default_std);
  if (on_device && (*device_drawer())(d, out)) return t;
  const int64_t n = t.size(), blocks = (n + det::kBatch - 1) / det::kBatch;
#pragma omp parallel for schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t i0 = blk * det::kBatch;
    const int len = int(std::min<int64_t>(det::kBatch, n - i0));
    double v[det::kBatch];
    if (d.uniform) {
      for (int j = 0; j < len; ++j) v[j] = draw::uniform_at(d.seed, d.stream, uint64_t(i0 + j));
    } else {
      normals_at(d.seed, d.stream, uint64_t(i0), len, v);
    }
    for (int j = 0; j < len; ++j) out[i0 + j] = draw::finish(d, uint64_t(i0 + j), v[j]);
  }
  return t;
}

}  // namespace

DeviceDrawerRegistrar::DeviceDrawerRegistrar(DeviceDrawer d) { device_drawer() = std::move(d); }

Problem generate_problem(const Scenario& sc) {
  Problem p;
  p.T = sc.tokens;
  p.H = sc.model.hidden;
  p.F = sc.model.ffn;
  p.E = sc.model.experts;
  p.k = sc.model.topk;
  // the same bits either way; the device draws where execution.device allows a GPU and one is usable
  const bool dev = device_drawer().has_value() && sc.execution.device != "cpu";
  p.x = draw_tensor(sc, "x", rng::kX, {p.T, p.H}, 1.0, dev);
  p.w1 = draw_tensor(sc, "w1", rng::kW1, {p.E, 2 * p.F, p.H}, 1.0 / std::sqrt(double(p.H)), dev);
  p.w2 = draw_tensor(sc, "w2", rng::kW2, {p.E, p.H, p.F}, 1.0 / std::sqrt(double(p.F)), dev);
  p.dy = draw_tensor(sc, "dy", rng::kDy, {p.T, p.H}, 1.0, dev);
  if (sc.model.bias) {
    p.b1 = draw_tensor(sc, "b1", rng::kB1, {p.E, 2 * p.F}, 0.1, dev);
    p.b2 = draw_tensor(sc, "b2", rng::kB2, {p.E, p.H}, 0.1, dev);
  } else {
    p.b1 = Tensor({p.E, 2 * p.F}, "bf16");
    p.b2 = Tensor({p.E, p.H}, "bf16");
  }
  return p;
}

}  // namespace moenum
