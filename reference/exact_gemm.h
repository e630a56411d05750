// The reference GEMM (numerics.md §6): every output is the correctly rounded fp32 value of the EXACT
// sum of products, so the result depends on no summation order, blocking or thread count.
//
// Fast path: one fp64 Eigen GEMM for C and one for S = |A|.|B|^T. C_ij is certified in one of two
// ways. (1) Exact: if every element of row i of A is a multiple of 2^qa_i and of row j of B of
// 2^qb_j, and S_ij < 2^(qa_i+qb_j+53), no partial sum can round, so C_ij is the exact sum whatever
// order Eigen used; bf16 and fp8 operands have short significands, their exact sums often sit
// exactly on an fp32 midpoint, and this certificate settles those ties for free. (2) Bounded:
// whatever order fp64 sums in, |C_ij - exact_ij| <= gamma(K, 2^-53) * S_ij (Higham, Thm 3.1), so
// when the whole interval C_ij +- bound rounds to one fp32 value, that value is the answer
// (rounding is monotone). Otherwise (under 1% of a bf16 GEMM's outputs at K = 7168) the output is
// summed again from its operands with a compensated sum (certify_compensated_f32), whose far
// tighter bound settles nearly all of them at a few times the cost of a plain dot product; the
// rest are recomputed with a long fixed-point accumulator that holds any sum of fp64 values
// exactly, and rounded once.
//
// Operands are fp64 matrices holding fp32 (bf16, dequantized MXFP8) values. Other fp64 values work
// too (products are split exactly with fma), as long as no product underflows the fp64 range. If an
// operand holds inf or NaN the output is the plain fp64 result converted to fp32 (not certified).
#pragma once
#include <cstdint>
#include <vector>

#include <Eigen/Dense>

namespace moenum::reference {

using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXd;

// How many outputs were computed, how many of them the fp64 product could not certify but the
// compensated sum could, and how many needed the exact (slow) accumulator.
struct GemmStats {
  int64_t outputs = 0;
  int64_t compensated = 0;
  int64_t exact_path = 0;
  GemmStats& operator+=(const GemmStats& o) {
    outputs += o.outputs;
    compensated += o.compensated;
    exact_path += o.exact_path;
    return *this;
  }
  double exact_fraction() const { return outputs ? double(exact_path) / double(outputs) : 0.0; }
};


// An exact sum of fp64 values: a 2176-bit two's-complement fixed-point number (bit 0 = 2^-1074) in
// 32-bit digits kept in int64 limbs, so additions need no carry propagation until the end.
class ExactSum {
 public:
  void add(double v);                        // v finite
  void add_product(double a, double b);      // a*b exactly (split with fma)
  bool is_zero() const;
  float round_f32() const;                   // round to nearest, ties to even; an exact zero is +0
  double round_f64() const;                  // same, to fp64

 private:
  static constexpr int kLimbs = 68;
  void normalize();
  int64_t limb_[kLimbs] = {};
  int64_t adds_ = 0;
};

// Exponent of the lowest set bit of v (v = odd * 2^lsb_exponent(v)); kNoGrid for 0, inf, NaN.
inline constexpr int kNoGrid = 1 << 20;
int lsb_exponent(double v);
// min over the elements of lsb_exponent: every element is a multiple of 2^result.
int grid_exponent(const double* v, int64_t n, int64_t stride = 1);

// Certify the fp64 value c of a sum of n terms whose absolute values sum to s (computed in fp64),
// each term a multiple of 2^q (q = kNoGrid when not known). Sets *out and returns true when
//  - s < 2^(q+53): every partial sum, in any order, is then an exact fp64 value, so c is the exact
//    sum (this catches the frequent exact fp32 ties of bf16 and fp8 GEMMs), or
//  - every value within the error bound of c rounds to the same fp32.
bool certify_f32(double c, double s, int64_t n, int q, float* out);

// The second certificate, for an output certify_f32 left open: sum_k a[k*sa] * b[k*sb] (+ *extra,
// one more term, if not null) summed again from the operands with error-free transformations. When
// every operand has at most 26 significant bits (fp32, bf16, dequantized MXFP8 values) each product
// is exact in fp64, and TwoSum (Knuth) keeps each addition's rounding error, so the result is off by
// at most u|r| plus 2 (n u)^2 times the sum of magnitudes s (Ogita, Rump & Oishi 2005, Sum2) instead
// of n u s: with its margin (twice that) it settles all but the outputs within about 2^-51 |r| of an
// fp32 rounding boundary (exact ties among them). Sets *out and returns true when every value within that bound of r
// rounds to the same fp32; false for wider operands or an open interval.
bool certify_compensated_f32(const double* a, const double* b, int64_t K, int64_t sa, int64_t sb,
                             const double* extra, double s, float* out);

// Correctly rounded fp32 value of sum_k a[k*sa] * b[k*sb]: fast path, else exact.
float dot_rn_f32(const double* a, const double* b, int64_t K, int64_t sa = 1, int64_t sb = 1,
                 GemmStats* stats = nullptr);

struct ExactGemmOptions {
  bool force_exact = false;  // every output through the exact accumulator (an oracle for tests)
};

// C = A . B^T (+ bias, one extra exact term per column j), A: M x K, B: N x K, C: M x N; each C_ij
// is the correctly rounded fp32 value of the exact sum (stored in fp64). bias may be null.
Matrix gemm_nt_rn_f32(const Matrix& A, const Matrix& B, const Vector* bias = nullptr,
                      GemmStats* stats = nullptr, const ExactGemmOptions& opt = {});
// The same GEMM from fp64 products computed elsewhere, in any summation order (a GPU's DGEMM): Cd =
// A . B^T and S = |A| . |B|^T, both without the bias. The certificate holds for every order, and an
// output it cannot certify is summed exactly from A and B here, so the result is bitwise that of
// gemm_nt_rn_f32 (a correctly rounded value is unique). Cd and S are not read under force_exact.
// Cd = A . B^T and S = |A| . |B|^T in fp64 with Eigen, the two products certify_gemm_nt reads; left
// empty when A or B has no rows.
void products_nt(const Matrix& A, const Matrix& B, Matrix& Cd, Matrix& S);
// The grid exponents of the rows of A and of B (grid_exponent of each row): the certificate's q.
struct RowGrids {
  std::vector<int> a, b;
};
RowGrids row_grids(const Matrix& A, const Matrix& B);
// grids: the rows' grid exponents when the caller has them (null: computed here).
Matrix certify_gemm_nt(const Matrix& A, const Matrix& B, const Vector* bias, Matrix Cd, Matrix S,
                       GemmStats* stats = nullptr, const ExactGemmOptions& opt = {}, const RowGrids* grids = nullptr);
// C = A . B (A: M x K, B: K x N) and C = A^T . B (A: K x M, B: K x N), same rounding.
Matrix gemm_nn_rn_f32(const Matrix& A, const Matrix& B, GemmStats* stats = nullptr);
Matrix gemm_tn_rn_f32(const Matrix& A, const Matrix& B, GemmStats* stats = nullptr);

// S = |A| . |B|^T in fp64 (relative error <= gamma(K, 2^-53), negligible next to the fp32 bounds
// of numerics.md §7): the S of the per-element bound (core/verify/bounds.h).
Matrix abs_product_nt(const Matrix& A, const Matrix& B);

}  // namespace moenum::reference
