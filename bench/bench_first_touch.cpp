// What a fresh production-size buffer costs before any work is done in it: malloc, first touch (one
// write per 4 KB page) and free of a 235 MB buffer (a DeepSeek-V3 expert's w1 in fp64), plain and
// advised for huge pages (moenum/huge_pages.h), in one run; then Mxfp8Policy::quantize_operand on
// such an operand (its output advised). The first advised round also pays the kernel's compaction,
// so each case runs a warm-up round first. Prints a Markdown table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "moenum/huge_pages.h"
#include "mxfp8_policy.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double first_touch(size_t bytes, bool advise) {
  const auto t0 = std::chrono::steady_clock::now();
  auto* p = static_cast<char*>(std::malloc(bytes));
  if (advise) moenum::advise_huge_pages(p, bytes);
  for (size_t i = 0; i < bytes; i += 4096) p[i] = 1;
  std::free(p);
  return seconds_since(t0);
}

}  // namespace

int main() {
  using moenum::reference::Matrix;
  const int64_t rows = 4096, cols = 7168;
  const size_t bytes = size_t(rows * cols) * sizeof(double);
  std::printf("| case | s (median of 5, after a warm-up) | ns per fp64 element |\n|---|---|---|\n");
  for (bool advise : {false, true}) {
    first_touch(bytes, advise);
    double t[5];
    for (double& s : t) s = first_touch(bytes, advise);
    std::sort(t, t + 5);
    std::printf("| malloc, first touch, free of %zu MB, %s | %.3f | %.2f |\n", bytes >> 20,
                advise ? "advised" : "plain", t[2], t[2] / double(rows * cols) * 1e9);
  }
  Matrix m(rows, cols);
  std::mt19937 g(1);
  std::normal_distribution<float> d(0.f, 0.02f);
  for (int64_t i = 0; i < m.size(); ++i) m.data()[i] = double(d(g));
  const moenum::reference::Mxfp8Policy pol;
  (void)pol.quantize_operand(m, moenum::layer::Gemm::kFc1Fprop, moenum::layer::Operand::kB);
  double t[5];
  for (double& s : t) {
    const auto t0 = std::chrono::steady_clock::now();
    const Matrix q = pol.quantize_operand(m, moenum::layer::Gemm::kFc1Fprop, moenum::layer::Operand::kB);
    s = seconds_since(t0);
  }
  std::sort(t, t + 5);
  std::printf("| Mxfp8Policy::quantize_operand, %lldx%lld | %.3f | %.2f |\n", (long long)rows, (long long)cols, t[2],
              t[2] / double(rows * cols) * 1e9);
}
