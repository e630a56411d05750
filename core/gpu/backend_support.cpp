#include "backend_support.h"

#include "device.h"
#include "moenum/error.h"
#include "moenum/mx_names.h"

namespace moenum::gpu {

Availability gpu_support(const Scenario& sc, const GpuCaps& caps) {
  Availability dev = cuda_availability();
  if (!dev.ok) return dev;
  auto no = [](std::string why) { return Availability::not_supported(std::move(why)); };
  if (sc.model.activation != "swiglu") return no("activation " + sc.model.activation + " (swiglu only)");
  if (sc.model.hidden % 8 || sc.model.ffn % 8)
    return no("hidden and ffn must be multiples of 8 (16-byte aligned rows for TMA/cuBLASLt)");
  if (caps.needs_sm90 && device_sm() != 90)
    return no("the CUTLASS grouped GEMM is built for sm_90a; this device is sm_" + std::to_string(device_sm()));
  return {};
}

MxRecipe mx_recipe(const Scenario& sc, const DispatchPlan& plan) {
  MxRecipe mx;
  if (sc.recipe.name != "mxfp8") return mx;
  mx.on = true;
  auto err = [&](const std::string& key, const std::string& what) {
    throw ConfigError(key, what, sc.name);
  };
  const auto& r = sc.recipe;
  if (r.grad_format == "e4m3") mx.grad = Fp8Format::E4M3;
  else if (r.grad_format == "e5m2") mx.grad = Fp8Format::E5M2;
  else err("recipe.grad_format", "unknown format '" + r.grad_format + "' (e4m3 or e5m2)");
  if (r.scale_rounding == "rceil") mx.rounding = ScaleRounding::Rceil;
  else if (r.scale_rounding == "floor") mx.rounding = ScaleRounding::Floor;
  else err("recipe.scale_rounding", "unknown scale rounding '" + r.scale_rounding + "' (rceil or floor)");
  const auto inv = inv_scale_rule_from_name(r.inv_scale);
  if (!inv) err("recipe.inv_scale", "unknown inverse scale rule '" + r.inv_scale + "' (te_kernel or spec)");
  mx.inv_scale = *inv;
  if (sc.model.hidden % kMxBlock)
    err("model.hidden", "hidden (" + std::to_string(sc.model.hidden) + ") must be a multiple of 32 for mxfp8");
  if (sc.model.ffn % kMxBlock)
    err("model.ffn", "ffn (" + std::to_string(sc.model.ffn) + ") must be a multiple of 32 for mxfp8");
  for (size_t rk = 0; rk < plan.ranks.size(); ++rk) {
    const auto& off = plan.ranks[rk].segment_offset;
    for (size_t le = 0; le + 1 < off.size(); ++le) {
      const int64_t n = off[le + 1] - off[le];
      if (n % kMxBlock)
        err("dispatch.padding",
            "mxfp8 needs every expert segment aligned to 32 rows (wgrad blocks run along tokens), but expert " +
                std::to_string(int64_t(rk) * plan.experts_per_rank + int64_t(le)) + " (rank " + std::to_string(rk) +
                ") has " + std::to_string(n) + " rows with padding '" + plan.padding +
                "' (use router, router_post, module or hybridep padding with align a multiple of 32)");
    }
  }
  return mx;
}

std::string recipe_path(const MxRecipe& mx) {
  return mx.on ? "sm90: bf16 GEMM on dequantized MXFP8 operands (exact in bf16; quantized on the GPU with mx.h)"
               : "bf16";
}

MlpOptions layer_options(const RunContext& ctx) {
  MlpOptions opt;
  opt.discrete_weights = ctx.scenario.weights == "discrete";
  opt.bias = ctx.scenario.model.bias;
  opt.mx = mx_recipe(ctx.scenario, ctx.plan);
  return opt;
}

BackendResult run_layer(const RunContext& ctx, std::unique_ptr<GemmEngine> engine, const MlpOptions& opt) {
  GroupedMlp mlp(ctx, std::move(engine), opt);
  mlp.poison_outputs(nullptr);
  mlp.forward(nullptr);
  mlp.backward(nullptr);
  BackendResult r = mlp.download(ctx.scenario.output.intermediates, nullptr);
  r.attrs["gemm_path"] = mlp.engine().path();
  r.attrs["recipe_path"] = recipe_path(opt.mx);
  r.attrs["device"] = device_description();
  return r;
}

}  // namespace moenum::gpu
