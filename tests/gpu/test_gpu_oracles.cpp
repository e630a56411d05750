// golden and reference with their fp64 GEMMs on the GPU (execution.device: gpu, core/gpu/oracle/):
// the cuBLAS DGEMM products against the CPU's, and whole layers against the CPU oracles: the reference
// bitwise (NaN equals NaN), golden to 1e-12 relative. Skipped (never passed) without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "device_gemm.h"
#include "gpu_test_util.h"
#include "oracle/cublas_fp64_gemm.h"

namespace moenum::gputest {
namespace {

using reference::Matrix;

Matrix random_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> nd(0.0, 1.0);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = double(float(nd(gen)));  // fp32 values, as the recipes'
  return m;
}

double max_rel(const Matrix& got, const Matrix& want) {
  const double scale = want.cwiseAbs().maxCoeff();
  return scale > 0 ? (got - want).cwiseAbs().maxCoeff() / scale : (got - want).cwiseAbs().maxCoeff();
}

TEST(GpuOracleGemm, ProductsAgreeWithTheCpuAndCertifyToTheCpuReference) {
  MOENUM_REQUIRE_GPU();
  // chunk_bytes small enough that A is streamed in several row chunks
  gpu::CublasFp64Gemm engine(2, size_t{1} << 20);
  for (auto [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {37, 29, 300}, {300, 257, 2048}, {5, 7, 0}}) {
    const Matrix A = random_matrix(M, K, uint32_t(M + K)), B = random_matrix(N, K, uint32_t(N + 3 * K));
    Matrix C, S;
    engine.gemm_nt(A, B, C, &S);
    const Matrix C_cpu = A * B.transpose(), S_cpu = A.cwiseAbs() * B.cwiseAbs().transpose();
    ASSERT_EQ(C.rows(), M);
    ASSERT_EQ(C.cols(), N);
    if (K == 0) {
      EXPECT_EQ(C.cwiseAbs().maxCoeff(), 0.0);
      continue;
    }
    EXPECT_LE(max_rel(C, C_cpu), 1e-12) << M << "x" << N << "x" << K;
    EXPECT_LE(max_rel(S, S_cpu), 1e-13) << M << "x" << N << "x" << K;
    const Matrix R = reference::certify_gemm_nt(A, B, nullptr, C, S);
    const Matrix R_cpu = reference::gemm_nt_rn_f32(A, B);
    EXPECT_EQ(0, std::memcmp(R.data(), R_cpu.data(), sizeof(double) * size_t(R.size())));
  }
}

struct OracleCase {
  std::string name, recipe;
  ScenarioSpec spec;
};

class GpuOracleLayer : public ::testing::TestWithParam<OracleCase> {};

TEST_P(GpuOracleLayer, ReferenceBitwiseAndGoldenWithin1e12) {
  MOENUM_REQUIRE_GPU();
  Scenario sc = make_scenario(GetParam().spec);
  sc.recipe.name = GetParam().recipe;
  const moenum::testing::Prepared p = moenum::testing::prepare(sc);
  moenum::testing::Prepared on_gpu = p;
  on_gpu.sc.execution.device = "gpu";
  moenum::testing::Prepared on_cpu = p;
  on_cpu.sc.execution.device = "cpu";
  for (const char* oracle : {"reference", "golden"}) {
    const BackendResult cpu = moenum::testing::run_backend(oracle, on_cpu);
    const BackendResult gpu = moenum::testing::run_backend(oracle, on_gpu);
    EXPECT_EQ(cpu.attrs.at("execution_device"), "cpu");
    EXPECT_EQ(gpu.attrs.at("execution_device"), "gpu");
    EXPECT_NE(gpu.attrs.at("device"), "cpu");
    ASSERT_EQ(cpu.outputs.size(), gpu.outputs.size());
    for (const auto& [name, t] : cpu.outputs) {
      if (std::string(oracle) == "reference")
        EXPECT_TRUE(moenum::testing::same_values(gpu.outputs.at(name), t)) << oracle << " " << name;
      else
        EXPECT_LE(moenum::testing::rel_fro(gpu.outputs.at(name), t), 1e-12) << oracle << " " << name;
    }
    if (std::string(oracle) == "reference")
      for (const auto& [name, t] : cpu.stages) EXPECT_TRUE(moenum::testing::same_values(gpu.stages.at(name), t)) << name;
  }
}

std::vector<OracleCase> oracle_cases() {
  ScenarioSpec edge;  // an empty expert, a single-token one, EP 2, zero pad rows
  edge.E = 4, edge.H = 64, edge.F = 64, edge.T = 96, edge.ep = 2, edge.padding = "module", edge.align = 32;
  edge.counts = {0, 1, 95, 96};
  ScenarioSpec wide;  // K large enough that fp64 rounds in every output
  wide.E = 4, wide.H = 1024, wide.F = 512, wide.T = 512, wide.padding = "hybridep", wide.align = 32;
  wide.skew = "zipf", wide.zipf_s = 1.2;
  return {{"fp32_edge", "fp32", edge}, {"bf16_edge", "bf16", edge}, {"mxfp8_edge", "mxfp8", edge},
          {"bf16_wide", "bf16", wide}, {"mxfp8_wide", "mxfp8", wide}};
}

INSTANTIATE_TEST_SUITE_P(Recipes, GpuOracleLayer, ::testing::ValuesIn(oracle_cases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace moenum::gputest
