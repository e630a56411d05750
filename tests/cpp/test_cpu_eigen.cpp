// cpu.eigen (reference/cpu_eigen_backend.cpp, eigen_gemm_policy.h) and the stage recomputations of
// reference/stage_ops.h: Eigen fp32 GEMMs within the per-element bound of numerics.md §7 of the exact
// reference GEMM, elementwise stages bit-identical to the reference's rules, and the stage functions
// reproducing the reference backend's own stages bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "eigen_gemm_policy.h"
#include "exact_gemm.h"
#include "moenum/backend.h"
#include "moenum/dispatch_plan.h"
#include "moenum/error.h"
#include "moenum/problem.h"
#include "moenum/routing.h"
#include "bounds.h"
#include "stage_ops.h"
#include "test_util.h"

using namespace moenum;
using namespace moenum::reference;
using moenum::testing::Prepared;
using moenum::testing::run_backend;

namespace {

Matrix random_bf16(int64_t rows, int64_t cols, uint32_t seed, double scale = 1.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = round_bf16(float(scale) * nd(gen));
  return m;
}

Prepared prepare(const std::string& recipe) {
  Scenario sc;
  sc.name = "cpu-eigen-test";
  sc.seed = 11;
  sc.tokens = 64;
  sc.model.experts = 4;
  sc.model.hidden = 64;
  sc.model.ffn = 32;
  sc.model.topk = 2;
  sc.dispatch.ep = 2;
  sc.dispatch.padding = "module";
  sc.dispatch.align = 32;
  sc.recipe.name = recipe;
  sc.output.intermediates = true;
  return moenum::testing::prepare(std::move(sc));
}

}  // namespace

TEST(CpuEigen, GemmWithinTheBoundOfTheExactGemm) {
  for (int64_t K : {7, 64, 1000}) {
    const Matrix A = random_bf16(9, K, 1 + uint32_t(K)), B = random_bf16(11, K, 2 + uint32_t(K));
    const Matrix C = eigen_gemm_nt_f32(A, B, nullptr);
    const Matrix R = gemm_nt_rn_f32(A, B);
    const Matrix S = abs_product_nt(A, B);
    int64_t differ = 0;
    for (int64_t i = 0; i < C.size(); ++i) {
      const verify::Interval iv = verify::accumulator_interval(R.data()[i], S.data()[i], K);
      EXPECT_GE(C.data()[i], iv.lo) << "K=" << K << " element " << i;
      EXPECT_LE(C.data()[i], iv.hi) << "K=" << K << " element " << i;
      EXPECT_EQ(double(float(C.data()[i])), C.data()[i]) << "an fp32 value";
      differ += C.data()[i] != R.data()[i];
    }
    if (K == 1000) EXPECT_GT(differ, 0) << "Eigen's fp32 order should differ from the exact sum somewhere";
  }
}

TEST(CpuEigen, EpilogueBiasAddedInFp32AfterTheProduct) {
  const Matrix A = random_bf16(3, 40, 5), B = random_bf16(4, 40, 6);
  const Vector bias = random_bf16(4, 1, 7).col(0);
  const Matrix C0 = eigen_gemm_nt_f32(A, B, nullptr), C = eigen_gemm_nt_f32(A, B, &bias);
  for (int64_t i = 0; i < C.rows(); ++i)
    for (int64_t j = 0; j < C.cols(); ++j) EXPECT_EQ(C(i, j), double(float(C0(i, j)) + float(bias(j))));
}

TEST(CpuEigen, SequentialFp32Dot) {
  const double a[] = {1.0, 0x1p-24, 0x1p-24}, b[] = {1.0, 1.0, 1.0};
  EXPECT_EQ(dot_seq_f32(a, b, 3, 1, 1), 1.0f);            // each tiny term is lost in turn
  EXPECT_EQ(dot_rn_f32(a, b, 3), 1.0f + 0x1p-23f);        // the exact sum keeps them
}

TEST(CpuEigen, RegisteredWithTheRecipesOfTheReference) {
  for (const char* recipe : {"fp32", "bf16", "mxfp8"}) {
    Scenario sc;
    sc.recipe.name = recipe;
    EXPECT_TRUE(make_backend("cpu.eigen")->available(sc).ok) << recipe;
  }
  Scenario sc;
  sc.recipe.name = "fp8_block";
  const Availability av = make_backend("cpu.eigen")->available(sc);
  EXPECT_FALSE(av.ok);
  EXPECT_EQ(av.disposition, Disposition::not_supported);
}

TEST(CpuEigen, SameStagesAsTheReferenceElementwiseBitExactGemmsWithinBound) {
  for (const char* recipe : {"fp32", "bf16"}) {
    const Prepared r = prepare(recipe);
    const BackendResult ref = run_backend("reference", r), eig = run_backend("cpu.eigen", r);
    for (const auto& [name, t] : ref.stages) {
      ASSERT_TRUE(eig.stages.count(name)) << name;
      EXPECT_EQ(eig.stages.at(name).shape, t.shape) << name;
      EXPECT_EQ(eig.stages.at(name).dtype, t.dtype) << name;
    }
    const stage_ops::Round rnd = stage_ops::parse_round(ref.stages.at("h").dtype);
    // teacher forcing on cpu.eigen's own h: act and a bit-exact
    const Tensor& h = eig.stages.at("h");
    const int64_t R = h.shape[0], F2 = h.shape[1], F = F2 / 2;
    Vector p(R);
    int64_t at = 0;
    for (const auto& rp : r.plan.ranks)
      for (float v : rp.row_prob) p(at++) = v;
    Matrix H(R, F2);
    h.read(0, R * F2, H.data());
    const auto fwd = stage_ops::act_forward(H, p, rnd);
    const Tensor& a = eig.stages.at("a");
    for (int64_t i = 0; i < R * F; ++i) ASSERT_EQ(a.get(i), fwd.a.data()[i]) << recipe << " a[" << i << "]";
    // dw2 of cpu.eigen within the bound of the exact GEMM on its own operands
    const Tensor& dw2 = eig.outputs.at("dw2");
    const int64_t Hd = r.prob.H;
    int64_t row0 = 0, differ = 0;
    for (int64_t e = 0; e < r.prob.E; ++e) {
      int64_t rows = 0;
      for (const auto& rp : r.plan.ranks)
        for (size_t i = 0; i < rp.row_expert.size(); ++i) rows += rp.row_expert[i] == e;
      Matrix DYt(Hd, rows), At(F, rows);
      int64_t global = 0, c = 0;
      for (const auto& rp : r.plan.ranks)
        for (size_t i = 0; i < rp.row_expert.size(); ++i, ++global) {
          if (rp.row_expert[i] != e) continue;
          const int64_t tok = rp.row_token[i];
          for (int64_t j = 0; j < Hd; ++j) DYt(j, c) = tok >= 0 ? r.prob.dy.get(tok * Hd + j) : 0.0;
          for (int64_t j = 0; j < F; ++j) At(j, c) = a.get(global * F + j);
          ++c;
        }
      const stage_ops::GemmRef g = stage_ops::exact_gemm_ref(DYt, At, nullptr);
      for (int64_t i = 0; i < Hd * F; ++i) {
        const double v = dw2.get(e * Hd * F + i), c32 = g.c32.data()[i];
        const verify::Interval iv = verify::accumulator_interval(c32, g.absprod.data()[i], rows);
        EXPECT_TRUE(v >= iv.lo && v <= iv.hi) << recipe << " dw2[" << e << "][" << i << "]";
        differ += v != c32;
      }
      row0 += rows;
    }
    EXPECT_EQ(row0, R);
    EXPECT_GT(differ, 0) << recipe << ": cpu.eigen should not be bit-identical to the exact reference in wgrad";
  }
}

TEST(StageOps, ReproduceTheReferenceStagesBitForBit) {
  const Prepared r = prepare("bf16");
  const BackendResult ref = run_backend("reference", r);
  const Tensor &h = ref.stages.at("h"), &a = ref.stages.at("a"), &da = ref.stages.at("da"),
               &dh = ref.stages.at("dh"), &o = ref.stages.at("o"), &out = ref.stages.at("out");
  const int64_t R = h.shape[0], F2 = h.shape[1], Hd = o.shape[1];
  Vector p(R);
  Matrix b2rows(R, Hd);
  int64_t at = 0;
  for (const auto& rp : r.plan.ranks)
    for (size_t i = 0; i < rp.row_prob.size(); ++i, ++at) {
      p(at) = rp.row_prob[i];
      for (int64_t j = 0; j < Hd; ++j) b2rows(at, j) = r.prob.b2.get(rp.row_expert[i] * Hd + j);
    }
  auto M = [](const Tensor& t) {
    Matrix m(t.shape[0], t.shape[1]);
    t.read(0, t.size(), m.data());
    return m;
  };
  const auto fwd = stage_ops::act_forward(M(h), p, stage_ops::Round::kBf16);
  EXPECT_EQ(fwd.a, M(a));
  EXPECT_EQ(fwd.act, M(ref.stages.at("act")));
  EXPECT_EQ(stage_ops::act_backward(M(da), M(h), p, stage_ops::Round::kBf16).out, M(dh));
  EXPECT_EQ(stage_ops::fc2_bias(M(o), &b2rows, p, stage_ops::Round::kBf16).out, M(out));
  // the combine of `out` over each token's routed rows, ascending expert id, is y
  stage_ops::IndexMatrix index = stage_ops::IndexMatrix::Constant(r.prob.T, r.prob.k, -1);
  std::vector<int> fill(r.prob.T, 0);
  std::vector<std::array<int64_t, 3>> routed;  // token, expert, row
  at = 0;
  for (const auto& rp : r.plan.ranks)
    for (size_t i = 0; i < rp.row_slot.size(); ++i, ++at)
      if (rp.row_slot[i] >= 0) routed.push_back({rp.row_token[i], rp.row_expert[i], at});
  std::sort(routed.begin(), routed.end());
  for (const auto& [t, e, row] : routed) index(t, fill[t]++) = row;
  const Matrix y = stage_ops::combine(M(out), index, stage_ops::Round::kBf16).out;
  EXPECT_EQ(y, M(ref.outputs.at("y")));
  (void)F2;
}

TEST(StageOps, ExactGemmRefCertifiesExactSums) {
  Matrix A(1, 3), B(2, 3);
  A << 1.0, 0x1p-30, 3.0;
  B << 1.0, 1.0, -1.0, 0.5, 0.5, 0.5;
  const stage_ops::GemmRef g = stage_ops::exact_gemm_ref(A, B, nullptr);
  EXPECT_EQ(g.c64(0, 0), 1.0 + 0x1p-30 - 3.0);
  EXPECT_EQ(g.c32(0, 0), double(float(1.0 + 0x1p-30 - 3.0)));
  EXPECT_EQ(g.absprod(0, 0), 4.0 + 0x1p-30);
  EXPECT_EQ(g.c64(0, 1), 2.0 + 0x1p-31);
  Vector bias(2);
  bias << 1.0, -1.0;
  const stage_ops::GemmRef gb = stage_ops::exact_gemm_ref(A, B, &bias);
  EXPECT_TRUE(std::isnan(gb.c64(0, 0)));  // not certified with a bias
  EXPECT_EQ(gb.absprod(0, 1), 2.0 + 0x1p-31 + 1.0);
  EXPECT_THROW(stage_ops::parse_round("e4m3"), ConfigError);
}
