#include "stage_check.h"

#include <algorithm>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "exact_gemm.h"
#include "first_error.h"
#include "hopper_mma.h"
#include "largest_first.h"
#include "moenum/bf16.h"
#include "moenum/mx_names.h"
#include "moenum/rng.h"
#include "stage_ops.h"

namespace moenum::verify {
namespace {

using layer::Direction;
using layer::GemmDesc;
using layer::GemmKind;
using layer::Operand;
using layer::Source;
using layer::StageDesc;
using layer::StageKind;
using reference::Matrix;
using reference::Vector;
namespace so = reference::stage_ops;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

std::string fmt(double v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

std::string index_text(const std::vector<int64_t>& idx) {
  std::string s;
  for (size_t i = 0; i < idx.size(); ++i) s += (i ? "," : "") + std::to_string(idx[i]);
  return s;
}

std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return idx;
}

int64_t ravel(const std::vector<int64_t>& idx, const std::vector<int64_t>& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

so::Round act_round(const RecipeFacts& r) { return r.act == Grid::kBf16 ? so::Round::kBf16 : so::Round::kF32; }
float round_act(float v, Grid g) { return g == Grid::kBf16 ? round_bf16(v) : v; }

// ---- operands ------------------------------------------------------------------------------------

Matrix view_rows(const View& v, int64_t r0, int64_t n, int64_t cols) {
  Matrix m(n, cols);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < cols; ++j) m(i, j) = v.at((r0 + i) * cols + j);
  return m;
}

// x or dy rows of a segment as the layer gathers them: a real token's row (router pad rows
// included), zeros for a zero pad row.
Matrix token_rows(const View& src, const LayerContext& c, int64_t s, int64_t n) {
  const int64_t cols = src.dim(1);
  Matrix m = Matrix::Zero(n, cols);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = c.row_token[s + i];
    if (t >= 0)
      for (int64_t j = 0; j < cols; ++j) m(i, j) = src.at(t * cols + j);
  }
  return m;
}

Fp8Format operand_format(const LayerContext& c, const layer::OperandDesc& od) {
  return od.gradient ? c.recipe.grad_format : Fp8Format::E4M3;
}

MxCodes quantize(const float* x, int64_t rows, int64_t cols, Direction d, Fp8Format f, ScaleRounding r,
                 InvScaleRule inv) {
  MxCodes q;
  q.codes.resize(size_t(rows * cols));
  q.scales.resize(size_t(rows * cols) / kMxBlock);
  if (d == Direction::kRowwise) mx_quantize_rowwise(x, rows, cols, q.codes.data(), q.scales.data(), f, r, inv);
  else mx_quantize_columnwise(x, rows, cols, q.codes.data(), q.scales.data(), f, r, inv);
  return q;
}

Matrix dequantize(const MxCodes& q, int64_t rows, int64_t cols, Direction d, Fp8Format f) {
  std::vector<float> y(static_cast<size_t>(rows * cols));
  if (d == Direction::kRowwise) mx_dequantize_rowwise(q.codes.data(), q.scales.data(), rows, cols, y.data(), f);
  else mx_dequantize_columnwise(q.codes.data(), q.scales.data(), rows, cols, y.data(), f);
  Matrix m(rows, cols);
  std::copy(y.begin(), y.end(), m.data());
  return m;
}

// Whether saved bytes [first, first + ref.size()) are ref (a view of FP8 or E8M0 codes stored as bytes).
bool bytes_match(const View& saved, int64_t first, const std::vector<uint8_t>& ref) {
  return saved.storage == Storage::kU8 &&
         std::memcmp(static_cast<const uint8_t*>(saved.data) + first, ref.data(), ref.size()) == 0;
}

// Where one expert's part lies in a tensor: rows [r0, r0 + n) of the per-row tensors, or block e of
// the weights.
struct Part {
  int64_t e, r0, n;
};

bool is_token_source(Source s) { return !layer::is_weight(s); }

// Offsets of an expert's part inside a saved MX operand's codes and scales.
struct MxSpan {
  int64_t code0, ncodes, scale0, nscales, rows, cols;
};
MxSpan mx_span(const LayerContext& c, Source s, const Part& p) {
  int64_t rows, cols, row0;
  if (is_token_source(s)) {
    rows = p.n, row0 = p.r0;
    cols = (s == Source::kX || s == Source::kDy) ? c.H : s == Source::kA ? c.F : 2 * c.F;
  } else {
    rows = s == Source::kW1 ? 2 * c.F : c.H;
    cols = s == Source::kW1 ? c.H : c.F;
    row0 = p.e * rows;
  }
  return {row0 * cols, rows * cols, row0 * cols / kMxBlock, rows * cols / kMxBlock, rows, cols};
}

// Row r of the natural-layout operand of a source for one expert: a gathered token row (zeros for a
// zero pad row), a saved a or dh row, or a row of the expert's weight block.
template <class T>
void natural_row(const LayerContext& c, const TensorMap& t, Source s, const Part& p, int64_t r, int64_t cols,
                 T* out) {
  const View* v = nullptr;
  int64_t row = 0;
  switch (s) {
    case Source::kX:
    case Source::kDy: {
      const int64_t token = c.row_token[p.r0 + r];
      if (token < 0) {
        std::fill(out, out + cols, T(0));
        return;
      }
      v = s == Source::kX ? &c.x : &c.dy, row = token;
      break;
    }
    case Source::kA: v = &t.at("a"), row = p.r0 + r; break;
    case Source::kDh: v = &t.at("dh"), row = p.r0 + r; break;
    case Source::kW1: v = &c.w1, row = p.e * 2 * c.F + r; break;
    default: v = &c.w2, row = p.e * c.H + r; break;
  }
  for (int64_t j = 0; j < cols; ++j) out[j] = T(v->at(row * cols + j));  // float: every source is bf16 or fp32
}

// The natural-layout operand of a source for one expert, [n, cols] rows or the weight block, as the
// floats the quantizer reads (every source holds bf16 or fp32 values).
TensorBuffer<float> natural_f32(const LayerContext& c, const TensorMap& t, Source s, const Part& p) {
  const MxSpan sp = mx_span(c, s, p);
  TensorBuffer<float> x(size_t(sp.rows * sp.cols));
  for (int64_t r = 0; r < sp.rows; ++r) natural_row(c, t, s, p, r, sp.cols, x.data() + r * sp.cols);
  return x;
}

std::string mx_stage_name(int gemm, Operand op) {
  return std::string(layer::kGemms[gemm].name) + "." + layer::operand_suffix(op);
}

// The operand a GEMM multiplied, natural layout, read one row at a time: for mxfp8 the codes and
// scales the backend saved (its own input to the GEMM) dequantized, else its bf16/fp32 values. A
// sampled stage reads only the rows it checks, and a transposed operand is built from rows without
// materialising the natural one first: at production sizes building whole operands dominated the
// stage checks.
class OperandRows {
 public:
  OperandRows(const LayerContext& c, const TensorMap& t, int gemm, Operand op, const Part& p)
      : c_(c), t_(t), part_(p) {
    const layer::OperandDesc& od = op == Operand::kA ? layer::kGemms[gemm].a : layer::kGemms[gemm].b;
    source_ = od.source;
    const MxSpan sp = mx_span(c, od.source, p);
    rows_ = sp.rows, cols_ = sp.cols;
    if (!c.recipe.mx) return;
    const Fp8Format f = operand_format(c, od);
    const std::string name = mx_stage_name(gemm, op);
    auto codes = t.find(name + ".codes"), scales = t.find(name + ".scales");
    if (codes == t.end() || scales == t.end()) {  // nothing saved: the quantization of its own tensor
      const TensorBuffer<float> x = natural_f32(c, t, od.source, p);
      whole_ = dequantize(quantize(x.data(), rows_, cols_, od.direction, f, c.recipe.scale_rounding, c.recipe.inv_scale),
                          rows_, cols_, od.direction, f);
      return;
    }
    mx_ = true;
    columnwise_ = od.direction == Direction::kColumnwise;
    codes_ = &codes->second, scales_ = &scales->second;
    code0_ = sp.code0, scale0_ = sp.scale0;
    for (int v = 0; v < 256; ++v) {
      decoded_[v] = fp8_decode(uint8_t(v), f);
      scale_of_[v] = e8m0_to_f32(uint8_t(v));
    }
  }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

  // Row r of the natural [rows, cols] operand into out[0, cols).
  void read(int64_t r, double* out) const {
    if (whole_.size()) {
      for (int64_t j = 0; j < cols_; ++j) out[j] = whole_(r, j);
    } else if (mx_) {
      // mx_dequantize_element: the fp8 value times the block's scale, in float
      const int64_t at = code0_ + r * cols_;
      const int64_t srow = scale0_ + (columnwise_ ? (r / kMxBlock) * cols_ : r * (cols_ / kMxBlock));
      for (int64_t j = 0; j < cols_; ++j) {
        const float scale = scale_of_[scales_->code(srow + (columnwise_ ? j : j / kMxBlock))];
        out[j] = double(decoded_[codes_->code(at + j)] * scale);
      }
    } else {
      natural_row(c_, t_, source_, part_, r, cols_, out);
    }
  }

 private:
  const LayerContext& c_;
  const TensorMap& t_;
  Part part_;
  Source source_;
  int64_t rows_ = 0, cols_ = 0;
  Matrix whole_;
  bool mx_ = false, columnwise_ = false;
  const View *codes_ = nullptr, *scales_ = nullptr;
  int64_t code0_ = 0, scale0_ = 0;
  float decoded_[256] = {}, scale_of_[256] = {};
};

// Rows `sel` of op(X) for an operand reader X: op = identity, or the transpose (rows of X^T are
// columns of X, read in one pass over X's rows).
Matrix selected_rows(const OperandRows& x, bool transpose, const std::vector<int64_t>& sel) {
  Matrix out(int64_t(sel.size()), transpose ? x.rows() : x.cols());
  if (!transpose) {
    for (size_t i = 0; i < sel.size(); ++i) x.read(sel[i], out.row(int64_t(i)).data());
    return out;
  }
  std::vector<double> row(size_t(x.cols()));
  for (int64_t r = 0; r < x.rows(); ++r) {
    x.read(r, row.data());
    for (size_t i = 0; i < sel.size(); ++i) out(int64_t(i), r) = row[size_t(sel[i])];
  }
  return out;
}

// op(X) whole: X itself, or X^T built from blocks of X's rows, so that each write fills a cache line.
Matrix whole_operand(const OperandRows& x, bool transpose) {
  if (!transpose) {
    Matrix out(x.rows(), x.cols());
    for (int64_t r = 0; r < x.rows(); ++r) x.read(r, out.row(r).data());
    return out;
  }
  constexpr int64_t kRowsPerBlock = 8;
  Matrix out(x.cols(), x.rows());
  std::vector<double> block(size_t(kRowsPerBlock * x.cols()));
  for (int64_t r0 = 0; r0 < x.rows(); r0 += kRowsPerBlock) {
    const int64_t n = std::min(kRowsPerBlock, x.rows() - r0);
    for (int64_t i = 0; i < n; ++i) x.read(r0 + i, block.data() + i * x.cols());
    for (int64_t j = 0; j < x.cols(); ++j)
      for (int64_t i = 0; i < n; ++i) out(j, r0 + i) = block[size_t(i * x.cols() + j)];
  }
  return out;
}

// ---- the tally of one task (an expert, or a block of tokens) -----------------------------------

struct ProbeIndex {
  std::unordered_map<int64_t, size_t> by_flat;  // flat index -> probe number
};

struct Tally {
  ClassCounts classes;  // every tensor of the stage
  ClassCounts codes;    // the stage's first tensor (per-expert counts of an mx stage)
  UlpBuckets ulps;
  int64_t checked = 0;
  int64_t failing = 0;
  bool sampled = false;  // a GEMM stage recomputed only some output rows
  // first failure: lowest (tensor order, flat index)
  int first_order = INT_MAX;
  int64_t first_flat = LLONG_MAX;
  std::string first_tensor;
  Class first_cls = Class::kBoundViolation;
  double first_value = 0, first_ref = 0;
  std::optional<Interval> first_bound;

  void merge(const Tally& o) {
    classes += o.classes;
    codes += o.codes;
    ulps += o.ulps;
    checked += o.checked;
    failing += o.failing;
    sampled |= o.sampled;
    if (std::make_pair(o.first_order, o.first_flat) < std::make_pair(first_order, first_flat)) {
      first_order = o.first_order, first_flat = o.first_flat, first_tensor = o.first_tensor;
      first_cls = o.first_cls, first_value = o.first_value, first_ref = o.first_ref, first_bound = o.first_bound;
    }
  }
};

struct StageRun {
  const LayerContext& c;
  const TensorMap& t;
  const StageDesc& st;
  std::string name;  // st.name, made once: record() runs for every element
  bool bit_exact;
  ElementwiseRule elementwise;
  std::map<std::string, ProbeIndex> probes;  // tensor -> probes
  std::vector<ProbeResult>* probe_results;
  GemmRule gemm = GemmRule::kBound;

  // order: the tensor's place in the comparison (an mx stage's scales 0, codes 1; else 0).
  void record(Tally& ty, const std::string& tensor, int order, int64_t flat, double value, const Expected& x,
              Grid g, bool ulps, bool primary) const {
    const Class cls = classify(value, x, g);
    note(ty, tensor, order, flat, value, x.ref, x.bound, cls, g, ulps, primary);
  }

  void note(Tally& ty, const std::string& tensor, int order, int64_t flat, double value, double ref,
            const std::optional<Interval>& bound, Class cls, Grid g, bool ulps, bool primary) const {
    ty.classes.add(cls);
    if (primary) ty.codes.add(cls);
    ++ty.checked;
    if (ulps) ty.ulps.add(ulp_distance(value, ref, g), std::isnan(value - ref) ? 0.0 : std::fabs(value - ref));
    if (is_failing(cls, bit_exact)) {
      ++ty.failing;
      if (std::make_pair(order, flat) < std::make_pair(ty.first_order, ty.first_flat)) {
        ty.first_order = order, ty.first_flat = flat, ty.first_tensor = tensor, ty.first_cls = cls;
        ty.first_value = value, ty.first_ref = ref, ty.first_bound = bound;
      }
    }
    auto pi = probes.find(tensor);
    if (pi != probes.end()) {
      auto it = pi->second.by_flat.find(flat);
      if (it != pi->second.by_flat.end()) {
        ProbeResult& pr = (*probe_results)[it->second];
        pr.checked = true, pr.cls = cls, pr.value = value, pr.ref = ref, pr.bound = bound;
      }
    }
  }

  // Local rows (of n) that must be checked whatever the sample: probes on this tensor at rows
  // [r0, r0 + n) of a per-row tensor, or output rows of expert e of a per-expert tensor.
  std::vector<int64_t> probe_rows(const std::string& tensor, const std::vector<int64_t>& shape, bool per_expert,
                                  int64_t e, int64_t r0, int64_t n) const {
    std::vector<int64_t> rows;
    auto pi = probes.find(tensor);
    if (pi == probes.end()) return rows;
    for (const auto& [flat, _] : pi->second.by_flat) {
      const auto idx = unravel(flat, shape);
      if (per_expert && idx[0] == e) rows.push_back(idx[1]);
      if (!per_expert && idx[0] >= r0 && idx[0] < r0 + n) rows.push_back(idx[0] - r0);
    }
    return rows;
  }
};

// ---- sampling ------------------------------------------------------------------------------------

// Output rows of one (stage, expert) to recompute: all, or `count` elements' worth of rows chosen
// by the counter RNG (independent of threads), always with the first and last row and `must`.
std::vector<int64_t> select_rows(int64_t rows, int64_t cols, int64_t count, uint64_t seed, uint64_t stream,
                                 std::vector<int64_t> must) {
  std::vector<int64_t> all(static_cast<size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  if (count <= 0 || rows * cols <= count) return all;
  const int64_t want = std::min(rows, (count + cols - 1) / std::max<int64_t>(cols, 1));
  must.push_back(0);
  must.push_back(rows - 1);
  std::vector<std::pair<uint64_t, int64_t>> keyed;
  keyed.reserve(size_t(rows));
  for (int64_t r = 0; r < rows; ++r) keyed.emplace_back(rng::bits(seed, stream, uint64_t(r)), r);
  std::sort(keyed.begin(), keyed.end());
  for (int64_t i = 0; i < want; ++i) must.push_back(keyed[i].second);
  std::sort(must.begin(), must.end());
  must.erase(std::unique(must.begin(), must.end()), must.end());
  return must;
}

// Pad rows of a segment (zero pad rows and router pad rows), local indices.
std::vector<int64_t> pad_rows(const LayerContext& c, int64_t s, int64_t n) {
  std::vector<int64_t> r;
  for (int64_t i = 0; i < n; ++i)
    if (c.row_slot[s + i] < 0) r.push_back(i);
  return r;
}

uint64_t sample_stream(int stage, int64_t expert) {
  return rng::splitmix64(0x5A3D1E0000000000ull ^ (uint64_t(stage) << 32) ^ uint64_t(expert + 1));
}

// ---- the stages ---------------------------------------------------------------------------------

struct StageOut {
  Tally all;
  std::map<int64_t, Tally> per_expert;
};

std::vector<int64_t> experts_with_rows(const LayerContext& c) {
  std::vector<int64_t> es;
  for (int64_t e = 0; e < c.E; ++e)
    if (c.seg_end[e] > c.seg_begin[e]) es.push_back(e);
  return es;
}

// fn(e, tally) for every expert of es in parallel, the experts with the most rows first
// (largest_first.h). The tallies merge in expert order, so nothing depends on the schedule.
template <class Fn>
void for_experts(const LayerContext& c, const std::vector<int64_t>& es, StageOut& out, Fn&& fn) {
  std::vector<Tally> parts(es.size());
  std::vector<int64_t> rows_of(es.size());
  for (size_t i = 0; i < es.size(); ++i) rows_of[i] = c.seg_end[es[i]] - c.seg_begin[es[i]];
  const std::vector<int64_t> order = reference::largest_first(rows_of);
  reference::FirstError guard;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < int64_t(es.size()); ++k) {
    const size_t i = size_t(order[size_t(k)]);
    guard.run([&] { fn(es[i], parts[i]); });
  }
  guard.rethrow();
  for (size_t i = 0; i < es.size(); ++i) {
    out.all.merge(parts[i]);
    out.per_expert[es[i]].merge(parts[i]);
  }
}

// A GEMM stage: exact_gemm_ref of the backend's own operands, the bound, the output rounding; under
// GemmRule::kHopperMma the modelled kernel's GEMM on those operands instead, bitwise.
void gemm_stage(const StageRun& run, int stage, const SampleSpec& sample, StageOut& out) {
  const LayerContext& c = run.c;
  const GemmDesc& g = layer::kGemms[run.st.gemm];
  const View& value = run.t.at(run.st.name);
  const bool wgrad = g.kind == GemmKind::kWgrad;
  const bool fc1 = g.id == layer::Gemm::kFc1Fprop;
  const bool epilogue = fc1 && c.recipe.bias && c.recipe.epilogue;
  const bool separate_bias = fc1 && c.recipe.bias && !c.recipe.epilogue;
  const Grid grid = g.rounding == layer::OutputRounding::kActivation ? c.recipe.act : Grid::kF32;

  // full cost (multiply-adds) decides auto sampling
  int64_t count = sample.mode == SampleSpec::Mode::kCount ? sample.count : 0;
  if (sample.mode == SampleSpec::Mode::kAuto) {
    // a wgrad output of expert e sums its M_e rows: the whole stage costs its size / E * rows
    const double rows = double(c.row_token.size());
    const double macs = wgrad ? double(value.size()) / double(std::max<int64_t>(c.E, 1)) * rows
                              : double(value.size()) * double(layer::dim_size(g.reduction, c.H, c.F, 0));
    if (macs > kAutoFullCheckMacs) count = kAutoSampleCount;
  }

  std::vector<int64_t> es;
  for (int64_t e = 0; e < c.E; ++e)
    if (wgrad || c.seg_end[e] > c.seg_begin[e]) es.push_back(e);
  for_experts(c, es, out, [&](int64_t e, Tally& ty) {
    const int64_t s = c.seg_begin[e], M = c.seg_end[e] - s;
    const Part part{e, s, M};
    const int64_t out_rows = wgrad ? value.dim(1) : M, cols = wgrad ? value.dim(2) : value.dim(1);
    std::vector<int64_t> must = run.probe_rows(run.st.name, value.shape, wgrad, e, s, M);
    if (!wgrad) {
      const auto pads = pad_rows(c, s, M);
      must.insert(must.end(), pads.begin(), pads.end());
    }
    const std::vector<int64_t> rows = select_rows(out_rows, cols, count, c.seed, sample_stream(stage, e), must);
    ty.sampled = int64_t(rows.size()) < out_rows;
    const auto flat_of = [&](int64_t i, int64_t j) {
      return wgrad ? (e * out_rows + i) * cols + j : (s + i) * cols + j;
    };
    if (M == 0) {  // an expert with no rows: its weight gradient is exactly zero
      for (int64_t i : rows)
        for (int64_t j = 0; j < cols; ++j)
          run.record(ty, run.name, 0, flat_of(i, j), value.at(flat_of(i, j)), {0.0, 0.0, Interval{0.0, 0.0}},
                     grid, true, true);
      return;
    }
    // the GEMM as C = Asel . Bnt^T: fprop rows . W^T, dgrad rows . W, wgrad A^T . B
    const OperandRows A(c, run.t, run.st.gemm, Operand::kA, part), B(c, run.t, run.st.gemm, Operand::kB, part);
    const Matrix Asel = selected_rows(A, g.kind == GemmKind::kWgrad, rows);
    const Matrix Bnt = whole_operand(B, g.kind != GemmKind::kFprop);
    Vector b1;
    if (fc1 && c.recipe.bias) {
      b1.resize(2 * c.F);
      for (int64_t j = 0; j < 2 * c.F; ++j) b1(j) = c.b1.at(e * 2 * c.F + j);
    }
    // the stage's output rounding: value and value before its last rounding
    const auto post = [&](double acc, int64_t j, double exact) -> std::pair<double, double> {
      if (g.rounding == layer::OutputRounding::kAccumulator) return {acc, exact};
      float v = float(acc);
      if (separate_bias) v = layer::fc1_separate_bias(round_act(v, grid), float(b1(j)));
      return {round_act(v, grid), v};
    };
    if (run.gemm == GemmRule::kHopperMma) {  // the modelled kernel: its bits, no bound
      MOENUM_CHECK(!epilogue, "hopper_mma: an FC1 bias in the GEMM epilogue is not modelled");
      const Matrix acc = reference::hopper_mma_gemm_nt(Asel, Bnt);
      for (size_t ii2 = 0; ii2 < rows.size(); ++ii2)
        for (int64_t j = 0; j < cols; ++j) {
          const auto [ref, pre] = post(acc(int64_t(ii2), j), j, kNaN);
          const int64_t flat = flat_of(rows[ii2], j);
          run.record(ty, run.name, 0, flat, value.at(flat), {ref, pre, std::nullopt}, grid, true, true);
        }
      return;
    }
    const so::GemmRef r = so::exact_gemm_ref(Asel, Bnt, epilogue ? &b1 : nullptr, c.device);
    const int64_t K = layer::dim_size(g.reduction, c.H, c.F, M) + (epilogue ? 1 : 0);
    for (size_t ii2 = 0; ii2 < rows.size(); ++ii2) {
      const int64_t i = rows[ii2];
      for (int64_t j = 0; j < cols; ++j) {
        const double c32 = r.c32(int64_t(ii2), j);
        const Interval acc = accumulator_interval(c32, r.absprod(int64_t(ii2), j), K, r.finite_absprod(int64_t(ii2), j));
        const auto [ref, pre] = post(c32, j, r.c64(int64_t(ii2), j));
        const Expected x{ref, pre, Interval{post(acc.lo, j, kNaN).first, post(acc.hi, j, kNaN).first, acc.nan_ok}};
        const int64_t flat = flat_of(i, j);
        run.record(ty, run.name, 0, flat, value.at(flat), x, grid, true, true);
      }
    }
  });
}

// The interval of elementwise_interval.h for element (i, j) of an elementwise stage's segment rows.
Interval elementwise_bound(const StageRun& run, const std::string& name, int64_t e, int64_t r, int64_t j,
                           float p, Grid grid) {
  const LayerContext& c = run.c;
  const int64_t F = c.F;
  if (name == "out") {
    const double b2 = c.recipe.bias ? c.b2.at(e * c.H + j) : 0.0;
    return stored_interval(out_interval(run.t.at("o").at(r * c.H + j), b2, p, c.recipe.bias), grid);
  }
  const View& h = run.t.at("h");
  const int64_t jj = j % F;
  const double g = h.at(r * 2 * F + jj), l = h.at(r * 2 * F + F + jj);
  if (name == "act") return stored_interval(act_interval(g, l), grid);
  if (name == "a") return stored_interval(a_interval(g, l, p), grid);
  const double da = run.t.at("da").at(r * F + jj);  // dh: [dg, dl]
  return stored_interval(j < F ? dg_interval(da, g, l, p) : dl_interval(da, g, p), grid);
}

// An elementwise stage over the rows of every segment: act, a, out, dh; bitwise against moenum's
// recomputation, or inside the interval of code that does not share moenum's functions.
void rowwise_exact_stage(const StageRun& run, StageOut& out) {
  const LayerContext& c = run.c;
  const std::string name = run.st.name;
  const View& value = run.t.at(name);
  const so::Round rnd = act_round(c.recipe);
  const bool interval = run.elementwise == ElementwiseRule::kInterval;
  for_experts(c, experts_with_rows(c), out, [&](int64_t e, Tally& ty) {
    const int64_t s = c.seg_begin[e], M = c.seg_end[e] - s;
    Vector p(M);
    for (int64_t i = 0; i < M; ++i) p(i) = c.row_prob[s + i];
    Matrix ref, pre;
    Grid grid = c.recipe.act;
    if (name == "act" || name == "a") {
      const so::ActForward f = so::act_forward(view_rows(run.t.at("h"), s, M, 2 * c.F), p, rnd);
      if (name == "act") ref = f.act, pre = Matrix::Constant(M, c.F, kNaN), grid = Grid::kF32;
      else ref = f.a, pre = f.a_pre;
    } else if (name == "out") {
      Matrix b2 = Matrix::Zero(M, c.H);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < c.H; ++j) b2(i, j) = c.b2.at(e * c.H + j);
      const so::Rounded r = so::fc2_bias(view_rows(run.t.at("o"), s, M, c.H), c.recipe.bias ? &b2 : nullptr, p, rnd);
      ref = r.out, pre = r.pre;
    } else {  // dh
      const so::Rounded r = so::act_backward(view_rows(run.t.at("da"), s, M, c.F),
                                             view_rows(run.t.at("h"), s, M, 2 * c.F), p, rnd);
      ref = r.out, pre = r.pre;
    }
    const int64_t cols = ref.cols();
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t flat = (s + i) * cols + j;
        std::optional<Interval> bound;
        if (interval) bound = elementwise_bound(run, name, e, s + i, j, float(p(i)), grid);
        run.record(ty, name, 0, flat, value.at(flat), {ref(i, j), pre(i, j), bound}, grid, true, true);
      }
  });
}

// The combines y and dx: each token's routed rows, ascending expert, summed in fp32, rounded once.
void combine_stage(const StageRun& run, StageOut& out) {
  const LayerContext& c = run.c;
  const bool y = std::string(run.st.name) == "y";
  const View& value = run.t.at(run.st.name);
  const View* rows = y ? (run.t.count("out") ? &run.t.at("out") : nullptr) : &run.t.at("dx_row");
  const View* o = y && !rows ? &run.t.at("o") : nullptr;
  const Grid grid = c.recipe.act;
  const int64_t H = c.H, blocks = (c.T + 63) / 64;
  std::vector<Tally> parts(size_t(std::max<int64_t>(blocks, 0)));
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    for (int64_t t = blk * 64; t < std::min(c.T, (blk + 1) * 64); ++t)
      for (int64_t j = 0; j < H; ++j) {
        float acc = 0.0f;
        for (int64_t s = 0; s < c.k; ++s) {
          const int64_t r = c.combine[t * c.k + s];
          if (r < 0) continue;
          float v;
          if (rows) {
            v = float(rows->at(r * H + j));
          } else {
            v = float(o->at(r * H + j));
            if (c.recipe.bias)
              v = round_act(layer::fc2_bias(v, float(c.b2.at(c.row_expert[r] * H + j)), c.row_prob[r]), grid);
          }
          acc = acc + v;
        }
        const int64_t flat = t * H + j;
        run.record(parts[blk], run.name, 0, flat, value.at(flat), {round_act(acc, grid), acc, std::nullopt}, grid,
                   true, true);
      }
  }
  for (const Tally& p : parts) out.all.merge(p);
}

// db1 / db2: per expert, column sums over its rows (db2 weighted by p), fp32, any order.
void bias_grad_stage(const StageRun& run, StageOut& out) {
  const LayerContext& c = run.c;
  const bool db2 = std::string(run.st.name) == "db2";
  const View& value = run.t.at(run.st.name);
  const int64_t cols = db2 ? c.H : 2 * c.F;
  std::vector<int64_t> all(static_cast<size_t>(c.E));
  std::iota(all.begin(), all.end(), 0);
  for_experts(c, all, out, [&](int64_t e, Tally& ty) {
    const int64_t s = c.seg_begin[e], M = c.seg_end[e] - s;
    if (M == 0) {
      for (int64_t j = 0; j < cols; ++j)
        run.record(ty, run.name, 0, e * cols + j, value.at(e * cols + j), {0.0, 0.0, Interval{0.0, 0.0}},
                   Grid::kF32, true, true);
      return;
    }
    Matrix w(1, M);
    for (int64_t i = 0; i < M; ++i) w(0, i) = db2 ? double(c.row_prob[s + i]) : 1.0;
    const Matrix vals = db2 ? token_rows(c.dy, c, s, M) : view_rows(run.t.at("dh"), s, M, cols);
    const so::GemmRef r = so::exact_gemm_ref(w, vals.transpose(), nullptr);
    for (int64_t j = 0; j < cols; ++j) {
      const Interval acc = accumulator_interval(r.c32(0, j), r.absprod(0, j), M, r.finite_absprod(0, j));
      run.record(ty, run.name, 0, e * cols + j, value.at(e * cols + j), {r.c32(0, j), r.c64(0, j), acc},
                 Grid::kF32, true, true);
    }
  });
}

// dprobs: per routed row, dot(da, act) (+ dot(dy, b2)), each dot correctly rounded, added in fp32.
void dprobs_stage(const StageRun& run, StageOut& out) {
  const LayerContext& c = run.c;
  const View& value = run.t.at("dprobs");
  const View& h = run.t.at("h");
  const View& da = run.t.at("da");
  const int64_t F = c.F, H = c.H;
  std::vector<char> mapped(size_t(c.T * c.k), 0);
  for (size_t r = 0; r < c.row_slot.size(); ++r)
    if (c.row_slot[r] >= 0) mapped[size_t(c.row_token[r] * c.k + c.row_slot[r])] = 1;
  for_experts(c, experts_with_rows(c), out, [&](int64_t e, Tally& ty) {
    std::vector<double> act(static_cast<size_t>(F)), dar(static_cast<size_t>(F)), dyr(static_cast<size_t>(H)), b2(static_cast<size_t>(H));
    for (int64_t j = 0; j < H; ++j) b2[j] = c.b2.at(e * H + j);
    for (int64_t r = c.seg_begin[e]; r < c.seg_end[e]; ++r) {
      if (c.row_slot[r] < 0) continue;
      double S = 0.0;
      for (int64_t j = 0; j < F; ++j) {
        act[j] = layer::swiglu_fwd(float(h.at(r * 2 * F + j)), float(h.at(r * 2 * F + F + j)));
        dar[j] = da.at(r * F + j);
        S += std::fabs(act[j] * dar[j]);
      }
      float ref = reference::dot_rn_f32(dar.data(), act.data(), F);
      int64_t K = F;
      if (c.recipe.bias) {
        const int64_t t = c.row_token[r];
        for (int64_t j = 0; j < H; ++j) {
          dyr[j] = c.dy.at(t * H + j);
          S += std::fabs(dyr[j] * b2[j]);
        }
        ref = reference::dot_rn_f32(dyr.data(), b2.data(), H) + ref;
        K = F + H + 3;  // two dots rounded once each, then one fp32 addition
      }
      const int64_t flat = c.row_token[r] * c.k + c.row_slot[r];
      run.record(ty, run.name, 0, flat, value.at(flat), {ref, kNaN, accumulator_interval(ref, S, K)}, Grid::kF32,
                 true, true);
    }
  });
  // (token, slot) pairs no simulated row feeds: exactly zero
  for (int64_t flat = 0; flat < c.T * c.k; ++flat)
    if (!mapped[flat]) {
      Tally ty;
      run.record(ty, run.name, 0, flat, value.at(flat), {0.0, kNaN, Interval{0.0, 0.0}}, Grid::kF32, true, true);
      out.all.merge(ty);
      out.per_expert[c.topk_idx[flat]].merge(ty);
    }
}

// An mx stage: the operand quantized from the backend's own bf16 tensor; scales first, and a scale
// one code off makes its whole block scale_off_by_one.
void mx_stage(const StageRun& run, StageOut& out) {
  const LayerContext& c = run.c;
  const Operand op = Operand(run.st.operand);
  const layer::OperandDesc& od = op == Operand::kA ? layer::kGemms[run.st.gemm].a : layer::kGemms[run.st.gemm].b;
  const std::string name = run.st.name;
  const std::string codes_name = name + ".codes", scales_name = name + ".scales";  // once, not per element
  const View& codes = run.t.at(codes_name);
  const View& scales = run.t.at(scales_name);
  const Fp8Format f = operand_format(c, od);
  const bool weight = layer::is_weight(od.source);
  std::vector<int64_t> es;
  if (weight) {
    es.resize(size_t(c.E));
    std::iota(es.begin(), es.end(), 0);
  } else {
    es = experts_with_rows(c);
  }
  for_experts(c, es, out, [&](int64_t e, Tally& ty) {
    const Part part{e, c.seg_begin[e], c.seg_end[e] - c.seg_begin[e]};
    const MxSpan sp = mx_span(c, od.source, part);
    const auto quantized = [&] {
      return quantize(natural_f32(c, run.t, od.source, part).data(), sp.rows, sp.cols, od.direction, f,
                      c.recipe.scale_rounding, c.recipe.inv_scale);
    };
    MxCodes own;
    const MxCodes* kept = nullptr;
    if (c.input_codes && drawn_from_inputs(od.source)) {
      kept = c.input_codes->find(od.source, od.direction, f, e);
      if (!kept) kept = &c.input_codes->keep(od.source, od.direction, f, e, quantized());
    } else {
      own = quantized();
    }
    const MxCodes& q = kept ? *kept : own;
    const int64_t cols = sp.cols;
    const auto scale_of = [&](int64_t i, int64_t j) {  // local scale index of local code (i, j)
      return od.direction == Direction::kRowwise ? i * (cols / kMxBlock) + j / kMxBlock : (i / kMxBlock) * cols + j;
    };
    // The common case at memory speed: the part's saved scales and codes are the reference's bytes
    // and no probe watches them. Tallied as note() tallies each element below.
    if (!run.probes.count(scales_name) && !run.probes.count(codes_name) && bytes_match(scales, sp.scale0, q.scales) &&
        bytes_match(codes, sp.code0, q.codes)) {
      ty.classes.add(Class::kBitwiseEqual, sp.nscales + sp.ncodes);
      ty.codes.add(Class::kBitwiseEqual, sp.ncodes);
      ty.checked += sp.nscales + sp.ncodes;
      return;
    }
    std::vector<int> dscale(static_cast<size_t>(sp.nscales));
    for (int64_t si = 0; si < sp.nscales; ++si) {
      const int saved = scales.code(sp.scale0 + si), ref = q.scales[si];
      dscale[si] = saved - ref;
      const Class cls = saved == ref ? Class::kBitwiseEqual
                        : std::abs(saved - ref) == 1 ? Class::kScaleOffByOne : Class::kBoundViolation;
      run.note(ty, scales_name, 0, sp.scale0 + si, saved, ref, std::nullopt, cls, Grid::kF32, false, false);
    }
    for (int64_t i = 0; i < sp.rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t li = i * cols + j;
        const int saved = codes.code(sp.code0 + li), ref = q.codes[li];
        const Class cls = std::abs(dscale[scale_of(i, j)]) == 1 ? Class::kScaleOffByOne
                          : saved == ref ? Class::kBitwiseEqual : Class::kBoundViolation;
        run.note(ty, codes_name, 1, sp.code0 + li, saved, ref, std::nullopt, cls, Grid::kF32, false, true);
      }
  });
}

// ---- shapes, inputs, descriptions ----------------------------------------------------------------

std::vector<int64_t> expected_shape(const LayerContext& c, const std::string& name) {
  const int64_t R = int64_t(c.row_token.size()), F = c.F, H = c.H, E = c.E;
  if (name == "h" || name == "dh") return {R, 2 * F};
  if (name == "act" || name == "a" || name == "da") return {R, F};
  if (name == "o" || name == "out" || name == "dx_row") return {R, H};
  if (name == "y" || name == "dx") return {c.T, H};
  if (name == "dw1") return {E, 2 * F, H};
  if (name == "dw2") return {E, H, F};
  if (name == "db1") return {E, 2 * F};
  if (name == "db2") return {E, H};
  if (name == "dprobs") return {c.T, c.k};
  return {};
}

std::vector<int64_t> mx_shape(const LayerContext& c, const StageDesc& st, bool scales) {
  const layer::OperandDesc& od = st.operand == 0 ? layer::kGemms[st.gemm].a : layer::kGemms[st.gemm].b;
  const int64_t R = int64_t(c.row_token.size());
  std::vector<int64_t> s;
  switch (od.source) {
    case Source::kX:
    case Source::kDy: s = {R, c.H}; break;
    case Source::kA: s = {R, c.F}; break;
    case Source::kDh: s = {R, 2 * c.F}; break;
    case Source::kW1: s = {c.E, 2 * c.F, c.H}; break;
    default: s = {c.E, c.H, c.F};
  }
  if (scales) {
    if (od.direction == Direction::kRowwise) s.back() /= kMxBlock;
    else s[s.size() - 2] /= kMxBlock;
  }
  return s;
}

std::string shape_text(const std::vector<int64_t>& s) {
  std::string t = "(";
  for (size_t i = 0; i < s.size(); ++i) t += (i ? ", " : "") + std::to_string(s[i]);
  return t + (s.size() == 1 ? ",)" : ")");
}

// Where an element lies, for the verdict: expert, row and token.
std::string locate(const LayerContext& c, const StageDesc& st, const std::string& tensor,
                   const std::vector<int64_t>& idx) {
  const std::string name = st.where == layer::StageWhere::kStages ? "stages/" + tensor : tensor;
  const std::string head = name + "[" + index_text(idx) + "]";
  bool row_tensor = st.where == layer::StageWhere::kStages && st.kind != StageKind::kMx;
  int64_t r = idx.empty() ? 0 : idx[0];
  if (st.kind == StageKind::kMx) {
    const layer::OperandDesc& od = st.operand == 0 ? layer::kGemms[st.gemm].a : layer::kGemms[st.gemm].b;
    row_tensor = !layer::is_weight(od.source);
    if (row_tensor && tensor.size() > 7 && tensor.compare(tensor.size() - 7, 7, ".scales") == 0 &&
        od.direction == Direction::kColumnwise)
      r *= kMxBlock;
  }
  if (row_tensor) {
    const int64_t tok = c.row_token[r];
    return head + ": expert " + std::to_string(c.row_expert[r]) + ", row " + std::to_string(r) + " (" +
           (tok < 0 ? std::string("zero pad row") : "token " + std::to_string(tok)) + ")";
  }
  if (st.kind == StageKind::kMx || tensor == "dw1" || tensor == "dw2" || tensor == "db1" || tensor == "db2")
    return head + ": expert " + std::to_string(idx[0]);
  if (tensor == "dprobs")
    return head + ": expert " + std::to_string(c.topk_idx[idx[0] * c.k + idx[1]]) + ", token " + std::to_string(idx[0]);
  return head + ": token " + std::to_string(idx[0]);
}

std::string describe(const StageDesc& st, const FirstFailure& f, int64_t failing, int64_t checked, bool bit_exact) {
  char share[48];
  std::snprintf(share, sizeof share, " (%.4g%% of %lld checked)", 100.0 * double(failing) / double(std::max<int64_t>(checked, 1)),
                static_cast<long long>(checked));
  std::string kind = layer::stage_kind_name(st.kind);
  if (st.gemm >= 0) kind += std::string(" ") + layer::kGemms[st.gemm].name;
  const std::string head = "stage " + std::string(st.name) + " (" + kind + "): " + f.where;
  if (st.kind == StageKind::kMx)
    return head + ": " + std::to_string(int64_t(f.value)) + " vs recomputed " + std::to_string(int64_t(f.ref)) + "; " +
           std::to_string(failing) + " element(s) differ";
  if (bit_exact)
    return head + ": " + fmt(f.value) + " vs recomputed " + fmt(f.ref) + " (" + kClassNames[int(f.cls)] + "); " +
           std::to_string(failing) + " element(s) differ" + share;
  const char* what = st.kind == StageKind::kExact ? "the interval" : "the bound";
  return head + ": " + fmt(f.value) + " outside " + what + " [" + fmt(f.bound->lo) + ", " + fmt(f.bound->hi) +
         "] around the reference " + fmt(f.ref) + "; " + std::to_string(failing) + " element(s) outside" + share;
}

}  // namespace

bool stage_applies(const StageDesc& st, const RecipeFacts& recipe) {
  if (st.kind == StageKind::kMx && !recipe.mx) return false;
  return !(st.needs_bias && !recipe.bias);
}

LayerContext make_layer_context(const Scenario& sc, const Routing& routing, const DispatchPlan& plan,
                                const std::map<std::string, View>& inputs) {
  LayerContext c;
  c.T = sc.tokens, c.H = sc.model.hidden, c.F = sc.model.ffn, c.E = sc.model.experts, c.k = sc.model.topk;
  c.seed = sc.seed;
  c.x = inputs.at("x"), c.w1 = inputs.at("w1"), c.b1 = inputs.at("b1");
  c.w2 = inputs.at("w2"), c.b2 = inputs.at("b2"), c.dy = inputs.at("dy");
  for (const RankPlan& rp : plan.ranks) {
    c.row_token.insert(c.row_token.end(), rp.row_token.begin(), rp.row_token.end());
    c.row_expert.insert(c.row_expert.end(), rp.row_expert.begin(), rp.row_expert.end());
    c.row_slot.insert(c.row_slot.end(), rp.row_slot.begin(), rp.row_slot.end());
    c.row_prob.insert(c.row_prob.end(), rp.row_prob.begin(), rp.row_prob.end());
  }
  const int64_t R = int64_t(c.row_token.size());
  for (int64_t r = 1; r < R; ++r)
    MOENUM_CHECK(c.row_expert[r] >= c.row_expert[r - 1], "dispatch plan rows are not grouped by ascending expert");
  c.seg_begin.assign(size_t(c.E), 0);
  c.seg_end.assign(size_t(c.E), 0);
  for (int64_t e = 0, r = 0; e < c.E; ++e) {
    while (r < R && c.row_expert[r] < e) ++r;
    c.seg_begin[e] = r;
    while (r < R && c.row_expert[r] == e) ++r;
    c.seg_end[e] = r;
  }
  c.combine.assign(size_t(c.T * c.k), -1);
  std::vector<int64_t> fill(size_t(c.T), 0);
  for (int64_t r = 0; r < R; ++r)  // rows are in ascending expert order, so each token's are too
    if (c.row_slot[r] >= 0) c.combine[c.row_token[r] * c.k + fill[c.row_token[r]]++] = r;
  c.topk_idx.assign(routing.topk_idx.begin(), routing.topk_idx.end());
  c.recipe.act = sc.recipe.name == "fp32" ? Grid::kF32 : Grid::kBf16;
  c.recipe.bias = sc.model.bias;
  c.recipe.epilogue = sc.model.bias && sc.recipe.bias_mode == "epilogue";
  c.recipe.mx = sc.recipe.name == "mxfp8";
  c.recipe.grad_format = sc.recipe.grad_format == "e5m2" ? Fp8Format::E5M2 : Fp8Format::E4M3;
  c.recipe.scale_rounding = sc.recipe.scale_rounding == "floor" ? ScaleRounding::Floor : ScaleRounding::Rceil;
  c.recipe.inv_scale = inv_scale_rule_from_name(sc.recipe.inv_scale).value_or(kDefaultInvScale);
  return c;
}

std::vector<StageReport> check_stages(const LayerContext& c, const TensorMap& t, const SampleSpec& sample,
                                      const std::vector<Probe>& probes, ElementwiseRule elementwise, GemmRule gemm) {
  std::vector<StageReport> reports;
  std::vector<ProbeResult> probe_results(probes.size());
  for (size_t p = 0; p < probes.size(); ++p) probe_results[p].tensor = probes[p].tensor, probe_results[p].index = probes[p].index;
  for (int si = 0; si < layer::kNumStages; ++si) {
    const StageDesc& st = layer::kStages[si];
    if (!stage_applies(st, c.recipe)) continue;
    StageReport rep;
    rep.stage = si;
    const bool mx = st.kind == StageKind::kMx;
    const std::string name = st.name;
    std::vector<std::string> tensors = mx ? std::vector<std::string>{name + ".codes", name + ".scales"}
                                          : std::vector<std::string>{name};
    std::vector<std::string> missing;
    for (const auto& n : tensors)
      if (!t.count(n)) missing.push_back(n);
    for (const char* in : st.inputs)
      if (*in && !t.count(in)) missing.push_back(in);
    if (!missing.empty()) {
      rep.reason = "not saved: ";
      for (size_t i = 0; i < missing.size(); ++i) rep.reason += (i ? ", " : "") + missing[i];
      reports.push_back(std::move(rep));
      continue;
    }
    // shapes first: a wrong shape fails the stage outright
    std::string bad_shape;
    for (const auto& n : tensors) {
      const auto want = mx ? mx_shape(c, st, n == name + ".scales") : expected_shape(c, name);
      rep.total += t.at(n).size();
      if (t.at(n).shape != want) bad_shape = n + " has shape " + shape_text(t.at(n).shape) + ", expected " + shape_text(want);
    }
    if (!bad_shape.empty()) {
      rep.status = StageReport::Status::kFailed;
      rep.reason = bad_shape;
      reports.push_back(std::move(rep));
      continue;
    }
    const bool combine = name == "y" || name == "dx";
    const bool bit_exact = mx || (st.kind == StageKind::kExact && (combine || elementwise == ElementwiseRule::kBitwise)) ||
                           (st.kind == StageKind::kGemm && gemm == GemmRule::kHopperMma);
    StageRun run{c, t, st, name, bit_exact, elementwise, {}, &probe_results, gemm};
    for (size_t p = 0; p < probes.size(); ++p)
      if (std::find(tensors.begin(), tensors.end(), probes[p].tensor) != tensors.end())
        run.probes[probes[p].tensor].by_flat[ravel(probes[p].index, t.at(probes[p].tensor).shape)] = p;
    StageOut out;
    if (mx) mx_stage(run, out);
    else if (st.kind == StageKind::kGemm) gemm_stage(run, si, sample, out);
    else if (combine) combine_stage(run, out);
    else if (name == "db1" || name == "db2") bias_grad_stage(run, out);
    else if (name == "dprobs") dprobs_stage(run, out);
    else rowwise_exact_stage(run, out);

    rep.bitwise = bit_exact;
    rep.classes = out.all.classes;
    rep.ulps = out.all.ulps;
    rep.checked = out.all.checked;
    rep.sampled = out.all.sampled;
    rep.failing = out.all.failing;
    for (const auto& [e, ty] : out.per_expert) {
      rep.per_expert[e] = ty.codes;
      if (!mx) rep.per_expert_ulps[e] = ty.ulps;
    }
    rep.status = StageReport::Status::kPassed;
    if (out.all.failing > 0) {
      FirstFailure f;
      f.tensor = out.all.first_tensor;
      f.index = unravel(out.all.first_flat, t.at(f.tensor).shape);
      f.cls = out.all.first_cls;
      f.value = out.all.first_value, f.ref = out.all.first_ref, f.bound = out.all.first_bound;
      f.where = locate(c, st, f.tensor, f.index);
      rep.status = StageReport::Status::kFailed;
      rep.reason = describe(st, f, out.all.failing, out.all.checked, bit_exact);
      rep.first = std::move(f);
    }
    reports.push_back(std::move(rep));
  }
  for (auto& rep : reports) {
    const StageDesc& st = rep.desc();
    const std::string name = st.name;
    for (size_t p = 0; p < probes.size(); ++p)
      if (probes[p].tensor == name || probes[p].tensor == name + ".codes" || probes[p].tensor == name + ".scales")
        rep.probes.push_back(probe_results[p]);
  }
  return reports;
}

StageVerdict summarize(const std::string& backend, const std::vector<StageReport>& reports) {
  StageVerdict v;
  std::vector<const StageReport*> failed, checked;
  std::vector<std::string> skipped;
  for (const auto& r : reports) {
    if (r.status == StageReport::Status::kSkipped) skipped.push_back(r.desc().name);
    else checked.push_back(&r);
    if (r.status == StageReport::Status::kFailed) failed.push_back(&r);
  }
  if (checked.empty()) {
    v.detail = "no stage tensors saved by " + backend + "; nothing checked";
    return v;
  }
  if (!failed.empty()) {
    v.passed = false;
    v.detail = "first failing " + failed[0]->reason;
    if (failed.size() > 1) {
      v.detail += "; later failing stages: ";
      for (size_t i = 1; i < failed.size(); ++i) v.detail += (i > 1 ? ", " : "") + std::string(failed[i]->desc().name);
    }
    return v;
  }
  std::string parts;
  for (const StageReport* r : checked) {
    const auto& n = r->classes.n;
    std::string bits = std::to_string(n[0]) + " equal";
    for (int k : {2, 1, 3})
      if (n[k]) {
        std::string cname = kClassNames[k];
        std::replace(cname.begin(), cname.end(), '_', ' ');
        bits += ", " + std::to_string(n[k]) + " " + cname;
      }
    if (r->sampled) bits += ", " + std::to_string(r->checked) + " of " + std::to_string(r->total) + " checked";
    parts += (parts.empty() ? "" : "; ") + std::string(r->desc().name) + " (" + bits + ")";
  }
  v.detail = std::to_string(checked.size()) + " stages passed: " + parts;
  if (!skipped.empty()) {
    v.detail += "; not verified (not saved): ";
    for (size_t i = 0; i < skipped.size(); ++i) v.detail += (i ? ", " : "") + skipped[i];
  }
  return v;
}

}  // namespace moenum::verify
