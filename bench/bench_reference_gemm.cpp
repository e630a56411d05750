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
  std::printf("Eigen threads: %d\n\n%s", Eigen::nbThreads(), table.c_str());
  if (argc == 3 && std::strcmp(argv[1], "--append") == 0) {
    FILE* f = std::fopen(argv[2], "a");
    if (!f) return 2;
    std::fprintf(f, "%s", table.c_str());
    std::fclose(f);
  }
  return 0;
}
