// The verifier's C++ pieces (bindings/moenum/stages.py): the reference GEMM with its per-element
// bound ingredients, and the elementwise stages recomputed with the reference's own rules
// (reference/stage_ops.h), so that Python never re-implements a rounding rule.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <optional>

#include "binding_registry.h"
#include "exact_gemm.h"
#include "moenum/error.h"
#include "stage_ops.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

using reference::Matrix;
using reference::Vector;
namespace so = reference::stage_ops;
using Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

Matrix to_matrix(const Array& a, const char* what) {
  if (a.ndim() != 2) throw ConfigError(what, "must be a 2-D array");
  return Eigen::Map<const Matrix>(a.data(), a.shape(0), a.shape(1));
}
Vector to_vector(const Array& a, const char* what) {
  if (a.ndim() != 1) throw ConfigError(what, "must be a 1-D array");
  return Eigen::Map<const Vector>(a.data(), a.shape(0));
}
py::array_t<double> to_numpy(const Matrix& m) {
  py::array_t<double> a({static_cast<py::ssize_t>(m.rows()), static_cast<py::ssize_t>(m.cols())});
  std::copy(m.data(), m.data() + m.size(), a.mutable_data());
  return a;
}
py::array_t<double> to_numpy(const Vector& v) {
  py::array_t<double> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.data(), v.data() + v.size(), a.mutable_data());
  return a;
}
py::tuple rounded(const so::Rounded& r) { return py::make_tuple(to_numpy(r.out), to_numpy(r.pre)); }

void bind(py::module_& m) {
  m.def("exact_gemm_nt", [](const Array& A, const Array& B, std::optional<Array> bias) {
    const Matrix a = to_matrix(A, "A"), b = to_matrix(B, "B");
    if (a.cols() != b.cols()) throw ConfigError("B", "exact_gemm_nt: A and B need the same K (columns)");
    std::optional<Vector> bv;
    if (bias) bv = to_vector(*bias, "bias");
    so::GemmRef g;
    {
      py::gil_scoped_release release;
      g = so::exact_gemm_ref(a, b, bv ? &*bv : nullptr);
    }
    return py::make_tuple(to_numpy(g.c32), to_numpy(g.absprod), to_numpy(g.c64));
  }, py::arg("A"), py::arg("B"), py::arg("bias") = py::none(),
  "C = A . B^T (+ bias) of the reference: (c_rn_f32, absprod, c64). c_rn_f32: correctly rounded fp32 of the\n"
  "exact sum; absprod: sum_k |a_k b_k| (+ |bias|); c64: the exact sum where fp64 certifies it, else NaN.");

  m.def("gamma", &reference::gamma, py::arg("n"), py::arg("u") = 0x1p-24,
        "gamma(n, u) = n*u / (1 - n*u), the relative error bound of an n-term dot product");

  m.def("round_to", [](const Array& v, const std::string& dtype) {
    const so::Round r = so::parse_round(dtype);
    py::array_t<double> out(v.request().shape);
    const double* in = v.data();
    double* o = out.mutable_data();
    for (py::ssize_t i = 0; i < v.size(); ++i) o[i] = so::round_to(float(in[i]), r);
    return out;
  }, py::arg("values"), py::arg("dtype"), "fp64 values -> fp32 (RN) -> dtype (bf16 RN-even or fp32)");

  m.def("stage_fc1_post", [](const Array& acc, std::optional<Array> b1, const std::string& dtype) {
    std::optional<Vector> bv;
    if (b1) bv = to_vector(*b1, "b1");
    return rounded(so::fc1_post(to_matrix(acc, "acc"), bv ? &*bv : nullptr, so::parse_round(dtype)));
  }, py::arg("acc"), py::arg("b1"), py::arg("dtype"),
  "FC1 output from the fp32 accumulator: (h, pre); separate bias: h = round(round(acc) + b1)");

  m.def("stage_act_forward", [](const Array& h, const Array& p, const std::string& dtype) {
    auto r = so::act_forward(to_matrix(h, "h"), to_vector(p, "p"), so::parse_round(dtype));
    return py::make_tuple(to_numpy(r.act), to_numpy(r.a), to_numpy(r.a_pre));
  }, py::arg("h"), py::arg("p"), py::arg("dtype"), "(act, a, a_pre): act = silu(g)*l, a = round(act*p)");

  m.def("stage_act_backward", [](const Array& da, const Array& h, const Array& p, const std::string& dtype) {
    return rounded(so::act_backward(to_matrix(da, "da"), to_matrix(h, "h"), to_vector(p, "p"), so::parse_round(dtype)));
  }, py::arg("da"), py::arg("h"), py::arg("p"), py::arg("dtype"), "(dh, pre): dh = round([dact*l*silu'(g), dact*silu(g)])");

  m.def("stage_fc2_bias", [](const Array& o, std::optional<Array> b2_rows, const Array& p, const std::string& dtype) {
    std::optional<Matrix> b;
    if (b2_rows) b = to_matrix(*b2_rows, "b2_rows");
    return rounded(so::fc2_bias(to_matrix(o, "o"), b ? &*b : nullptr, to_vector(p, "p"), so::parse_round(dtype)));
  }, py::arg("o"), py::arg("b2_rows"), py::arg("p"), py::arg("dtype"), "(out, pre): out = round(o + b2*p)");

  m.def("stage_combine", [](const Array& rows, const py::array_t<int64_t, py::array::c_style | py::array::forcecast>& index,
                            const std::string& dtype) {
    if (index.ndim() != 2) throw ConfigError("index", "must be a 2-D array [T, k]");
    const so::IndexMatrix idx = Eigen::Map<const so::IndexMatrix>(index.data(), index.shape(0), index.shape(1));
    return rounded(so::combine(to_matrix(rows, "rows"), idx, so::parse_round(dtype)));
  }, py::arg("rows"), py::arg("index"), py::arg("dtype"),
  "(y, pre): y_t = round(sum_i rows[index[t, i]]) in fp32, in index order, -1 = none");

  m.def("rowwise_dot_rn", [](const Array& A, const Array& B) {
    Vector d, s;
    so::rowwise_dot_rn(to_matrix(A, "A"), to_matrix(B, "B"), d, s);
    return py::make_tuple(to_numpy(d), to_numpy(s));
  }, py::arg("A"), py::arg("B"), "(dot_rn_f32, absdot) per row");

}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
