// The oracles' GEMM device seam (reference/device_gemm.h) without a GPU: an engine that sums in
// another order (k descending, fused multiply-adds) stands in for cuBLAS. The reference certified
// from its products must be bitwise the CPU reference (a correctly rounded value is unique); golden
// agrees to rounding. tests/gpu/test_gpu_oracles.cpp runs the same comparisons with the GPU engine.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <random>

#include "device_gemm.h"
#include "grouped_mlp.h"
#include "moenum/bf16.h"
#include "numeric_policy.h"
#include "recipes.h"
#include "test_util.h"

namespace moenum::reference {
namespace {

// C and S element by element, k from K-1 down to 0 with fma: neither Eigen's order nor its roundings.
class ReversedOrderGemm final : public DeviceGemm {
 public:
  void gemm_nt(const Matrix& A, const Matrix& B, Matrix& C, Matrix* S) override {
    const int64_t M = A.rows(), N = B.rows(), K = A.cols();
    C.resize(M, N);
    if (S) S->resize(M, N);
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double c = 0.0, s = 0.0;
        for (int64_t k = K - 1; k >= 0; --k) {
          c = std::fma(A(i, k), B(j, k), c);
          s = std::fma(std::fabs(A(i, k)), std::fabs(B(j, k)), s);
        }
        C(i, j) = c;
        if (S) (*S)(i, j) = s;
      }
    calls_ += 1;
  }
  std::string description() const override { return "reversed-order test engine"; }
  int64_t calls() const { return calls_; }

 private:
  std::atomic<int64_t> calls_{0};
};

// bf16 values with few significant bits (exact fp32 ties are frequent) and cancelling rows.
Matrix tie_prone(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> mant(-8, 8), ex(-3, 3);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = std::ldexp(double(mant(gen)), ex(gen));
  return m;
}

TEST(DeviceGemm, CertifiedProductsOfAnotherOrderAreBitwiseTheCpuGemm) {
  ReversedOrderGemm engine;
  for (int64_t K : {1, 31, 256, 2000}) {
    const Matrix A = tie_prone(13, K, 3 + uint32_t(K)), B = tie_prone(17, K, 5 + uint32_t(K));
    Vector bias(17);
    for (int64_t j = 0; j < 17; ++j) bias(j) = std::ldexp(double(j % 5) - 2.0, -2);
    for (const Vector* b : {static_cast<const Vector*>(nullptr), static_cast<const Vector*>(&bias)}) {
      GemmStats cpu_stats, dev_stats;
      const Matrix cpu = gemm_nt_rn_f32(A, B, b, &cpu_stats);
      Matrix C, S;
      engine.gemm_nt(A, B, C, &S);
      const Matrix dev = certify_gemm_nt(A, B, b, std::move(C), std::move(S), &dev_stats);
      ASSERT_EQ(cpu.rows(), dev.rows());
      EXPECT_EQ(0, std::memcmp(cpu.data(), dev.data(), sizeof(double) * size_t(cpu.size()))) << "K " << K;
      EXPECT_EQ(cpu_stats.outputs, dev_stats.outputs);
    }
  }
}

TEST(DeviceGemm, AnOutputNextToAnFp32MidpointIsSummedExactlyOnEitherEngine) {
  // 1 + 2^-24 + 2^-70: fp64 loses the last term in either order and lands on the fp32 midpoint
  // 1 + 2^-24; only the exact sum rounds it up, to 1 + 2^-23.
  Matrix A(1, 3), B(1, 3);
  A << 1.0, 0x1p-24, 0x1p-70;
  B << 1.0, 1.0, 1.0;
  ReversedOrderGemm engine;
  Matrix C, S;
  engine.gemm_nt(A, B, C, &S);
  GemmStats st;
  const Matrix dev = certify_gemm_nt(A, B, nullptr, std::move(C), std::move(S), &st);
  EXPECT_EQ(dev(0, 0), 1.0 + 0x1p-23);
  EXPECT_EQ(gemm_nt_rn_f32(A, B)(0, 0), 1.0 + 0x1p-23);
  EXPECT_EQ(st.exact_path, 1);
}

Scenario layer_scenario(const std::string& recipe, bool special) {
  Scenario sc;
  sc.name = "device-gemm-test";
  sc.seed = 23;
  sc.tokens = 96;
  sc.model.experts = 4;
  sc.model.hidden = 64;
  sc.model.ffn = 64;
  sc.model.topk = 2;
  sc.dispatch.ep = 2;
  sc.dispatch.padding = "module";
  sc.dispatch.align = 32;
  sc.routing.skew.kind = "counts";
  sc.routing.skew.counts = {0, 1, 95, 96};  // an empty expert and a single-token one
  sc.recipe.name = recipe;
  sc.output.intermediates = true;
  if (special) sc.inputs["x"].regime = "special";
  return sc;
}

class DeviceGemmLayer : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(DeviceGemmLayer, ReferenceIsBitwiseAndGoldenAgrees) {
  const auto [recipe, special] = GetParam();
  const moenum::testing::Prepared p = moenum::testing::prepare(layer_scenario(recipe, special));
  ReversedOrderGemm engine;
  LayerOptions cpu_opt = layer_options(p.sc), dev_opt = cpu_opt;
  dev_opt.gemm_device = &engine;
  const RecipeRunner& run = recipe_registry().at(recipe);
  const LayerResult cpu = run(p.sc, p.prob, p.plan, cpu_opt);
  const LayerResult dev = run(p.sc, p.prob, p.plan, dev_opt);
  EXPECT_GT(engine.calls(), 0);
  ASSERT_EQ(cpu.outputs.size(), dev.outputs.size());
  for (const auto& [name, t] : cpu.outputs) EXPECT_TRUE(moenum::testing::same_values(t, dev.outputs.at(name))) << name;
  for (const auto& [name, t] : cpu.stages) EXPECT_TRUE(moenum::testing::same_values(t, dev.stages.at(name))) << name;

  GoldenPolicy on_device;
  on_device.device = &engine;
  const LayerResult g_cpu = grouped_mlp(GoldenPolicy{}, p.prob, p.plan, cpu_opt);
  const LayerResult g_dev = grouped_mlp(on_device, p.prob, p.plan, cpu_opt);
  for (const auto& [name, t] : g_cpu.outputs) {
    if (special) continue;  // NaN and inf: the rule above; finite values in rel_fro
    EXPECT_LE(moenum::testing::rel_fro(g_dev.outputs.at(name), t), 1e-12) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, DeviceGemmLayer,
                         ::testing::Combine(::testing::Values("fp32", "bf16", "mxfp8"), ::testing::Bool()),
                         [](const auto& info) {
                           return std::get<0>(info.param) + (std::get<1>(info.param) ? "_special" : "_normal");
                         });

TEST(ExecutionDevice, ResolvesAutoCpuAndGpu) {
  EXPECT_TRUE(resolve_execution_device("cpu").ok);
  EXPECT_EQ(resolve_execution_device("cpu").device, ExecutionDevice::cpu);
  const ExecutionChoice gpu = resolve_execution_device("gpu"), aut = resolve_execution_device("auto");
  EXPECT_TRUE(aut.ok);
  // auto is the GPU exactly when gpu can be honoured here
  EXPECT_EQ(aut.device, gpu.ok ? ExecutionDevice::gpu : ExecutionDevice::cpu);
  if (!gpu.ok) EXPECT_EQ(gpu.reason.rfind("execution.device: gpu, but ", 0), 0u) << gpu.reason;
  EXPECT_FALSE(resolve_execution_device("tpu").ok);
  EXPECT_THROW(oracle_device("tpu"), InternalError);
}

TEST(ExecutionDevice, OraclesRecordTheirDevice) {
  Scenario sc = layer_scenario("bf16", false);
  sc.execution.device = "cpu";
  const moenum::testing::Prepared p = moenum::testing::prepare(sc);
  for (const char* name : {"golden", "reference"}) {
    const BackendResult r = moenum::testing::run_backend(name, p);
    EXPECT_EQ(r.attrs.at("execution_device"), "cpu") << name;
    EXPECT_EQ(r.attrs.at("device"), "cpu") << name;
  }
}

}  // namespace
}  // namespace moenum::reference
