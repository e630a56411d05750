// The mxfp8 recipe of the `reference` backend: Mxfp8Policy (mxfp8_policy.h, where the operand rules
// and the stage layouts are documented), its configuration checks, the operand stages, and the
// registration as recipe "mxfp8".
#include "mxfp8_policy.h"

#include <algorithm>

#include "grouped_mlp.h"
#include "large_matrix.h"
#include "moenum/mx_names.h"
#include "recipes.h"

namespace moenum::reference {

Mxfp8Policy Mxfp8Policy::from_scenario(const Scenario& sc) {
  Mxfp8Policy pol;
  pol.scenario = sc.name;
  const auto& r = sc.recipe;
  const auto grad = fp8_format_from_name(r.grad_format);
  if (!grad) pol.config_error("recipe.grad_format", "unknown format '" + r.grad_format + "' (e4m3 or e5m2)");
  const auto rounding = scale_rounding_from_name(r.scale_rounding);
  if (!rounding)
    pol.config_error("recipe.scale_rounding", "unknown scale rounding '" + r.scale_rounding + "' (rceil or floor)");
  const auto inv = inv_scale_rule_from_name(r.inv_scale);
  if (!inv) pol.config_error("recipe.inv_scale", "unknown inverse scale rule '" + r.inv_scale + "' (te_kernel or spec)");
  pol.grad_format = *grad;
  pol.scale_rounding = *rounding;
  pol.inv_scale = *inv;
  return pol;
}

void Mxfp8Policy::check_blocks(int64_t K, Gemm g, Operand op) const {
  if (K % kMxBlock == 0) return;
  const std::string what = std::string(gemm_name(g)) + (op == Operand::kA ? ".A" : ".B");
  if (layer::blocks_along_tokens(g))
    config_error("dispatch.padding",
                 "mxfp8 quantizes " + what + " columnwise in blocks of 32 rows along the tokens of each "
                 "expert segment, but a segment has " + std::to_string(K) +
                 " rows (use router, router_post, module or hybridep padding with align a multiple of 32)");
  const bool ffn = g == Gemm::kFc2Fprop || g == Gemm::kFc1Dgrad;
  config_error(ffn ? "model.ffn" : "model.hidden",
               "mxfp8 quantizes " + what + " in blocks of 32 along a reduction dim of " + std::to_string(K) +
                   ": hidden and ffn must be multiples of 32");
}

namespace {

// Every block of 32 consecutive elements of m (its rows are whole blocks long, so a block never
// crosses a row), quantized one at a time from the fp64 values (bf16 or fp32 values: exact in
// float), without a whole-operand float copy: fn(offset of the block, its 32 codes, its scale code).
template <class Fn>
void quantize_blocks(const Matrix& m, Fp8Format f, ScaleRounding r, InvScaleRule inv, Fn&& fn) {
  const double* v = m.data();
  for (int64_t off = 0; off < int64_t(m.size()); off += kMxBlock) {
    float x[kMxBlock];
    uint8_t q[kMxBlock];
    for (int i = 0; i < kMxBlock; ++i) x[i] = float(v[off + i]);
    const uint8_t scale = mx_quantize_block(x, 1, q, 1, f, r, inv);
    fn(off, q, scale);
  }
}

}  // namespace

MxOperand Mxfp8Policy::quantize_codes(const Matrix& m, Gemm g, Operand op) const {
  check_blocks(m.cols(), g, op);
  MxOperand q;
  q.rows = m.rows();
  q.cols = m.cols();
  q.format = format(g, op);
  q.codes.resize(size_t(m.size()));
  q.scales.resize(size_t(m.size() / kMxBlock));
  quantize_blocks(m, q.format, scale_rounding, inv_scale, [&](int64_t off, const uint8_t* codes, uint8_t scale) {
    std::copy(codes, codes + kMxBlock, q.codes.begin() + off);
    q.scales[size_t(off / kMxBlock)] = scale;
  });
  return q;
}

Matrix Mxfp8Policy::quantize_operand(const Matrix& m, Gemm g, Operand op) const {
  check_blocks(m.cols(), g, op);
  const Fp8Format f = format(g, op);
  Matrix out = large_matrix(m.rows(), m.cols());
  double* y = out.data();
  quantize_blocks(m, f, scale_rounding, inv_scale, [&](int64_t off, const uint8_t* codes, uint8_t scale) {
    float d[kMxBlock];
    mx_dequantize_block(codes, 1, scale, d, 1, f);
    std::copy(d, d + kMxBlock, y + off);  // exact: every fp32 value is an fp64 value
  });
  return out;
}

void Mxfp8Policy::check_config(const Problem& prob, const DispatchPlan& plan) const {
  if (prob.H % kMxBlock)
    config_error("model.hidden", "hidden (" + std::to_string(prob.H) + ") must be a multiple of 32 for mxfp8");
  if (prob.F % kMxBlock)
    config_error("model.ffn", "ffn (" + std::to_string(prob.F) + ") must be a multiple of 32 for mxfp8");
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const auto& off = plan.ranks[r].segment_offset;
    for (size_t le = 0; le + 1 < off.size(); ++le) {
      const int64_t n = off[le + 1] - off[le];
      if (n % kMxBlock)
        config_error("dispatch.padding",
                     "mxfp8 needs every expert segment aligned to 32 rows (wgrad blocks run along tokens), "
                     "but expert " + std::to_string(int64_t(r) * plan.experts_per_rank + int64_t(le)) + " (rank " +
                         std::to_string(r) + ") has " + std::to_string(n) + " rows with padding '" + plan.padding +
                         "' (use router, router_post, module or hybridep padding with align a multiple of 32)");
    }
  }
}

namespace {

// Codes [total_rows, K] and scales [total_rows, K/32] of a rowwise operand; `q` (NT form = natural
// layout here) lands at rows row0...
void put_rowwise(const MxOperand& q, Tensor& codes, Tensor& scales, int64_t row0) {
  std::copy(q.codes.begin(), q.codes.end(), codes.u8().begin() + row0 * q.cols);
  std::copy(q.scales.begin(), q.scales.end(), scales.u8().begin() + row0 * (q.cols / kMxBlock));
}

// A columnwise operand arrives as t^T [C x M] (blocks along M); in the natural layout its codes are
// t [M x C] at rows row0.. of [total_rows, C], its scales [M/32 x C] at rows row0/32.. of
// [total_rows/32, C]. row0 is a multiple of 32 (segments and weight matrices are).
void put_columnwise(const MxOperand& q, Tensor& codes, Tensor& scales, int64_t row0) {
  const int64_t C = q.rows, M = q.cols, nb = M / kMxBlock;
  const std::span<uint8_t> cd = codes.u8(), sc = scales.u8();
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t i = 0; i < M; ++i) cd[(row0 + i) * C + c] = q.codes[c * M + i];
    for (int64_t b = 0; b < nb; ++b) sc[(row0 / kMxBlock + b) * C + c] = q.scales[c * nb + b];
  }
}

// The rows of `src` [T x cols] gathered as grouped_mlp gathers x and dy: real tokens (router pad rows
// included) get their token's row, zero pad rows zeros.
Matrix gather_rows(const Tensor& src, const RankPlan& rp, int64_t begin, int64_t M, int64_t cols) {
  Matrix m = Matrix::Zero(M, cols);
  for (int64_t i = 0; i < M; ++i) {
    const int64_t t = rp.row_token[begin + i];
    if (t >= 0) src.read(t * cols, cols, m.row(i).data());
  }
  return m;
}

struct StagePair {
  Tensor codes, scales;
};

}  // namespace

void add_mx_operand_stages(const Mxfp8Policy& pol, const Problem& prob, const DispatchPlan& plan,
                           std::map<std::string, Tensor>& stages) {
  const int64_t H = prob.H, F = prob.F, F2 = 2 * F, E = prob.E;
  const bool backward = stages.count("dh") > 0;
  MOENUM_CHECK(stages.count("a"), "mxfp8 stages need the stage 'a' (keep_stages)");
  pol.check_config(prob, plan);

  std::vector<int64_t> rank_row0(plan.ranks.size() + 1, 0);
  for (size_t r = 0; r < plan.ranks.size(); ++r)
    rank_row0[r + 1] = rank_row0[r] + int64_t(plan.ranks[r].row_token.size());
  const int64_t N = rank_row0.back();
  MOENUM_CHECK(stages.at("a").shape == std::vector<int64_t>({N, F}), "stage 'a' does not match the plan");

  std::map<std::string, StagePair> st;
  const auto make = [&](Gemm g, Operand op, std::vector<int64_t> shape, std::vector<int64_t> scale_shape) {
    const std::string name = std::string(gemm_name(g)) + (op == Operand::kA ? ".A" : ".B");
    st[name] = {Tensor(std::move(shape), fp8_format_name(pol.format(g, op))), Tensor(std::move(scale_shape), "e8m0")};
    return &st[name];
  };
  using G = Gemm;
  using O = Operand;
  // token operands
  StagePair* f1a = make(G::kFc1Fprop, O::kA, {N, H}, {N, H / 32});
  StagePair* f2a = make(G::kFc2Fprop, O::kA, {N, F}, {N, F / 32});
  StagePair *d2a = nullptr, *d1a = nullptr, *w2a = nullptr, *w2b = nullptr, *w1a = nullptr, *w1b = nullptr;
  if (backward) {
    d2a = make(G::kFc2Dgrad, O::kA, {N, H}, {N, H / 32});
    d1a = make(G::kFc1Dgrad, O::kA, {N, F2}, {N, F2 / 32});
    w2a = make(G::kFc2Wgrad, O::kA, {N, H}, {N / 32, H});
    w2b = make(G::kFc2Wgrad, O::kB, {N, F}, {N / 32, F});
    w1a = make(G::kFc1Wgrad, O::kA, {N, F2}, {N / 32, F2});
    w1b = make(G::kFc1Wgrad, O::kB, {N, H}, {N / 32, H});
  }
  // weights
  StagePair* f1b = make(G::kFc1Fprop, O::kB, {E, F2, H}, {E, F2, H / 32});
  StagePair* f2b = make(G::kFc2Fprop, O::kB, {E, H, F}, {E, H, F / 32});
  StagePair *d2b = nullptr, *d1b = nullptr;
  if (backward) {
    d2b = make(G::kFc2Dgrad, O::kB, {E, H, F}, {E, H / 32, F});
    d1b = make(G::kFc1Dgrad, O::kB, {E, F2, H}, {E, F2 / 32, H});
  }

  for (int64_t e = 0; e < E; ++e) {
    const Matrix W1 = detail::tensor_rows(prob.w1, e * F2, F2, H);
    const Matrix W2 = detail::tensor_rows(prob.w2, e * H, H, F);
    put_rowwise(pol.quantize_codes(W1, G::kFc1Fprop, O::kB), f1b->codes, f1b->scales, e * F2);
    put_rowwise(pol.quantize_codes(W2, G::kFc2Fprop, O::kB), f2b->codes, f2b->scales, e * H);
    if (backward) {
      put_columnwise(pol.quantize_codes(W2.transpose(), G::kFc2Dgrad, O::kB), d2b->codes, d2b->scales, e * H);
      put_columnwise(pol.quantize_codes(W1.transpose(), G::kFc1Dgrad, O::kB), d1b->codes, d1b->scales, e * F2);
    }
  }

  const Tensor& a_st = stages.at("a");
  const Tensor* dh_st = backward ? &stages.at("dh") : nullptr;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    for (int64_t le = 0; le < plan.experts_per_rank; ++le) {
      const int64_t b = rp.segment_offset[le], M = rp.segment_offset[le + 1] - b;
      const int64_t row0 = rank_row0[r] + b;
      // the very matrices grouped_mlp hands to the policy for this segment
      const Matrix X = gather_rows(prob.x, rp, b, M, H);
      const Matrix A = detail::tensor_rows(a_st, row0, M, F);
      put_rowwise(pol.quantize_codes(X, G::kFc1Fprop, O::kA), f1a->codes, f1a->scales, row0);
      put_rowwise(pol.quantize_codes(A, G::kFc2Fprop, O::kA), f2a->codes, f2a->scales, row0);
      if (!backward) continue;
      const Matrix DY = gather_rows(prob.dy, rp, b, M, H);
      const Matrix DH = detail::tensor_rows(*dh_st, row0, M, F2);
      put_rowwise(pol.quantize_codes(DY, G::kFc2Dgrad, O::kA), d2a->codes, d2a->scales, row0);
      put_rowwise(pol.quantize_codes(DH, G::kFc1Dgrad, O::kA), d1a->codes, d1a->scales, row0);
      put_columnwise(pol.quantize_codes(DY.transpose(), G::kFc2Wgrad, O::kA), w2a->codes, w2a->scales, row0);
      put_columnwise(pol.quantize_codes(A.transpose(), G::kFc2Wgrad, O::kB), w2b->codes, w2b->scales, row0);
      put_columnwise(pol.quantize_codes(DH.transpose(), G::kFc1Wgrad, O::kA), w1a->codes, w1a->scales, row0);
      put_columnwise(pol.quantize_codes(X.transpose(), G::kFc1Wgrad, O::kB), w1b->codes, w1b->scales, row0);
    }
  }
  for (auto& [name, p] : st) {
    stages[name + ".codes"] = std::move(p.codes);
    stages[name + ".scales"] = std::move(p.scales);
  }
}

namespace {

// Not MOENUM_REGISTER_REFERENCE_RECIPE: the configuration is checked before the layer runs (a bad
// one is refused before any work), and the operand stages are added after it.
const RecipeRegistrar mxfp8_registrar(
    "mxfp8", [](const Scenario& sc, const Problem& prob, const DispatchPlan& plan, const LayerOptions& opt) {
      Mxfp8Policy pol = Mxfp8Policy::from_scenario(sc);
      pol.device = opt.gemm_device;
      pol.check_config(prob, plan);
      LayerResult r = with_accumulate(sc, pol, [&](const auto& p) { return grouped_mlp(p, prob, plan, opt); });
      if (opt.keep_stages) add_mx_operand_stages(pol, prob, plan, r.stages);
      return r;
    });

}  // namespace
}  // namespace moenum::reference
