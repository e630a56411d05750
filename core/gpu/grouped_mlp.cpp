#include "grouped_mlp.h"

#include <algorithm>
#include <span>
#include <tuple>

#include "cuda_check.h"
#include "kernels/layer_kernels.h"
#include "kernels/mx_quantize.h"
#include "moenum/bf16.h"

namespace moenum::gpu {

namespace {

// Host-side conversions of whole tensors run in parallel above this many elements: widening the
// stages back to float dominates a backend's time at production shapes otherwise.
constexpr int64_t kParallelConvert = int64_t(1) << 16;

void upload_bf16(DeviceBuffer<uint16_t>& d, std::span<const float> v, cudaStream_t s) {
  const int64_t n = int64_t(v.size());
  TensorBuffer<uint16_t> h(v.size());  // first touched by the conversion's threads
#pragma omp parallel for schedule(static) if (n > kParallelConvert)
  for (int64_t i = 0; i < n; ++i) h[i] = bf16_bits_rn(v[i]);  // exact: values are bf16
  d.reset(h.size());
  copy_to_device(d.get(), h.data(), size_t(n) * 2, s);  // synchronous: h goes out of scope
}

Tensor bf16_tensor(const DeviceBuffer<uint16_t>& d, std::vector<int64_t> shape, cudaStream_t s) {
  Tensor t = Tensor::for_overwrite(std::move(shape), "bf16");  // every element set by the loop below
  const int64_t n = t.size();
  MOENUM_CHECK(static_cast<int64_t>(d.size()) == n, "bf16 download size mismatch");
  TensorBuffer<uint16_t> h(d.size());
  d.download_to(h.data(), s);
  const std::span<float> out = t.f32();
#pragma omp parallel for schedule(static) if (n > kParallelConvert)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
  return t;
}

Tensor fp32_tensor(const std::vector<const DeviceBuffer<float>*>& parts, std::vector<int64_t> shape, cudaStream_t s) {
  Tensor t = Tensor::for_overwrite(std::move(shape), "fp32");  // the parts cover it (checked below)
  const std::span<float> out = t.f32();
  size_t at = 0;
  for (auto* p : parts) {
    MOENUM_CHECK(at + p->size() <= out.size(), "fp32 download size mismatch");
    p->download_to(out.data() + at, s);
    at += p->size();
  }
  MOENUM_CHECK(at == out.size(), "fp32 download size mismatch");
  return t;
}

Tensor u8_tensor(const DeviceBuffer<uint8_t>& d, std::vector<int64_t> shape, const char* dtype, cudaStream_t s) {
  Tensor t = Tensor::for_overwrite(std::move(shape), dtype);
  MOENUM_CHECK(static_cast<int64_t>(d.size()) == t.size(), "fp8/e8m0 download size mismatch");
  d.download_to(t.u8().data(), s);
  return t;
}

const char* fmt_name(Fp8Format f) { return f == Fp8Format::E4M3 ? "e4m3" : "e5m2"; }

}  // namespace

FlatPlan flatten_plan(const Routing& routing, const DispatchPlan& plan, int64_t T, int64_t E, int64_t k) {
  FlatPlan f;
  f.counts.assign(E, 0);
  const int64_t epr = plan.experts_per_rank;
  for (size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rp = plan.ranks[r];
    for (size_t i = 0; i < rp.row_token.size(); ++i) {
      f.row_token.push_back(static_cast<int32_t>(rp.row_token[i]));
      f.row_expert.push_back(rp.row_expert[i]);
      f.row_slot.push_back(rp.row_slot[i]);
      f.row_prob.push_back(rp.row_prob[i]);
    }
    for (size_t j = 0; j < rp.tokens_per_expert.size(); ++j) f.counts.at(r * epr + j) = rp.tokens_per_expert[j];
  }
  f.rows = static_cast<int64_t>(f.row_token.size());
  // The grouped GEMMs need each expert's rows contiguous and in ascending expert order.
  int64_t at = 0;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t i = 0; i < f.counts[e]; ++i, ++at)
      MOENUM_CHECK(at < f.rows && f.row_expert[at] == e, "dispatch plan rows are not grouped by ascending expert");
  MOENUM_CHECK(at == f.rows, "dispatch plan counts do not add up to its rows");

  // Combine index: per token, its routed (non-pad) rows sorted by expert id.
  std::vector<std::vector<std::tuple<int32_t, int32_t, int32_t>>> per(T);  // (expert, row, slot)
  for (int64_t r = 0; r < f.rows; ++r)
    if (f.row_slot[r] >= 0 && f.row_token[r] >= 0) per.at(f.row_token[r]).emplace_back(f.row_expert[r], r, f.row_slot[r]);
  f.crow.assign(T * k, -1);
  f.cslot.assign(T * k, -1);
  for (int64_t t = 0; t < T; ++t) {
    auto& v = per[t];
    std::sort(v.begin(), v.end());
    MOENUM_CHECK(static_cast<int64_t>(v.size()) <= k, "token routed to more than k rows");
    for (size_t i = 0; i < v.size(); ++i) {
      f.crow[t * k + i] = std::get<1>(v[i]);
      f.cslot[t * k + i] = std::get<2>(v[i]);
    }
  }
  (void)routing;
  return f;
}

GroupedMlp::GroupedMlp(const RunContext& ctx, std::unique_ptr<GemmEngine> engine, MlpOptions opt)
    : opt_(opt), engine_(std::move(engine)) {
  const Problem& p = ctx.problem;
  T_ = p.T, H_ = p.H, F_ = p.F, E_ = p.E, k_ = p.k;
  cudaStream_t s = nullptr;
  upload_bf16(x_, p.x.f32(), s);
  upload_bf16(dy_, p.dy.f32(), s);
  upload_bf16(b1_, p.b1.f32(), s);
  upload_bf16(b2_, p.b2.f32(), s);
  const size_t n1 = 2 * F_ * H_, n2 = H_ * F_;
  const int nbuf = opt_.discrete_weights ? static_cast<int>(E_) : 1;
  const size_t per1 = opt_.discrete_weights ? n1 : n1 * E_, per2 = opt_.discrete_weights ? n2 : n2 * E_;
  w1_.resize(nbuf);
  w2_.resize(nbuf);
  dw1_.resize(nbuf);
  dw2_.resize(nbuf);
  for (int i = 0; i < nbuf; ++i) {
    upload_bf16(w1_[i], p.w1.f32().subspan(i * per1, per1), s);
    upload_bf16(w2_[i], p.w2.f32().subspan(i * per2, per2), s);
    dw1_[i].reset(per1);
    dw2_[i].reset(per2);
  }
  y_.reset(T_ * H_);
  dx_.reset(T_ * H_);
  db1_.reset(E_ * 2 * F_);
  db2_.reset(E_ * H_);
  dprobs_.reset(T_ * k_);
  counts_.reset(E_);
  offsets_.reset(E_ + 1);
  if (opt_.mx.on) {
    MOENUM_CHECK(H_ % kMxBlock == 0 && F_ % kMxBlock == 0, "mxfp8: hidden and ffn must be multiples of 32");
    mx_alloc(mx_w1_, Fp8Format::E4M3, E_ * 2 * F_, H_, nbuf);
    mx_alloc(mx_w2_, Fp8Format::E4M3, E_ * H_, F_, nbuf);
    mx_inexact_.reset(1);
  }
  set_plan(ctx.routing, ctx.plan, s);
}

void GroupedMlp::mx_alloc(MxTensor& t, Fp8Format fmt, int64_t rows, int64_t cols, int nbuf) {
  MOENUM_CHECK(rows % nbuf == 0 && (rows / nbuf) % kMxBlock == 0 && cols % kMxBlock == 0,
               "mxfp8: operand rows per buffer and cols must be multiples of 32");
  t.fmt = fmt, t.rows = rows, t.cols = cols;
  t.q_row.reset(rows * cols);
  t.q_col.reset(rows * cols);
  t.s_row.reset(rows * cols / kMxBlock);
  t.s_col.reset(rows * cols / kMxBlock);
  t.d_row.resize(nbuf);
  t.d_col.resize(nbuf);
  for (int b = 0; b < nbuf; ++b) {
    t.d_row[b].reset(rows / nbuf * cols);
    t.d_col[b].reset(rows / nbuf * cols);
  }
}

void GroupedMlp::mx_quantize(MxTensor& t, const std::vector<const uint16_t*>& src, cudaStream_t s) {
  const int nbuf = static_cast<int>(src.size());
  MOENUM_CHECK(nbuf == static_cast<int>(t.d_row.size()), "mx_quantize: buffer count mismatch");
  const int64_t rb = t.rows / nbuf, n = rb * t.cols;
  for (int b = 0; b < nbuf; ++b) {
    // rowwise scales [rows, cols/32] and columnwise [rows/32, cols] both start at element offset/32
    uint8_t *qr = t.q_row.get() + b * n, *qc = t.q_col.get() + b * n;
    uint8_t *sr = t.s_row.get() + b * n / kMxBlock, *sc = t.s_col.get() + b * n / kMxBlock;
    launch_mx_quantize_bf16(src[b], rb, t.cols, t.fmt, opt_.mx.rounding, opt_.mx.inv_scale, qr, sr, qc, sc, s);
    launch_mx_dequantize_bf16(qr, sr, rb, t.cols, t.fmt, false, t.d_row[b].get(), mx_inexact_.get(), s);
    launch_mx_dequantize_bf16(qc, sc, rb, t.cols, t.fmt, true, t.d_col[b].get(), mx_inexact_.get(), s);
  }
}

void GroupedMlp::set_plan(const Routing& routing, const DispatchPlan& plan, cudaStream_t s) {
  FlatPlan f = flatten_plan(routing, plan, T_, E_, k_);
  MOENUM_CHECK(R_ == 0 || f.rows == R_, "set_plan: the row count changed (buffers are sized once)");
  row_token_.upload(f.row_token, s);
  row_expert_.upload(f.row_expert, s);
  row_prob_.upload(f.row_prob, s);
  crow_.upload(f.crow, s);
  cslot_.upload(f.cslot, s);
  counts_.upload(f.counts, s);
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));  // the host vectors die here
  if (R_ == 0 && f.rows > 0) {
    R_ = f.rows;
    xd_.reset(R_ * H_);
    h_.reset(R_ * 2 * F_);
    a_.reset(R_ * F_);
    o_.reset(R_ * H_);
    dyd_.reset(R_ * H_);
    da_.reset(R_ * F_);
    dh_.reset(R_ * 2 * F_);
    dxr_.reset(R_ * H_);
    dp_.reset(R_);
    if (opt_.mx.on) {
      mx_alloc(mx_x_, Fp8Format::E4M3, R_, H_, 1);
      mx_alloc(mx_a_, Fp8Format::E4M3, R_, F_, 1);
      mx_alloc(mx_dy_, opt_.mx.grad, R_, H_, 1);
      mx_alloc(mx_dh_, opt_.mx.grad, R_, 2 * F_, 1);
    }
  }
}

// One GEMM of layer.h's table on this layer's device buffers: its operands (for mxfp8 the dequantized
// operand in the table's direction, TE's usage), sizes and output.
GroupedGemmDesc GroupedMlp::desc(layer::Gemm gemm) const {
  using layer::Direction;
  using layer::Source;
  const layer::GemmDesc& gd = layer::gemm_desc(gemm);
  GroupedGemmDesc g;
  g.id = static_cast<int>(gemm);
  g.groups = static_cast<int>(E_);
  g.counts = counts_.get();
  g.offsets = offsets_.get();
  const auto cols = [&](Source s) { return s == Source::kA ? F_ : s == Source::kDh ? 2 * F_ : H_; };
  const auto rows_of = [&](const layer::OperandDesc& od) -> const uint16_t* {
    const MxTensor* mx = nullptr;
    const uint16_t* plain = nullptr;
    switch (od.source) {
      case Source::kX: mx = &mx_x_, plain = xd_.get(); break;
      case Source::kA: mx = &mx_a_, plain = a_.get(); break;
      case Source::kDy: mx = &mx_dy_, plain = dyd_.get(); break;
      default: mx = &mx_dh_, plain = dh_.get(); break;
    }
    if (!opt_.mx.on) return plain;
    return (od.direction == Direction::kRowwise ? mx->d_row : mx->d_col)[0].get();
  };
  const bool w1 = gd.b.source == Source::kW1;
  const size_t per = w1 ? 2 * F_ * H_ : H_ * F_;
  const auto weights_of = [&](const layer::OperandDesc& od) {
    const MxTensor& mx = w1 ? mx_w1_ : mx_w2_;
    const std::vector<DeviceBuffer<uint16_t>>& v =
        !opt_.mx.on ? (w1 ? w1_ : w2_) : od.direction == Direction::kRowwise ? mx.d_row : mx.d_col;
    std::vector<const uint16_t*> out(E_);
    for (int64_t e = 0; e < E_; ++e) out[e] = v.size() == 1 ? v[0].get() + e * per : v[e].get();
    return out;
  };
  switch (gd.kind) {
    case layer::GemmKind::kFprop:  // rows . W^T, W [n, k]
      g.kind = GemmKind::Fprop, g.n = w1 ? 2 * F_ : H_, g.k = cols(gd.a.source), g.rows = R_;
      g.a = rows_of(gd.a), g.b_expert = weights_of(gd.b);
      g.d_rows = gemm == layer::Gemm::kFc1Fprop ? h_.get() : o_.get();
      if (gemm == layer::Gemm::kFc1Fprop && opt_.fc1_bias_in_epilogue && opt_.bias)
        for (int64_t e = 0; e < E_; ++e) g.bias_expert.push_back(b1_.get() + e * 2 * F_);
      break;
    case layer::GemmKind::kDgrad:  // rows . W, W [k, n]
      g.kind = GemmKind::Dgrad, g.n = w1 ? H_ : F_, g.k = cols(gd.a.source), g.rows = R_;
      g.a = rows_of(gd.a), g.b_expert = weights_of(gd.b);
      g.d_rows = gemm == layer::Gemm::kFc1Dgrad ? dxr_.get() : da_.get();
      break;
    case layer::GemmKind::kWgrad: {  // A^T . B over each expert's rows
      g.kind = GemmKind::Wgrad, g.m = cols(gd.a.source), g.n = cols(gd.b.source);
      g.a = rows_of(gd.a), g.b_rows = rows_of(gd.b);
      const bool fc1 = gemm == layer::Gemm::kFc1Wgrad;
      const std::vector<DeviceBuffer<float>>& dw = fc1 ? dw1_ : dw2_;
      const size_t dper = fc1 ? 2 * F_ * H_ : H_ * F_;
      for (int64_t e = 0; e < E_; ++e) g.d_expert.push_back(dw.size() == 1 ? dw[0].get() + e * dper : dw[e].get());
      break;
    }
  }
  return g;
}

void GroupedMlp::poison_outputs(cudaStream_t s) {
  for (auto* b : {&y_, &dx_, &xd_, &h_, &a_, &o_, &dyd_, &da_, &dh_, &dxr_}) b->poison(s);
  for (auto* b : {&db1_, &db2_, &dprobs_, &dp_}) b->poison(s);
}

void GroupedMlp::forward(cudaStream_t s) {
  launch_counts_to_offsets(counts_.get(), offsets_.get(), static_cast<int>(E_), s);
  engine_->begin(counts_.get(), static_cast<int>(E_), s);
  auto ptrs = [](const std::vector<DeviceBuffer<uint16_t>>& v) {
    std::vector<const uint16_t*> p;
    for (auto& b : v) p.push_back(b.get());
    return p;
  };
  if (opt_.mx.on) {
    mx_inexact_.zero(s);
    mx_quantize(mx_w1_, ptrs(w1_), s);
    mx_quantize(mx_w2_, ptrs(w2_), s);
  }
  if (R_ > 0) {
    launch_gather_rows(x_.get(), row_token_.get(), R_, H_, xd_.get(), s);
    if (opt_.mx.on) mx_quantize(mx_x_, {xd_.get()}, s);
    engine_->run(desc(layer::Gemm::kFc1Fprop), s);
    launch_act_fwd(h_.get(), (opt_.fc1_bias_in_epilogue || !opt_.bias) ? nullptr : b1_.get(), row_expert_.get(), row_prob_.get(), R_,
                   F_, a_.get(), s);
    if (opt_.mx.on) mx_quantize(mx_a_, {a_.get()}, s);
    engine_->run(desc(layer::Gemm::kFc2Fprop), s);
  }
  launch_combine_fwd(o_.get(), opt_.bias ? b2_.get() : nullptr, row_expert_.get(), row_prob_.get(), crow_.get(), T_, k_, H_, y_.get(), s);
}

void GroupedMlp::backward(cudaStream_t s) {
  for (auto& b : dw1_) b.zero(s);
  for (auto& b : dw2_) b.zero(s);
  db1_.zero(s);
  db2_.zero(s);
  dprobs_.zero(s);
  if (R_ > 0) {
    launch_gather_rows(dy_.get(), row_token_.get(), R_, H_, dyd_.get(), s);
    if (opt_.mx.on) mx_quantize(mx_dy_, {dyd_.get()}, s);
    engine_->run(desc(layer::Gemm::kFc2Dgrad), s);
    engine_->run(desc(layer::Gemm::kFc2Wgrad), s);
    launch_act_bwd(da_.get(), h_.get(), dyd_.get(), opt_.bias ? b2_.get() : nullptr, row_expert_.get(), row_prob_.get(), R_, F_, H_,
                   dh_.get(), dp_.get(), s);
    if (opt_.mx.on) mx_quantize(mx_dh_, {dh_.get()}, s);
    engine_->run(desc(layer::Gemm::kFc1Dgrad), s);
    engine_->run(desc(layer::Gemm::kFc1Wgrad), s);
    if (opt_.bias)
      launch_bias_grads(dh_.get(), dyd_.get(), row_prob_.get(), offsets_.get(), static_cast<int>(E_), F_, H_,
                        db1_.get(), db2_.get(), s);
  }
  launch_combine_bwd(dxr_.get(), dp_.get(), crow_.get(), cslot_.get(), T_, k_, H_, dx_.get(), dprobs_.get(), s);
}

BackendResult GroupedMlp::download(bool intermediates, cudaStream_t s) const {
  MOENUM_CUDA_CHECK(cudaStreamSynchronize(s));
  BackendResult r;
  r.outputs["y"] = bf16_tensor(y_, {T_, H_}, s);
  r.outputs["dx"] = bf16_tensor(dx_, {T_, H_}, s);
  std::vector<const DeviceBuffer<float>*> p1, p2;
  for (auto& b : dw1_) p1.push_back(&b);
  for (auto& b : dw2_) p2.push_back(&b);
  r.outputs["dw1"] = fp32_tensor(p1, {E_, 2 * F_, H_}, s);
  r.outputs["dw2"] = fp32_tensor(p2, {E_, H_, F_}, s);
  if (opt_.bias) {
    r.outputs["db1"] = fp32_tensor({&db1_}, {E_, 2 * F_}, s);
    r.outputs["db2"] = fp32_tensor({&db2_}, {E_, H_}, s);
  }
  r.outputs["dprobs"] = fp32_tensor({&dprobs_}, {T_, k_}, s);
  if (intermediates && R_ > 0) {
    r.stages["h"] = bf16_tensor(h_, {R_, 2 * F_}, s);
    r.stages["a"] = bf16_tensor(a_, {R_, F_}, s);
    r.stages["o"] = bf16_tensor(o_, {R_, H_}, s);
    r.stages["da"] = bf16_tensor(da_, {R_, F_}, s);
    r.stages["dh"] = bf16_tensor(dh_, {R_, 2 * F_}, s);
    r.stages["dx_row"] = bf16_tensor(dxr_, {R_, H_}, s);
  }
  if (opt_.mx.on) {
    r.attrs["mx_bf16_inexact"] = std::to_string(mx_inexact_.download(s).at(0));
    if (intermediates) {
      // reference/mxfp8_policy.h: <gemm>.<A|B>.{codes,scales}, natural layouts, plain scales
      auto put = [&](const std::string& name, const MxTensor& t, bool col, std::vector<int64_t> shape,
                     std::vector<int64_t> sshape) {
        r.stages[name + ".codes"] = u8_tensor(col ? t.q_col : t.q_row, std::move(shape), fmt_name(t.fmt), s);
        r.stages[name + ".scales"] = u8_tensor(col ? t.s_col : t.s_row, std::move(sshape), "e8m0", s);
      };
      const int64_t N = R_, F2 = 2 * F_, H = H_, F = F_, E = E_;
      put("fc1_fprop.B", mx_w1_, false, {E, F2, H}, {E, F2, H / 32});
      put("fc2_fprop.B", mx_w2_, false, {E, H, F}, {E, H, F / 32});
      put("fc2_dgrad.B", mx_w2_, true, {E, H, F}, {E, H / 32, F});
      put("fc1_dgrad.B", mx_w1_, true, {E, F2, H}, {E, F2 / 32, H});
      if (N > 0) {
        put("fc1_fprop.A", mx_x_, false, {N, H}, {N, H / 32});
        put("fc2_fprop.A", mx_a_, false, {N, F}, {N, F / 32});
        put("fc2_dgrad.A", mx_dy_, false, {N, H}, {N, H / 32});
        put("fc1_dgrad.A", mx_dh_, false, {N, F2}, {N, F2 / 32});
        put("fc2_wgrad.A", mx_dy_, true, {N, H}, {N / 32, H});
        put("fc2_wgrad.B", mx_a_, true, {N, F}, {N / 32, F});
        put("fc1_wgrad.A", mx_dh_, true, {N, F2}, {N / 32, F2});
        put("fc1_wgrad.B", mx_x_, true, {N, H}, {N / 32, H});
      }
    }
  }
  return r;
}

}  // namespace moenum::gpu
