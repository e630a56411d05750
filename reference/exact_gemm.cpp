#include "exact_gemm.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include <omp.h>

#include "large_matrix.h"
#include "moenum/error.h"

namespace moenum::reference {
namespace {

uint64_t f64_bits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}
uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

constexpr int kBitsTotal = 68 * 32;

// Carry-propagate so that limbs 0..n-2 hold 32-bit digits and the top limb holds the sign (0 or -1).
void propagate(int64_t* limb, int n) {
  int64_t carry = 0;
  for (int i = 0; i < n - 1; ++i) {
    const int64_t v = limb[i] + carry;
    limb[i] = v & 0xFFFFFFFF;
    carry = v >> 32;  // arithmetic shift (C++20)
  }
  limb[n - 1] += carry;
}

}  // namespace

// ---- ExactSum ------------------------------------------------------------------------------------

void ExactSum::add(double v) {
  const uint64_t u = f64_bits(v);
  const uint64_t e = (u >> 52) & 0x7FF;
  uint64_t m = u & ((uint64_t{1} << 52) - 1);
  if (e == 0 && m == 0) return;
  // v = m * 2^(shift - 1074): bit 0 of the accumulator weighs 2^-1074, the smallest subnormal.
  int shift = 0;
  if (e != 0) {
    m |= uint64_t{1} << 52;
    shift = int(e) - 1;
  }
  const int d = shift >> 5, o = shift & 31;
  const unsigned __int128 w = static_cast<unsigned __int128>(m) << o;  // <= 84 bits
  const int64_t d0 = int64_t(uint64_t(w) & 0xFFFFFFFF);
  const int64_t d1 = int64_t(uint64_t(w >> 32) & 0xFFFFFFFF);
  const int64_t d2 = int64_t(uint64_t(w >> 64));
  if (u >> 63) {
    limb_[d] -= d0;
    limb_[d + 1] -= d1;
    limb_[d + 2] -= d2;
  } else {
    limb_[d] += d0;
    limb_[d + 1] += d1;
    limb_[d + 2] += d2;
  }
  // Each add moves a limb by < 2^32; normalise long before an int64 limb could overflow.
  if (++adds_ == (int64_t{1} << 30)) normalize();
}

void ExactSum::add_product(double a, double b) {
  const double p = a * b;
  add(p);
  add(std::fma(a, b, -p));  // the rounding error of a*b, exact (zero for fp32 operands)
}

void ExactSum::normalize() {
  propagate(limb_, kLimbs);
  adds_ = 0;
}

bool ExactSum::is_zero() const {
  int64_t l[kLimbs];
  std::memcpy(l, limb_, sizeof l);
  propagate(l, kLimbs);
  for (int i = 0; i < kLimbs; ++i)
    if (l[i] != 0) return false;
  return true;
}

namespace {

// Round a magnitude held in 32-bit digits D (bit 0 = 2^-1074) to `prec` significant bits, the
// lowest kept bit being at least `min_lsb` (subnormals): returns mant and sets *lsb; ties to even.
uint64_t round_magnitude(const uint32_t* D, int nd, int prec, int min_lsb, int* lsb_out, bool* zero) {
  int top = -1;
  for (int i = nd - 1; i >= 0; --i)
    if (D[i]) {
      top = 32 * i + 31 - std::countl_zero(D[i]);
      break;
    }
  *zero = top < 0;
  if (top < 0) return 0;
  auto bit = [&](int i) -> uint64_t { return (D[i >> 5] >> (i & 31)) & 1u; };
  const int lsb = std::max(top - (prec - 1), min_lsb);
  uint64_t mant = 0;
  for (int b = top; b >= lsb; --b) mant = (mant << 1) | bit(b);
  uint64_t round = 0;
  bool sticky = false;
  if (lsb >= 1) {
    const int rb = lsb - 1;
    round = bit(rb);
    const int rd = rb >> 5;
    if (D[rd] & ((uint32_t{1} << (rb & 31)) - 1)) sticky = true;
    for (int i = 0; i < rd && !sticky; ++i) sticky = D[i] != 0;
  }
  if (round && (sticky || (mant & 1))) ++mant;  // may carry to 2^prec: still exact below
  *lsb_out = lsb;
  return mant;
}

// Normalised digits and sign of an accumulator.
bool magnitude_digits(const int64_t* limb, int n, uint32_t* D) {
  int64_t l[68];
  std::memcpy(l, limb, sizeof(int64_t) * n);
  propagate(l, n);
  const bool neg = l[n - 1] < 0;
  uint64_t carry = 1;
  for (int i = 0; i < n - 1; ++i) {
    const uint32_t d = uint32_t(l[i]);
    if (neg) {  // two's complement negation: ~x + 1
      const uint64_t t = uint64_t(uint32_t(~d)) + carry;
      D[i] = uint32_t(t);
      carry = t >> 32;
    } else {
      D[i] = d;
    }
  }
  return neg;
}

}  // namespace

float ExactSum::round_f32() const {
  static_assert(kLimbs == 68 && kBitsTotal == 2176, "accumulator layout");
  uint32_t D[kLimbs - 1];
  const bool neg = magnitude_digits(limb_, kLimbs, D);
  int lsb = 0;
  bool zero = false;
  // fp32: 24 bits; the smallest subnormal 2^-149 is bit 925.
  const uint64_t mant = round_magnitude(D, kLimbs - 1, 24, 1074 - 149, &lsb, &zero);
  if (zero) return 0.0f;
  // Exact in fp64 (mant <= 2^24); the conversion is exact too, or overflows to inf where it must.
  const float f = static_cast<float>(std::ldexp(double(mant), lsb - 1074));
  return neg ? -f : f;
}

double ExactSum::round_f64() const {
  uint32_t D[kLimbs - 1];
  const bool neg = magnitude_digits(limb_, kLimbs, D);
  int lsb = 0;
  bool zero = false;
  const uint64_t mant = round_magnitude(D, kLimbs - 1, 53, 0, &lsb, &zero);
  if (zero) return 0.0;
  const double d = std::ldexp(double(mant), lsb - 1074);  // exact, or inf on overflow
  return neg ? -d : d;
}

// ---- certification -----------------------------------------------------------------------------

int lsb_exponent(double v) {
  const uint64_t u = f64_bits(v);
  const int e = int((u >> 52) & 0x7FF);
  uint64_t m = u & ((uint64_t{1} << 52) - 1);
  if (e == 0x7FF || (e == 0 && m == 0)) return kNoGrid;
  if (e != 0) m |= uint64_t{1} << 52;
  return (e == 0 ? -1074 : e - 1075) + std::countr_zero(m);
}

int grid_exponent(const double* v, int64_t n, int64_t stride) {
  int q = kNoGrid;
  for (int64_t i = 0; i < n; ++i) q = std::min(q, lsb_exponent(v[i * stride]));
  return q;
}

bool certify_f32(double c, double s, int64_t n, int q, float* out) {
  if (!std::isfinite(c) || !std::isfinite(s)) {  // inf/NaN operands: IEEE fp64 result, uncertified
    *out = static_cast<float>(c);
    return true;
  }
  if (s == 0.0) {  // every product is zero: the exact sum is zero
    *out = 0.0f;
    return true;
  }
  // (1) exact: all terms on the grid 2^q and s < 2^(q+53) (s, rounded, is >= 2^(q+53) whenever the
  // true sum of magnitudes is, since 2^(q+53) is representable and rounding is monotone).
  if (q < kNoGrid / 2 && q + 53 > -1074 && s < std::ldexp(1.0, std::min(q + 53, 1100))) {
    *out = static_cast<float>(c);  // c is the exact sum: one correct rounding, ties to even
    return true;
  }
  // (2) bounded: gamma(n, 2^-53) * S_true <= 2*(n+1)*2^-53 * s covers the rounding of s itself; twice that
  // again absorbs the rounding of c +- bound, so the interval below contains the exact sum.
  const double bound = 4.0 * double(n + 2) * 0x1p-53 * s;
  const float lo = static_cast<float>(c - bound), hi = static_cast<float>(c + bound);
  if (f32_bits(lo) != f32_bits(hi)) return false;  // bits, not ==: -0 and +0 must not certify
  *out = lo;
  return true;
}

namespace {

// a + b = sum + *err exactly, for any finite a and b (Knuth's TwoSum: no branch on the magnitudes).
inline double two_sum(double a, double b, double* err) {
  const double sum = a + b, b_part = sum - a;
  *err = (a - (sum - b_part)) + (b - b_part);
  return sum;
}

// Significands of at most 26 bits: the low 27 bits of the fp64 fraction are zero, so the product of
// two such values (53 bits at most) is exact in fp64 unless it underflows.
constexpr uint64_t kBelowNarrowSignificand = (uint64_t{1} << 27) - 1;

}  // namespace

bool certify_compensated_f32(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb,
                             const double* extra, double s, float* out) {
  // Independent lanes, so consecutive TwoSums do not wait on each other.
  constexpr int kLanes = 4;
  double sum[kLanes] = {}, err[kLanes] = {};
  uint64_t low_bits = 0;
  const auto term = [&](int lane, double x, double y) {
    low_bits |= f64_bits(x) | f64_bits(y);
    double e;
    sum[lane] = two_sum(sum[lane], x * y, &e);
    err[lane] += e;
  };
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int lane = 0; lane < kLanes; ++lane) term(lane, a[(k + lane) * sa], b[(k + lane) * sb]);
  for (; k < K; ++k) term(0, a[k * sa], b[k * sb]);
  if (low_bits & kBelowNarrowSignificand) return false;  // a product may have been rounded
  double total = sum[0], errors = 0.0;
  for (int lane = 0; lane < kLanes; ++lane) errors += err[lane];
  for (int lane = 1; lane < kLanes; ++lane) {
    double e;
    total = two_sum(total, sum[lane], &e);
    errors += e;
  }
  if (extra) {
    double e;
    total = two_sum(total, *extra, &e);
    errors += e;
  }
  // exact = total + (the TwoSum errors, exactly); `errors` is their fp64 sum, n terms each at most
  // u times a partial sum, so it is off by at most gamma(n)^2 S_true <= 2 (n u)^2 s (s within a
  // factor 2 of S_true, whatever order computed it). r = fl(total + errors) adds u|r|. The bound
  // below is twice that, which also covers rounding r +- bound.
  const double r = total + errors;
  if (!std::isfinite(r)) return false;
  const double nu = double(K + kLanes + 2) * 0x1p-53;
  const double bound = 4.0 * 0x1p-53 * std::fabs(r) + 8.0 * nu * nu * s;
  const float lo = static_cast<float>(r - bound), hi = static_cast<float>(r + bound);
  if (f32_bits(lo) != f32_bits(hi)) return false;  // bits, not ==: -0 and +0 must not certify
  *out = lo;
  return true;
}

namespace {

// An output certify_f32 left open (or every output, forced): the compensated certificate, else the
// exact accumulator; counts which one settled it in *paths.
float settle_open_output(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb, const double* extra,
                         double s, bool force_exact, GemmStats* paths) {
  float out;
  if (!force_exact && certify_compensated_f32(a, b, K, sa, sb, extra, s, &out)) {
    ++paths->compensated;
    return out;
  }
  ExactSum acc;
  for (int64_t k = 0; k < K; ++k) acc.add_product(a[k * sa], b[k * sb]);
  if (extra) acc.add(*extra);
  ++paths->exact_path;
  return acc.round_f32();
}

}  // namespace

float dot_rn_f32(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb, GemmStats* stats) {
  double c = 0.0, s = 0.0;
  for (int64_t k = 0; k < K; ++k) {
    const double p = a[k * sa] * b[k * sb];
    c += p;
    s += std::fabs(p);
  }
  const int q = std::min(grid_exponent(a, K, sa) + grid_exponent(b, K, sb), kNoGrid);
  GemmStats paths;
  float out;
  if (!certify_f32(c, s, K, q, &out)) out = settle_open_output(a, b, K, sa, sb, nullptr, s, false, &paths);
  if (stats) {
    paths.outputs = 1;
    *stats += paths;
  }
  return out;
}

// ---- GEMMs -------------------------------------------------------------------------------------

Matrix gemm_nt_rn_f32(const Matrix& A, const Matrix& B, const Vector* bias, GemmStats* stats,
                      const ExactGemmOptions& opt) {
  MOENUM_CHECK(B.cols() == A.cols(), "gemm_nt_rn_f32: A and B disagree on K");
  Matrix Cd, S;
  if (!opt.force_exact) products_nt(A, B, Cd, S);
  return certify_gemm_nt(A, B, bias, std::move(Cd), std::move(S), stats, opt);
}

void products_nt(const Matrix& A, const Matrix& B, Matrix& Cd, Matrix& S) {
  if (A.rows() == 0 || B.rows() == 0) return;
  Cd.noalias() = A * B.transpose();
  S = abs_product_nt(A, B);
}

RowGrids row_grids(const Matrix& A, const Matrix& B) {
  RowGrids g{std::vector<int>(size_t(A.rows())), std::vector<int>(size_t(B.rows()))};
  for (Eigen::Index i = 0; i < A.rows(); ++i) g.a[size_t(i)] = grid_exponent(A.data() + i * A.cols(), A.cols());
  for (Eigen::Index j = 0; j < B.rows(); ++j) g.b[size_t(j)] = grid_exponent(B.data() + j * B.cols(), B.cols());
  return g;
}

Matrix certify_gemm_nt(const Matrix& A, const Matrix& B, const Vector* bias, Matrix Cd, Matrix S,
                       GemmStats* stats, const ExactGemmOptions& opt, const RowGrids* grids) {
  const int64_t M = A.rows(), N = B.rows(), K = A.cols();
  MOENUM_CHECK(B.cols() == K, "gemm_nt_rn_f32: A and B disagree on K");
  MOENUM_CHECK(!bias || bias->size() == N, "gemm_nt_rn_f32: bias length must be N");
  Matrix C = large_matrix(M, N);
  if (M == 0 || N == 0) return C;
  if (!opt.force_exact) {
    MOENUM_CHECK(Cd.rows() == M && Cd.cols() == N && S.rows() == M && S.cols() == N,
                 "certify_gemm_nt: the products do not have the shape of A . B^T");
    if (bias) {
      Cd.rowwise() += bias->transpose();
      S.rowwise() += bias->cwiseAbs().transpose();
    }
  }
  const int64_t nterms = K + (bias ? 1 : 0);
  // Grid exponents of the rows of A and B (and of the bias terms), for the exactness certificate.
  const RowGrids own = grids ? RowGrids{} : row_grids(A, B);
  const std::vector<int>& qa = grids ? grids->a : own.a;
  const std::vector<int>& qb = grids ? grids->b : own.b;
  MOENUM_CHECK(int64_t(qa.size()) == M && int64_t(qb.size()) == N, "certify_gemm_nt: grids of other operands");
  // Rows [i0, i1): every output alone, so how the rows are split changes no value. Adds how many
  // took the compensated and the exact path to *block.
  const auto certify_rows = [&](int64_t i0, int64_t i1, GemmStats* block) {
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = 0; j < N; ++j) {
        float v;
        int q = std::min(qa[i] + qb[j], kNoGrid);
        if (bias) q = std::min(q, lsb_exponent((*bias)(j)));
        if (opt.force_exact || !certify_f32(Cd(i, j), S(i, j), nterms, q, &v))
          v = settle_open_output(A.data() + i * K, B.data() + j * K, K, 1, 1, bias ? &(*bias)(j) : nullptr,
                                 opt.force_exact ? 0.0 : S(i, j), opt.force_exact, block);
        C(i, j) = v;
      }
    }
  };
  // Blocks of rows as tasks: the exact path is rare but K products long each, and one large expert's
  // GEMM would otherwise hold one thread while the others idle. Inside a parallel region (the
  // layer's segments run in one) the team's idle threads take the tasks at its barrier; outside
  // one, a parallel loop runs them.
  constexpr int64_t kRowsPerTask = 16;
  const int64_t blocks = (M + kRowsPerTask - 1) / kRowsPerTask;
  std::vector<GemmStats> paths_in(static_cast<size_t>(blocks));
  const auto run_block = [&](int64_t blk) {
    certify_rows(blk * kRowsPerTask, std::min(M, (blk + 1) * kRowsPerTask), &paths_in[size_t(blk)]);
  };
  if (omp_in_parallel()) {
#pragma omp taskloop grainsize(1)
    for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
  } else {
#pragma omp parallel for schedule(dynamic, 1) if (blocks > 1)
    for (int64_t blk = 0; blk < blocks; ++blk) run_block(blk);
  }
  if (stats) {
    stats->outputs += M * N;
    for (const GemmStats& paths : paths_in) *stats += paths;
  }
  return C;
}

Matrix gemm_nn_rn_f32(const Matrix& A, const Matrix& B, GemmStats* stats) {
  const Matrix Bt = B.transpose();
  return gemm_nt_rn_f32(A, Bt, nullptr, stats);
}

Matrix gemm_tn_rn_f32(const Matrix& A, const Matrix& B, GemmStats* stats) {
  const Matrix At = A.transpose(), Bt = B.transpose();
  return gemm_nt_rn_f32(At, Bt, nullptr, stats);
}

Matrix abs_product_nt(const Matrix& A, const Matrix& B) {
  MOENUM_CHECK(A.cols() == B.cols(), "abs_product_nt: A and B disagree on K");
  Matrix S = A.cwiseAbs() * B.cwiseAbs().transpose();
  return S;
}

}  // namespace moenum::reference
