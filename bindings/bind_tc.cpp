// The Hopper tensor-core accumulation model (core/include/moenum/tc.h) exposed to Python; moenum.tc
// wraps it. The work runs without the GIL; a bad format, architecture, shape or operand value is a
// ValueError naming it.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "binding_registry.h"
#include "moenum/tc.h"

namespace py = pybind11;

namespace moenum::bindings {
namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

tc::Format parse_tc_format(const std::string& s) {
  if (const auto f = tc::format_from_name(s)) return *f;
  throw py::value_error("unknown fmt '" + s + "': expected 'bf16', 'e4m3' or 'e5m2'");
}

tc::Arch parse_arch(const std::string& s) {
  if (const auto a = tc::arch_from_name(s)) return *a;
  throw py::value_error("unknown arch '" + s + "': expected 'sm90'");
}

std::string shape_text(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t d = 0; d < a.ndim(); ++d) s += (d ? ", " : "") + std::to_string(a.shape(d));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

F32Array tc_dot(const F32Array& a, const F32Array& b, const F32Array& c, const std::string& arch,
                const std::string& fmt) {
  const tc::Format f = parse_tc_format(fmt);
  const tc::Arch ar = parse_arch(arch);
  if (a.ndim() != 2) throw py::value_error("a must be 2-D [N, K], got shape " + shape_text(a));
  if (b.ndim() != 2 || b.shape(0) != a.shape(0) || b.shape(1) != a.shape(1))
    throw py::value_error("b must have a's shape " + shape_text(a) + ", got " + shape_text(b));
  if (c.ndim() != 1 || c.shape(0) != a.shape(0))
    throw py::value_error("c must be 1-D [N] with N = " + std::to_string(a.shape(0)) + ", got shape " + shape_text(c));
  const int64_t N = a.shape(0), K = a.shape(1);
  F32Array out(N);
  try {
    py::gil_scoped_release release;
    tc::dot_rows(a.data(), b.data(), c.data(), out.mutable_data(), N, K, f, ar);
  } catch (const std::invalid_argument& e) {
    throw py::value_error(e.what());
  }
  return out;
}

const BindRegistrar reg([](py::module_& m) {
  m.def("tc_dot", &tc_dot, py::arg("a"), py::arg("b"), py::arg("c"), py::arg("arch") = "sm90",
        py::arg("fmt") = "bf16",
        "Hopper tensor-core dot products (core/include/moenum/tc.h): out[i] = c[i] chained through the\n"
        "MMA's fused steps over a[i, :] . b[i, :] in k order. a, b float32 [N, K] holding values of fmt\n"
        "('bf16', 'e4m3', 'e5m2'), c float32 [N]; returns float32 [N]. arch: 'sm90'.");
  m.def("tc_representable", [](float v, const std::string& fmt) { return tc::representable(v, parse_tc_format(fmt)); },
        py::arg("v"), py::arg("fmt"), "Whether v is a value of fmt (NaN: yes; inf: bf16 and e5m2 only).");
});

}  // namespace
}  // namespace moenum::bindings
