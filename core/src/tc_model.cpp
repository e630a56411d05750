// The drivers of moenum/tc.h: decode the operands once (checking them), then one accumulator chain
// per output (tc_step.h), outputs split over OpenMP threads. Each output is computed by one thread
// from its own operands only, so the bits never depend on the thread count. On CPUs with AVX2 the
// chains run in a build of the same code for AVX2 (the integer lanes of a step vectorise there).
#include <algorithm>
#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "moenum/tc.h"
#include "tc_step.h"

namespace moenum::tc {

StepShape step_shape(Arch, Format fmt) {
  // sm_90 wgmma (MMA-Sim's Hopper parameters): 32 bytes of products per step.
  if (fmt == Format::kBf16) return {16, 25, 24};
  return {32, 13, 14};
}

std::optional<Format> format_from_name(std::string_view n) {
  if (n == "bf16") return Format::kBf16;
  if (n == "e4m3") return Format::kE4M3;
  if (n == "e5m2") return Format::kE5M2;
  return std::nullopt;
}

std::optional<Arch> arch_from_name(std::string_view n) {
  if (n == "sm90") return Arch::kSm90;
  return std::nullopt;
}

const char* format_name(Format f) {
  return f == Format::kBf16 ? "bf16" : f == Format::kE4M3 ? "e4m3" : "e5m2";
}

bool representable(float v, Format f) {
  int16_t m, e;
  return detail::decode(v, f, m, e);
}

int64_t first_unrepresentable(const float* a, int64_t n, Format f) {
  for (int64_t i = 0; i < n; ++i)
    if (!representable(a[i], f)) return i;
  return -1;
}

namespace {

using detail::StepParams;

std::string number(float v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", double(v));
  return buf;
}

// An operand [rows, K] decoded: significands and exponents, row-major.
struct Decoded {
  std::vector<int16_t> m, e;
};

Decoded decode_all(const float* x, int64_t rows, int64_t K, Format f, const char* name) {
  Decoded d;
  const int64_t n = rows * K;
  d.m.resize(size_t(n));
  d.e.resize(size_t(n));
  int64_t bad = INT64_MAX;  // the first element that is not a value of f
#pragma omp parallel for schedule(static) reduction(min : bad) if (n > (1 << 16))
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const int64_t i = r * K + k;
      if (!detail::decode(x[i], f, d.m[i], d.e[i])) bad = std::min(bad, i);
    }
  if (bad != INT64_MAX)
    throw std::invalid_argument(std::string(name) + "[" + std::to_string(bad / K) + ", " + std::to_string(bad % K) +
                                "] = " + number(x[bad]) + " is not a value of " + format_name(f));
  return d;
}

// out[i * ldo + j * sj] for the row pairs the caller walks: the two drivers below share the chain.
template <int L>
[[gnu::always_inline]] inline void rows_kernel(const Decoded& A, const Decoded& B, const float* c, float* out,
                                                int64_t N, int64_t K, const StepParams& P) {
#pragma omp parallel for schedule(static) if (N * K > (1 << 14))
  for (int64_t i = 0; i < N; ++i)
    out[i] = detail::chain<L>(&A.m[i * K], &A.e[i * K], &B.m[i * K], &B.e[i * K], K, c ? c[i] : 0.0f, P);
}

template <int L>
[[gnu::always_inline]] inline void gemm_kernel(const Decoded& A, const Decoded& B, float* C, int64_t M, int64_t N,
                                                int64_t K, const StepParams& P) {
#pragma omp parallel for schedule(dynamic, 4) collapse(2) if (M * N * K > (1 << 14))
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * N + j] = detail::chain<L>(&A.m[i * K], &A.e[i * K], &B.m[j * K], &B.e[j * K], K, 0.0f, P);
}

void rows_portable(const Decoded& A, const Decoded& B, const float* c, float* out, int64_t N, int64_t K,
                   const StepParams& P) {
  if (P.L == 16) rows_kernel<16>(A, B, c, out, N, K, P);
  else rows_kernel<32>(A, B, c, out, N, K, P);
}
void gemm_portable(const Decoded& A, const Decoded& B, float* C, int64_t M, int64_t N, int64_t K, const StepParams& P) {
  if (P.L == 16) gemm_kernel<16>(A, B, C, M, N, K, P);
  else gemm_kernel<32>(A, B, C, M, N, K, P);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void rows_avx2(const Decoded& A, const Decoded& B, const float* c, float* out,
                                               int64_t N, int64_t K, const StepParams& P) {
  if (P.L == 16) rows_kernel<16>(A, B, c, out, N, K, P);
  else rows_kernel<32>(A, B, c, out, N, K, P);
}
__attribute__((target("avx2"))) void gemm_avx2(const Decoded& A, const Decoded& B, float* C, int64_t M, int64_t N,
                                               int64_t K, const StepParams& P) {
  if (P.L == 16) gemm_kernel<16>(A, B, C, M, N, K, P);
  else gemm_kernel<32>(A, B, C, M, N, K, P);
}
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#else
void rows_avx2(const Decoded& A, const Decoded& B, const float* c, float* out, int64_t N, int64_t K,
               const StepParams& P) {
  rows_portable(A, B, c, out, N, K, P);
}
void gemm_avx2(const Decoded& A, const Decoded& B, float* C, int64_t M, int64_t N, int64_t K, const StepParams& P) {
  gemm_portable(A, B, C, M, N, K, P);
}
bool have_avx2() { return false; }
#endif

}  // namespace

float dot(const float* a, const float* b, int64_t K, float c, Format fmt, Arch arch, int64_t sa, int64_t sb) {
  std::vector<float> ra(static_cast<size_t>(K)), rb(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) ra[k] = a[k * sa], rb[k] = b[k * sb];
  float out = 0.0f;
  dot_rows(ra.data(), rb.data(), &c, &out, 1, K, fmt, arch);
  return out;
}

void dot_rows(const float* a, const float* b, const float* c, float* out, int64_t N, int64_t K, Format fmt, Arch arch) {
  const Decoded A = decode_all(a, N, K, fmt, "a"), B = decode_all(b, N, K, fmt, "b");
  const StepParams P = detail::step_params(arch, fmt);
  if (have_avx2()) rows_avx2(A, B, c, out, N, K, P);
  else rows_portable(A, B, c, out, N, K, P);
}

void gemm_nt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, Format fmt, Arch arch) {
  const Decoded dA = decode_all(A, M, K, fmt, "A"), dB = decode_all(B, N, K, fmt, "B");
  const StepParams P = detail::step_params(arch, fmt);
  if (have_avx2()) gemm_avx2(dA, dB, C, M, N, K, P);
  else gemm_portable(dA, dB, C, M, N, K, P);
}

}  // namespace moenum::tc
