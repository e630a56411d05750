// The drivers of moenum/tc.h: decode the operands (checking them), then one accumulator chain
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

// Decodes x[0, n) into d (resized); the first element that is not a value of f, or -1. The loop
// only counts failures (so that it vectorises); a second pass finds the first one.
template <Format F>
[[gnu::always_inline]] inline int64_t decode_into_fmt(const float* x, int64_t n, Decoded& d) {
  d.m.resize(size_t(n));
  d.e.resize(size_t(n));
  int16_t* m = d.m.data();
  int16_t* e = d.e.data();
  int32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) bad += !detail::decode_lane<F>(x[i], m[i], e[i]);
  if (!bad) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!detail::decode_lane<F>(x[i], m[i], e[i])) return i;
  return -1;
}

[[gnu::always_inline]] inline int64_t decode_into(const float* x, int64_t n, Format f, Decoded& d) {
  switch (f) {
    case Format::kBf16: return decode_into_fmt<Format::kBf16>(x, n, d);
    case Format::kE4M3: return decode_into_fmt<Format::kE4M3>(x, n, d);
    default: return decode_into_fmt<Format::kE5M2>(x, n, d);
  }
}

[[noreturn]] void unrepresentable(const char* name, const float* x, int64_t flat, int64_t K, Format f) {
  throw std::invalid_argument(std::string(name) + "[" + std::to_string(flat / K) + ", " + std::to_string(flat % K) +
                              "] = " + number(x[flat]) + " is not a value of " + format_name(f));
}

Decoded decode_all(const float* x, int64_t rows, int64_t K, Format f, const char* name) {
  Decoded d;
  const int64_t bad = decode_into(x, rows * K, f, d);
  if (bad >= 0) unrepresentable(name, x, bad, K, f);
  return d;
}

// The serial kernels over a range of rows [i0, i1): dot_rows pairs row i of A with row i of B,
// gemm_nt row i of A with every row of B. The threads split the rows (drivers below); the kernels are
// also built for AVX2 (target attribute on a serial function: inside an OpenMP region the compiler
// would not use it), where the steps' integer lanes vectorise in 256-bit registers.
template <int L>
[[gnu::always_inline]] inline void rows_range(const Decoded& A, const Decoded& B, const float* c, float* out, int64_t,
                                              int64_t K, const StepParams& P, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    out[i] = detail::chain<L>(&A.m[i * K], &A.e[i * K], &B.m[i * K], &B.e[i * K], K, c ? c[i] : 0.0f, P);
}

template <int L>
[[gnu::always_inline]] inline void gemm_range(const Decoded& A, const Decoded& B, const float*, float* C, int64_t N,
                                              int64_t K, const StepParams& P, int64_t i0, int64_t i1) {
  for (int64_t i = i0; i < i1; ++i)
    for (int64_t j = 0; j < N; ++j)
      C[i * N + j] = detail::chain<L>(&A.m[i * K], &A.e[i * K], &B.m[j * K], &B.e[j * K], K, 0.0f, P);
}

// One block of dot_rows: decode the rows' operands (bad_a/bad_b: the first element that is not a
// value of fmt, or -1) and, when all are, run their chains.
[[gnu::always_inline]] inline void dot_block(const float* a, const float* b, const float* c, float* out, int64_t rows,
                                             int64_t K, Format fmt, const StepParams& P, Decoded& A, Decoded& B,
                                             int64_t& bad_a, int64_t& bad_b) {
  bad_a = decode_into(a, rows * K, fmt, A);
  bad_b = decode_into(b, rows * K, fmt, B);
  if (bad_a >= 0 || bad_b >= 0) return;
  if (P.L == 16) rows_range<16>(A, B, c, out, rows, K, P, 0, rows);
  else rows_range<32>(A, B, c, out, rows, K, P, 0, rows);
}

using BlockFn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t, Format, const StepParams&,
                         Decoded&, Decoded&, int64_t&, int64_t&);
void block_portable(const float* a, const float* b, const float* c, float* out, int64_t rows, int64_t K, Format fmt,
                    const StepParams& P, Decoded& A, Decoded& B, int64_t& bad_a, int64_t& bad_b) {
  dot_block(a, b, c, out, rows, K, fmt, P, A, B, bad_a, bad_b);
}

using RangeFn = void (*)(const Decoded&, const Decoded&, const float*, float*, int64_t, int64_t, const StepParams&,
                         int64_t, int64_t);

void gemm_portable(const Decoded& A, const Decoded& B, const float* c, float* o, int64_t N, int64_t K,
                   const StepParams& P, int64_t i0, int64_t i1) {
  if (P.L == 16) gemm_range<16>(A, B, c, o, N, K, P, i0, i1);
  else gemm_range<32>(A, B, c, o, N, K, P, i0, i1);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void gemm_avx2(const Decoded& A, const Decoded& B, const float* c, float* o, int64_t N,
                                               int64_t K, const StepParams& P, int64_t i0, int64_t i1) {
  if (P.L == 16) gemm_range<16>(A, B, c, o, N, K, P, i0, i1);
  else gemm_range<32>(A, B, c, o, N, K, P, i0, i1);
}
__attribute__((target("avx2"))) void block_avx2(const float* a, const float* b, const float* c, float* out,
                                                int64_t rows, int64_t K, Format fmt, const StepParams& P, Decoded& A,
                                                Decoded& B, int64_t& bad_a, int64_t& bad_b) {
  dot_block(a, b, c, out, rows, K, fmt, P, A, B, bad_a, bad_b);
}
bool have_avx2() {
  static const bool yes = __builtin_cpu_supports("avx2");
  return yes;
}
#else
constexpr BlockFn block_avx2 = block_portable;
constexpr RangeFn gemm_avx2 = gemm_portable;
bool have_avx2() { return false; }
#endif

// Splits rows [0, rows) over the threads in blocks; `macs_per_row` decides whether threads pay off.
void run_rows(RangeFn fn, const Decoded& A, const Decoded& B, const float* c, float* out, int64_t rows, int64_t N,
              int64_t K, const StepParams& P, double macs_per_row) {
  const int64_t block = std::max<int64_t>(1, int64_t(65536.0 / std::max(macs_per_row, 1.0)));
  const int64_t blocks = (rows + block - 1) / block;
#pragma omp parallel for schedule(dynamic, 1) if (double(rows) * macs_per_row > 1e6)
  for (int64_t b = 0; b < blocks; ++b) fn(A, B, c, out, N, K, P, b * block, std::min(rows, (b + 1) * block));
}

}  // namespace

float dot(const float* a, const float* b, int64_t K, float c, Format fmt, Arch arch, int64_t sa, int64_t sb) {
  std::vector<float> ra(static_cast<size_t>(K)), rb(static_cast<size_t>(K));
  for (int64_t k = 0; k < K; ++k) ra[k] = a[k * sa], rb[k] = b[k * sb];
  float out = 0.0f;
  dot_rows(ra.data(), rb.data(), &c, &out, 1, K, fmt, arch);
  return out;
}

// Each operand element is used once here, so the rows are decoded block by block into per-thread
// buffers, right before their chains: no operand-sized allocation, and the decode stays in cache.
void dot_rows(const float* a, const float* b, const float* c, float* out, int64_t N, int64_t K, Format fmt, Arch arch) {
  const StepParams P = detail::step_params(arch, fmt);
  const BlockFn fn = have_avx2() ? BlockFn(block_avx2) : BlockFn(block_portable);
  const int64_t block = std::max<int64_t>(1, 16384 / std::max<int64_t>(K, 1));
  const int64_t blocks = (N + block - 1) / block;
  int64_t bad_a = INT64_MAX, bad_b = INT64_MAX;  // the first element of each that is not a value of fmt
#pragma omp parallel reduction(min : bad_a, bad_b) if (double(N) * double(K) > 1e6)
  {
    Decoded A, B;
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t r0 = blk * block, r1 = std::min(N, r0 + block);
      int64_t ba, bb;
      fn(a + r0 * K, b + r0 * K, c ? c + r0 : nullptr, out + r0, r1 - r0, K, fmt, P, A, B, ba, bb);
      if (ba >= 0) bad_a = std::min(bad_a, r0 * K + ba);
      if (bb >= 0) bad_b = std::min(bad_b, r0 * K + bb);
    }
  }
  if (bad_a != INT64_MAX) unrepresentable("a", a, bad_a, K, fmt);
  if (bad_b != INT64_MAX) unrepresentable("b", b, bad_b, K, fmt);
}

void gemm_nt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, Format fmt, Arch arch) {
  const Decoded dA = decode_all(A, M, K, fmt, "A"), dB = decode_all(B, N, K, fmt, "B");
  const StepParams P = detail::step_params(arch, fmt);
  run_rows(have_avx2() ? RangeFn(gemm_avx2) : RangeFn(gemm_portable), dA, dB, nullptr, C, M, N, K, P,
           double(N) * double(K));
}

}  // namespace moenum::tc
