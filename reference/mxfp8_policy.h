// The mxfp8 recipe of the `reference` backend (numerics.md §4, §5): the bf16 recipe with every GEMM
// operand MXFP8-quantized, each independently from its bf16 tensor (never requantized), and the
// dequantized values (exact in fp32, so exact in the reference GEMM) fed to the exact GEMM. Outputs
// bf16, wgrads fp32, elementwise stages as the bf16 recipe.
//
// ---- operand rules: the GEMM table of moenum/layer.h (kGemms: source, rowwise/columnwise, gradient) --
//
// recipe.grad_format (e4m3 | e5m2) applies to the gradient operands dy and dh (operand A of the four
// backward GEMMs), E4M3 to the rest. Scale rounding: recipe.scale_rounding (rceil | floor); the inverse
// scale elements are multiplied by: recipe.inv_scale (te_kernel | spec, moenum/mx.h). x and dy are the
// dispatched rows (a router pad row carries its token's real x and dy; a zero pad row zeros); a and dh
// are the bf16 stage values (pad rows: +-0). Columnwise blocks along tokens lie inside one expert
// segment (segments are multiples of 32 rows), so they never mix experts or ranks; weight blocks
// never cross experts.
//
// In the NT form grouped_mlp.h hands over ([rows x K], see numeric_policy.h), every one of these
// directions is "32 consecutive elements of one row of the matrix handed over" (the columnwise
// operands arrive transposed: dy^T, a^T, dh^T, x^T, w2^T, w1^T), so the policy quantizes rowwise
// along K whatever the GEMM. tests/cpp/test_mxfp8_recipe.cpp checks each direction against
// mx_quantize_rowwise/columnwise on the natural layout.
//
// ---- stages (output.intermediates), under /results/<backend>/stages/ -------------------------------
//
// For every GEMM g in {fc1_fprop, fc2_fprop, fc2_dgrad, fc1_dgrad, fc2_wgrad, fc1_wgrad} and operand
// X in {A, B}: `g.X.codes` (FP8 codes, dtype "e4m3" or "e5m2", stored uint8 with attr format) and
// `g.X.scales` (E8M0 codes, dtype "e8m0", uint8), in the tensor's NATURAL layout, not the NT form:
// codes have the shape of the tensor; rowwise scales are [.., rows, cols/32], columnwise scales
// [.., rows/32, cols] (the plain layouts of mx_quantize_rowwise / mx_quantize_columnwise and of
// moenum.mx.quantize(t, axis=-1) / axis=-2; no 128x4 swizzle, no padding). N = total dispatched rows
// of all ranks (pad rows included), concatenated in plan row order (rank 0's segments in local
// expert order, then rank 1's, ...), as the other per-row stages (h, a, dh, ...).
//
//   name                 tensor  codes         scales          blocks
//   fc1_fprop.A          x       [N, H]        [N, H/32]       rowwise
//   fc1_fprop.B          w1      [E, 2F, H]    [E, 2F, H/32]   rowwise
//   fc2_fprop.A          a       [N, F]        [N, F/32]       rowwise
//   fc2_fprop.B          w2      [E, H, F]     [E, H, F/32]    rowwise
//   fc2_dgrad.A          dy      [N, H]        [N, H/32]       rowwise       (grad_format)
//   fc2_dgrad.B          w2      [E, H, F]     [E, H/32, F]    columnwise
//   fc1_dgrad.A          dh      [N, 2F]       [N, 2F/32]      rowwise       (grad_format)
//   fc1_dgrad.B          w1      [E, 2F, H]    [E, 2F/32, H]   columnwise
//   fc2_wgrad.A          dy      [N, H]        [N/32, H]       columnwise    (grad_format)
//   fc2_wgrad.B          a       [N, F]        [N/32, F]       columnwise
//   fc1_wgrad.A          dh      [N, 2F]       [N/32, 2F]      columnwise    (grad_format)
//   fc1_wgrad.B          x       [N, H]        [N/32, H]       columnwise
//
// Because every segment is a multiple of 32 rows, the columnwise token operands over all segments
// equal mx_quantize_columnwise of the whole [N, cols] tensor. Dequantized value = fp8(code) *
// 2^(scale-127) (moenum.mx.dequantize(codes, scales, fmt, axis=-1 rowwise / axis=-2 columnwise)),
// which is exactly what the exact GEMM was fed.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "moenum/dispatch_plan.h"
#include "moenum/error.h"
#include "moenum/mx.h"
#include "moenum/problem.h"
#include "moenum/scenario.h"
#include "moenum/tensor.h"
#include "numeric_policy.h"

namespace moenum::reference {

inline const char* fp8_format_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

// One quantized operand in the NT form it was handed over in: codes [rows x K] row-major, scales
// [rows x K/32] (blocks of 32 along each row).
struct MxOperand {
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::E4M3;
  std::vector<uint8_t> codes, scales;
};

struct Mxfp8Policy : Bf16Policy {
  static constexpr const char* gemm_attr =
      "ideal: MXFP8 operands dequantized exactly, exact sum of products, rounded once to fp32";
  Fp8Format grad_format = Fp8Format::E4M3;
  ScaleRounding scale_rounding = ScaleRounding::Rceil;
  InvScaleRule inv_scale = kDefaultInvScale;
  std::string scenario = "mxfp8";  // for error messages

  Mxfp8Policy() = default;
  Mxfp8Policy(Fp8Format grad, ScaleRounding rounding, std::string scenario_name = "mxfp8",
              InvScaleRule inv = kDefaultInvScale)
      : grad_format(grad), scale_rounding(rounding), inv_scale(inv), scenario(std::move(scenario_name)) {}
  // From recipe.grad_format / recipe.scale_rounding / recipe.inv_scale; ConfigError on unknown values.
  static Mxfp8Policy from_scenario(const Scenario& sc);

  Fp8Format format(Gemm g, Operand op) const { return layer::is_gradient(g, op) ? grad_format : Fp8Format::E4M3; }

  // Blocks of 32 along each row of m (the K dim of the NT form). Throws ConfigError when K is not a
  // multiple of 32: key dispatch.padding for the wgrad operands (K = the segment's rows), else
  // model.hidden / model.ffn. Thrown inside grouped_mlp's parallel loop, it reaches grouped_mlp's
  // caller (first_error.h); the recipe runners call check_config first, so that a bad configuration
  // is refused before any work.
  MxOperand quantize_codes(const Matrix& m, Gemm g, Operand op) const;
  // The ConfigError above when K (the NT form's row length) is not a multiple of 32.
  void check_blocks(int64_t K, Gemm g, Operand op) const;

  // THE QUANTIZATION HOOK (numeric_policy.h): the dequantized values of quantize_codes.
  Matrix quantize_operand(const Matrix& m, Gemm g, Operand op) const;

  // The configuration errors the recipe cannot run with, before the layer starts: hidden or ffn not a
  // multiple of 32 (model.hidden / model.ffn), a segment whose rows are not (dispatch.padding).
  void check_config(const Problem& prob, const DispatchPlan& plan) const;

  [[noreturn]] void config_error(const std::string& key, const std::string& what) const {
    throw ConfigError(key, what, scenario);
  }
};

// Codes and scales of every operand of every GEMM, in the natural layouts of the table above, as
// stage tensors (appended to `stages`). Needs the stages "a" and "dh" of a keep_stages run (the
// forward operands only when the run had no backward). Every operand is quantized again here through
// pol.quantize_codes from the very matrices grouped_mlp handed to the policy, so the bytes are the
// ones the GEMMs were fed.
void add_mx_operand_stages(const Mxfp8Policy& pol, const Problem& prob, const DispatchPlan& plan,
                           std::map<std::string, Tensor>& stages);

}  // namespace moenum::reference
