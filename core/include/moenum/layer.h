// The layer under test, described once (numerics.md §1, §4): its six GEMMs (operands, which operand
// MXFP8 quantizes in which direction, the reduction dim, the output rounding), its stages in dataflow
// order, and the SwiGLU forward/backward compositions. The CPU reference, cpu.eigen, the GPU GEMM
// descriptors, the stage recomputation and the bounds all read these tables; a new stage or GEMM is
// one row here plus the code that computes it.
#pragma once
#include <cmath>
#include <cstdint>

#include "moenum/activation.h"
#include "moenum/hd.h"

namespace moenum::layer {

// ---- the six GEMMs, in the order the layer runs them ---------------------------------------------
enum class Gemm : int { kFc1Fprop = 0, kFc2Fprop, kFc2Dgrad, kFc2Wgrad, kFc1Dgrad, kFc1Wgrad };
inline constexpr int kNumGemms = 6;
enum class Operand : int { kA = 0, kB };

// fprop: rows x out = rows . W^T; dgrad: rows x in = rows . W; wgrad: out x in = A^T . B over rows.
enum class GemmKind : int { kFprop, kDgrad, kWgrad };

// The tensors that feed GEMMs, in their natural layouts: x, dy [rows, H] (dispatched rows),
// a [rows, F], dh [rows, 2F], w1 [E, 2F, H], w2 [E, H, F].
enum class Source : int { kX, kW1, kA, kW2, kDy, kDh };

// TransformerEngine's usage of an operand: rowwise = MX blocks of 32 along the tensor's last dim,
// columnwise = along its first dim (tokens for activations, out-features for weights).
enum class Direction : int { kRowwise, kColumnwise };

// The reduction dim K of a GEMM.
enum class Dim : int { kHidden, kFfn, kFfn2, kSegmentRows };

// What a GEMM output is stored as: the recipe's activation dtype (bf16, or fp32 for the fp32
// recipe), or the fp32 accumulator itself (wgrad into main_grad).
enum class OutputRounding : int { kActivation, kAccumulator };

struct OperandDesc {
  Source source;
  Direction direction;
  bool gradient;  // dy and dh: MXFP8 recipe.grad_format (E4M3 or E5M2); everything else E4M3
};

struct GemmDesc {
  Gemm id;
  const char* name;
  GemmKind kind;
  const char* output;  // the stage or output it produces
  OperandDesc a, b;
  Dim reduction;
  OutputRounding rounding;
};

inline constexpr GemmDesc kGemms[kNumGemms] = {
    {Gemm::kFc1Fprop, "fc1_fprop", GemmKind::kFprop, "h",
     {Source::kX, Direction::kRowwise, false}, {Source::kW1, Direction::kRowwise, false},
     Dim::kHidden, OutputRounding::kActivation},
    {Gemm::kFc2Fprop, "fc2_fprop", GemmKind::kFprop, "o",
     {Source::kA, Direction::kRowwise, false}, {Source::kW2, Direction::kRowwise, false},
     Dim::kFfn, OutputRounding::kActivation},
    {Gemm::kFc2Dgrad, "fc2_dgrad", GemmKind::kDgrad, "da",
     {Source::kDy, Direction::kRowwise, true}, {Source::kW2, Direction::kColumnwise, false},
     Dim::kHidden, OutputRounding::kActivation},
    {Gemm::kFc2Wgrad, "fc2_wgrad", GemmKind::kWgrad, "dw2",
     {Source::kDy, Direction::kColumnwise, true}, {Source::kA, Direction::kColumnwise, false},
     Dim::kSegmentRows, OutputRounding::kAccumulator},
    {Gemm::kFc1Dgrad, "fc1_dgrad", GemmKind::kDgrad, "dx_row",
     {Source::kDh, Direction::kRowwise, true}, {Source::kW1, Direction::kColumnwise, false},
     Dim::kFfn2, OutputRounding::kActivation},
    {Gemm::kFc1Wgrad, "fc1_wgrad", GemmKind::kWgrad, "dw1",
     {Source::kDh, Direction::kColumnwise, true}, {Source::kX, Direction::kColumnwise, false},
     Dim::kSegmentRows, OutputRounding::kAccumulator},
};

MOENUM_HD const GemmDesc& gemm_desc(Gemm g) { return kGemms[static_cast<int>(g)]; }
MOENUM_HD const OperandDesc& operand_desc(Gemm g, Operand op) {
  return op == Operand::kA ? gemm_desc(g).a : gemm_desc(g).b;
}
inline const char* gemm_name(Gemm g) { return gemm_desc(g).name; }
inline const char* operand_suffix(Operand op) { return op == Operand::kA ? "A" : "B"; }

inline const char* source_name(Source s) {
  constexpr const char* names[] = {"x", "w1", "a", "w2", "dy", "dh"};
  return names[static_cast<int>(s)];
}
MOENUM_HD bool is_weight(Source s) { return s == Source::kW1 || s == Source::kW2; }

// Columnwise in the NT form the CPU layer hands to a GEMM (C = A . B^T, both [rows x K]): such an
// operand arrives transposed, so its MX blocks are again 32 consecutive elements of one row.
MOENUM_HD bool is_columnwise(Gemm g, Operand op) { return operand_desc(g, op).direction == Direction::kColumnwise; }
MOENUM_HD bool is_gradient(Gemm g, Operand op) { return operand_desc(g, op).gradient; }
// Blocks along the tokens (the wgrad operands): every expert segment must be a multiple of 32 rows.
MOENUM_HD bool blocks_along_tokens(Gemm g) { return gemm_desc(g).kind == GemmKind::kWgrad; }

MOENUM_HD int64_t dim_size(Dim d, int64_t H, int64_t F, int64_t segment_rows) {
  switch (d) {
    case Dim::kHidden: return H;
    case Dim::kFfn: return F;
    case Dim::kFfn2: return 2 * F;
    default: return segment_rows;
  }
}

// ---- the stages, in dataflow order ---------------------------------------------------------------
// exact: bit-exact by contract (elementwise, casts, combine). gemm: one of the six GEMMs, checked
// against the bound of numerics.md §7. reduction: a dot product or column sum accumulated in fp32 in
// any order (dprobs, db1, db2): the same bound. mx: MXFP8 codes and scales of one GEMM operand
// (named "<gemm>.<A|B>"), bitwise, scales first.
enum class StageKind : int { kExact, kGemm, kReduction, kMx };
// Where a backend keeps the stage's tensor: /results/<backend>/stages or one of its outputs.
enum class StageWhere : int { kStages, kOutputs };

struct StageDesc {
  const char* name;
  StageKind kind;
  StageWhere where;
  const char* inputs[2];  // saved tensors of the same backend it is recomputed from ("" = none)
  int gemm;               // kGemms index for gemm and mx stages, else -1
  int operand;            // mx stages: Operand, else -1
  bool needs_bias;        // only with model.bias
  const char* doc;
};

inline constexpr StageDesc kStages[] = {
    {"fc1_fprop.A", StageKind::kMx, StageWhere::kStages, {"", ""}, 0, 0, false, "MXFP8 codes and scales of x (fc1_fprop A)"},
    {"fc1_fprop.B", StageKind::kMx, StageWhere::kStages, {"", ""}, 0, 1, false, "MXFP8 codes and scales of w1 (fc1_fprop B)"},
    {"h", StageKind::kGemm, StageWhere::kStages, {"", ""}, 0, -1, false, "FC1: x . w1^T (+ b1), the activation's input"},
    {"act", StageKind::kExact, StageWhere::kStages, {"h", ""}, -1, -1, false, "silu(g) * l, fp32"},
    {"a", StageKind::kExact, StageWhere::kStages, {"h", ""}, -1, -1, false, "round(silu(g) * l * p), FC2's input"},
    {"fc2_fprop.A", StageKind::kMx, StageWhere::kStages, {"a", ""}, 1, 0, false, "MXFP8 codes and scales of a (fc2_fprop A)"},
    {"fc2_fprop.B", StageKind::kMx, StageWhere::kStages, {"", ""}, 1, 1, false, "MXFP8 codes and scales of w2 (fc2_fprop B)"},
    {"o", StageKind::kGemm, StageWhere::kStages, {"a", ""}, 1, -1, false, "FC2: a . w2^T"},
    {"out", StageKind::kExact, StageWhere::kStages, {"o", ""}, -1, -1, false, "round(o + b2 * p)"},
    {"y", StageKind::kExact, StageWhere::kOutputs, {"o", ""}, -1, -1, false, "combine: round(sum of out over routed experts, ascending id)"},
    {"fc2_dgrad.A", StageKind::kMx, StageWhere::kStages, {"", ""}, 2, 0, false, "MXFP8 codes and scales of dy (fc2_dgrad A)"},
    {"fc2_dgrad.B", StageKind::kMx, StageWhere::kStages, {"", ""}, 2, 1, false, "MXFP8 codes and scales of w2 (fc2_dgrad B)"},
    {"da", StageKind::kGemm, StageWhere::kStages, {"", ""}, 2, -1, false, "FC2 dgrad: dy . w2"},
    {"fc2_wgrad.A", StageKind::kMx, StageWhere::kStages, {"", ""}, 3, 0, false, "MXFP8 codes and scales of dy (fc2_wgrad A)"},
    {"fc2_wgrad.B", StageKind::kMx, StageWhere::kStages, {"a", ""}, 3, 1, false, "MXFP8 codes and scales of a (fc2_wgrad B)"},
    {"dw2", StageKind::kGemm, StageWhere::kOutputs, {"a", ""}, 3, -1, false, "FC2 wgrad: dy^T . a, fp32"},
    {"db2", StageKind::kReduction, StageWhere::kOutputs, {"", ""}, -1, -1, true, "sum of p * dy over the expert's rows"},
    {"dh", StageKind::kExact, StageWhere::kStages, {"da", "h"}, -1, -1, false, "round([da*p*l*silu'(g), da*p*silu(g)])"},
    {"dprobs", StageKind::kReduction, StageWhere::kOutputs, {"da", "h"}, -1, -1, false, "dot(da, act) + dot(dy, b2) per routed row"},
    {"fc1_dgrad.A", StageKind::kMx, StageWhere::kStages, {"dh", ""}, 4, 0, false, "MXFP8 codes and scales of dh (fc1_dgrad A)"},
    {"fc1_dgrad.B", StageKind::kMx, StageWhere::kStages, {"", ""}, 4, 1, false, "MXFP8 codes and scales of w1 (fc1_dgrad B)"},
    {"dx_row", StageKind::kGemm, StageWhere::kStages, {"dh", ""}, 4, -1, false, "FC1 dgrad: dh . w1"},
    {"dx", StageKind::kExact, StageWhere::kOutputs, {"dx_row", ""}, -1, -1, false, "combine of dx_row"},
    {"fc1_wgrad.A", StageKind::kMx, StageWhere::kStages, {"dh", ""}, 5, 0, false, "MXFP8 codes and scales of dh (fc1_wgrad A)"},
    {"fc1_wgrad.B", StageKind::kMx, StageWhere::kStages, {"", ""}, 5, 1, false, "MXFP8 codes and scales of x (fc1_wgrad B)"},
    {"dw1", StageKind::kGemm, StageWhere::kOutputs, {"dh", ""}, 5, -1, false, "FC1 wgrad: dh^T . x, fp32"},
    {"db1", StageKind::kReduction, StageWhere::kOutputs, {"dh", ""}, -1, -1, true, "sum of dh over the expert's rows"},
};
inline constexpr int kNumStages = sizeof(kStages) / sizeof(kStages[0]);

inline const char* stage_kind_name(StageKind k) {
  constexpr const char* names[] = {"exact", "gemm", "reduction", "mx"};
  return names[static_cast<int>(k)];
}

// ---- SwiGLU, forward and backward (numerics.md §1) -------------------------------------------------
// One composition for every backend: fp32 with the shared silu of activation.h (the recipes, the CPU
// and the GPU), or plain fp64 (golden). The caller rounds a = act * p and dh = [dg, dl] to its
// activation dtype.
namespace detail {
MOENUM_HD float mul(float a, float b) { return f32op::mul(a, b); }
MOENUM_HD double mul(double a, double b) { return a * b; }
MOENUM_HD float add(float a, float b) { return f32op::add(a, b); }
MOENUM_HD double add(double a, double b) { return a + b; }
MOENUM_HD float silu(float x) { return silu_f32(x); }
MOENUM_HD float dsilu(float x) { return dsilu_f32(x); }
MOENUM_HD double silu(double x) { return x / (1.0 + exp(-x)); }
MOENUM_HD double dsilu(double x) {
  const double s = 1.0 / (1.0 + exp(-x));
  return s * (1.0 + x * (1.0 - s));
}
}  // namespace detail

// act = silu(g) * l; the probs multiply before FC2: a = round(act * p).
template <class R>
MOENUM_HD R swiglu_fwd(R g, R l) {
  return detail::mul(detail::silu(g), l);
}
template <class R>
MOENUM_HD R probs_scale(R act, R p) {
  return detail::mul(act, p);
}

template <class R>
struct SwigluGrad {
  R dg, dl;
};
// dact = da * p; dg = dact * l * silu'(g); dl = dact * silu(g).
template <class R>
MOENUM_HD SwigluGrad<R> swiglu_bwd(R da, R g, R l, R p) {
  const R dact = detail::mul(da, p);
  return {detail::mul(detail::mul(dact, l), detail::dsilu(g)), detail::mul(dact, detail::silu(g))};
}

// ---- the bias rules (numerics.md §1), values before the output rounding -------------------------
// FC1 with a separate bias (TE grouped-tensor path): h = round(round(acc) + b1).
template <class R>
MOENUM_HD R fc1_separate_bias(R h_rounded, R b1) {
  return detail::add(h_rounded, b1);
}
// FC2's bias after the GEMM, scaled by the row's prob, in fp32 (Megatron _apply_packed_bias):
// out = round(o + b2 * p).
template <class R>
MOENUM_HD R fc2_bias(R o, R b2, R p) {
  return detail::add(o, detail::mul(b2, p));
}

}  // namespace moenum::layer
