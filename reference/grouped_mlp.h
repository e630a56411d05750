// The grouped MoE MLP layer on the CPU, forward and backward (numerics.md §1), templated on a numeric
// policy: GoldenPolicy (fp64), Fp32Policy, Bf16Policy (numeric_policy.h), Mxfp8Policy
// (mxfp8_policy.h), and cpu.eigen's EigenGemmPolicy over any of them (eigen_gemm_policy.h).
//
// Work is split into (rank, local expert) segments of the dispatch plan, run in parallel with
// OpenMP; nothing a segment computes depends on another segment or on the thread count. The first
// exception thrown in a segment is rethrown on the caller's thread after the loop (first_error.h).
// The combines (y, dx) then sum each token's routed rows in ascending expert id order.
//
// Pad rows: a zero pad row (row_token -1) has x = 0 and dy = 0; a router pad row (a real token with
// slot -1) has its token's x and dy and p = 0. Both go through every GEMM of their segment (they
// matter for MXFP8 block scales) but, having a = 0 and dact = 0, add nothing to any gradient; only
// routed rows (slot >= 0) enter the combines and dprobs.
#pragma once
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "exact_gemm.h"
#include "moenum/dispatch_plan.h"
#include "moenum/error.h"
#include "moenum/problem.h"
#include "moenum/scenario.h"
#include "moenum/tensor.h"
#include "first_error.h"
#include "large_matrix.h"
#include "largest_first.h"
#include "numeric_policy.h"

namespace moenum::reference {

struct LayerOptions {
  bool bias = true;                    // model.bias: b1 and b2 used, db1/db2 produced
  // separate: h = round(round(h_gemm) + b1) in Real (TE grouped-tensor path). epilogue: b1 is one
  // more term of the exact FC1 sum, rounded once (cuBLASLt bias epilogue, idealised).
  std::string bias_mode = "separate";
  bool backward = true;                // false: y only (finite-difference tests)
  bool keep_stages = false;            // keep h, act, a, o, out, da, dh, dx_row
  // The oracles' GEMM device (execution.device, device_gemm.h): null = the CPU. The recipe runners
  // hand it to their policy; cpu.eigen's policies ignore it.
  DeviceGemm* gemm_device = nullptr;
};

inline LayerOptions layer_options(const Scenario& sc) {
  LayerOptions o;
  o.bias = sc.model.bias;
  o.bias_mode = sc.recipe.bias_mode;
  o.keep_stages = sc.output.intermediates;
  return o;
}

struct LayerResult {
  std::map<std::string, Tensor> outputs;  // y, dx, dw1, dw2, db1, db2 (bias only), dprobs
  // Per-row intermediates, all rows of all ranks concatenated in rank order (plan row order).
  std::map<std::string, Tensor> stages;
  std::array<GemmStats, kNumGemms> gemm_stats{};
  GemmStats reduction_stats;              // dprobs dot products, db1/db2 reductions
};

namespace detail {

// One (rank, local expert) segment: rows [begin, end) of its rank, rows [row0, row0 + end - begin)
// of all ranks' rows in plan order.
struct Segment {
  int64_t rank, local, expert, begin, end, row0;
};

// The per-row tensors of all ranks, rows in plan order, each segment writing its own rows; kept in
// the stages' dtypes, so that the stages are these very tensors. out and dx_row feed the combines.
struct RowTensors {
  Tensor out, dx_row;           // [N, H]
  Tensor h, act, a, o, da, dh;  // stages, when kept
};

// Rows [row0, row0 + rows) of t seen as a [*, cols] matrix, in fp64 (exact for every dtype).
inline Matrix tensor_rows(const Tensor& t, int64_t row0, int64_t rows, int64_t cols) {
  Matrix m = large_matrix(rows, cols);
  t.read(row0 * cols, rows * cols, m.data());
  return m;
}

inline Vector tensor_row(const Tensor& t, int64_t row, int64_t cols) {
  Vector v(cols);
  t.read(row * cols, cols, v.data());
  return v;
}

inline void check_plan(const Problem& prob, const DispatchPlan& plan, const LayerOptions& opt) {
  MOENUM_CHECK(opt.bias_mode == "separate" || opt.bias_mode == "epilogue",
               "bias_mode must be separate or epilogue, got '" + opt.bias_mode + "'");
  MOENUM_CHECK(plan.ep >= 1 && int64_t(plan.ranks.size()) == plan.ep, "plan: ranks.size() != ep");
  MOENUM_CHECK(plan.experts_per_rank * plan.ep == prob.E, "plan: experts_per_rank * ep != E");
  for (const auto& rp : plan.ranks) {
    const size_t n = rp.row_token.size();
    MOENUM_CHECK(rp.row_expert.size() == n && rp.row_slot.size() == n && rp.row_prob.size() == n,
                 "plan: row vectors of one rank differ in length");
    MOENUM_CHECK(int64_t(rp.segment_offset.size()) == plan.experts_per_rank + 1,
                 "plan: segment_offset must have experts_per_rank + 1 entries");
    MOENUM_CHECK(rp.segment_offset.front() == 0 && rp.segment_offset.back() == int64_t(n),
                 "plan: segment_offset must run from 0 to the number of rows");
    for (size_t i = 0; i < n; ++i) {
      MOENUM_CHECK(rp.row_token[i] >= -1 && rp.row_token[i] < prob.T, "plan: row_token out of range");
      MOENUM_CHECK(rp.row_slot[i] >= -1 && rp.row_slot[i] < prob.k, "plan: row_slot out of range");
      MOENUM_CHECK(rp.row_token[i] >= 0 || rp.row_slot[i] == -1, "plan: a zero pad row has a slot");
    }
  }
}

}  // namespace detail

template <class Policy>
LayerResult grouped_mlp(const Policy& pol, const Problem& prob, const DispatchPlan& plan,
                        const LayerOptions& opt) {
  using R = typename Policy::Real;
  detail::check_plan(prob, plan, opt);
  const int64_t T = prob.T, H = prob.H, F = prob.F, E = prob.E, k = prob.k;
  const int64_t F2 = 2 * F;
  const bool epilogue = opt.bias && opt.bias_mode == "epilogue";
  const char* act_dt = Policy::act_dtype;
  const char* grad_dt = Policy::grad_dtype;

  std::vector<detail::Segment> segs;
  std::vector<int64_t> rank_row0(plan.ranks.size() + 1, 0);
  for (int64_t r = 0; r < plan.ep; ++r) {
    const RankPlan& rp = plan.ranks[r];
    rank_row0[r + 1] = rank_row0[r] + int64_t(rp.row_token.size());
    if (!rp.simulated) continue;  // dispatch.ranks: its experts compute nothing, their gradients stay zero
    for (int64_t le = 0; le < plan.experts_per_rank; ++le) {
      const int64_t e = r * plan.experts_per_rank + le;
      const int64_t b = rp.segment_offset[le], en = rp.segment_offset[le + 1];
      for (int64_t i = b; i < en; ++i) MOENUM_CHECK(rp.row_expert[i] == e, "plan: row_expert disagrees with its segment");
      segs.push_back({r, le, e, b, en, rank_row0[r] + b});
    }
  }
  const int64_t N = rank_row0.back();
  detail::RowTensors rows;
  rows.out = Tensor({N, H}, act_dt);
  if (opt.backward) rows.dx_row = Tensor({N, H}, act_dt);
  if (opt.keep_stages) {
    rows.h = Tensor({N, F2}, act_dt);
    rows.act = Tensor({N, F}, grad_dt);
    rows.a = Tensor({N, F}, act_dt);
    rows.o = Tensor({N, H}, act_dt);
    if (opt.backward) {
      rows.da = Tensor({N, F}, act_dt);
      rows.dh = Tensor({N, F2}, act_dt);
    }
  }
  const std::span<R> out_rows = rows.out.values<R>();
  const std::span<R> dx_rows = opt.backward ? rows.dx_row.values<R>() : std::span<R>();
  std::vector<R> dp_rows(N, R(0));

  LayerResult res;
  Tensor dw1({E, F2, H}, grad_dt), dw2({E, H, F}, grad_dt), db1({E, F2}, grad_dt), db2({E, H}, grad_dt);
  std::vector<std::array<GemmStats, kNumGemms + 1>> seg_stats(segs.size());

  // decltype(auto): an identity policy's reference passes through (no copy); a quantizing one's
  // new matrix is returned by value. Either lives until the end of the GEMM call's full expression.
  const auto Q = [&pol](const Matrix& m, Gemm g, Operand op) -> decltype(auto) { return pol.quantize_operand(m, g, op); };

  // The segments with the most rows first (largest_first.h); each writes only its own rows and experts.
  std::vector<int64_t> rows_of(segs.size());
  for (size_t s = 0; s < segs.size(); ++s) rows_of[s] = segs[s].end - segs[s].begin;
  const std::vector<int64_t> order = largest_first(rows_of);
  FirstError first_error;
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t k = 0; k < int64_t(segs.size()); ++k) {
    const int64_t s = order[k];
    first_error.run([&] {
      const detail::Segment sg = segs[s];
      const RankPlan& rp = plan.ranks[sg.rank];
      auto& st = seg_stats[s];
      auto gs = [&st](Gemm g) -> GemmStats& { return st[static_cast<int>(g)]; };
      GemmStats& red = st[kNumGemms];
      const int64_t e = sg.expert, M = sg.end - sg.begin;

      // ---- gather: x rows of real tokens (router pad rows included), zeros for zero pad rows
      Matrix X = large_matrix(M, H);
      X.setZero();
      std::vector<double> p(M);
      for (int64_t i = 0; i < M; ++i) {
        const int64_t t = rp.row_token[sg.begin + i];
        if (t >= 0) prob.x.read(t * H, H, X.row(i).data());
        p[i] = double(rp.row_prob[sg.begin + i]);
      }
      const Matrix W1 = detail::tensor_rows(prob.w1, e * F2, F2, H);
      const Matrix W2 = detail::tensor_rows(prob.w2, e * H, H, F);
      const Vector b1 = detail::tensor_row(prob.b1, e, F2);
      const Vector b2 = detail::tensor_row(prob.b2, e, H);

      // ---- forward
      // FC1: h = x . w1^T (+ b1)
      Matrix Hm = pol.gemm(Q(X, Gemm::kFc1Fprop, Operand::kA), Q(W1, Gemm::kFc1Fprop, Operand::kB),
                           Gemm::kFc1Fprop, epilogue ? &b1 : nullptr, gs(Gemm::kFc1Fprop));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < F2; ++j) {
          R v = pol.round_act(R(Hm(i, j)));
          if (opt.bias && !epilogue) v = pol.round_act(layer::fc1_separate_bias(v, R(b1(j))));
          Hm(i, j) = v;
        }
      // act = silu(g) * l ; a = round(act * p)
      Matrix Act(M, F), A(M, F);
      for (int64_t i = 0; i < M; ++i) {
        const R pi = R(p[i]);
        for (int64_t j = 0; j < F; ++j) {
          const R g = R(Hm(i, j)), l = R(Hm(i, F + j));
          const R act = layer::swiglu_fwd(g, l);
          Act(i, j) = act;
          A(i, j) = pol.round_act(layer::probs_scale(act, pi));
        }
      }
      // FC2: o = a . w2^T ; out = round(o + b2 * p)
      Matrix O = pol.gemm(Q(A, Gemm::kFc2Fprop, Operand::kA), Q(W2, Gemm::kFc2Fprop, Operand::kB),
                          Gemm::kFc2Fprop, nullptr, gs(Gemm::kFc2Fprop));
      for (int64_t i = 0; i < M; ++i) {
        const R pi = R(p[i]);
        for (int64_t j = 0; j < H; ++j) {
          const R o = pol.round_act(R(O(i, j)));
          O(i, j) = o;
          out_rows[(sg.row0 + i) * H + j] = opt.bias ? pol.round_act(layer::fc2_bias(o, R(b2(j)), pi)) : o;
        }
      }
      if (opt.keep_stages) {
        rows.h.write(sg.row0 * F2, M * F2, Hm.data());
        rows.act.write(sg.row0 * F, M * F, Act.data());
        rows.a.write(sg.row0 * F, M * F, A.data());
        rows.o.write(sg.row0 * H, M * H, O.data());
      }
      if (!opt.backward) return;  // (inside the per-segment lambda: next segment)

      // ---- backward. Every row of a real token gets its token's dy (the combine has no probs).
      Matrix DY = large_matrix(M, H);
      DY.setZero();
      for (int64_t i = 0; i < M; ++i) {
        const int64_t t = rp.row_token[sg.begin + i];
        if (t >= 0) prob.dy.read(t * H, H, DY.row(i).data());
      }
      // db2 = sum_i p_i dy_i
      if (opt.bias)
        for (int64_t j = 0; j < H; ++j) db2.values<R>()[e * H + j] = pol.dot(p.data(), DY.data() + j, M, 1, H, red);
      // FC2 dgrad: da = dy . w2
      Matrix DA = pol.gemm(Q(DY, Gemm::kFc2Dgrad, Operand::kA), Q(transposed(W2), Gemm::kFc2Dgrad, Operand::kB),
                           Gemm::kFc2Dgrad, nullptr, gs(Gemm::kFc2Dgrad));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < F; ++j) DA(i, j) = pol.round_act(R(DA(i, j)));
      // FC2 wgrad: dw2 = dy^T . a  (accumulator precision, no further rounding)
      {
        const Matrix DW2 = pol.gemm(Q(transposed(DY), Gemm::kFc2Wgrad, Operand::kA),
                                    Q(transposed(A), Gemm::kFc2Wgrad, Operand::kB), Gemm::kFc2Wgrad, nullptr,
                                    gs(Gemm::kFc2Wgrad));
        dw2.write(e * H * F, H * F, DW2.data());
      }
      // dp = dot(dy, b2) + dot(da, act): each dot rounded once, then added in Real
      for (int64_t i = 0; i < M; ++i) {
        R dp = pol.dot(DA.data() + i * F, Act.data() + i * F, F, 1, 1, red);
        if (opt.bias) dp = pol.dot(DY.data() + i * H, b2.data(), H, 1, 1, red) + dp;
        dp_rows[sg.row0 + i] = dp;
      }
      // dact = da * p ; dg = dact * l * silu'(g) ; dl = dact * silu(g) ; dh = round([dg, dl])
      Matrix DH(M, F2);
      for (int64_t i = 0; i < M; ++i) {
        const R pi = R(p[i]);
        for (int64_t j = 0; j < F; ++j) {
          const R g = R(Hm(i, j)), l = R(Hm(i, F + j));
          const layer::SwigluGrad<R> d = layer::swiglu_bwd(R(DA(i, j)), g, l, pi);
          DH(i, j) = pol.round_act(d.dg);
          DH(i, F + j) = pol.round_act(d.dl);
        }
      }
      // FC1 dgrad: dx_row = dh . w1
      {
        const Matrix DXR = pol.gemm(Q(DH, Gemm::kFc1Dgrad, Operand::kA), Q(transposed(W1), Gemm::kFc1Dgrad, Operand::kB),
                                    Gemm::kFc1Dgrad, nullptr, gs(Gemm::kFc1Dgrad));
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < H; ++j) dx_rows[(sg.row0 + i) * H + j] = pol.round_act(R(DXR(i, j)));
      }
      // FC1 wgrad: dw1 = dh^T . x
      {
        const Matrix DW1 = pol.gemm(Q(transposed(DH), Gemm::kFc1Wgrad, Operand::kA),
                                    Q(transposed(X), Gemm::kFc1Wgrad, Operand::kB), Gemm::kFc1Wgrad, nullptr,
                                    gs(Gemm::kFc1Wgrad));
        dw1.write(e * F2 * H, F2 * H, DW1.data());
      }
      // db1 = sum of dh rows
      if (opt.bias) {
        const std::vector<double> ones(M, 1.0);
        for (int64_t j = 0; j < F2; ++j) db1.values<R>()[e * F2 + j] = pol.dot(ones.data(), DH.data() + j, M, 1, F2, red);
      }
      if (opt.keep_stages) {
        rows.da.write(sg.row0 * F, M * F, DA.data());
        rows.dh.write(sg.row0 * F2, M * F2, DH.data());
      }
    });
  }
  first_error.rethrow();

  for (const auto& st : seg_stats) {
    for (int g = 0; g < kNumGemms; ++g) res.gemm_stats[g] += st[g];
    res.reduction_stats += st[kNumGemms];
  }

  // ---- combine: each token's routed rows (slot >= 0), ascending expert id, summed in Real
  struct Entry {
    int64_t token, expert, row, slot;  // row: in plan order over all ranks
  };
  std::vector<Entry> entries;
  for (int64_t r = 0; r < plan.ep; ++r) {
    const RankPlan& rp = plan.ranks[r];
    for (int64_t i = 0; i < int64_t(rp.row_token.size()); ++i)
      if (rp.row_slot[i] >= 0) entries.push_back({rp.row_token[i], rp.row_expert[i], rank_row0[r] + i, rp.row_slot[i]});
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.token != b.token ? a.token < b.token : a.expert < b.expert;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    MOENUM_CHECK(entries[i].token != entries[i - 1].token || entries[i].expert != entries[i - 1].expert,
                 "plan: a (token, expert) pair is routed twice");
  std::vector<size_t> first(T + 1, entries.size());
  for (size_t i = entries.size(); i-- > 0;) first[entries[i].token] = i;
  for (int64_t t = T - 1; t >= 0; --t) first[t] = std::min(first[t], first[t + 1]);

  const auto combine = [&](std::span<const R> row_values, const char* name) {
    Tensor out({T, H}, act_dt);
    const std::span<R> o = out.values<R>();
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < T; ++t) {
      std::vector<R> acc(H, R(0));
      for (size_t n = first[t]; n < first[t + 1]; ++n) {
        const R* row = row_values.data() + entries[n].row * H;
        for (int64_t j = 0; j < H; ++j) acc[j] += row[j];
      }
      for (int64_t j = 0; j < H; ++j) o[t * H + j] = pol.round_act(acc[j]);
    }
    res.outputs[name] = std::move(out);
  };
  combine(out_rows, "y");

  if (opt.backward) {
    combine(dx_rows, "dx");
    Tensor dprobs({T, k}, grad_dt);
    const std::span<R> dprobs_v = dprobs.values<R>();
    for (const Entry& en : entries) dprobs_v[en.token * k + en.slot] = dp_rows[en.row];
    res.outputs["dprobs"] = std::move(dprobs);
    res.outputs["dw1"] = std::move(dw1);
    res.outputs["dw2"] = std::move(dw2);
    if (opt.bias) {
      res.outputs["db1"] = std::move(db1);
      res.outputs["db2"] = std::move(db2);
    }
  }

  if (opt.keep_stages) {
    res.stages["h"] = std::move(rows.h);
    res.stages["act"] = std::move(rows.act);
    res.stages["a"] = std::move(rows.a);
    res.stages["o"] = std::move(rows.o);
    res.stages["out"] = std::move(rows.out);
    if (opt.backward) {
      res.stages["da"] = std::move(rows.da);
      res.stages["dh"] = std::move(rows.dh);
      res.stages["dx_row"] = std::move(rows.dx_row);
    }
  }
  return res;
}

}  // namespace moenum::reference
