// Throughput of the reference GEMM (each output the correctly rounded fp32 value of the exact sum)
// next to Eigen's own fp64 GEMM on the same operands, measured in one run. bf16-valued operands, as
// the bf16 recipe feeds them. Prints a Markdown table; `--append FILE` adds it to bench/RESULTS.md.
#include <Eigen/Dense>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "exact_gemm.h"
#include "moenum/bf16.h"

using moenum::reference::Matrix;

namespace {

Matrix random_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  Matrix m(rows, cols);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = moenum::round_bf16(dist(gen));
  return m;
}

template <class F>
double median_seconds(F&& f, int reps) {
  std::vector<double> t;
  f();  // warm-up
  for (int r = 0; r < reps; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The outputs the fp64 bound leaves open, summed again one thread: the compensated certificate
// against the exact accumulator, per product, at DeepSeek-V3 FC1's K. Rows of A carry a large pair
// that cancels against B and one tiny element (as a few tiny activations put the grid far below S),
// so that many outputs are open.
std::string open_outputs_table() {
  using namespace moenum::reference;
  const int64_t M = 64, N = 64, K = 7168;
  Matrix A = random_bf16(M, K, 3), B = random_bf16(N, K, 4);
  B *= 0.015625;  // 2^-6: bf16 values stay bf16 values
  for (int64_t i = 0; i < M; ++i) A(i, 0) = 0x1p16, A(i, 1) = -0x1p16, A(i, 2) = 0x1p-40;
  for (int64_t j = 0; j < N; ++j) B(j, 1) = B(j, 0);
  Matrix Cd, S;
  products_nt(A, B, Cd, S);
  const RowGrids grids = row_grids(A, B);
  std::vector<std::pair<int64_t, int64_t>> open;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float v;
      if (!certify_f32(Cd(i, j), S(i, j), K, grids.a[size_t(i)] + grids.b[size_t(j)], &v)) open.push_back({i, j});
    }
  int64_t settled = 0;
  float sink = 0.0f;
  const double t_comp = median_seconds([&] {
    settled = 0;
    for (const auto& [i, j] : open) {
      float v = 0.0f;
      settled += certify_compensated_f32(&A(i, 0), &B(j, 0), K, 1, 1, nullptr, S(i, j), &v);
      sink += v;
    }
  }, 5);
  const double t_exact = median_seconds([&] {
    for (const auto& [i, j] : open) {
      ExactSum acc;
      for (int64_t k = 0; k < K; ++k) acc.add_product(A(i, k), B(j, k));
      sink += acc.round_f32();
    }
  }, 5);
  const double products = double(open.size()) * double(K);
  char out[512];
  std::snprintf(out, sizeof out,
                "| open outputs (K = %lld, of %lld) | settled by the compensated sum | compensated ns/product | "
                "exact accumulator ns/product | exact/compensated |\n|---|---|---|---|---|\n"
                "| %zu | %lld | %.2f | %.2f | %.1f |\n",
                (long long)K, (long long)(M * N), open.size(), (long long)settled, t_comp / products * 1e9,
                t_exact / products * 1e9, t_exact / t_comp);
  return sink == 12345.0f ? std::string() : std::string(out);  // sink: keep the loops
}

}  // namespace

int main(int argc, char** argv) {
  struct Shape { const char* what; int64_t M, N, K; };
  // smoke-sized expert GEMMs up to a mid-sized layer (rows = tokens of one expert)
  const Shape shapes[] = {
      {"smoke fc1 fprop", 32, 128, 64}, {"smoke fc2 fprop", 32, 64, 64},
      {"mid fc1 fprop", 512, 1024, 1024}, {"mid fc1 wgrad", 1024, 1024, 512},
      {"large fc1 fprop", 2048, 2048, 2048},
  };
  std::string table =
      "| shape | M | N | K | reference (exact, rn fp32) GFLOP/s | Eigen fp64 GEMM GFLOP/s | reference/Eigen | exact-path outputs |\n"
      "|---|---|---|---|---|---|---|---|\n";
  for (const Shape& s : shapes) {
    Matrix A = random_bf16(s.M, s.K, 1), B = random_bf16(s.N, s.K, 2);
    const int reps = s.M * s.N * s.K > 100000000 ? 3 : 9;
    moenum::reference::GemmStats stats;
    double t_ref = median_seconds([&] { stats = {}; Matrix C = moenum::reference::gemm_nt_rn_f32(A, B, nullptr, &stats); }, reps);
    double t_eigen = median_seconds([&] { Matrix C = A * B.transpose(); }, reps);
    const double flop = 2.0 * s.M * s.N * s.K;
    char row[256];
    std::snprintf(row, sizeof row, "| %s | %lld | %lld | %lld | %.2f | %.2f | %.2f | %lld of %lld |\n", s.what,
                  (long long)s.M, (long long)s.N, (long long)s.K, flop / t_ref * 1e-9, flop / t_eigen * 1e-9,
                  t_eigen / t_ref, (long long)stats.exact_path, (long long)stats.outputs);
    table += row;
  }
  table += "\n" + open_outputs_table();
  std::printf("Eigen threads: %d\n\n%s", Eigen::nbThreads(), table.c_str());
  if (argc == 3 && std::strcmp(argv[1], "--append") == 0) {
    FILE* f = std::fopen(argv[2], "a");
    if (!f) return 2;
    std::fprintf(f, "%s", table.c_str());
    std::fclose(f);
  }
  return 0;
}
