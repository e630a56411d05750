#include "stage_ops.h"

#include <cmath>
#include <limits>

#include "moenum/error.h"
#include "numeric_policy.h"

namespace moenum::reference::stage_ops {
namespace {

// One policy object per rounding, so that round_act is the reference's own; the arithmetic is layer.h's.
template <class F>
auto with_policy(Round r, F&& f) {
  if (r == Round::kBf16) return f(Bf16Policy{});
  return f(Fp32Policy{});
}

}  // namespace

Round parse_round(const std::string& dtype) {
  if (dtype == "bf16") return Round::kBf16;
  if (dtype == "fp32") return Round::kF32;
  throw ConfigError("dtype", "a stage dtype must be bf16 or fp32, got '" + dtype + "'");
}

float round_to(float v, Round r) { return r == Round::kBf16 ? round_bf16(v) : v; }

Matrix round_matrix(const Matrix& m, Round r) {
  Matrix out(m.rows(), m.cols());
  for (Eigen::Index i = 0; i < m.size(); ++i) out.data()[i] = round_to(float(m.data()[i]), r);
  return out;
}

GemmRef exact_gemm_ref(const Matrix& A, const Matrix& B, const Vector* bias, DeviceGemm* device) {
  MOENUM_CHECK(A.cols() == B.cols(), "exact_gemm_ref: A and B must have the same number of columns (K)");
  MOENUM_CHECK(!bias || bias->size() == B.rows(), "exact_gemm_ref: bias length must equal B's rows");
  GemmRef g;
  // One fp64 product and one |A|.|B|^T product serve the certified fp32 result, the bound and c64.
  Matrix c, s_abs;
  products_nt(device, A, B, c, s_abs);
  if (c.size() == 0) c = s_abs = Matrix::Zero(A.rows(), B.rows());  // no rows: the tables keep their shape
  const RowGrids grids = row_grids(A, B);
  g.c32 = certify_gemm_nt(A, B, bias, c, s_abs, nullptr, {}, &grids);
  g.absprod = std::move(s_abs);
  g.finite_absprod = Matrix(A.rows(), B.rows());
  g.c64 = Matrix::Constant(A.rows(), B.rows(), std::numeric_limits<double>::quiet_NaN());
  const std::vector<int>& qa = grids.a;
  const std::vector<int>& qb = grids.b;
  for (Eigen::Index i = 0; i < A.rows(); ++i)
    for (Eigen::Index j = 0; j < B.rows(); ++j) {
      double s = g.absprod(i, j), v = c(i, j);
      if (bias) {
        s += std::fabs((*bias)(j));
        v = std::numeric_limits<double>::quiet_NaN();  // certified below only without bias
      }
      g.absprod(i, j) = g.finite_absprod(i, j) = s;
      if (!std::isfinite(s)) {  // rare: sum the finite terms' magnitudes one by one
        double f = bias && std::isfinite((*bias)(j)) ? std::fabs((*bias)(j)) : 0.0;
        for (Eigen::Index k = 0; k < A.cols(); ++k) {
          const double t = std::fabs(A(i, k) * B(j, k));
          if (std::isfinite(t)) f += t;
        }
        g.finite_absprod(i, j) = f;
      }
      if (bias || qa[i] == kNoGrid || qb[j] == kNoGrid) {
        if (s == 0.0 && !bias) g.c64(i, j) = 0.0;
        continue;
      }
      if (s < std::ldexp(1.0, qa[i] + qb[j] + 53)) g.c64(i, j) = v;
    }
  return g;
}

Rounded fc1_post(const Matrix& acc, const Vector* b1, Round r) {
  MOENUM_CHECK(!b1 || b1->size() == acc.cols(), "fc1_post: b1 length must equal the columns of h");
  return with_policy(r, [&](const auto& pol) {
    Rounded out{Matrix(acc.rows(), acc.cols()), Matrix(acc.rows(), acc.cols())};
    for (Eigen::Index i = 0; i < acc.rows(); ++i)
      for (Eigen::Index j = 0; j < acc.cols(); ++j) {
        float v = float(acc(i, j));
        if (b1) v = layer::fc1_separate_bias(pol.round_act(v), float((*b1)(j)));
        out.pre(i, j) = v;
        out.out(i, j) = pol.round_act(v);
      }
    return out;
  });
}

ActForward act_forward(const Matrix& h, const Vector& p, Round r) {
  MOENUM_CHECK(h.cols() % 2 == 0 && p.size() == h.rows(), "act_forward: h must be [R, 2F] and p [R]");
  const Eigen::Index R = h.rows(), F = h.cols() / 2;
  return with_policy(r, [&](const auto& pol) {
    ActForward out{Matrix(R, F), Matrix(R, F), Matrix(R, F)};
    for (Eigen::Index i = 0; i < R; ++i) {
      const float pi = float(p(i));
      for (Eigen::Index j = 0; j < F; ++j) {
        const float g = float(h(i, j)), l = float(h(i, F + j));
        const float act = layer::swiglu_fwd(g, l);
        const float pre = layer::probs_scale(act, pi);
        out.act(i, j) = act;
        out.a_pre(i, j) = pre;
        out.a(i, j) = pol.round_act(pre);
      }
    }
    return out;
  });
}

Rounded act_backward(const Matrix& da, const Matrix& h, const Vector& p, Round r) {
  const Eigen::Index R = h.rows(), F = h.cols() / 2;
  MOENUM_CHECK(h.cols() % 2 == 0 && da.rows() == R && da.cols() == F && p.size() == R,
               "act_backward: need da [R, F], h [R, 2F], p [R]");
  return with_policy(r, [&](const auto& pol) {
    Rounded out{Matrix(R, 2 * F), Matrix(R, 2 * F)};
    for (Eigen::Index i = 0; i < R; ++i) {
      const float pi = float(p(i));
      for (Eigen::Index j = 0; j < F; ++j) {
        const float g = float(h(i, j)), l = float(h(i, F + j));
        const layer::SwigluGrad<float> d = layer::swiglu_bwd(float(da(i, j)), g, l, pi);
        out.pre(i, j) = d.dg;
        out.pre(i, F + j) = d.dl;
        out.out(i, j) = pol.round_act(d.dg);
        out.out(i, F + j) = pol.round_act(d.dl);
      }
    }
    return out;
  });
}

Rounded fc2_bias(const Matrix& o, const Matrix* b2_rows, const Vector& p, Round r) {
  MOENUM_CHECK(p.size() == o.rows() && (!b2_rows || (b2_rows->rows() == o.rows() && b2_rows->cols() == o.cols())),
               "fc2_bias: need o [R, H], b2_rows [R, H], p [R]");
  return with_policy(r, [&](const auto& pol) {
    Rounded out{Matrix(o.rows(), o.cols()), Matrix(o.rows(), o.cols())};
    for (Eigen::Index i = 0; i < o.rows(); ++i) {
      const float pi = float(p(i));
      for (Eigen::Index j = 0; j < o.cols(); ++j) {
        const float ov = float(o(i, j));
        const float pre = b2_rows ? layer::fc2_bias(ov, float((*b2_rows)(i, j)), pi) : ov;
        out.pre(i, j) = pre;
        out.out(i, j) = b2_rows ? pol.round_act(pre) : ov;
      }
    }
    return out;
  });
}

Rounded combine(const Matrix& rows, const IndexMatrix& index, Round r) {
  const Eigen::Index T = index.rows(), H = rows.cols();
  for (Eigen::Index i = 0; i < index.size(); ++i)
    MOENUM_CHECK(index.data()[i] >= -1 && index.data()[i] < rows.rows(), "combine: row index out of range");
  return with_policy(r, [&](const auto& pol) {
    Rounded out{Matrix(T, H), Matrix(T, H)};
    for (Eigen::Index t = 0; t < T; ++t)
      for (Eigen::Index j = 0; j < H; ++j) {
        float acc = 0.0f;
        for (Eigen::Index s = 0; s < index.cols(); ++s)
          if (index(t, s) >= 0) acc += float(rows(index(t, s), j));
        out.pre(t, j) = acc;
        out.out(t, j) = pol.round_act(acc);
      }
    return out;
  });
}

void rowwise_dot_rn(const Matrix& A, const Matrix& B, Vector& dot, Vector& absdot) {
  MOENUM_CHECK(A.rows() == B.rows() && A.cols() == B.cols(), "rowwise_dot_rn: A and B must have the same shape");
  dot.resize(A.rows());
  absdot.resize(A.rows());
  for (Eigen::Index i = 0; i < A.rows(); ++i) {
    dot(i) = dot_rn_f32(A.row(i).data(), B.row(i).data(), A.cols());
    absdot(i) = (A.row(i).cwiseAbs().array() * B.row(i).cwiseAbs().array()).sum();
  }
}

}  // namespace moenum::reference::stage_ops
