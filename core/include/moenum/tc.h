// moenum.tc: a bit-exact model of Hopper (sm_90) tensor-core accumulation (numerics.md §6), the
// semantics MMA-Sim (arXiv 2511.10909) validated against the hardware's wgmma:
//
//   One fused step takes L products and the accumulator c:
//     - every operand is read as s * 2^e with e clamped to its format's smallest normal exponent
//       (subnormals keep e_min and s < 1); products are exact: s_a s_b * 2^(e_a + e_b); a zero
//       product, and a zero c, count with the exponent 2^-133 (kZeroExponent);
//     - e_max = the largest exponent among the L products and c;
//     - each term (c included) is truncated toward zero to F fraction bits below 2^e_max, and the
//       truncated terms are summed exactly;
//     - the sum is rounded toward zero to the output grid (fp32, or E8M13 for fp8: 13 fraction
//       bits, same exponent range, subnormals below 2^-126); a zero is +0, a NaN 0x7FFFFFFF, a
//       finite sum at or above 2^128 +-inf.
//   bf16 (wgmma m64nNk16.f32.bf16.bf16): L = 16, F = 25, output fp32.
//   e4m3 / e5m2 (wgmma m64nNk32.f32.e4m3|e5m2...): L = 32, F = 13, output E8M13 (in an fp32).
//   A dot product over K chains the steps over k = 0, L, 2L, ... in order from the accumulator c;
//   the last step takes the K % L products that are left (zeros added to it would change nothing:
//   a nonzero c has e >= -126 > -133, and a zero c already counts with -133).
//   Special values: a NaN operand, inf * 0 or +inf + -inf gives NaN; otherwise an infinite term
//   gives that infinity.
//
// Operands are float32 values that must be values of the format (NaN allowed; inf for bf16 and
// e5m2 only); anything else is refused with the element's position.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace moenum::tc {

enum class Format { kBf16, kE4M3, kE5M2 };
enum class Arch { kSm90 };

inline constexpr int kZeroExponent = -133;

// The shape of one fused step of the architecture's MMA for a format.
struct StepShape {
  int products;     // L
  int frac_bits;    // F: fraction bits kept below 2^e_max
  int result_bits;  // significand bits of the step's output, implicit bit included (fp32 24, E8M13 14)
};
StepShape step_shape(Arch arch, Format fmt);

std::optional<Format> format_from_name(std::string_view name);  // bf16 | e4m3 | e5m2
std::optional<Arch> arch_from_name(std::string_view name);      // sm90
const char* format_name(Format f);

// Whether v is a value of the format (NaN: yes; inf: bf16 and e5m2).
bool representable(float v, Format f);

// The first element of a[0, n) that is not a value of f, or -1.
int64_t first_unrepresentable(const float* a, int64_t n, Format f);

// One dot product: c chained through the steps over a[0..K) . b[0..K) (strides sa, sb).
// Precondition: every a and b element is a value of fmt (checked by the batched entry points).
float dot(const float* a, const float* b, int64_t K, float c, Format fmt, Arch arch = Arch::kSm90,
          int64_t sa = 1, int64_t sb = 1);

// out[i] = dot(a[i, :], b[i, :], K, c[i]) for a, b row-major [N, K]; c may be null (+0). Threaded
// over rows (OpenMP); the result does not depend on the thread count. Throws std::invalid_argument
// naming the operand and element when a value is not one of fmt.
void dot_rows(const float* a, const float* b, const float* c, float* out, int64_t N, int64_t K, Format fmt,
              Arch arch = Arch::kSm90);

// C[i, j] = dot(A[i, :], B[j, :], K, +0): the GEMM C = A . B^T of one wgmma accumulator chain per
// output, A row-major [M, K], B row-major [N, K], C row-major [M, N]. Threaded; same checks.
void gemm_nt(const float* A, const float* B, float* C, int64_t M, int64_t N, int64_t K, Format fmt,
             Arch arch = Arch::kSm90);

}  // namespace moenum::tc
