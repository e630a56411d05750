// The arithmetic of a real EP run's exchanges (moenum.ep): what a rank computes on rows it received.
// The combine is the backends' own rule (reference/grouped_mlp.h, the GPU combine kernels): each
// token's routed rows summed in ascending expert id, in the rows' precision (fp64 for golden, fp32
// otherwise) from zero, then rounded once to the output dtype.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "binding_registry.h"
#include "prepared.h"
#include "moenum/bf16.h"
#include "moenum/error.h"
#include "moenum/layer.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

template <typename T>
using Array = py::array_t<T, py::array::c_style | py::array::forcecast>;

template <typename R>
R round_to(R v, bool bf16) {
  if constexpr (std::is_same_v<R, float>) return bf16 ? round_bf16(v) : v;
  return v;
}

bool rounds_to_bf16(const std::string& dtype) {
  if (dtype == "bf16") return true;
  MOENUM_CHECK(dtype == "fp32" || dtype == "fp64", "ep: unknown output dtype '" + dtype + "'");
  return false;
}

// rows [n, H]: routed rows of one source rank's tokens; token [n] in [0, T); expert [n] global ids.
template <typename R>
py::array combine(const Array<R>& rows, const Array<int64_t>& token, const Array<int32_t>& expert, int64_t T,
                  const std::string& dtype) {
  const bool bf16 = rounds_to_bf16(dtype);
  const int64_t n = token.size(), H = rows.ndim() == 2 ? rows.shape(1) : 0;
  MOENUM_CHECK(rows.ndim() == 2 && rows.shape(0) == n && expert.size() == n, "ep_combine: rows, token, expert disagree");
  const int64_t* tok = token.data();
  const int32_t* ex = expert.data();
  std::vector<int64_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return tok[a] != tok[b] ? tok[a] < tok[b] : ex[a] < ex[b]; });
  Array<R> out({T, H});
  R* o = out.mutable_data();
  std::fill(o, o + T * H, R(0));
  const R* in = rows.data();
  {
    py::gil_scoped_release release;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = tok[order[i]];
      MOENUM_CHECK(t >= 0 && t < T, "ep_combine: token out of range");
      const R* row = in + order[i] * H;
      for (int64_t j = 0; j < H; ++j) o[t * H + j] += row[j];
    }
    for (int64_t i = 0; i < T * H; ++i) o[i] = round_to(o[i], bf16);
  }
  return out;
}

// out = round(o + b2[e] * p) per row (layer::fc2_bias), for a backend whose combine kernel adds the bias.
py::array out_rows(const Array<float>& o, const std::optional<Array<float>>& b2, const Array<int32_t>& row_expert,
                   const Array<float>& row_prob, const std::string& dtype) {
  const bool bf16 = rounds_to_bf16(dtype);
  MOENUM_CHECK(o.ndim() == 2 && o.shape(0) == row_expert.size() && o.shape(0) == row_prob.size(),
               "ep_out_rows: o, row_expert, row_prob disagree");
  const int64_t n = o.shape(0), H = o.shape(1);
  Array<float> out({n, H});
  std::copy(o.data(), o.data() + n * H, out.mutable_data());
  if (!b2) return out;
  MOENUM_CHECK(b2->ndim() == 2 && b2->shape(1) == H, "ep_out_rows: b2 is not E x H");
  float* v = out.mutable_data();
  for (int64_t i = 0; i < n; ++i) {
    const int32_t e = row_expert.data()[i];
    MOENUM_CHECK(e >= 0 && e < b2->shape(0), "ep_out_rows: expert out of range");
    for (int64_t j = 0; j < H; ++j)
      v[i * H + j] = round_to(layer::fc2_bias(v[i * H + j], b2->data()[e * H + j], row_prob.data()[i]), bf16);
  }
  return out;
}

void bind(py::module_& m) {
  m.def("ep_combine", [](const py::array& rows, const Array<int64_t>& token, const Array<int32_t>& expert, int64_t T,
                         const std::string& dtype) {
    if (rows.dtype().is(py::dtype::of<double>())) return combine<double>(rows, token, expert, T, dtype);
    return combine<float>(rows, token, expert, T, dtype);
  }, py::arg("rows"), py::arg("token"), py::arg("expert"), py::arg("tokens"), py::arg("dtype"),
  "Each token's rows summed in ascending expert id in the rows' precision, rounded once to dtype: [tokens, H]");
  m.def("ep_out_rows", &out_rows, py::arg("o"), py::arg("b2"), py::arg("row_expert"), py::arg("row_prob"),
        py::arg("dtype"), "The combine's rows from FC2's o: round(o + b2[e] * p) (o itself without bias)");
  m.def("ep_set_row_prob", [](Prepared& p, int64_t rank, const std::vector<float>& probs) {
    MOENUM_CHECK(rank >= 0 && rank < int64_t(p.plan.ranks.size()), "ep_set_row_prob: rank out of range");
    RankPlan& rp = p.plan.ranks[rank];
    MOENUM_CHECK(probs.size() == rp.row_prob.size(), "ep_set_row_prob: one prob per row of the rank");
    rp.row_prob = probs;
  }, py::arg("prepared"), py::arg("rank"), py::arg("probs"),
  "Replace a rank's row probs with the ones it received in the dispatch");
}

BindRegistrar registrar(bind);

}  // namespace
}  // namespace moenum::bindings
